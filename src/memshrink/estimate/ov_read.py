"""What OpenVINO's ``read_model`` (ONNX frontend, 2026.4) holds in anonymous memory.

Why a module of its own: the ov.Model that ``read_model`` builds is not one object per ONNX
node. The frontend translates a node into several ov ops (a Conv with a bias is
Convolution + a bias reshape computed from ``ShapeOf``: 9 ops and 2 new Constants; Gemm 4;
LayerNormalization 4), folds others away (an ``Identity`` of a constant, ``Dropout``) and
makes a Constant per initializer, per ``Constant`` node and per attribute that became an
input (``perm``, ``axis``, ``axes``). Each ov op costs about the same, a Constant a little more
(an external one, which wraps its memory-mapped region, more again), and the parsed
ModelProto's own bytes (names, ``doc_string``, the dynamo exporter's ``metadata_props``: up to
2 KB a node) stay on the heap as long as the ov.Model lives. Counting ONNX nodes instead
(the rule this replaces) over-predicted TorchScript transformer exports by 50-68 %: their
hundreds of ``Constant`` / ``Identity`` nodes are one cheap ov op or none.

Measured with ``docs/bench/ov_read_sweep.py`` (chains of 32 and 1,024 units, ``read_model``
only, the verifier's ``Meter``; ov op counts from ``read_model(...).get_ops()`` of single
nodes taken from the suite and held-out exports). No weight byte is read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from memshrink.estimate.graph import GraphInfo, NodeInfo

MiB = 1 << 20

# ONNX op -> (ov ops other than Constants, Constants it adds besides its constant inputs),
# counted on OpenVINO 2026.4's read_model of single nodes (``ov_read_sweep.py``); 1 op, 0
# Constants for anything not listed (element-wise, MatMul, Reshape, Concat, Softmax, ...).
READ_OPS: dict[str, tuple[int, int]] = {
    "Gemm": (4, 2),  # MatMul, alpha / beta Multiply, bias Add
    "LayerNormalization": (4, 3),  # MVN, scale Multiply, bias Add (+ axes)
    "InstanceNormalization": (15, 5),
    "GlobalAveragePool": (5, 2),  # ReduceMean over axes computed from ShapeOf
    "Clip": (2, 0),
    "Shape": (1, 0),  # with start / end attributes: (2, 4), see _ops
    "Slice": (3, 1),  # 4 inputs; 3: (3, 2), 5: (3, 0), see _ops
    "Gather": (1, 1),  # the axis
    "Transpose": (1, 1),  # the perm
    "Reciprocal": (1, 1),  # Divide(1, x)
    "HardSigmoid": (1, 2),  # alpha, beta
    "Pad": (1, 2),
    "Flatten": (1, 1),
    "Dropout": (0, 0),  # inference: removed
    # ORT's dynamic quantization: min / max over all axes (ShapeOf -> Range), scale, zero
    # point, Round / Clamp / Convert; MatMulInteger Converts and Subtracts the zero points
    # (``get_ops()`` of single nodes on a [b, 16, 64] input: 27 ops + 8 Constants, 7 + 0)
    "DynamicQuantizeLinear": (27, 8),
    "MatMulInteger": (7, 0),
}
# LSTM / GRU -> (ov ops, Constants) by (initial state given, sequence_lens given): the
# sequence op, Transposes / Squeezes to its layout, a Broadcast from ShapeOf for each absent
# state and for absent lengths; direction does not change the count (``get_ops()`` of single
# nodes, forward and bidirectional, OpenVINO 2026.4; an LSTM's c0 goes with its h0).
RNN_OPS: dict[str, dict[tuple[bool, bool], tuple[int, int]]] = {
    "LSTM": {(True, True): (13, 8), (True, False): (17, 12), (False, True): (20, 14),
             (False, False): (22, 16)},
    "GRU": {(True, True): (6, 4), (True, False): (10, 8), (False, True): (12, 10),
            (False, False): (14, 12)},
}  # fmt: skip
# Opset < 13 attributes that the frontend turns into a Constant input.
_ATTR_CONST = frozenset({"axes", "split"})


def conv_shape_items(node: NodeInfo) -> tuple[int, int]:
    """(ov ops, Constants) of a Conv's shape arithmetic: its bias is reshaped to
    ``[1, C, 1, ...]`` from ``ShapeOf`` (8 ops, 2 Constants), a grouped Conv's weight is split
    into groups from ``ShapeOf`` too (5 ops, 3 Constants; with or without a bias)."""
    if node.op_type != "Conv":
        return 0, 0
    ops, consts = 0, 0
    if len(node.inputs) > 2 and node.inputs[2]:
        ops, consts = 8, 2
    if int(node.attrs.get("group", 1)) > 1:
        ops, consts = ops + 5, consts + 3
    return ops, consts


def _ops(node: NodeInfo, const_in: int, rank: int | None = None) -> tuple[int, int]:
    """(ov ops, new Constants) that ``node`` becomes; ``const_in``: its constant inputs,
    ``rank``: its first input's rank where known."""
    op = node.op_type
    if node.domain not in ("", "ai.onnx"):
        return 1, 0
    if op == "Identity" and const_in:
        return 0, 0  # the Constant itself is passed on
    if op == "ConstantOfShape" and const_in:
        return 0, 0  # folded into one Constant
    if op == "ConvTranspose":
        return (3, 1) if len(node.inputs) > 2 and bool(node.inputs[2]) else (1, 0)
    if op == "Conv":
        extra_ops, extra_consts = conv_shape_items(node)
        return 1 + extra_ops, extra_consts
    if op == "Shape" and ("start" in node.attrs or "end" in node.attrs):
        return (2, 4) if "end" in node.attrs else (1, 0)
    if op == "Slice":
        n_in = sum(1 for i in node.inputs if i)
        return 3, max(0, 5 - n_in)
    if op == "Flatten":
        # axis 0 / 1: Reshape to a constant [1, -1] / [d0, -1]; any other axis multiplies the
        # leading dims of ShapeOf (StridedSlice, ReduceProd, Concat): 5 ops and 5 Constants,
        # static or dynamic input alike (LeViT's 46 flatten(2): 180 ops, 184 Constants)
        axis = int(node.attrs.get("axis", 1))
        if axis < 0 and rank is not None:
            axis += rank
        return (1, 1) if axis in (0, 1) else (5, 5)
    if op == "Split":
        return 1, 2 if "split" in node.attrs else 1
    if op in RNN_OPS:
        states = len(node.inputs) > 5 and bool(node.inputs[5])
        lens = len(node.inputs) > 4 and bool(node.inputs[4])
        return RNN_OPS[op][(states, lens)]
    if op == "DequantizeLinear" and int(node.attrs.get("block_size", 0) or 0) > 0:
        # block-wise (opset 21, int4 weights): Convert, Unsqueeze, ShapeOf, Reshape to blocks,
        # Multiply, Reshape back, + Convert / Unsqueeze / Subtract with a zero point; 2
        # Constants (``get_ops()`` of 4 such DQs, one with a zero point: 27 ops, 8 Constants)
        return (9, 2) if len(node.inputs) > 2 and node.inputs[2] else (6, 2)
    ops, consts = READ_OPS.get(op, (1, 0))
    if op not in READ_OPS and _ATTR_CONST & set(node.attrs):
        consts += 1
    return ops, consts


def _rank(g: GraphInfo, node: NodeInfo) -> int | None:
    t = g.tensors.get(node.inputs[0]) if node.inputs and node.inputs[0] else None
    if t is None:
        return None
    shape = t.shape if t.shape is not None else t.sym_shape
    return len(shape) if shape is not None else None


def read_counts(g: GraphInfo) -> tuple[int, int, int]:
    """(ov ops other than Constants, Constants held inside the .onnx or made by the frontend,
    Constants over external data) of the ov.Model that ``read_model`` builds, If / Loop /
    Scan bodies included (the frontend reads each into its own ov.Model: a body's ops and
    Constants are on the heap like the main graph's; its Parameter / Result per value it
    reads or writes)."""
    const_nodes = {o for n in g.nodes if n.op_type == "Constant" for o in n.outputs if o}
    inits = {n for n in g.initializers if not g.tensors[n].folded}
    external = sum(1 for n in inits if g.tensors[n].external)
    consts = set(inits) | const_nodes
    ops, made = 2, 0  # a Parameter and a Result at least
    for node in g.nodes:
        if node.op_type == "Constant":
            continue
        k, c = _ops(node, sum(1 for i in node.inputs if i in consts), _rank(g, node))
        ops += k
        made += c
        for sub in node.subgraphs:
            s_ops, s_inside, s_ext = read_counts(sub)
            ops += s_ops + len(node.implicit_inputs)
            made += s_inside
            external += s_ext
    ops += len(g.inputs) + len(g.outputs) - 2
    return ops, len(consts) - external + made, external


def proto_bytes(path: str | None, inside_weight_bytes: int) -> int:
    """Bytes of the .onnx file that are structure, not weights (names, attributes, doc
    strings, metadata): parsed and kept on the heap with the ov.Model. ``stat`` only."""
    if not path:
        return 0
    try:
        size = os.stat(path).st_size
    except OSError:
        return 0
    return max(0, size - inside_weight_bytes)


def read_anon(g: GraphInfo, c: Mapping[str, float], structure_bytes: int = 0) -> int:
    """Anonymous memory of the ov.Model ``read_model`` builds (external weights; embedded
    ones add their copies on top): a fixed part, per ov op, per Constant (more for one over
    external data) and the file's structure bytes."""
    ops, inside, external = read_counts(g)
    # A Conv's shape arithmetic (ShapeOf, Subtract, Broadcast, Concat, ...) is cheaper per
    # item than the ops and Constants the fit above saw: chains of 256 dynamic Convs read
    # 0.0238 MiB more anon per bias (8 ops, 2 Constants; 0.037 at the generic costs) and
    # 0.0216 per group split (5 ops, 3 Constants; 0.031), 0.0025 an item.
    shape_ops = shape_consts = 0
    for node in g.nodes:
        o, k = conv_shape_items(node)
        shape_ops, shape_consts = shape_ops + o, shape_consts + k
    ops -= shape_ops
    inside -= shape_consts
    return int(
        c["ov_read"]
        + c["ov_read_per_op"] * ops
        + c["ov_read_per_conv_shape_item"] * (shape_ops + shape_consts)
        + c["ov_read_per_const"] * inside
        + c["ov_read_per_ext_const"] * external
        + c["ov_read_per_proto_byte"] * structure_bytes
    )
