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
    ctype = np.complex128 if ref.dtype.kind == "c" else np.float64
    flat_out, flat_ref = out.reshape(-1), ref.reshape(-1)
    acc = _Stats()
    for start in range(0, flat_ref.size, CHUNK):
        stop = start + CHUNK
        acc.add(start, flat_out[start:stop].astype(ctype), flat_ref[start:stop].astype(ctype),
                atol, rtol, equal_nan)  # fmt: skip
    res.nan_out, res.nan_ref, res.inf_out, res.inf_ref = acc.nan_a, acc.nan_b, acc.inf_a, acc.inf_b
    res.mismatches = acc.bad
    res.ok = res.mismatches == 0
    if acc.finite:
        res.max_abs, res.mean_abs = acc.max_abs, acc.sum_abs / acc.finite
        res.max_rel, res.mean_rel = acc.max_rel, acc.sum_rel / acc.finite
    if res.mismatches:
        idx = np.unravel_index(acc.worst, ref.shape)
        res.worst_index = [int(i) for i in idx]
        res.worst_ref, res.worst_out = acc.worst_ref, acc.worst_out
    return res


#: Elements compared per step: the float64 temporaries of one step stay near 20 MiB whatever
#: the output's size (GPT-2's logits, 6.4 M values, took ~500 MiB compared in one go).
CHUNK = 1 << 18


@dataclass
class _Stats:
    """Running totals of ``compare_arrays`` over consecutive chunks of the flattened arrays."""

    nan_a: int = 0
    nan_b: int = 0
    inf_a: int = 0
    inf_b: int = 0
    bad: int = 0
    finite: int = 0
    max_abs: float = 0.0
    sum_abs: float = 0.0
    max_rel: float = 0.0
    sum_rel: float = 0.0
    worst: int = 0
    worst_score: float = -1.0
    worst_ref: float = 0.0
    worst_out: float = 0.0

    def add(
        self, start: int, a: np.ndarray, b: np.ndarray, atol: float, rtol: float, equal_nan: bool
    ) -> None:
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        inf_a, inf_b = np.isinf(a), np.isinf(b)
        self.nan_a += int(nan_a.sum())
        self.nan_b += int(nan_b.sum())
        self.inf_a += int(inf_a.sum())
        self.inf_b += int(inf_b.sum())
        finite = ~(nan_a | nan_b | inf_a | inf_b)
        absdiff = np.zeros(a.shape, np.float64)
        absdiff[finite] = np.abs(a[finite] - b[finite])
        refmag = np.abs(b)
        bad = np.zeros(a.shape, bool)
        bad[finite] = absdiff[finite] > atol + rtol * refmag[finite]
        nan_bad = (nan_a != nan_b) if equal_nan else (nan_a | nan_b)
        inf_bad = (inf_a | inf_b) & ~(inf_a & inf_b & (a == b))
        bad |= nan_bad | inf_bad
        n_bad = int(bad.sum())
        self.bad += n_bad
        if finite.any():
            fa = absdiff[finite]
            mag = refmag[finite]
            with np.errstate(divide="ignore", invalid="ignore"):
                rel = np.where(mag > 0, fa / mag, np.where(fa > 0, np.inf, 0.0))
            self.max_abs = max(self.max_abs, float(fa.max()))
            self.max_rel = max(self.max_rel, float(rel.max()))
            self.sum_abs += float(fa.sum())
            self.sum_rel += float(rel.sum())
            self.finite += int(fa.size)
        if n_bad:
            score = np.where(bad, absdiff + 1.0, 0.0)  # worst mismatching element, NaN/Inf first
            score[bad & ~finite] = np.inf
            i = int(np.argmax(score))
            if score[i] > self.worst_score:  # strict: the first worst element wins, as argmax
                self.worst, self.worst_score = start + i, float(score[i])
                self.worst_ref, self.worst_out = _scalar(b[i]), _scalar(a[i])


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
