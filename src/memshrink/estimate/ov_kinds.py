"""Which CPU-plugin node kinds an ONNX graph becomes: the library code its compile touches.

OpenVINO's CPU plugin runs a graph as nodes of a few kinds (``FullyConnected``,
``Convolution``, ``Eltwise`` / Snippets ``Subgraph``, ``Reduce``, ``Pooling``, ``If``,
``TensorIterator``, ...). The file-backed pages that ``read_model`` + ``compile_model`` touch
grow with the *kinds* the runtime graph holds, not with the ONNX op types: every element-wise
op is one Eltwise / Subgraph kernel family, ``Constant`` / ``Identity`` / reshapes make no code,
and an ``If`` / ``Loop`` body is compiled as an inner graph whose kinds count too. Measured on
25 models, 2026-11-27 (docs/estimate.md, "Session 10: library pages by node kind").
"""

from __future__ import annotations

from collections.abc import Iterator

from memshrink.estimate.graph import GraphInfo, NodeInfo

# ONNX ops run by one Eltwise / Snippets Subgraph kernel family (jit injectors).
ELTWISE = frozenset(
    {
        "Abs", "Acos", "Add", "And", "Asin", "Atan", "BitShift", "Ceil", "Clip", "Cos", "Div",
        "Elu", "Equal", "Erf", "Exp", "Floor", "Gelu", "Greater", "GreaterOrEqual",
        "HardSigmoid", "HardSwish", "IsInf", "IsNaN", "LeakyRelu", "Less", "LessOrEqual", "Log",
        "Max", "Min", "Mish", "Mod", "Mul", "Neg", "Not", "Or", "PRelu", "Pow", "Reciprocal",
        "Relu", "Round", "Selu", "Sigmoid", "Sign", "Sin", "Softplus", "Sqrt", "Sub", "Sum",
        "Tanh", "Where", "Xor", "BatchNormalization", "Swish",
    }
)  # fmt: skip
# Ops that make no node with code of its own: folded at read, views, sequence bookkeeping that
# the frontend resolves into the ops around it, shape reads (folded under static shapes).
NO_CODE = frozenset(
    {
        "Constant", "Identity", "Dropout", "Reshape", "Squeeze", "Unsqueeze", "Flatten",
        "SequenceConstruct", "SequenceAt", "SequenceInsert", "SequenceLength", "SequenceEmpty",
        "SequenceErase", "Optional", "OptionalGetElement", "OptionalHasElement", "Shape",
        "Size", "ConstantOfShape",
    }
)  # fmt: skip
KIND: dict[str, tuple[str, ...]] = {
    "Gemm": ("fc",),
    "MatMulInteger": ("fc",),
    "Conv": ("conv",),
    "ConvTranspose": ("deconv",),
    "MaxPool": ("pool",),
    "AveragePool": ("pool",),
    "GlobalMaxPool": ("pool",),
    "GlobalAveragePool": ("reduce",),  # the runtime graph holds a Reduce for it
    "LayerNormalization": ("mvn",),
    "MeanVarianceNormalization": ("mvn",),
    "InstanceNormalization": ("mvn",),
    "Loop": ("loop",),  # TensorIterator
    "Scan": ("loop",),
    "Cast": ("convert",),
    "Resize": ("interpolate",),
    "Upsample": ("interpolate",),
    "SplitToSequence": ("split",),
    "ConcatFromSequence": ("concat",),
    "Concat": ("concat",),
    "Split": ("split",),
    "QuantizeLinear": ("eltwise", "convert"),
    "DequantizeLinear": ("eltwise", "convert"),
    "DynamicQuantizeLinear": ("reduce", "eltwise", "convert"),
}
CONV_KINDS = frozenset({"conv", "deconv"})
FC_KINDS = frozenset({"fc", "matmul"})


def _nodes(g: GraphInfo) -> Iterator[tuple[GraphInfo, NodeInfo]]:
    for node in g.nodes:
        yield g, node
        for sub in node.subgraphs:
            yield from _nodes(sub)


def node_kinds(g: GraphInfo) -> set[str]:
    """The plugin node kinds of ``g`` and of its If / Loop / Scan bodies (``KIND``; MatMul by
    a constant is ``fc``, by an activation ``matmul``; every other op is its own kind)."""
    kinds: set[str] = set()
    for graph, node in _nodes(g):
        op = node.op_type
        if op in NO_CODE or node.domain not in ("", "ai.onnx", "com.microsoft"):
            continue
        if op == "MatMul":
            b = node.inputs[1] if len(node.inputs) > 1 else ""
            t = graph.tensors.get(b) or g.tensors.get(b)  # a body may read an outer weight
            kinds.add("fc" if t is not None and t.kind == "initializer" else "matmul")
        elif op in ELTWISE:
            kinds.add("eltwise")
        elif op.startswith("Reduce"):
            kinds.add("reduce")
        else:
            kinds.update(KIND.get(op, (op,)))
    return kinds


def op_types(g: GraphInfo) -> set[str]:
    """ONNX op types of ``g`` and its bodies (the frontend translates every body op)."""
    return {node.op_type for _, node in _nodes(g)}


def activation_gathers(g: GraphInfo) -> int:
    """Gather nodes of ``g`` and its bodies that read an activation (or a graph input): each
    stays a runtime ``Gather`` node with its own executor and index / axis Constants, while a
    Gather of a Shape or of weights alone folds (``ov_per_gather``). An unrolled scan (Mamba's
    legacy export: 128 of them, one per token and tensor) pays this per step."""
    n = 0
    for graph, node in _nodes(g):
        if node.op_type != "Gather" or node.index in graph.folded or not node.inputs:
            continue
        # a body may read an outer tensor: its producer index is the owner graph's
        owner = graph if node.inputs[0] in graph.tensors else g
        t = owner.tensors.get(node.inputs[0])
        if t is None or t.kind == "initializer" or t.folded:
            continue
        i = t.producer
        p = owner.nodes[i] if i is not None and i < len(owner.nodes) else None
        if p is not None and p.op_type in ("Shape", "Size", "Constant"):
            continue
        n += 1
    return n
