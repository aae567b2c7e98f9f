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

from memshrink.estimate.graph import GraphInfo

PLAIN_OPS = frozenset({"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Softmax"})


def _activation(g: GraphInfo, name: str) -> bool:
    t = g.tensors.get(name) if name else None
    return t is not None and t.kind != "initializer" and not t.folded


def plain_nodes(g: GraphInfo, inner: set[str], folded_kt: set[str]) -> int:
    """Runtime nodes of kinds ``PLAIN_OPS`` and activation x activation MatMuls of ``g``.

    Left out: nodes the runtime folds (constant inputs, shape arithmetic), nodes inside a
    tokenized MHA block (``inner``: its scores MatMul, Softmax and the MatMul reading them are
    one MHA Subgraph) and the Kᵀ Transposes that block folds (``folded_kt``).
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
        else:
            continue
        n += 1
    return n
