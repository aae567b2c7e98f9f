"""optimize warns when its output is predicted to cost more on a runtime it did not target."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from memshrink.commands import _other_backends


def _conv_chain(n: int, path: Path) -> Path:
    """``n`` 1x1 convs in a chain: OpenVINO compiles one kernel per Conv, so more convs cost
    it memory even where the activations do not grow."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(n):
        w = rng.standard_normal((16, 16, 1, 1)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"]))
        x = f"c{i}"
    g = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32, 32])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 16, 32, 32])],
        inits,
    )
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_predicted_rise_on_another_runtime_is_reported(tmp_path: Path) -> None:
    one, many = _conv_chain(1, tmp_path / "one.onnx"), _conv_chain(40, tmp_path / "many.onnx")
    result: dict = {}
    note = _other_backends(result, one, many, "ort", {}, {}, rise=0.0, min_bytes=0)
    figs = result["other_backends_predicted_peak"]
    assert set(figs) == {"openvino", "ort-openvino"}
    assert figs["openvino"]["after"] > figs["openvino"]["before"]
    assert note is not None and "--backend openvino" in note


def test_no_note_without_a_rise_and_the_target_is_skipped(tmp_path: Path) -> None:
    one = _conv_chain(1, tmp_path / "one.onnx")
    result: dict = {}
    assert _other_backends(result, one, one, "openvino", {}, {}) is None
    assert set(result["other_backends_predicted_peak"]) == {"ort-openvino"}
