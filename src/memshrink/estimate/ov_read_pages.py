"""Library pages (file-backed) that OpenVINO's ``read_model`` touches (ONNX frontend, 2026.4).

Why a module of its own: these pages are most of a small model's ``read_model`` peak (4 of
6 MiB), and they follow the *code* the frontend runs, not the graph's size. Per library
(``/proc/self/smaps``, a fresh process per file): loading the frontend and translating one
Relu touches 2.6 MiB of ``libopenvino_onnx_frontend.so`` and 0.9 MiB of ``libopenvino.so``;
what grows after that is mostly ``libopenvino.so``'s op classes (shape inference, constant
evaluation). Read in sequence in one process (each figure the new pages only): Relu 3.45,
then Reshape +0.69, Slice +0.56, Conv with a bias +0.38, If +0.75, Loop / Gemm /
LayerNormalization +0.06 each; Conv with a bias first +1.56, then Reshape +0.00. So one
large block of code (reshape / ShapeOf evaluation, about 1.2 MiB) comes with the first op
whose translation computes a shape, an ``If`` brings it too, a ``Loop`` / ``Scan`` without it
half as much, quantize ops (FakeQuantize) a block of their own, and each further op type
adds a little less than the one before (the element-wise ops share code):
``sqrt(distinct op types)``. Fitted on the 121 distinct files of session 10's sweep
(docs/estimate.md, "Session 11: read_model's library pages"): rms 0.18 MiB, worst 0.54,
where the rule it replaces (4.8 MiB + 0.05 per op type) was rms 0.48, worst 1.06 (every
small MLP over-predicted by 1 MiB).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from memshrink.estimate import ov_kinds
from memshrink.estimate.graph import GraphInfo, NodeInfo

# ONNX ops whose translation (or the ov ops it makes) reshapes by a computed shape at read
# time: Reshape / ShapeOf / Concat evaluated on constants, so ``libopenvino.so``'s evaluate
# code is paged in. An ``If`` brings the same block (its bodies' parameters).
SHAPE_OPS = frozenset(
    {
        "Reshape", "Flatten", "Slice", "Tile", "Pad", "ConstantOfShape", "GlobalAveragePool",
        "LayerNormalization", "InstanceNormalization", "If",
    }
)  # fmt: skip
# Ops that read a shape without reshaping by it (ShapeOf, Broadcast, Range): part of the block.
SHAPE_READ_OPS = frozenset({"Shape", "Expand", "Resize", "Range", "DynamicQuantizeLinear"})
LOOP_OPS = frozenset({"Loop", "Scan"})
QUANT_OPS = frozenset(
    {
        "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
        "MatMulNBits", "ConvInteger", "QLinearConv", "QLinearMatMul",
    }
)  # fmt: skip
NOT_AN_OP = frozenset({"Constant", "Identity"})  # a Constant / pass-through: no translator code


def shape_level(node: NodeInfo) -> int:
    """2 when the frontend's translation of ``node`` reshapes by a computed shape (a
    ``SHAPE_OPS`` op; a Conv / ConvTranspose with a bias, reshaped to ``[1, C, 1, ...]`` from
    ``ShapeOf`` arithmetic, ``ov_read.READ_OPS``), 1 when it only reads one (``SHAPE_READ_OPS``;
    a Reduce over all axes: ``Range(0, rank)`` of its input's ``ShapeOf``), else 0."""
    op = node.op_type
    if op in SHAPE_OPS:
        return 2
    if op == "DequantizeLinear" and int(node.attrs.get("block_size", 0) or 0) > 0:
        return 2  # block-wise: reshaped to blocks by a shape computed from ShapeOf
    if op in ("Conv", "ConvTranspose"):
        return 2 if len(node.inputs) > 2 and bool(node.inputs[2]) else 0
    if op in SHAPE_READ_OPS:
        return 1
    if op.startswith("Reduce"):
        return int("axes" not in node.attrs and not (len(node.inputs) > 1 and node.inputs[1]))
    return 0


def read_features(g: GraphInfo) -> tuple[int, bool, bool, int]:
    """(shape level: the highest ``shape_level`` of a node, has a Loop / Scan, has quantize
    ops, distinct op types other than Constant / Identity) of ``g`` and its bodies: what
    ``read_lib_pages`` charges for."""
    types: set[str] = set()
    level = 0
    for _, node in ov_kinds._nodes(g):
        types.add(node.op_type)
        level = max(level, shape_level(node))
    return level, bool(types & LOOP_OPS), bool(types & QUANT_OPS), len(types - NOT_AN_OP)


def read_lib_pages(g: GraphInfo, c: Mapping[str, float]) -> int:
    """File-backed library pages that ``read_model`` of ``g`` touches (bytes)."""
    level, loop, quant, n_types = read_features(g)
    pages = c["ov_read_lib"] + c["ov_read_lib_per_sqrt_type"] * math.sqrt(n_types)
    if level == 2:
        pages += c["ov_read_lib_shape"]
    elif level == 1:
        pages += c["ov_read_lib_shape_read"]
    elif loop:
        pages += c["ov_read_lib_loop"]
    if quant:
        pages += c["ov_read_lib_quant"]
    return int(pages)
