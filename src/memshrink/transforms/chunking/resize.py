"""Chunk rule for ``Resize`` along the chunk axis: nearest-neighbour upsampling by an integer.

Why: a detector's FPN top-down path upsamples the coarser level ×2 (nearest) and adds it to
the lateral of the finer one (``fpn-800``: three 39 MiB tensors at stride 4). Chunking that
path along H needs to know which input rows an output band reads.

Exactness. With an integer scale ``s`` (output extent = ``s`` × input extent, by ``scales`` or
``sizes``), output row ``o = q·s + r`` (0 ≤ r < s) reads input row ``q`` under:

* ``asymmetric`` + ``floor``: ``x = o / s = q + r/s``, floored: ``q``;
* ``half_pixel`` / ``pytorch_half_pixel`` + ``round_prefer_floor`` / ``round_prefer_ceil``:
  ``x = (o + 0.5)/s − 0.5 = q + (r + 0.5)/s − 0.5``, whose fraction lies strictly inside
  ``(−0.5, 0.5)`` (at least ``0.5/s`` from a tie), so either rounding gives ``q``.

So output rows ``[o0, o1)`` need input rows ``[⌊o0/s⌋, ⌈o1/s⌉)``; the chunk's copy upsamples
those (``s`` × as many rows, local row ``o'`` → local input row ``⌊o'/s⌋``, the same mapping
shifted by a multiple of ``s``) and is cropped to the band. Every other combination is
refused: ``linear``/``cubic`` blend neighbouring rows (a halo this rule does not add),
``align_corners`` and ``tf_crop_and_resize`` do not map rows by ``o / s``, ``asymmetric`` with
rounding and ``half_pixel`` with ``floor``/``ceil`` read a row that depends on ``r`` in ways not
proven here, a non-integer scale has no periodic mapping. ``Upsample`` (deprecated) is not
supported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from memshrink.transforms.chunking.rules import Emit, NodeFacts, Range

#: (coordinate_transformation_mode, nearest_mode) pairs proven to read input row ``o // s``.
EXACT = {
    ("asymmetric", "floor"),
    ("half_pixel", "round_prefer_floor"),
    ("half_pixel", "round_prefer_ceil"),
    ("pytorch_half_pixel", "round_prefer_floor"),
    ("pytorch_half_pixel", "round_prefer_ceil"),
}


def _str(f: NodeFacts, name: str, default: str) -> str:
    v = f.attr(name, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def scale(f: NodeFacts, axis: int) -> int:
    """The integer upsampling factor of ``f`` (a Resize) along ``axis``; raises ``Refuse``
    unless the op provably maps output row ``o`` to input row ``o // s`` (module docstring)."""
    from memshrink.transforms.chunking.rules import Refuse

    if f.opset < 11:
        raise Refuse("Resize before opset 11 (no coordinate_transformation_mode)")
    mode = _str(f, "mode", "nearest")
    if mode != "nearest":
        raise Refuse(f"Resize mode {mode} blends rows along the chunked axis")
    ctm = _str(f, "coordinate_transformation_mode", "half_pixel")
    nearest = _str(f, "nearest_mode", "round_prefer_floor")
    if (ctm, nearest) not in EXACT:
        raise Refuse(f"Resize {ctm}/{nearest} is not proven row-periodic")
    if int(f.attr("antialias", 0)):
        raise Refuse("Resize with antialias")
    if f.attr("axes") is not None:
        raise Refuse("Resize with axes")
    if len(f.node.inputs) > 3 and f.node.inputs[3] is not None:
        if _str(f, "keep_aspect_ratio_policy", "stretch") != "stretch":
            raise Refuse("Resize sizes with a keep_aspect_ratio_policy")
        if f.const_ints(3) is None:
            raise Refuse("Resize sizes are not constant")
    si, so = f.in_shapes[0], f.out_shapes[0]
    assert si is not None and so is not None
    if so[axis] % si[axis]:
        raise Refuse("Resize by a non-integer scale along the chunked axis")
    s = so[axis] // si[axis]
    if len(f.node.inputs) > 2 and f.node.inputs[2] is not None:
        sc = _const_floats(f, 2)
        # an empty scales tensor means sizes rule (checked by the extents above)
        if sc != [] and (sc is None or len(sc) != len(si) or sc[axis] != float(s)):
            raise Refuse("Resize scale along the chunked axis is not the integer size ratio")
    return s


def _const_floats(f: NodeFacts, index: int) -> list[float] | None:
    v = f.node.inputs[index]
    if v is None:
        return None
    t = v.const_value
    if t is None:
        p = v.producer()
        a = p.attributes.get("value") if p is not None else None
        t = a.value if a is not None else None
    if t is None or t.size > 16:
        return None
    return [float(x) for x in np.asarray(t.numpy()).reshape(-1)]


def forward(f: NodeFacts, axes: list[int | None]) -> tuple[list[int], dict[int, int]]:
    """Resize keeps the chunk axis; along H/W it must be an exact integer nearest upsample."""
    from memshrink.transforms.chunking.rules import Refuse

    if any(a is not None for a in axes[1:]):
        raise Refuse("Resize: only its data input may be chunked")
    a = axes[0]
    if a is None:
        raise Refuse("Resize: data input not chunked")
    scale(f, a)  # also when the chunk axis keeps its size: the same proof (s = 1) applies
    return [a], {}


def need(f: NodeFacts, axis: int, out_range: Range) -> Range:
    """Input rows for output rows ``out_range``."""
    s = scale(f, axis)
    return (out_range[0] // s, -(-out_range[1] // s))


def emit(f: NodeFacts, axis: int, out_range: Range, clipped: Range, e: Emit) -> None:
    """The chunk's copy upsamples its input rows ``clipped`` whole, then is cropped to the
    band; a ``sizes`` input gets the chunk's extent."""
    so = f.out_shapes[0]
    assert so is not None
    s = scale(f, axis)
    raw = (clipped[1] - clipped[0]) * s
    lo = out_range[0] - clipped[0] * s
    hi = lo + out_range[1] - out_range[0]
    if (lo, hi) != (0, raw):
        e.crop = (lo, hi)
        e.raw_extent = raw
    if len(f.node.inputs) > 3 and f.node.inputs[3] is not None:
        sizes = list(so)
        sizes[axis] = raw
        e.const_inputs[3] = np.asarray(sizes, dtype=np.int64)
