"""ORT OpenVINO EP rules found on real exports (session 10, branch ``ovep10``): hand-built
graphs with known answers, and the measured ones checked against the real EP (skipped where no
interpreter has ``onnxruntime-openvino``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from interpreters import NO_OVEP, ovep_python
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.ort_openvino import OVEP_CALIBRATION

MiB = 1 << 20


def _shapeless_beside_shaped() -> onnx.ModelProto:
    """``x`` declares no shape (Relu only); ``z[b, 64]`` feeds MatMul -> Relu -> Sigmoid."""
    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "W")
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["a"]),
            helper.make_node("MatMul", ["z", "W"], ["m"]),
            helper.make_node("Relu", ["m"], ["r"]),
            helper.make_node("Sigmoid", ["r"], ["s"]),
        ],
        "shapeless",
        [vi("x", TensorProto.FLOAT, None), vi("z", TensorProto.FLOAT, ["b", 64])],
        [vi("a", TensorProto.FLOAT, None), vi("s", TensorProto.FLOAT, ["b", 64])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_shapeless_graph_input_leaves_every_node_to_ort_cpu() -> None:
    """ORT 1.24.1's verbose placements: "All nodes placed on [CPUExecutionProvider]", the
    shaped chain included. So the EP costs ORT CPU's prediction plus its fixed cost."""
    m = _shapeless_beside_shaped()
    kw = {"shapes": {"x": (4, 64)}, "dims": {"b": 4}}
    ep = estimate(m, backend="ort-openvino", **kw)
    cpu = estimate(m, backend="cpu", **kw).stage_peaks()
    assert ep.prediction.details["ovep_subgraphs"] == 0
    fixed = OVEP_CALIBRATION["ovep_anon"] + OVEP_CALIBRATION["ovep_file"]
    for st, peak in ep.stage_peaks().items():
        assert peak == pytest.approx(cpu[st] + fixed, rel=0, abs=1024), st
    assert any("without a shape (x)" in a for a in ep.prediction.assumptions)


def test_a_shapeless_graph_input_matches_the_real_ep(tmp_path: Path) -> None:
    """Measured 27.2 / 27.5 MiB (session / run 1); the same graph with the input shaped was
    49.6 / 55.1 (OpenVINO compiled: its libraries and plugin load)."""
    py = ovep_python()
    if py is None:
        pytest.skip(NO_OVEP)
    from memshrink.verify import profile

    path = str(tmp_path / "shapeless.onnx")
    onnx.save(_shapeless_beside_shaped(), path)
    kw = {"shapes": {"x": (4, 64)}, "dims": {"b": 4}}
    rep = profile(path, backends=("ort-openvino",), runs=2, python={"ort-openvino": py}, **kw)
    run = rep.runs[0].to_dict()
    assert run["status"] == "ok", run["error"]
    meas = {s["name"]: s["peak_delta"] for s in run["stages"]}
    pred = estimate(path, backend="ort-openvino", **kw).stage_peaks()
    for st, ms in (("session_creation", "session"), ("run_1", "run1")):
        assert pred[st] == pytest.approx(meas[ms], rel=0.10, abs=0), (st, pred[st] / MiB)
