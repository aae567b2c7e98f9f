"""OpenVINO CPU inference precision: the host's default read from its CPU flags agrees with
what the real plugin compiles to, and the OpenVINO prediction says when it is not f32."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from memshrink.estimate import estimate
from memshrink.estimate.ov_precision import host_default, inference_precision

ov = pytest.importorskip("openvino")


def _relu(path: Path) -> str:
    vi = helper.make_tensor_value_info
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "r",
        [vi("x", TensorProto.FLOAT, [1, 8])], [vi("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return str(path)


def test_host_default_is_what_the_plugin_compiles_to(tmp_path: Path) -> None:
    compiled = ov.Core().compile_model(_relu(tmp_path / "r.onnx"), "CPU")
    assert compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name() == host_default()


def test_flags_and_hint_decide_the_precision(tmp_path: Path) -> None:
    cpu = tmp_path / "cpuinfo"
    cpu.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16\n")
    assert host_default.__wrapped__(str(cpu)) == "bf16"
    cpu.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n")
    assert host_default.__wrapped__(str(cpu)) == "f32"
    assert inference_precision({"INFERENCE_PRECISION_HINT": "f32"}) == "f32"
    assert inference_precision({"INFERENCE_PRECISION_HINT": "bf16"}) == "bf16"


def test_a_bf16_compile_is_flagged_and_the_ep_is_not(tmp_path: Path) -> None:
    path = _relu(tmp_path / "r.onnx")
    bf16 = estimate(path, backend="openvino", session_options={"INFERENCE_PRECISION_HINT": "bf16"})
    assert any("bf16" in a for a in bf16.prediction.assumptions)
    f32 = estimate(path, backend="openvino", session_options={"INFERENCE_PRECISION_HINT": "f32"})
    assert "inference precision f32" in f32.prediction.assumptions
    # Same numbers: bf16 is reported, not modelled.
    assert bf16.stage_peaks() == f32.stage_peaks()
    ep = estimate(
        path, backend="ort-openvino", session_options={"INFERENCE_PRECISION_HINT": "bf16"}
    )
    assert not any("bf16" in n for s in ep.prediction.stages for n in s.notes)
