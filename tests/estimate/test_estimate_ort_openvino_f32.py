"""ORT OpenVINO EP rules of session 11 (docs/estimate.md, EP rules 15-17): what the EP's f32
compile loads (MLAS FCs, SiLU post-ops), which ops stay on ORT's CPU EP (sequence ops), and
ORT's level-1 Conv+Mul fusion carrying the fused weights inline. Known answers from the rules'
constants on hand-built graphs; one check against the real EP (skips without it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from fixtures_onnx import fc_chain
from interpreters import NO_OVEP, ovep_python
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.openvino import OV_CALIBRATION, lib_pages
from memshrink.estimate.ort_openvino import ep_lib_pages, subgraph_count
from memshrink.estimate.ov_mlas import swish_fcs

MiB = 1 << 20
MLAS_SAVING = int(OV_CALIBRATION["ov_lib"] - OV_CALIBRATION["ov_lib_eltwise"])


def _bf16_lib(model: onnx.ModelProto) -> int:
    """Native OpenVINO's library charge at this host's bf16 (oneDNN FC code for every FC);
    native's own f32 prediction, in the EP's ``details["lib_pages"]``, has the MLAS rule too."""
    return lib_pages(build_view(model).graph, OV_CALIBRATION)


def _model(nodes: list, inputs: list, outputs: list, inits: list) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def test_fc_without_post_op_loads_no_onednn_fc_code() -> None:
    """At the EP's f32 an FC without a fused activation runs on MLAS: the element-wise base,
    ``ov_lib - ov_lib_eltwise`` (5 MiB) under native OpenVINO's bf16-fitted charge. Relu and SiLU
    post-ops keep oneDNN's FC (measured EP session 53.2 / 61.4 / 62 MiB: plain / Relu / SiLU)."""
    peaks = {
        p: estimate(fc_chain(p), backend="ort-openvino").stage_peaks()["session_creation"]
        for p in (None, "Relu", "SiLU")
    }
    details = estimate(fc_chain(None), backend="ort-openvino").prediction.details
    assert _bf16_lib(fc_chain(None)) - details["ovep_lib_pages"] == MLAS_SAVING
    assert details["lib_pages"] == details["ovep_lib_pages"]  # native f32: MLAS too
    relu = estimate(fc_chain("Relu"), backend="ort-openvino").prediction.details
    assert relu["lib_pages"] == relu["ovep_lib_pages"]
    # SiLU (two more nodes, the same plugin kinds as Relu): the same lib pages as Relu
    silu = estimate(fc_chain("SiLU"), backend="ort-openvino").prediction.details
    assert silu["ovep_lib_pages"] == relu["ovep_lib_pages"]
    assert peaks["Relu"] - peaks[None] > MLAS_SAVING  # Relu's nodes on top of the saving


def test_swish_fcs_counts_silu_gated_fcs() -> None:
    assert swish_fcs(build_view(fc_chain("SiLU")).graph) == 4
    assert swish_fcs(build_view(fc_chain("Relu")).graph) == 0
    assert swish_fcs(build_view(fc_chain(None)).graph) == 0


def test_dynamic_silu_fcs_load_their_code_at_the_first_run() -> None:
    """Dynamic batch: FCs with a fused SiLU are made at the first infer, as with Relu (native
    ``_fc_postop`` counts SiLU), so the EP stages match Relu's (measured EP session / run 1:
    SiLU 52.7 / 61.3 MiB) and session creation is at least ``ov_deferred_lib_f32`` (6 MiB)
    under the static graph's."""
    shift = int(OV_CALIBRATION["ov_deferred_lib_f32"])
    dims = {"batch": 8}
    dyn = estimate(fc_chain("SiLU", "batch"), backend="ort-openvino", dims=dims).stage_peaks()
    relu = estimate(fc_chain("Relu", "batch"), backend="ort-openvino", dims=dims).stage_peaks()
    for st, v in dyn.items():  # SiLU's two nodes a node each more than Relu's one
        assert v == pytest.approx(relu[st], rel=0, abs=0.1 * MiB), st
    stat = estimate(fc_chain("SiLU"), backend="ort-openvino").stage_peaks()
    assert stat["session_creation"] - dyn["session_creation"] >= shift


def _sequence_graph() -> onnx.ModelProto:
    """MatMul -> (Relu, Sigmoid) -> sequence ops (ORT CPU) -> Add: the sweep's sequence-ops."""
    f = TensorProto.FLOAT
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Sigmoid", ["a"], ["c"]),
        helper.make_node("SequenceConstruct", ["a", "b", "c"], ["seq"]),
        helper.make_node("ConcatFromSequence", ["seq"], ["cat"], axis=1),
        helper.make_node("SplitToSequence", ["cat", "split"], ["parts"], axis=1),
        helper.make_node("SequenceAt", ["parts", "idx"], ["p1"]),
        helper.make_node("Add", ["p1", "bias"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(rng.standard_normal((48, 48)).astype(np.float32), "W"),
        numpy_helper.from_array(np.zeros(72, np.float32), "bias"),
        numpy_helper.from_array(np.array([72, 72], np.int64), "split"),
        numpy_helper.from_array(np.array(1, np.int64), "idx"),
    ]
    ins = [helper.make_tensor_value_info("x", f, [2, 48])]
    return _model(nodes, ins, [helper.make_tensor_value_info("y", f, [2, 72])], inits)


def test_sequence_ops_run_on_ort_cpu_and_load_no_plugin_code() -> None:
    """ORT's verbose log puts the six sequence ops on [CPUExecutionProvider] and the rest in 2
    OpenVINO subgraphs; their split / concat kinds are not charged (0.7 MiB each)."""
    g = build_view(_sequence_graph()).graph
    assert subgraph_count(g) == 2
    details = estimate(_sequence_graph(), backend="ort-openvino").prediction.details
    assert ep_lib_pages(g, 0, OV_CALIBRATION) == details["ovep_lib_pages"]
    per_kind = int(OV_CALIBRATION["ov_lib_per_op_type"])
    # native: fc, eltwise, split, concat; the EP: fc, eltwise, on MLAS (native f32 too)
    assert _bf16_lib(_sequence_graph()) - details["ovep_lib_pages"] == pytest.approx(
        MLAS_SAVING + 2 * per_kind, abs=2
    )
    assert details["lib_pages"] - details["ovep_lib_pages"] == pytest.approx(2 * per_kind, abs=2)


def _conv_scaled(batch: int | str, c: int = 64, n: int = 2) -> onnx.ModelProto:
    """``n`` x Conv 3x3 c -> c, each scaled per channel by a Mul (ORT's ConvMulFusion)."""
    rng = np.random.default_rng(0)
    nodes, inits, cur = [], [], "x"
    for i in range(n):
        w = (rng.standard_normal((c, c, 3, 3)) * 0.01).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        inits.append(numpy_helper.from_array(np.ones((1, c, 1, 1), np.float32), f"s{i}"))
        nodes.append(helper.make_node("Conv", [cur, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Mul", [f"c{i}", f"s{i}"], [f"m{i}"]))
        nodes.append(helper.make_node("Relu", [f"m{i}"], [f"r{i}"]))
        cur = f"r{i}"
    nodes.append(helper.make_node("Identity", [cur], ["y"]))
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [batch, c, 8, 8]) for n in "xy"]
    return _model(nodes, vi[:1], vi[1:], inits)


def test_ort_fused_conv_weights_travel_inline_under_dynamic_dims() -> None:
    """External weights, dynamic batch: ORT's Conv+Mul fusion makes a new initializer that the
    EP's kept proto and its string carry: session + 2x the fused weights, and the run stages
    hold the session peak (tensors under 32 MiB). Static dims and embedded files: unchanged."""
    w = 2 * 64 * 64 * 9 * 4
    dyn = estimate(_conv_scaled("batch"), backend="ort-openvino", dims={"batch": 2}, embedded=False)
    stages = dyn.prediction.stages
    assert dyn.prediction.details["ov_weights"]["conv_fused"] == w
    assert any("ORT-fused Conv" in n for n in stages[0].notes)
    native = estimate(
        _conv_scaled("batch"),
        backend="openvino",
        dims={"batch": 2},
        embedded=False,
        session_options={"INFERENCE_PRECISION_HINT": "f32"},
    ).prediction.stages
    assert stages[0].weights_anon - native[1].weights_anon == 2 * w  # vs native compile
    assert stages[1].peak >= stages[0].peak and stages[2].peak >= stages[0].peak
    stat = estimate(_conv_scaled(2), backend="ort-openvino", embedded=False).prediction.stages
    assert not any("ORT-fused Conv" in n for n in stat[0].notes)


def test_mlas_fc_chain_matches_the_real_ep(tmp_path: Path) -> None:
    """4 x MatMul 256^2 on [8, 128, 256], no activation: measured 53.2 / 56.4 MiB (session /
    run 1), predicted 61.0 / 64.0 (+15 %) before the MLAS rule, 56.0 / 59.0 with it."""
    py = ovep_python()
    if py is None:
        pytest.skip(NO_OVEP)
    from memshrink.verify import profile

    path = str(tmp_path / "fc.onnx")
    onnx.save(fc_chain(None), path)
    rep = profile(path, backends=("ort-openvino",), runs=2, python={"ort-openvino": py})
    run = rep.runs[0].to_dict()
    assert run["status"] == "ok", run["error"]
    meas = {s["name"]: s["peak_delta"] for s in run["stages"]}
    pred = estimate(path, backend="ort-openvino").stage_peaks()
    for st, ms in (("session_creation", "session"), ("run_1", "run1")):
        assert pred[st] == pytest.approx(meas[ms], rel=0.10, abs=0), (st, pred[st] / MiB)


def test_quantized_and_control_flow_fcs_keep_onednn_code() -> None:
    """No MLAS saving where the FC is int8 (MatMulInteger: dynamically quantized BERT measured
    5 MiB above the MLAS figure) or has a post-op inside an If body (torch.cond's Gemm -> Relu:
    native f32 / bf16 file 55 / 56 MiB)."""
    f, i8 = TensorProto.FLOAT, TensorProto.UINT8
    w8 = numpy_helper.from_array(np.ones((64, 64), np.uint8), "w8")
    q = _model(
        [helper.make_node("MatMulInteger", ["x", "w8"], ["y"])],
        [helper.make_tensor_value_info("x", i8, [8, 64])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [8, 64])],
        [w8],
    )
    d = estimate(q, backend="ort-openvino").prediction.details
    assert d["lib_pages"] == d["ovep_lib_pages"]
    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    branch = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["o"])],
        "b",
        [],
        [helper.make_tensor_value_info("o", f, [8, 64])],
    )
    cond = _model(
        [
            helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
            helper.make_node("Greater", ["s", "zero"], ["c"]),
            helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch),
        ],
        [helper.make_tensor_value_info("x", f, [8, 64])],
        [helper.make_tensor_value_info("y", f, [8, 64])],
        [w, numpy_helper.from_array(np.array(0.0, np.float32), "zero")],
    )
    d = estimate(cond, backend="ort-openvino").prediction.details
    assert d["lib_pages"] == d["ovep_lib_pages"]
    plain = _model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [helper.make_tensor_value_info("x", f, [8, 64])],
        [helper.make_tensor_value_info("y", f, [8, 64])],
        [w],
    )
    d = estimate(plain, backend="ort-openvino").prediction.details
    assert _bf16_lib(plain) - d["ovep_lib_pages"] == MLAS_SAVING
