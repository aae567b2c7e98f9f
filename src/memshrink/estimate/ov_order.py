"""OpenVINO's execution order over its *fused* graph (the CPU plugin's ``SortTopologically``).

Why: the plugin sorts its own graph depth-first from the outputs, a node's parents in port
order, after its fusions. A Conv that absorbs a residual ``Add`` (Conv + Sum) gets the Add's
other input as its *last* parent, so the Conv's own input chain runs first and the summed
tensor's chain after it. On the ONNX graph the Add's argument order decides instead. The
difference matters for ``chunk``'s channel split, whose partial sums are such Adds
(``acc_k = acc_(k-1) + reduce_k``): the plugin runs every slice's expand and per-channel ops
first and all reduces last, so the K hidden slices are alive together (measured on the
runtime model of a split inverted-bottleneck chain, docs/estimate.md, "Session 11: the
channel split's order"), where the ONNX-order DFS finished one slice before the next.
"""

from __future__ import annotations

from collections.abc import Mapping

from memshrink.estimate.graph import GraphInfo
from memshrink.estimate.openvino import Fusion, fusions
from memshrink.estimate.schedule import argument_producers, dfs_postorder

#: How far back from a fused edge to look for the Conv/FC that heads it (BN / affine links).
_CHAIN = 8


def _head(g: GraphInfo, node: int) -> int:
    """The Conv/FC at the head of the fused chain that ends in ``node`` (itself if none)."""
    cur = node
    for _ in range(_CHAIN):
        n = g.nodes[cur]
        if n.op_type in ("Conv", "ConvTranspose", "MatMul", "Gemm"):
            return cur
        t = g.tensors.get(n.inputs[0]) if n.inputs and n.inputs[0] else None
        if t is None or t.producer is None:
            return node
        cur = t.producer
    return node


def conv_sums(g: GraphInfo) -> dict[int, Fusion]:
    """The residual Adds the plugin folds into a Conv (Conv + Sum), by Add node. When both
    inputs are fusable Convs it merges the one at port 0 (checked on a two-slice block with
    both argument orders); ``fusions`` lists both."""
    merged: dict[int, Fusion] = {}
    for f in fusions(g):
        into = g.tensors.get(f.into)
        if f.other is None or into is None or into.producer is None:
            continue
        add = into.producer
        if add not in merged or g.nodes[add].inputs[:1] == [f.edge]:
            merged[add] = f
    return merged


def sync_steps(g: GraphInfo, pos: Mapping[int, int]) -> list[int]:
    """Steps (in ``pos``) of the Convs that absorb a sum: in a dynamic-shape graph each is a
    sync point of the plugin (``Graph::IdentifySyncPoints``: a Conv with an in-place sum must
    have its shapes inferred, prepared and run in sequence), and the dynamic plan
    (``MemoryManageNonOverlapingSets``) extends every box that spans one to the next sync
    point at or after its end (to the graph's end after the last)."""
    # The fused node is one step of the plugin, two here (the Conv, then the Add): the Add's
    # step stands for it, so a tensor the fused node reads (its input, the summed tensor)
    # does not span it, and one it writes does.
    return sorted(pos[add] for add in conv_sums(g) if add in pos)


def fused_producers(g: GraphInfo) -> list[list[int]]:
    """Per node, its producers in the order the plugin's sort visits them: argument order,
    except that a Conv + Sum fusion's Conv visits the summed input last and the absorbed Add
    visits only the Conv (the sum is already done when it runs)."""
    prods = argument_producers(g)
    for add, f in conv_sums(g).items():
        edge = g.tensors.get(f.edge)
        other = g.tensors.get(f.other) if f.other else None
        if edge is None or edge.producer is None:
            continue
        conv = _head(g, edge.producer)
        if other is not None and other.producer is not None and other.producer not in prods[conv]:
            prods[conv] = [*prods[conv], other.producer]
        prods[add] = [edge.producer] + [p for p in prods[add] if p != edge.producer]
    return prods


def openvino_order(g: GraphInfo) -> list[int]:
    """Depth-first post-order from the outputs over the fused graph's parent order."""
    return dfs_postorder(g, fused_producers(g))
