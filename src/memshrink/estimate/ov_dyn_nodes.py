"""OpenVINO CPU under dynamic shapes: the runtime nodes no other per-node rule charges.

With a symbolic input dim the plugin keeps every op that reads an activation as a node of its
own runtime graph (no Snippets tokenization): Concat, Slice (``StridedSlice``), Pad, Cast
(``Convert``), LayerNormalization (``MVN``), GridSample, Expand (``Broadcast``), reductions,
CumSum, Range, ... each with its executor, descriptors and shape-inference state. Chains of 32
such units on [B, 8, 32, 32] (B symbolic; read, compile, drop the ov.Model, infer, as the
verifier does; bf16 host) cost at compile, anon + file, over read's per-op share: Slice + Pad
0.060 MiB a unit, Slice + Slice + Concat 0.045, LayerNormalization 0.049, Slice + Transpose +
Slice + GridSample (over Slice + Pad) 0.082; a Sigmoid + Mul pair 0.013 in all (an
element-wise chain is one Eltwise node). So about 0.03 a node
(``ov_per_dyn_node``), an element-wise chain counted once, and the Slices of one tensor on the
same axes once (the plugin makes them one ``Split``: timm MobileViT's 27 q / k / v Slices are 9
Split nodes; three Slices covering [B, 8, 32, 96] on its last axis, one) (docs/estimate.md, "Session 14:
dynamic runtime nodes"). Kernels (Conv / FC), Gathers, Transpose / Softmax / reshapes
(``ov_plain``), recurrent nodes and MHA blocks have rules of their own and are left out here.
"""

from __future__ import annotations

from memshrink.estimate.graph import GraphInfo, NodeInfo
from memshrink.estimate.ov_kinds import ELTWISE, NO_CODE
from memshrink.estimate.ov_plain import FLOATS

# Charged elsewhere: kernels (``ov_per_kernel``), Gathers (``ov_per_gather``), plain nodes
# (``ov_plain``), recurrent nodes (``ov_rnn``), dynamic quantization (``ov_per_dyn_quant``).
OWN_RULE = frozenset(
    {
        "Conv", "ConvTranspose", "Gemm", "MatMul", "MatMulInteger", "ConvInteger", "Gather",
        "Transpose", "Softmax", "LSTM", "GRU", "RNN", "DynamicQuantizeLinear", "If", "Loop",
        "Scan",
    }
)  # fmt: skip


def _live(g: GraphInfo, name: str) -> bool:
    t = g.tensors.get(name) if name else None
    return t is not None and t.kind != "initializer" and not t.folded


# A kernel whose element-wise reader (bias, activation, scale) becomes its post-op.
KERNELS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})


def _joins(g: GraphInfo, name: str, skip: set[str], depth: int = 0) -> bool:
    """Whether an element-wise reader of ``name`` joins a node already there: a kernel's
    post-op (a SiLU's Mul reads the Conv through its fused Sigmoid) or the chain of an
    element-wise node that counts (fused edges, ``skip``, are followed up to their source)."""
    t = g.tensors.get(name) if name else None
    if t is None or t.producer is None or t.folded or depth > 32:
        return False
    p = g.nodes[t.producer]
    single = len(set(t.consumers)) == 1
    if p.op_type in KERNELS:
        return single or name in skip
    if p.op_type not in ELTWISE:
        return False
    if name not in skip:
        return single
    return any(_joins(g, i, skip, depth + 1) for i in p.inputs if i)


def _float_cast(g: GraphInfo, node: NodeInfo) -> bool:
    """A Cast between float types: the plugin runs the graph in its inference precision and
    drops it (32 chained f32 -> f16 -> f32 pairs: +0.007 MiB a pair at compile)."""
    t = g.tensors.get(node.inputs[0]) if node.inputs else None
    o = g.tensors.get(node.outputs[0])
    return t is not None and o is not None and t.elem_type in FLOATS and o.elem_type in FLOATS


def dyn_nodes(g: GraphInfo, skip: set[str]) -> tuple[int, int]:
    """(float, integer) runtime nodes of ``g`` that no other rule charges, for a model
    compiled with dynamic shapes. ``skip``: output edges fused into a kernel or inside an MHA
    block. Integer nodes are the shape arithmetic the plugin keeps where a size depends on a
    symbolic dim (counted apart: the caller decides)."""
    fl = ints = 0
    slices: set[tuple[str, str]] = set()
    for node in g.nodes:
        op = node.op_type
        if node.index in g.folded or not node.outputs or not node.outputs[0]:
            continue
        if op in NO_CODE or op in OWN_RULE or node.domain not in ("", "ai.onnx"):
            continue
        if node.outputs[0] in skip or not any(_live(g, i) for i in node.inputs):
            continue
        if (op in ELTWISE and any(_joins(g, i, skip) for i in node.inputs)) or (
            op == "Cast" and _float_cast(g, node)
        ):
            continue
        if op == "Slice":  # slices of one tensor on the same axes: one Split node
            key = (node.inputs[0], node.inputs[3] if len(node.inputs) > 3 else "")
            if key in slices:
                continue
            slices.add(key)
        t = g.tensors.get(node.outputs[0])
        if t is not None and t.elem_type in FLOATS:
            fl += 1
        else:
            ints += 1
    return fl, ints
