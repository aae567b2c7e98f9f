"""Find a region that can be computed in chunks, and the rows each chunk computes.

A region grows forward from *entry* tensors (graph inputs chunked along the batch axis, or
along a spatial axis) through every op whose rule (``rules.forward``) proves that output
rows depend only on matching input rows (plus a halo for windows). It stops at the first op
it cannot prove, whose inputs then become region outputs (concatenated back). The region is
made *convex*: no region node may wait for a value computed outside from a region output,
else the chunks could not run one after another.

Rows per chunk are computed backward: each region output is cut into K bands; every node
must produce the union of the rows its consumers need (``rules.need``), clipped to the
tensor; so halos grow with depth exactly as the chain's kernels, strides and pads dictate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import onnx_ir as ir

from memshrink.transforms.chunking import rules
from memshrink.transforms.chunking.rules import NodeFacts, Range, Refuse, Shape


@dataclass
class Region:
    label: str
    nodes: list[ir.Node]
    axes: dict[ir.Value, int]  # chunk axis of every chunked value (region-made or sliced input)
    in_axes: dict[ir.Node, list[int | None]]
    out_axis: dict[ir.Node, int]
    externals: list[ir.Value]  # chunked values made outside the region: sliced per chunk
    outputs: list[ir.Value]  # region values read outside: concatenated
    facts: dict[ir.Node, NodeFacts]
    stops: dict[str, int] = field(default_factory=dict)  # why growth stopped (reason -> count)

    @property
    def work(self) -> int:
        """The region's compute (FLOPs): how much of the model the chunks cover."""
        return sum(
            rules.flops(n.op_type, self.facts[n].in_shapes, self.facts[n].out_shapes[0],
                        {k: a.value for k, a in n.attributes.items()})
            for n in self.nodes
        )  # fmt: skip


@dataclass
class ChunkRows:
    """Rows (along each value's chunk axis) one chunk computes."""

    node_range: dict[ir.Node, Range]
    needs: dict[ir.Node, list[Range | None]]  # unclipped, per input
    clipped: dict[ir.Node, list[Range | None]]
    value_range: dict[ir.Value, Range]
    part: dict[ir.Value, Range]  # each region output's own band


def shape_of(shapes: Mapping[str, Shape | None], v: ir.Value | None) -> Shape | None:
    if v is None:
        return None
    s = shapes.get(v.name or "")
    if s is None and v.shape is not None and all(isinstance(d, int) for d in v.shape):
        s = tuple(int(d) for d in v.shape)  # type: ignore[arg-type]
    return s


def node_facts(node: ir.Node, shapes: Mapping[str, Shape | None], opset: int) -> NodeFacts:
    return NodeFacts(
        node,
        [shape_of(shapes, v) for v in node.inputs],
        [shape_of(shapes, v) for v in node.outputs],
        opset,
    )


def discover(
    graph: ir.Graph,
    shapes: Mapping[str, Shape | None],
    opset: int,
    entries: Mapping[ir.Value, int],
    label: str,
    min_extent: int = 2,
) -> Region:
    """Grow the region forward from ``entries`` (value -> chunk axis)."""
    axes: dict[ir.Value, int] = dict(entries)
    region: list[ir.Node] = []
    in_axes: dict[ir.Node, list[int | None]] = {}
    out_axis: dict[ir.Node, int] = {}
    facts: dict[ir.Node, NodeFacts] = {}
    stops: dict[str, int] = {}
    made: set[ir.Value] = set()
    for node in graph:
        ia = [axes.get(v) if v is not None and (v in made or v in entries) else None
              for v in node.inputs]  # fmt: skip
        if all(a is None for a in ia):
            continue
        f = node_facts(node, shapes, opset)
        try:
            oa, sliced = rules.forward(f, ia)
            for i, ax in sliced.items():
                v = node.inputs[i]
                assert v is not None
                if v in made or (v in axes and axes[v] != ax):
                    raise Refuse(f"{node.op_type} reads {v.name} along two axes")
            if len(set(oa)) != 1 and node.op_type not in rules.RECURRENT:
                raise Refuse(f"{node.op_type} outputs chunked along different axes")
            ext = {
                f.out_shapes[i][oa[i]]  # type: ignore[index]
                for i in range(len(oa))
                if node.outputs[i].name  # unnamed: not written
            }
            if len(ext) != 1 or min(ext) < min_extent:
                raise Refuse(f"{node.op_type} output below the region's smallest extent")
        except Refuse as exc:
            stops[str(exc)] = stops.get(str(exc), 0) + 1
            continue
        for i, ax in sliced.items():
            v = node.inputs[i]
            assert v is not None
            axes[v] = ax
            ia[i] = ax
        region.append(node)
        in_axes[node] = ia
        out_axis[node] = oa[0]
        facts[node] = f
        for v, ax in zip(node.outputs, oa, strict=False):
            axes[v] = ax
            made.add(v)
    region = _make_convex(region)
    return _close(label, region, axes, in_axes, out_axis, facts, stops)


def _close(
    label: str,
    region: list[ir.Node],
    axes: Mapping[ir.Value, int],
    in_axes: Mapping[ir.Node, list[int | None]],
    out_axis: Mapping[ir.Node, int],
    facts: Mapping[ir.Node, NodeFacts],
    stops: dict[str, int],
) -> Region:
    """The Region of ``region``'s nodes: its sliced inputs (externals) and read outputs."""
    keep = set(region)
    made = {v for n in region for v in n.outputs}
    externals: list[ir.Value] = []
    seen: set[ir.Value] = set()
    for n in region:
        for v, a in zip(n.inputs, in_axes[n], strict=False):
            if v is not None and a is not None and v not in made and v not in seen:
                seen.add(v)
                externals.append(v)
    outputs = [
        v
        for n in region
        for v in n.outputs
        if v.is_graph_output() or any(u.node not in keep for u in v.uses())
    ]
    axes = {v: a for v, a in axes.items() if v in made or v in seen}
    return Region(
        label,
        region,
        axes,
        {n: in_axes[n] for n in region},
        {n: out_axis[n] for n in region},
        externals,
        outputs,
        {n: facts[n] for n in region},
        stops,
    )


def cuts(region: Region) -> list[ir.Value]:
    """Region values that can end a region alone, in file order: the nodes they depend on
    inside the region (their ancestors) have no other value read outside those nodes.

    Why: ending a region at a block boundary (a ResNet block's output, after its residual
    Add) concatenates one tensor; ending mid-block also concatenates the skip branch.
    """
    index = {n: i for i, n in enumerate(region.nodes)}
    out: list[ir.Value] = []
    for node in region.nodes:
        for v in node.outputs:
            anc = ancestors(region, v)
            if all(
                w is v or all(u.node in anc for u in w.uses()) and not w.is_graph_output()
                for n in anc
                for w in n.outputs
            ):
                out.append(v)
    return sorted(out, key=lambda v: index[v.producer()])  # type: ignore[index]


def ancestors(region: Region, v: ir.Value) -> set[ir.Node]:
    """The region nodes ``v`` depends on (its producer included)."""
    inside = set(region.nodes)
    seen: set[ir.Node] = set()
    stack = [v.producer()]
    while stack:
        n = stack.pop()
        if n is None or n in seen or n not in inside:
            continue
        seen.add(n)
        stack.extend(x.producer() for x in n.inputs if x is not None)
    return seen


def cut(region: Region, v: ir.Value) -> Region:
    """``region`` ended at ``v``: only the nodes ``v`` depends on."""
    keep = ancestors(region, v)
    nodes = [n for n in region.nodes if n in keep]
    return _close(region.label, nodes, region.axes, region.in_axes, region.out_axis,
                  region.facts, dict(region.stops))  # fmt: skip


def discover_best(
    graph: ir.Graph,
    shapes: Mapping[str, Shape | None],
    opset: int,
    entries: Mapping[ir.Value, int],
    label: str,
    min_extent: int = 2,
) -> Region:
    """The region of most compute over entry subsets: all entries, all but one, each alone.

    Why subsets: an input whose path leaves the region and comes back (BERT's attention mask,
    gathered by an op we cannot prove) makes everything after the re-entry non-convex; left
    unchunked, that input is computed whole and sliced where the region reads it.
    """
    keys = list(entries)
    subsets = [keys] + [[k for k in keys if k is not x] for x in keys] + [[x] for x in keys]
    best: Region | None = None
    seen: set[tuple[int, ...]] = set()
    for sub in subsets:
        key = tuple(sorted(id(v) for v in sub))
        if not sub or key in seen:
            continue
        seen.add(key)
        r = discover(graph, shapes, opset, {v: entries[v] for v in sub}, label, min_extent)
        if best is None or r.work > best.work:
            best = r
    assert best is not None
    return best


def _make_convex(region: list[ir.Node]) -> list[ir.Node]:
    """Drop region nodes that would wait on an outside node fed by the region (and below)."""
    inside = set(region)
    while True:
        tainted: set[ir.Node] = set()  # outside nodes downstream of the region
        stack = [
            u.node for n in inside for v in n.outputs for u in v.uses() if u.node not in inside
        ]
        while stack:
            n = stack.pop()
            if n in tainted or n in inside:
                continue
            tainted.add(n)
            stack.extend(u.node for v in n.outputs for u in v.uses())
        bad = {
            n for n in inside if any(v is not None and v.producer() in tainted for v in n.inputs)
        }
        if not bad:
            return [n for n in region if n in inside]
        stack = list(bad)
        while stack:
            n = stack.pop()
            if n not in inside:
                continue
            inside.discard(n)
            stack.extend(u.node for v in n.outputs for u in v.uses() if u.node in inside)


def _hull(a: Range | None, b: Range) -> Range:
    return b if a is None else (min(a[0], b[0]), max(a[1], b[1]))


def bands(extent: int, k: int, count: int, stagger: int = 0) -> Range:
    """Band ``k`` of ``count`` bands of ``extent`` rows: near-equal, or with ``stagger`` > 0
    sizes that differ by ``stagger`` rows from one band to the next.

    Why staggering: ONNX Runtime's planner hands a freed buffer to a later tensor of exactly the
    same shape, so identical chunks chain each layer's buffer through every chunk and keep a
    whole chunk's tensors alive at once; bands of different sizes leave reuse to the arena.
    """

    def edge(j: int) -> int:
        return j * extent // count + (j * (j - count) * stagger) // 2

    return (edge(k), edge(k + 1))


def output_extent(region: Region) -> int:
    """The largest chunk-axis extent of the region's outputs: the scale ``edges`` are given on."""
    return max(
        region.facts[v.producer()].out_shapes[v.index()][region.axes[v]]  # type: ignore[arg-type,index]
        for v in region.outputs
    )


def output_parts(
    region: Region, k: int, count: int, stagger: int = 0, edges: Sequence[int] | None = None
) -> dict[ir.Value, Range]:
    """The rows of every region output that chunk ``k`` of ``count`` must deliver."""
    part: dict[ir.Value, Range] = {}
    ref = output_extent(region) if edges is not None else 0
    for v in region.outputs:
        s = region.facts[v.producer()].out_shapes[v.index()]  # type: ignore[index,arg-type]
        assert s is not None
        ext = s[region.axes[v]]
        if edges is not None:
            part[v] = (edges[k] * ext // ref, edges[k + 1] * ext // ref)
        else:
            part[v] = bands(ext, k, count, stagger)
        if part[v][1] <= part[v][0]:
            raise Refuse(f"band layout {edges or stagger} leaves chunk {k} of {v.name} empty")
    return part


def chunk_rows(
    region: Region, k: int, count: int, stagger: int = 0, edges: Sequence[int] | None = None
) -> ChunkRows:
    """Backward: what every region node must produce, and read, for chunk ``k``.

    ``edges`` (``count + 1`` increasing rows on the scale of ``output_extent``), when given,
    replace the near-equal / staggered ``bands``; an output of another extent is cut at the
    proportional rows.
    """
    part = output_parts(region, k, count, stagger, edges)
    want: dict[ir.Value, Range] = dict(part)
    node_range: dict[ir.Node, Range] = {}
    needs: dict[ir.Node, list[Range | None]] = {}
    clipped: dict[ir.Node, list[Range | None]] = {}
    for node in reversed(region.nodes):
        r: Range | None = None
        for v in node.outputs:
            if v in want:
                r = _hull(r, want[v])
        if r is None:
            continue  # nothing in this chunk reads it (dead code): the chunk skips the node
        if r[1] <= r[0]:
            raise Refuse(f"chunk {k} needs no rows of {node.name}")
        f = region.facts[node]
        node_range[node] = r
        nd = rules.need(f, region.in_axes[node], region.out_axis[node], r)
        cl: list[Range | None] = []
        for i, (x, n) in enumerate(zip(node.inputs, nd, strict=False)):
            if n is None or x is None:
                cl.append(None)
                continue
            s = f.in_shapes[i]
            assert s is not None
            c = (max(0, n[0]), min(s[region.in_axes[node][i]], n[1]))  # type: ignore[index]
            if c[1] <= c[0]:
                raise Refuse(f"chunk {k} reads no rows of {x.name}")
            cl.append(c)
            want[x] = _hull(want.get(x), c)
        needs[node] = nd
        clipped[node] = cl
        for v in node.outputs:
            want[v] = r
    return ChunkRows(node_range, needs, clipped, want, part)
