"""Static shapes on the ORT OpenVINO EP: the infer request the EP creates at session creation
holds OpenVINO's own input tensors (``ort_openvino.static_request_inputs``). The measured test
skips cleanly without ``onnxruntime-openvino``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from interpreters import NO_OVEP, ovep_python
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.ort_openvino import static_request_inputs

MiB = 1 << 20


def _conv(c: int, hw: int | str, cout: int) -> onnx.ModelProto:
    """One Conv 3x3 c -> cout on [1, c, hw, hw] (``hw`` a name: dynamic h = w)."""
    w = (np.random.default_rng(0).standard_normal((cout, c, 3, 3)) * 0.02).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, hw, hw])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_static_session_holds_the_inputs_dynamic_does_not() -> None:
    static = _conv(64, 128, 3)
    assert static_request_inputs(build_view(static).graph) == 64 * 128 * 128 * 4  # 4 MiB
    s = estimate(static, backend="ort-openvino").prediction.stages[0]
    assert any("input tensors" in n for n in s.notes)
    d = estimate(_conv(64, "h", 3), backend="ort-openvino", dims={"h": 128}).prediction.stages[0]
    assert not any("input tensors" in n for n in d.notes)


def test_static_input_matches_the_real_ep(tmp_path: Path) -> None:
    """A 16 MiB static input ([1, 64, 256, 256]) into one Conv 64 -> 64: session measured 72,
    predicted 59 before (-18 %), 75 now; run 1 120 / 124. (3 x Conv + Relu chains and one Conv
    at 8-32 MiB inputs: -5 to -30 % before, +4 to +6 % now; SAM ViT at 1024^2 -11 -> +2 %.)"""
    py = ovep_python()
    if py is None:
        pytest.skip(NO_OVEP)
    from memshrink.verify import profile

    path = tmp_path / "c.onnx"
    onnx.save(_conv(64, 256, 64), path)
    rep = profile(str(path), backends=("ort-openvino",), runs=1, python={"ort-openvino": py})
    run = rep.runs[0].to_dict()
    assert run["status"] == "ok", run["error"]
    meas = {s["name"]: s["peak_delta"] for s in run["stages"]}
    pred = estimate(str(path), backend="ort-openvino").stage_peaks()
    assert pred["session_creation"] == pytest.approx(meas["session"], rel=0.08, abs=0)
    assert pred["run_1"] == pytest.approx(meas["run1"], rel=0.10, abs=0)
