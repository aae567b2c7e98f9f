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

from collections.abc import Mapping

import onnx_ir as ir

from memshrink.transforms.chunking.cone import cone_nodes, node_positions
from memshrink.transforms.chunking.region import Region, _close, discover
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
    batch: Region, graph: ir.Graph, positions: Mapping[ir.Node, int] | None = None
) -> list[ir.Value]:
    """Values of the batch region read by a weighted node whose core holds an activation
    MatMul or Softmax (an attention output), in file order."""
    out: list[ir.Value] = []
    if positions is None:
        positions = node_positions(graph)
    for n in batch.nodes:
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
    mm = _activation_matmul(core, graph)
    if mm is None:
        raise Refuse("the core has no MatMul between activations")
    shape = shapes.get(mm.outputs[0].name or "")
    if shape is None or len(shape) < 4:
        raise Refuse("the core's MatMul has no inner batch axis")
    entries = {x: 1 for x in mm.inputs if x is not None}
    grown = discover(graph, shapes, opset, entries, label, min_extent=2)
    inside = set(core.nodes)
    nodes = [n for n in grown.nodes if n in inside]
    if mm not in nodes:
        raise Refuse(f"{mm.name} cannot be chunked along axis 1")
    r = _close(label, nodes, grown.axes, grown.in_axes, grown.out_axis, grown.facts, {})
    if len(r.outputs) != 1:
        raise Refuse(f"the heads stretch of {core.label} leaves {len(r.outputs)} values")
    return r
