"""Output comparison with stated tolerances, modelled on Polygraphy's comparator.

An element matches when ``|out - ref| <= atol + rtol * |ref|`` (numpy's ``isclose`` rule, with
the reference on the right). NaN matches NaN at the same position (``equal_nan``, on by default:
a rewrite must not create or remove NaNs); +Inf/-Inf must match exactly in position and sign.
Shape or dtype changes are mismatches of the whole output. The statistics (max/mean abs error,
max/mean rel error over finite elements, mismatch count, the worst element) are always reported,
so a pass shows how close it was and a failure shows where.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

DEFAULT_ATOL = 1e-5
DEFAULT_RTOL = 1e-5


@dataclass
class OutputComparison:
    name: str
    ok: bool
    atol: float
    rtol: float
    shape: list[int] | None = None
    ref_shape: list[int] | None = None
    dtype: str | None = None
    ref_dtype: str | None = None
    total: int = 0
    mismatches: int = 0
    max_abs: float | None = None
    mean_abs: float | None = None
    max_rel: float | None = None
    mean_rel: float | None = None
    nan_ref: int = 0
    nan_out: int = 0
    inf_ref: int = 0
    inf_out: int = 0
    worst_index: list[int] | None = None
    worst_ref: float | None = None
    worst_out: float | None = None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare_arrays(
    name: str,
    ref: np.ndarray | None,
    out: np.ndarray | None,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
    equal_nan: bool = True,
) -> OutputComparison:
    """Compare one output against its reference; never raises on odd data."""
    res = OutputComparison(name=name, ok=False, atol=float(atol), rtol=float(rtol))
    if ref is None or out is None:
        res.note = "missing in the reference" if ref is None else "missing in the candidate"
        return res
    res.shape, res.ref_shape = list(out.shape), list(ref.shape)
    res.dtype, res.ref_dtype = str(out.dtype), str(ref.dtype)
    res.total = int(ref.size)
    if out.shape != ref.shape:
        res.note = "shape differs"
        res.mismatches = res.total
        return res
    if out.dtype != ref.dtype:
        res.note = "dtype differs"
        res.mismatches = res.total
        return res
    if ref.dtype.kind not in "biufc":
        eq = out == ref
        res.mismatches = int(eq.size - np.count_nonzero(eq))
        res.ok = res.mismatches == 0
        res.note = "compared for equality (non-numeric dtype)"
        return res
    a = out.astype(np.complex128 if ref.dtype.kind == "c" else np.float64)
    b = ref.astype(a.dtype)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    inf_a, inf_b = np.isinf(a), np.isinf(b)
    res.nan_out, res.nan_ref = int(nan_a.sum()), int(nan_b.sum())
    res.inf_out, res.inf_ref = int(inf_a.sum()), int(inf_b.sum())
    finite = ~(nan_a | nan_b | inf_a | inf_b)
    absdiff = np.zeros(a.shape, np.float64)
    absdiff[finite] = np.abs(a[finite] - b[finite])
    refmag = np.abs(b)
    bad = np.zeros(a.shape, bool)
    bad[finite] = absdiff[finite] > atol + rtol * refmag[finite]
    nan_bad = (nan_a != nan_b) if equal_nan else (nan_a | nan_b)
    inf_bad = (inf_a | inf_b) & ~(inf_a & inf_b & (a == b))
    bad |= nan_bad | inf_bad
    res.mismatches = int(bad.sum())
    res.ok = res.mismatches == 0
    if finite.any():
        fa = absdiff[finite]
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(refmag[finite] > 0, fa / refmag[finite], np.where(fa > 0, np.inf, 0.0))
        res.max_abs, res.mean_abs = float(fa.max()), float(fa.mean())
        res.max_rel, res.mean_rel = float(rel.max()), float(rel.mean())
    if res.mismatches:
        score = np.where(bad, absdiff + 1.0, 0.0)  # worst mismatching element, NaN/Inf first
        score[bad & ~finite] = np.inf
        idx = np.unravel_index(int(np.argmax(score)), a.shape)
        res.worst_index = [int(i) for i in idx]
        res.worst_ref, res.worst_out = _scalar(b[idx]), _scalar(a[idx])
    return res


def _scalar(v: Any) -> float:
    return float(np.abs(v)) if np.iscomplexobj(v) else float(v)


def compare_outputs(
    names: list[str],
    ref: Mapping[str, np.ndarray],
    out: Mapping[str, np.ndarray],
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
    tolerances: Mapping[str, tuple[float, float]] | None = None,
) -> list[OutputComparison]:
    """Compare every named output; ``tolerances[name] = (atol, rtol)`` overrides the defaults."""
    tolerances = tolerances or {}
    results = []
    for name in names:
        at, rt = tolerances.get(name, (atol, rtol))
        results.append(compare_arrays(name, ref.get(name), out.get(name), at, rt))
    return results
