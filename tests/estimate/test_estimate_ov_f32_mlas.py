"""Native OpenVINO at f32 (hosts without bf16, or ``INFERENCE_PRECISION_HINT=f32``): an FC
without a fused activation runs on MLAS and loads no oneDNN FC code; SiLU (``x * Sigmoid(x)``)
is an FC post-op like Relu. docs/estimate.md, "Session 11: native OpenVINO at f32"; known
answers from the calibration constants on hand-built graphs.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from fixtures_onnx import fc_chain
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.openvino import OV_CALIBRATION, lib_pages, weight_rules

MiB = 1 << 20
F32 = {"INFERENCE_PRECISION_HINT": "f32"}
BF16 = {"INFERENCE_PRECISION_HINT": "bf16"}
MLAS_SAVING = int(OV_CALIBRATION["ov_lib"] - OV_CALIBRATION["ov_lib_eltwise"])
FC_BYTES = 4 * 256 * 256 * 4  # four f32 256 x 256 weights


def _details(model: onnx.ModelProto, opts: dict, **kw: object) -> dict:
    return estimate(model, backend="openvino", session_options=opts, **kw).prediction.details


def test_f32_fc_without_post_op_loads_no_onednn_code() -> None:
    """Measured compile file peak over baseline, bf16 / f32: 4 x MatMul 256^2 29.1 / 23.5 MiB,
    with Relu 29.9 / 31.4: the f32 plain chain charges the element-wise base, 5 MiB less."""
    bf16_lib = lib_pages(build_view(fc_chain(None)).graph, OV_CALIBRATION)
    assert _details(fc_chain(None), BF16)["lib_pages"] == bf16_lib  # bf16 unchanged
    assert _details(fc_chain(None), F32)["lib_pages"] == bf16_lib - MLAS_SAVING
    for post in ("Relu", "SiLU"):  # a fused post-op keeps oneDNN's FC primitive
        m = fc_chain(post)
        assert _details(m, F32)["lib_pages"] == _details(m, BF16)["lib_pages"], post
    plain = estimate(fc_chain(None), backend="openvino", session_options=F32).stage_peaks()
    relu = estimate(fc_chain("Relu"), backend="openvino", session_options=F32).stage_peaks()
    # Relu adds one element-wise node kind (0.7 MiB) and its nodes on top of the saving
    assert relu["compile_model"] - plain["compile_model"] > MLAS_SAVING


def test_silu_is_an_fc_post_op() -> None:
    """SwishFusion makes ``x * Sigmoid(x)`` a Swish, which the FC takes as a post-op."""
    assert weight_rules(build_view(fc_chain("SiLU"))).fc_postop == FC_BYTES
    assert weight_rules(build_view(fc_chain("Relu"))).fc_postop == FC_BYTES
    assert weight_rules(build_view(fc_chain(None))).fc_postop == 0


def test_silu_with_another_reader_is_not_a_post_op() -> None:
    """x also read by the next MatMul: the FC output must exist, no Swish post-op."""
    m = fc_chain("SiLU")
    for n in m.graph.node:
        if n.op_type == "Mul":
            n.input[0], n.input[1] = n.input[1], n.input[0]  # order does not matter
    assert weight_rules(build_view(m)).fc_postop == FC_BYTES
    extra = helper.make_node("Neg", ["m0"], ["neg"])
    m.graph.node.append(extra)
    m.graph.output.append(helper.make_tensor_value_info("neg", TensorProto.FLOAT, [8, 128, 256]))
    assert weight_rules(build_view(m)).fc_postop == 3 * FC_BYTES // 4


def test_f32_dynamic_silu_fcs_are_made_at_the_first_infer() -> None:
    """Dynamic batch at f32: FCs with a fused SiLU are made (weights packed, oneDNN's FC code
    loaded) at the first infer, as with Relu. Measured compile / infer 1 file 24.0 / 32.2 MiB
    (static 31.4 / 32.2), compile anon 9.5 (static 11.8): predicted compile 35.0 MiB (measured
    33.5; 42.0 before), infer 1 47.0 (46.8)."""
    dims = {"B": 8}
    dyn = estimate(fc_chain("SiLU", "B"), backend="openvino", session_options=F32, dims=dims)
    rel = estimate(fc_chain("Relu", "B"), backend="openvino", session_options=F32, dims=dims)
    cm, cm_relu = dyn.prediction.stages[1], rel.prediction.stages[1]
    assert cm.name == "compile_model"
    assert cm.overhead == pytest.approx(cm_relu.overhead, rel=0, abs=0.1 * MiB)
    assert cm.weights_anon == cm_relu.weights_anon
    stat = estimate(fc_chain("SiLU"), backend="openvino", session_options=F32)
    shift = int(OV_CALIBRATION["ov_deferred_lib_f32"])
    assert stat.prediction.stages[1].overhead - cm.overhead >= shift
    assert stat.prediction.stages[1].weights_anon - cm.weights_anon == pytest.approx(
        OV_CALIBRATION["ov_fc"] * FC_BYTES, rel=0, abs=1
    )


def test_f32_conv_keeps_onednn_code() -> None:
    """A Conv keeps oneDNN's convolution code at f32 (4 x Conv 3x3 64: compile 40.2 / 41.0 MiB
    bf16 / f32 measured)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.1).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
        [w],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    assert _details(m, F32)["lib_pages"] == _details(m, BF16)["lib_pages"]
