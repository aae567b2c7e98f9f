"""OpenVINO CPU: the runtime nodes that are neither a kernel primitive nor a Snippets Subgraph.

A Transpose, a Reshape (Squeeze, Unsqueeze, Flatten), a Softmax and a MatMul of two activations
each stay a node of their own in the plugin's runtime graph (``get_runtime_model()``: one
``Transpose`` / ``Reshape`` / ``Softmax`` / ``MatMul`` layer per ONNX node reading an
activation), with its executor, memory descriptors and, for Transpose, a permute kernel. Each
costs anon memory beyond the ov.Model's per-op share that ``ov_read`` charges. A split of the
attention queries into K pieces multiplies them by K (the query-split pieces of ``chunk``).
Measured on chains of 16 and 128 units, static shapes, bf16 host, over the per-op read share
(docs/estimate.md, "Session 13: plain runtime nodes"): Softmax +0.016 MiB, Transpose
+0.018 / +0.036 (last-two swap / heads swap), Reshape +0.035, MatMul +0.026, the same at
[1, 12, 64, 64] and [4, 12, 128, 128]; 64 query pieces of a four-layer stack +0.12 / +0.15
MiB each (compile / infer 3) beyond the Subgraphs and MatMuls already charged.
"""

from __future__ import annotations

from memshrink.estimate.graph import GraphInfo, NodeInfo

# float32, float16, double, bfloat16 (ONNX TensorProto elem types)
FLOATS = frozenset({1, 10, 11, 16})

VIEW_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten"})
PLAIN_OPS = VIEW_OPS | {"Transpose", "Softmax"}


def _activation(g: GraphInfo, name: str) -> bool:
    """A floating-point activation: integer tensors are shape arithmetic, which the plugin
    folds under static shapes (MobileViT: 117 Unsqueezes of shape values, no runtime node)."""
    t = g.tensors.get(name) if name else None
    return t is not None and t.kind != "initializer" and not t.folded and t.elem_type in FLOATS


def _swaps_last_two(node: NodeInfo) -> bool:
    perm = [int(p) for p in node.attrs.get("perm", [])]
    return len(perm) >= 2 and perm == [*range(len(perm) - 2), len(perm) - 1, len(perm) - 2]


def _into_matmul(g: GraphInfo, node: NodeInfo) -> bool:
    """A Transpose of the last two dims read only by MatMuls: folded into them (their
    ``transpose_a`` / ``transpose_b``)."""
    t = g.tensors.get(node.outputs[0])
    if t is None or t.is_output or not t.consumers or not _swaps_last_two(node):
        return False
    return all(g.nodes[c].op_type == "MatMul" for c in t.consumers)


def _after_view(g: GraphInfo, node: NodeInfo) -> bool:
    """A view of a view: the plugin merges consecutive reshapes into one node."""
    t = g.tensors.get(node.inputs[0])
    if t is None or t.producer is None:
        return False
    return g.nodes[t.producer].op_type in VIEW_OPS and len(set(t.consumers)) == 1


def plain_nodes(g: GraphInfo, inner: set[str], folded_kt: set[str]) -> int:
    """Runtime nodes of kinds ``PLAIN_OPS`` and activation x activation MatMuls of ``g``.

    Left out: nodes the runtime folds (constant inputs, shape arithmetic), nodes inside a
    tokenized MHA block (``inner``: its scores MatMul, Softmax and the MatMul reading them are
    one MHA Subgraph), the Kᵀ Transposes that block folds (``folded_kt``), last-two-dims
    Transposes a MatMul reads (folded into it) and a view of a view (merged).
    """
    n = 0
    for node in g.nodes:
        op = node.op_type
        if node.index in g.folded or not node.inputs or not node.outputs:
            continue
        out = node.outputs[0]
        if op == "MatMul":
            if len(node.inputs) < 2 or not all(_activation(g, i) for i in node.inputs[:2]):
                continue
            if out in inner or node.inputs[0] in inner:
                continue
        elif op in PLAIN_OPS:
            if not _activation(g, node.inputs[0]) or out in inner or out in folded_kt:
                continue
            if op == "Transpose" and _into_matmul(g, node):
                continue
            if op in VIEW_OPS and _after_view(g, node):
                continue
        else:
            continue
        n += 1
    return n
