"""Nested bands: split each overlapping band's shallow layers into sub-bands.

Why: a band of an overlapping-band region (``chunking.overlap``) must reach deep enough for
its output (ResNet-50 at 960²: stage 3, stride 16), so its halo is wide and more bands cost
a lot of compute (K = 4: +37 % FLOPs, K = 8: +102 %). Inside one band, the peak is set by the
shallow, high-resolution layers (the stem and stage 1 at stride 4), which need little halo.
Splitting only those layers of each band again, into sub-bands that end at a shallow block
boundary, lowers the band's peak for a fraction of the compute a finer outer split costs.

Exact by construction: a band is a graph of its own whose input is the band's rows, and its
ops run with their own pads at the band's edges. The sub-band plan (``overlap_plans`` on the
band's shallow layers) treats those edges as the real border, so it computes the band's
tensors row for row, the rows the outer plan discards included.
"""

from __future__ import annotations

from collections.abc import Mapping

import onnx_ir as ir

from memshrink.transforms.chunking.overlap import _defers, _strides, overlap_plans
from memshrink.transforms.chunking.region import Region, cuts, discover
from memshrink.transforms.chunking.region import cut as end_at
from memshrink.transforms.chunking.rewrite import RewriteStats, rewrite
from memshrink.transforms.chunking.rules import Refuse, Shape


def band_region(graph: ir.Graph, entry: ir.Value, axis: int, opset: int, label: str) -> Region:
    """The layers of one band that can be split again: all that grow from its input slice
    (they stop at the band's output Slice, which cuts along the axis)."""
    shapes: Mapping[str, Shape | None] = {}  # the rewrite declared every band value's shape
    return discover(graph, shapes, opset, {entry: axis}, label)


def inner_ends(region: Region) -> list[ir.Value]:
    """Block boundaries of ``region`` (``region.cuts``) that can end a sub-band region: the
    first one at each cumulative stride (the smallest tensor there: the least halo)."""
    out: list[ir.Value] = []
    seen: set[int] = set()
    cs = cuts(region)
    later = set(cs)
    for v in cs:
        if _defers(v, later):
            continue
        try:
            s = _strides(end_at(region, v))[v]
        except Refuse:
            break  # the ops from here on cannot be overlapped (the band's output Slice)
        if s not in seen:
            seen.add(s)
            out.append(v)
    return out


def nest(
    graph: ir.Graph,
    outer: RewriteStats,
    axis: int,
    end: str,
    count: int,
    opset: int,
    label: str,
) -> RewriteStats:
    """Split every band of ``outer`` (the stats of an overlapping-band rewrite) into ``count``
    sub-bands from its input to the copy of value ``end``; returns the summed stats of the
    inner rewrites. Raises ``Refuse`` before writing anything when a band cannot be split."""
    jobs: list[tuple[Region, ir.Value]] = []
    for k, entries in enumerate(outer.entries):
        if len(entries) != 1 or entries[0].is_graph_input():
            raise Refuse(f"band {k} reads {len(entries)} inputs or the whole input")
        region = band_region(graph, entries[0], axis, opset, f"{label}b{k}")
        v = outer.copies[k].get(end)
        if v is None or v not in inner_ends(region):
            raise Refuse(f"band {k}: {end} cannot end its sub-bands")
        jobs.append((end_at(region, v), v))
    lengths: list[int] = []  # sub-bands of all bands keep distinct shapes (ORT's planner)
    plans = [overlap_plans(r, count, lengths=lengths) for r, _ in jobs]  # may Refuse
    total = RewriteStats(count, 0, 0, 0, 0, 0)
    for (region, _), p in zip(jobs, plans, strict=True):
        st = rewrite(graph, region, count, plans=p)
        total.nodes_before += st.nodes_before
        total.nodes_after += st.nodes_after
        total.flops_before += st.flops_before
        total.flops_after += st.flops_after
        total.reblocked += st.reblocked
    return total


def band_end_names(graph: ir.Graph, outer: RewriteStats, axis: int, opset: int) -> list[str]:
    """``inner_ends`` of ``outer``'s first band, by the names of the original values."""
    if not outer.entries or len(outer.entries[0]) != 1:
        return []
    region = band_region(graph, outer.entries[0][0], axis, opset, "ends")
    names = {v: n for n, v in outer.copies[0].items()}
    return [names[v] for v in inner_ends(region) if v in names]
