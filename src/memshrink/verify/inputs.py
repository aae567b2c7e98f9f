"""Feeds for verification: seeded random data by dtype, or the user's ``.npz``.

The same feeds go to every backend and both models, so they are made once in the parent and
written to one ``.npz`` the children read. Integer inputs (token ids, indices) get a valid
range, from (first wins): ``int_ranges`` (``--int-range``), the model's sidecar, the size of
the initializer a ``Gather`` indexes with that input, else ``[0, 2)`` — small enough to be a
valid index or mask almost anywhere, and stated in the report.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from memshrink.bindings import bind_input_shapes, check_dim_names, load_sidecar
from memshrink.errors import UsageError
from memshrink.verify.modelinfo import ModelIO

DEFAULT_INT_RANGE = (0, 2)
GLOBAL = "*"


@dataclass
class FeedInfo:
    """How one input was made, for the report."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    range: tuple[float, float] | None
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "range": list(self.range) if self.range is not None else None,
            "source": self.source,
        }


def parse_int_range_args(args: Sequence[str] | None) -> dict[str, tuple[int, int]]:
    """``['0,30522', 'mask=0,2']`` -> ``{'*': (0, 30522), 'mask': (0, 2)}`` (hi exclusive)."""
    out: dict[str, tuple[int, int]] = {}
    for arg in args or ():
        name, sep, rng = arg.rpartition("=")
        key = name if sep else GLOBAL
        try:
            lo, hi = (int(x) for x in rng.split(","))
        except ValueError:
            raise UsageError(
                f"bad --int-range {arg!r}: expected [NAME=]LO,HI (HI exclusive), e.g. ids=0,30522"
            ) from None
        if hi <= lo:
            raise UsageError(f"bad --int-range {arg!r}: HI must be greater than LO")
        out[key] = (lo, hi)
    return out


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype, lo_hi) -> np.ndarray:  # type: ignore[no-untyped-def]
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        lo, hi = lo_hi
        return rng.integers(int(lo), int(hi), size=shape, dtype=np.int64).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(size=shape, dtype=np.float32).astype(dtype)
    if np.issubdtype(dtype, np.complexfloating):
        return (rng.standard_normal(size=shape) + 1j * rng.standard_normal(size=shape)).astype(
            dtype
        )
    if np.dtype(dtype).kind in "OUS":  # ONNX STRING: random words, mixed case
        words = np.array(["alpha", "Beta", "GAMMA", "delta", "Epsilon", "zeta", "ETA", "theta"])
        return words[rng.integers(0, len(words), size=shape)].astype("<U8")
    raise UsageError(f"cannot make random data of dtype {dtype}; pass --inputs feeds.npz")


def make_feeds(
    io: ModelIO,
    model_path: str | os.PathLike | None = None,
    *,
    shapes: Mapping[str, Sequence[int]] | None = None,
    dims: Mapping[str, int] | None = None,
    int_ranges: Mapping[str, tuple[int, int]] | None = None,
    seed: int = 0,
) -> tuple[dict[str, np.ndarray], list[FeedInfo]]:
    """Seeded random feeds for every graph input; unbound symbolic dims raise, naming them all."""
    sidecar = load_sidecar(model_path) if model_path is not None else None
    check_dim_names(dims, [(i.name, i.dims) for i in io.inputs])
    bound = bind_input_shapes(
        [(i.name, i.dims) for i in io.inputs], shapes=shapes, dims=dims, sidecar=sidecar
    )
    int_ranges = dict(int_ranges or {})
    unknown = sorted(set(int_ranges) - {i.name for i in io.inputs} - {GLOBAL})
    if unknown:
        raise UsageError(f"--int-range names unknown input(s): {', '.join(unknown)}")
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    infos: list[FeedInfo] = []
    for inp in io.inputs:
        dtype = np.dtype(inp.dtype)
        shape = bound[inp.name]
        rrange: tuple[float, float] | None = None
        source = "random normal"
        if dtype != np.bool_ and np.issubdtype(dtype, np.integer):
            side = sidecar.input(inp.name) if sidecar else None
            if inp.name in int_ranges:
                rrange, source = int_ranges[inp.name], "--int-range"
            elif GLOBAL in int_ranges:
                rrange, source = int_ranges[GLOBAL], "--int-range"
            elif side is not None and side.range is not None:
                rrange, source = side.range, "sidecar"
            elif inp.name in io.index_bounds:
                rrange, source = (0, io.index_bounds[inp.name]), "Gather table size"
            else:
                rrange, source = DEFAULT_INT_RANGE, "default"
            source = f"random uniform int in [lo, hi), range from {source}"
        elif dtype == np.bool_:
            source = "random bool"
        feeds[inp.name] = _random(rng, shape, dtype, rrange)
        infos.append(FeedInfo(inp.name, shape, str(dtype), rrange, source))
    return feeds, infos


def load_feeds(
    path: str | os.PathLike, io: ModelIO
) -> tuple[dict[str, np.ndarray], list[FeedInfo]]:
    """User feeds from ``.npz``; every graph input must be present, extra arrays are an error."""
    try:
        with np.load(path, allow_pickle=False) as z:
            feeds = {k: z[k] for k in z.files}
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read --inputs {os.fspath(path)}: {exc}") from exc
    names = [i.name for i in io.inputs]
    missing = [n for n in names if n not in feeds]
    extra = sorted(set(feeds) - set(names))
    if missing or extra:
        raise UsageError(
            f"--inputs {os.fspath(path)}: "
            + (f"missing input(s) {', '.join(missing)}; " if missing else "")
            + (f"unknown array(s) {', '.join(extra)}; " if extra else "")
            + f"the model's inputs are: {', '.join(names)}"
        )
    infos = [
        FeedInfo(
            n, tuple(feeds[n].shape), str(feeds[n].dtype), None, f"user file {os.fspath(path)}"
        )
        for n in names
    ]
    return {n: feeds[n] for n in names}, infos
