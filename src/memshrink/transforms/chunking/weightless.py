"""Weightless cores: chunk only the weight-free part of a layer, leave its weighted nodes whole.

Why: a batch chunk copies every node of its region, so K MatMuls read each Linear weight. On a
host where OpenVINO computes in bf16 its CPU plugin converts an FC weight once *per MatMul that
reads it* (``docs/estimate.md``, "OpenVINO on a bf16 host"): BERT b4×512 split ×4 would hold
3 extra bf16/f32 copies of every weight, and the chunk pass's OpenVINO guard refuses the split.
But a transformer's activation peak is its attention scores (4×12×512×512 f32, 48 MiB), made
and consumed between weighted nodes: Q, K, V projections → Reshape/Transpose → MatMul(Q, Kᵀ)
→ scale/mask → Softmax → MatMul(·, V) → Transpose/Reshape → output projection. Chunking only
that stretch along the batch lowers ORT CPU's peak while no weight gets a second reader.

A *core* ends at a value ``E`` read by a weighted node (the output projection's input). Its
nodes are ``E``'s cone (``chunking.cone.cone_nodes``: nodes whose outputs are read only inside
it) less every weighted node (a MatMul/Gemm/Conv reading a constant, and a constant bias
``Add`` after one: OpenVINO fuses it into the FC) and less every cone node upstream of one.
The entries are then the projections' outputs (read whole, sliced per chunk) and whatever
the batch region slices (the attention mask). Each core node must be in the batch region
(``region.discover_best``), whose rules proved it row-independent along the batch; its axes
are that region's. Only ``E`` may leave the core, so it is convex. One rewrite per core
(a BERT layer each): the chunks run the same kernels on fewer rows.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import Any

import onnx_ir as ir

from memshrink.transforms.chunking import query_memo
from memshrink.transforms.chunking.cone import cone_nodes, node_positions
from memshrink.transforms.chunking.region import Region, _close, discover, shape_of
from memshrink.transforms.chunking.rules import Refuse, Shape

#: ops whose constant input is a weight the runtime prepacks or converts per node
WEIGHTED_OPS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "FusedMatMul"})
#: ops that reduce a core's whole-batch tensors (a core without one saves nothing)
CORE_OPS = frozenset({"MatMul", "Softmax"})


def _constant(v: ir.Value | None, graph: ir.Graph) -> bool:
    if v is None:
        return False
    if v.const_value is not None or (v.name is not None and v.name in graph.initializers):
        return True
    p = v.producer()
    return p is not None and p.op_type == "Constant"


def weighted(node: ir.Node, graph: ir.Graph) -> bool:
    """A weighted node, or the constant bias ``Add`` right after one (an FC with bias)."""
    if node.op_type in WEIGHTED_OPS:
        return any(_constant(x, graph) for x in node.inputs)
    if node.op_type == "Add" and len(node.inputs) == 2:
        a, b = node.inputs
        for x, y in ((a, b), (b, a)):
            p = None if x is None else x.producer()
            fc = p is not None and p.op_type in WEIGHTED_OPS and weighted(p, graph)
            if fc and _constant(y, graph):
                return True
    return False


def core_nodes(
    end: ir.Value, graph: ir.Graph, positions: Mapping[ir.Node, int] | None = None
) -> list[ir.Node]:
    """``end``'s cone less its weighted nodes and everything upstream of them (file order).

    Walked directly rather than as the whole cone minus what lies upstream of its weighted
    nodes: a core node's readers are all core nodes (a weighted or upstream reader would put it
    upstream too), so the core is the cone walk that never enters a weighted node. The whole
    cone reaches back to the graph input on a residual chain, which made ``ends`` quadratic."""
    first = end.producer()
    if first is None or weighted(first, graph):
        return []
    return cone_nodes(end, positions, stop=lambda n: weighted(n, graph))


def region(
    batch: Region,
    graph: ir.Graph,
    end: ir.Value,
    label: str,
    positions: Mapping[ir.Node, int] | None = None,
    inside: set[ir.Node] | None = None,
) -> Region:
    """The core ending at ``end`` as a region with ``batch``'s axes; ``Refuse`` when a core
    node is outside the batch region, the core leaks another value, or it has no MatMul or
    Softmax between activations (nothing to gain). ``positions`` (``node_positions(graph)``)
    and ``inside`` (``set(batch.nodes)``): computed once by a caller asking for many cores,
    each O(nodes) (a 5,000-node graph's 1,000 cores: 25 of its 31 CPU-s in ``chunk``)."""
    nodes = core_nodes(end, graph, positions)
    if not nodes:
        raise Refuse(f"the cone of {end.name} is weighted nodes only")
    if inside is None:
        inside = set(batch.nodes)
    out = [n for n in nodes if n not in inside]
    if out:
        raise Refuse(f"{out[0].op_type} {out[0].name} in the core of {end.name} is not "
                     "row-independent along the batch")  # fmt: skip
    if not any(n.op_type in CORE_OPS for n in nodes):
        raise Refuse(f"the core of {end.name} has no MatMul or Softmax")
    r = _close(label, nodes, batch.axes, batch.in_axes, batch.out_axis, batch.facts, {})
    if list(r.outputs) != [end]:
        raise Refuse(f"the core of {end.name} has other outputs")
    return r


def ends(
    batch: Region | None, graph: ir.Graph, positions: Mapping[ir.Node, int] | None = None
) -> list[ir.Value]:
    """Values of the batch region (``None``: of the graph) read by a weighted node whose core
    holds an activation MatMul or Softmax (an attention output), in file order."""
    out: list[ir.Value] = []
    if positions is None:
        positions = node_positions(graph)
    for n in batch.nodes if batch is not None else list(graph):
        if weighted(n, graph):
            continue
        for v in n.outputs:
            if v.is_graph_output() or v in out:
                continue
            if not any(weighted(u.node, graph) for u in v.uses()):
                continue
            if any(m.op_type in CORE_OPS for m in core_nodes(v, graph, positions)):
                out.append(v)
    return out


def cores(batch: Region, graph: ir.Graph) -> list[Region]:
    """Every core of the batch region that can be chunked (``region``), in file order."""
    out: list[Region] = []
    positions = node_positions(graph)
    inside = set(batch.nodes)
    for i, v in enumerate(ends(batch, graph, positions)):
        try:
            out.append(region(batch, graph, v, f"{batch.label}w{i}", positions, inside))
        except Refuse:
            continue
    return out


def _activation_matmul(core: Region, graph: ir.Graph) -> ir.Node | None:
    """The core's first MatMul between two activations (attention's Q·Kᵀ), if any."""
    for n in core.nodes:
        if n.op_type == "MatMul" and not any(_constant(x, graph) for x in n.inputs):
            return n
    return None


def heads(core: Region, graph: ir.Graph, shapes: Mapping[str, Shape | None], opset: int,
          label: str) -> Region:  # fmt: skip
    """The stretch of ``core`` chunked along its activation MatMul's inner batch axis (the
    heads of Q·Kᵀ, axis 1 of ``[batch, heads, rows, cols]``) instead of the batch.

    Why: with batch 4 a batch split stops at 4 chunks, one sample each, whose scores
    (12 heads × 512 × 512 f32, 12 MiB) are still the peak; the heads are as independent as
    the samples (MatMul broadcasts its leading axes), so the scores can be cut 12 ways. The
    region is grown from Q and Kᵀ along that axis (``region.discover``: the rules slice V
    and read the mask whole where it broadcasts), kept inside ``core`` and required to leave
    one value, so it stays convex; the Reshape/Transpose of Q, K, V and of the output,
    where the heads are not an axis, run whole between the projections."""
    return heads_of(core.nodes, graph, shapes, opset, label)


def heads_of(nodes: list[ir.Node], graph: ir.Graph, shapes: Mapping[str, Shape | None],
             opset: int, label: str) -> Region:  # fmt: skip
    """``heads`` for a core given as its nodes (``graph_cores``: no batch region needed).

    Why at batch 1: where the queries are few but heads × keys is large (a decoder's
    cross-attention over 1500 encoder frames) the query rows leave little to cut; the heads
    are as independent there as at any batch."""
    mm = next((n for n in nodes if n.op_type == "MatMul"
               and not any(_constant(x, graph) for x in n.inputs)), None)  # fmt: skip
    if mm is None:
        raise Refuse("the core has no MatMul between activations")
    shape = shapes.get(mm.outputs[0].name or "")
    if shape is None or len(shape) < 4:
        raise Refuse("the core's MatMul has no inner batch axis")
    entries = {x: 1 for x in mm.inputs if x is not None}
    grown = discover(graph, shapes, opset, entries, label, min_extent=2)
    inside = set(nodes)
    keep = [n for n in grown.nodes if n in inside]
    if mm not in keep:
        raise Refuse(f"{mm.name} cannot be chunked along axis 1")
    r = _close(label, keep, grown.axes, grown.in_axes, grown.out_axis, grown.facts, {})
    if len(r.outputs) != 1:
        raise Refuse(f"the heads stretch of {label} leaves {len(r.outputs)} values")
    return r


#: a query split cuts the cores whose scores hold at least 1/QUERY_SHARE of the largest
#: core's: SAM's 14² windows (15 MB of scores) beside its global layer (134 MB) gain nothing
QUERY_SHARE = 4
#: how far back from ``Q·Kᵀ``'s first operand the entry of a query split is searched
QUERY_DEPTH = 8


def graph_cores(graph: ir.Graph) -> list[list[ir.Node]]:
    """Every weightless core of the graph (no batch region needed), in file order.

    Why without the batch region: a query split proves its own rows (``queries``), and at
    batch 1, where it matters (SAM, ViT at high resolution, an LLM prefill), there is no
    batch axis to discover a region along."""
    positions = node_positions(graph)
    out: list[list[ir.Node]] = []
    for v in ends(None, graph, positions):
        nodes = core_nodes(v, graph, positions)
        if nodes and any(n.op_type in CORE_OPS for n in nodes):
            out.append(nodes)
    return out


def _entries(a: ir.Value, inside: set[ir.Node], shapes: Mapping[str, Shape | None],
             rank: int) -> list[tuple[ir.Value, int]]:  # fmt: skip
    """(value, axis) pairs a query split may grow from: ``Q·Kᵀ``'s first operand along its
    rows, then its ancestors inside the core (the largest non-constant input each step) along
    every axis. An ancestor also read by another path (SAM's ``q`` feeds the relative-position
    ``Einsum``s too) brings that path into the split; one shared with K is refused by the
    MatMul rule (both operands chunked)."""
    out = [(a, rank - 2)]
    x: ir.Value | None = a
    for _ in range(QUERY_DEPTH):
        p = None if x is None else x.producer()
        if p is None or p not in inside:
            break
        ins: list[tuple[Shape, ir.Value]] = []
        for y in p.inputs:
            sy = shape_of(shapes, y)
            if (
                y is not None
                and sy is not None
                and p.graph is not None
                and not _constant(y, p.graph)
            ):
                ins.append((sy, y))
        if not ins:
            break
        s, x = max(ins, key=lambda t: _elems(t[0]))
        out += [(x, ax) for ax in range(len(s)) if s[ax] >= 2]
    return out


def _elems(s: Shape) -> int:
    n = 1
    for d in s:
        n *= d
    return n


def queries(nodes: list[ir.Node], graph: ir.Graph, shapes: Mapping[str, Shape | None],
            opset: int, label: str, memo: dict[Hashable, Any] | None = None,
            at: Hashable = None) -> Region:  # fmt: skip
    """The stretch of a core chunked along its query rows: ``Q`` sliced, ``Kᵀ`` and ``V``
    read whole by every piece.

    Why: at batch 1 with long sequences (SAM's global attention over 4096 patches, ViT at
    high resolution, Whisper's 1500 frames) the ``[heads, S, S]`` scores are the peak, and a
    heads split still leaves ``[1, S, S]`` per slice. Softmax normalizes each query row on its
    own, so rows of Q·Kᵀ, the scale, the mask ``Add`` (its query axis sliced, a broadcast one
    read whole), the Softmax and ·V can be computed a band at a time. The region is grown
    forward from Q (``region.discover``, the ordinary rules: the MatMul rule refuses a
    contraction over the rows and a chunked Kᵀ), kept inside the core and required to
    leave one value and hold ``Q·Kᵀ`` with Kᵀ whole and the Softmax; of the entries tried
    (``_entries``) the one covering the most compute is kept. ``memo`` (``query_memo``: the
    graph's structure's) remembers under ``at`` which entry won (or why none did), so a clone
    of the graph grows only that one."""
    inside = set(nodes)
    mm = next((n for n in nodes if n.op_type == "MatMul"
               and not any(_constant(x, graph) for x in n.inputs)), None)  # fmt: skip
    if mm is None or mm.inputs[0] is None:
        raise Refuse("the core has no MatMul between activations")
    sa = shape_of(shapes, mm.inputs[0])
    if sa is None or len(sa) < 2:
        raise Refuse("the core's MatMul has no rows")
    best: Region | None = None
    won: int | None = None
    why = f"{mm.name} cannot be chunked along its query rows with Kᵀ whole"
    entries = list(enumerate(_entries(mm.inputs[0], inside, shapes, len(sa))))
    known = memo.get(at) if memo is not None else None
    if known is not None:
        won, why = known
        entries = [] if won is None else [entries[won]]
    for i, (entry, axis) in entries:
        grown = discover(graph, shapes, opset, {entry: axis}, label, min_extent=2)
        keep = [n for n in grown.nodes if n in inside]
        if mm not in keep or grown.in_axes[mm] != [len(sa) - 2, None]:
            continue
        if not any(n.op_type == "Softmax" for n in keep):
            why = f"the query rows of {mm.name} do not reach a Softmax"
            continue
        r = _close(label, keep, grown.axes, grown.in_axes, grown.out_axis, grown.facts, {})
        if len(r.outputs) != 1:
            why = f"the query stretch of {mm.name} leaves {len(r.outputs)} values"
            continue
        if best is None or _work(r) > _work(best):
            best, won = r, i
    if memo is not None and known is None:
        memo[at] = (won if best is not None else None, why)
    if best is None:
        raise Refuse(why)
    return best


def _work(r: Region) -> int:
    """A query region's compute less its Slices: an entry further up that only adds a slice
    of whole Q (a heads piece's own Slice) is no better than the MatMul's operand."""
    return r.work - sum(_elems(s) for n, f in r.facts.items() if n.op_type == "Slice"
                        for s in f.out_shapes[:1] if s is not None)  # fmt: skip


def scores_elems(r: Region) -> int:
    """Elements of a query region's largest tensor (the scores)."""
    return max((_elems(s) for f in r.facts.values() for s in f.out_shapes if s is not None),
               default=0)  # fmt: skip


def query_regions(graph: ir.Graph, shapes: Mapping[str, Shape | None], opset: int,
                  label: str, share: int = QUERY_SHARE, along: str = "queries",
                  ) -> list[Region]:  # fmt: skip
    """The query regions (``along="heads"``: heads regions, ``heads_of``) of the graph's cores
    whose scores are at least 1/``share`` of the largest one's (file order; ``share`` 0: all);
    cores that cannot be split are left whole."""
    found: list[Region] = []
    key = query_memo.structure_key(graph, shapes, opset) if along == "queries" else None
    memo = None if key is None else query_memo.memo_for(key)
    for i, nodes in enumerate(graph_cores(graph)):
        label_i = f"{label}{along[0]}{i}"
        try:
            if along == "queries":
                found.append(queries(nodes, graph, shapes, opset, label_i, memo, i))
            else:
                found.append(heads_of(nodes, graph, shapes, opset, label_i))
        except Refuse:
            continue
    if not found or not share:
        return found
    top = max(scores_elems(r) for r in found)
    return [r for r in found if scores_elems(r) * share >= top]


def piece_counts(found: list[Region], count: int, scaled: bool) -> list[int]:
    """How many pieces each query region gets when the largest scores are cut in ``count``.

    ``scaled=False``: ``count`` for every core whose scores hold at least 1/QUERY_SHARE of the
    largest's, the others whole (1). ``scaled=True``: each core the fewest pieces whose scores
    are no larger than a piece of the largest core's, ``ceil(count × scores / top)``, capped
    by its rows. Why: the peak is the largest piece; cutting a smaller core (Swin's windows
    beside a global layer, a decoder's self-attention beside its cross-attention) finer than
    that lowers no peak and costs per-piece nodes (OpenVINO compiles a kernel per piece), and
    a core under the 1/QUERY_SHARE line may still hold the peak once the largest is cut."""
    if not found:
        return []
    top = max(scores_elems(r) for r in found)
    if not scaled:
        return [count if scores_elems(r) * QUERY_SHARE >= top else 1 for r in found]
    return [max(1, min(count, out_rows(r), -(-count * scores_elems(r) // top))) for r in found]


def out_rows(r: Region) -> int:
    """The chunk-axis extent of a region's (single) output: the rows its pieces deliver."""
    v = r.outputs[0]
    p = v.producer()
    assert p is not None and v.index() is not None
    s = r.facts[p].out_shapes[v.index()]  # type: ignore[index]
    return s[r.axes[v]] if s is not None else 0


def piece_edges(r: Region, count: int) -> list[int] | None:
    """Edges of ``count`` pieces of a region's output rows: ``None`` (equal pieces) when
    ``count`` divides every sliced input's rows, else ``ceil(rows / count)`` rows a piece and
    a shorter last one (ViT-B/16's 197 tokens ×4: 50, 50, 50, 47).

    Why the short piece last: ONNX Runtime's planner hands a freed buffer only to a tensor of
    the same shape, so the first ``count - 1`` pieces reuse each other's buffers; the smaller
    last piece fits in what they freed. Near-equal pieces (49, 49, 49, 50) would end on a
    larger one that fits nowhere. ``Refuse`` when the last piece would be empty."""
    if query_rows(r) % count == 0:
        return None
    n = out_rows(r)
    step = -(-n // count)
    if step * (count - 1) >= n:
        raise Refuse(f"{count} pieces of {step} rows leave no rows of {n} for the last one")
    return [min(k * step, n) for k in range(count + 1)]


def query_rows(r: Region) -> int:
    """The greatest common divisor of a query region's sliced inputs' chunk-axis extents
    (Q's rows, SAM's per-row position tables): a count dividing it cuts every one evenly."""
    ext = [
        s[r.axes[v]]
        for v in r.externals
        for n in r.nodes
        for i, x in enumerate(n.inputs)
        if x is v and (s := r.facts[n].in_shapes[i]) is not None
    ]
    return math.gcd(*ext) if ext else 0
