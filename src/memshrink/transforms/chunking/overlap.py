"""Overlapping bands: every tensor of a chunk spans one row range, no slice inside the chunk.

Why: the exact plan (``region.chunk_rows``) gives each consumer exactly the rows it needs, so
a residual block (``x`` → 3×3 conv → … → ``Add(x)``) slices its skip input to the conv
branch's narrower rows. On ONNX Runtime CPU every such Slice reads a blocked (NCHWc) tensor:
the NCHWc transformer inserts a ReorderOutput (a full copy in plain layout) before it and a
ReorderInput after it, and the Conv+Add ``Sum`` fusion is lost. On ResNet-50 at 960² the
chunked model was then predicted (and measured: 230 → 277 MiB) above the original.

Here a chunk reads one slice of the entry rows ``[a, b)`` and every op runs on all the rows
it gets, with its own pads: at a real border the pads are the original's, so those rows are
exact; at an interior border the pads read zeros where the neighbour's rows would be, so the
rows near it are wrong. The plan tracks, per tensor, the global rows that are still exact
(``valid``); a window op shrinks them by its reach. The band ``[a, b)`` is widened until the
region output's exact rows cover the chunk's part, which is then sliced out (the only slice).
Entry rows start at a multiple of every cumulative stride, so a strided op's local rows map
onto global rows. Extra compute is higher than the exact plan's (every layer computes the
whole widened band), which ``max_extra_flops`` weighs.

Refused (the exact plan still applies): ops other than windows, row-wise and element-wise
ones (ConvTranspose, reshapes that merge the chunk axis, slices along it), and element-wise
ops whose chunked inputs arrive with different rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import lcm, prod

import onnx_ir as ir

from memshrink.transforms.chunking import rules
from memshrink.transforms.chunking.region import ChunkRows, Region, output_parts
from memshrink.transforms.chunking.rules import Range, Refuse

#: Ops whose output rows are the input rows (same extent), element for element.
_ROWWISE = rules.BROADCAST | {"BatchNormalization", "LRN", "Concat", "Identity"}


def _strides(region: Region, strict: bool = True) -> dict[ir.Value, int]:
    """Cumulative stride of every region value along the chunk axis (entries: 1).

    ``strict=False`` leaves out, instead of refusing, the values of a ``Resize`` and of
    everything it feeds (an FPN's top-down path, which ``chunking.resize`` admits into the
    exact plan's regions): the ops before it may still end a region (``ends``), as they did
    when regions stopped at the Resize. Any other op overlapping bands cannot pass still
    refuses."""
    cum: dict[ir.Value, int] = {v: 1 for v in region.externals}
    for node in region.nodes:
        f = region.facts[node]
        a = region.in_axes[node]
        if not strict and any(
            ax is not None and x is not None and x not in cum
            for x, ax in zip(node.inputs, a, strict=False)
        ):
            continue
        ins = [cum[x] for x, ax in zip(node.inputs, a, strict=False) if ax is not None and x]
        if not strict and node.op_type == "Resize":
            continue
        if len(set(ins)) != 1:
            raise Refuse(f"{node.op_type} joins rows of different strides")
        s = ins[0]
        if node.op_type in rules.WINDOWED and a[0] is not None and a[0] >= 2:
            s *= rules._window(f, a[0]).s
        elif node.op_type not in _ROWWISE:
            raise Refuse(f"overlapping bands do not pass {node.op_type}")
        for y in node.outputs:
            cum[y] = s
    return cum


def _forward(
    region: Region, start: int, stop: int
) -> tuple[dict[ir.Value, Range], dict[ir.Value, Range]]:
    """Rows (global) each value spans and the exact ones among them, for entry rows
    ``[start, stop)``."""
    span: dict[ir.Value, Range] = {}
    valid: dict[ir.Value, Range] = {}
    for v in region.externals:
        span[v] = valid[v] = (start, stop)
    for node in region.nodes:
        f = region.facts[node]
        a = region.in_axes[node]
        chunked = [i for i, ax in enumerate(a) if ax is not None and node.inputs[i] is not None]
        spans = {span[node.inputs[i]] for i in chunked}  # type: ignore[index]
        if len(spans) != 1:
            raise Refuse(f"{node.op_type} reads chunked inputs of different rows")
        (s0, s1) = spans.pop()
        v0 = max(valid[node.inputs[i]][0] for i in chunked)  # type: ignore[index]
        v1 = min(valid[node.inputs[i]][1] for i in chunked)  # type: ignore[index]
        ax = a[chunked[0]]
        assert ax is not None
        si = f.in_shapes[chunked[0]]
        so = f.out_shapes[0]
        assert si is not None and so is not None
        if node.op_type in rules.WINDOWED and ax >= 2:
            w = rules._window(f, ax)
            if s0 % w.s:
                raise Refuse(f"{node.op_type}: band start {s0} not a multiple of its stride")
            o0 = s0 // w.s
            o1 = o0 + (s1 - s0 + w.pb + w.pe - w.ek) // w.s + 1
            # exact output rows: every row read is exact, or real padding at a real border
            lo = o0 if v0 == 0 else -(-(v0 + w.pb) // w.s)
            hi = o1 if v1 == si[ax] else (v1 - w.ek + w.pb) // w.s + 1
            if o1 > so[ax] or o1 <= o0:
                raise Refuse(f"{node.op_type}: band rows {o0}..{o1} outside the output")
            out, ok = (o0, o1), (max(lo, o0), min(hi, o1))
        else:
            out, ok = (s0, s1), (v0, v1)
        for y in node.outputs:
            span[y] = out
            valid[y] = ok if ok[1] > ok[0] else (-1, -1)  # none exact (never a border)
    return span, valid


def overlap_plans(
    region: Region,
    count: int,
    stagger: int = 0,
    edges: Sequence[int] | None = None,
    lengths: list[int] | None = None,
) -> list[ChunkRows]:
    """One ``ChunkRows`` per chunk, for ``rewrite.rewrite(plans=...)``.

    ``lengths``: entry-row lengths other regions whose chunks run in the same session already
    use (``chunking.nested``'s sibling bands, which have the same layers): kept apart as this
    region's own are, and extended with them and with each part's length (the output slice a
    chunk makes, in entry rows), so that no later chunk's tensor takes that slice's shape."""
    cum = _strides(region)
    entry_ext = {
        region.facts[n].in_shapes[i][ax]  # type: ignore[index]
        for n in region.nodes
        for i, ax in enumerate(region.in_axes[n])
        if ax is not None and n.inputs[i] in region.externals
    }
    if len(entry_ext) != 1:
        raise Refuse("overlapping bands need one entry extent")
    extent = entry_ext.pop()
    align = lcm(*cum.values())
    plans: list[ChunkRows] = []
    shared = lengths is not None
    lengths = [] if lengths is None else lengths
    for k in range(count):
        part = output_parts(region, k, count, stagger, edges)
        a = min(p[0] * cum[v] for v, p in part.items()) // align * align
        b = min(extent, max(p[1] * cum[v] for v, p in part.items()))
        while True:  # widen each side until the exact rows cover the part
            span, valid = _forward(region, a, b)
            none = any(valid[v][1] <= valid[v][0] for v in part)  # no exact row yet
            top = not none and all(valid[v][0] <= p[0] for v, p in part.items())
            bottom = not none and all(p[1] <= valid[v][1] for v, p in part.items())
            if top and bottom:
                break
            if a == 0 and b == extent:
                raise Refuse(f"chunk {k}: the whole input does not cover its part")
            a = a if top and a > 0 else max(0, a - align)
            b = b if bottom and b < extent else min(extent, b + align)
        # Keep every chunk's length at least ``align`` rows from every other's, so no two
        # chunks have a tensor of the same shape at any stride: ORT's planner would chain
        # equal buffers through the chunks (``chunking.layout``). Widening is always exact.
        while any(abs((b - a) - n) < align for n in lengths) and (a > 0 or b < extent):
            if b < extent:
                b = min(extent, b + align)
            else:
                a = max(0, a - align)
        lengths.append(b - a)
        if shared:
            lengths.extend((p[1] - p[0]) * cum[v] for v, p in part.items())
        span, valid = _forward(region, a, b)
        plans.append(_rows(region, span, part))
    return plans


def _rows(region: Region, span: dict[ir.Value, Range], part: dict[ir.Value, Range]) -> ChunkRows:
    node_range: dict[ir.Node, Range] = {}
    needs: dict[ir.Node, list[Range | None]] = {}
    for node in region.nodes:
        f = region.facts[node]
        a = region.in_axes[node]
        node_range[node] = span[node.outputs[0]]
        nd: list[Range | None] = []
        for i, x in enumerate(node.inputs):
            if a[i] is None or x is None:
                nd.append(None)
                continue
            c0, c1 = span[x]
            if node.op_type in rules.WINDOWED and a[i] >= 2:  # type: ignore[operator]
                w = rules._window(f, a[i])  # type: ignore[arg-type]
                o0, o1 = node_range[node]
                # pads: the original's at the top (rows map to global rows), and at the
                # bottom what the last output row reaches past the band (never negative)
                nd.append((c0 - w.pb, max(c1, (o1 - 1) * w.s - w.pb + w.ek)))
            else:
                nd.append((c0, c1))
        needs[node] = nd
    clipped = {
        n: [None if needs[n][i] is None else span[x] for i, x in enumerate(n.inputs)]  # type: ignore[index]
        for n in region.nodes
    }
    return ChunkRows(node_range, needs, clipped, dict(span), part)  # type: ignore[arg-type]


def ends(region: Region, max_fraction: float = 0.5) -> list[ir.Value]:
    """Where an overlapping-band region may end: at each cumulative stride, the first and the
    last block boundary (``region.cuts``), if its tensor is at most ``max_fraction`` of the
    region's largest one.

    Why these: the concatenated output exists whole next to its chunks (twice its size at the
    Concat), so a region should end right after a downsampling (the first boundary at a
    stride: smallest tensor for the least halo) or where that stride ends (more compute per
    halo row saved); a boundary whose tensor is as large as the region's largest saves
    nothing. A value whose only reader is a one-input op that is itself a boundary (an
    ``Add`` before its ``Relu``) defers to that reader.
    """
    from memshrink.transforms.chunking.region import cuts

    try:
        cum = _strides(region, strict=False)
    except Refuse:
        return []
    size = {
        y: prod(s)
        for n in region.nodes
        for y, s in zip(n.outputs, region.facts[n].out_shapes, strict=False)
        if s is not None
    }
    largest = max(size.values(), default=0)
    cs = cuts(region)
    later = set(cs)
    kept = [
        v
        for v in cs
        if v in cum and not _defers(v, later) and size.get(v, largest) <= largest * max_fraction
    ]
    out: list[ir.Value] = []
    for s in sorted({cum[v] for v in kept}):
        at = [v for v in kept if cum[v] == s]
        out.extend(dict.fromkeys([at[0], at[-1]]))
    return out


def _defers(v: ir.Value, later: set[ir.Value]) -> bool:
    """``v``'s only reader is a one-input op whose output is a boundary too."""
    uses = list(v.uses())
    if len(uses) != 1:
        return False
    node = uses[0].node
    return sum(x is not None for x in node.inputs) == 1 and any(y in later for y in node.outputs)
