"""optimize warns when its output is predicted to cost more on a runtime it did not target."""

from __future__ import annotations

from pathlib import Path

import onnx
from fixtures_onnx import weight_chain

from memshrink.commands import _other_backends


def _conv_chain(n: int, path: Path) -> Path:
    """``n`` 1x1 convs in a chain: OpenVINO compiles one kernel per Conv, so more convs cost
    it memory even where the activations do not grow."""
    model = weight_chain("Conv", n, (16, 16, 1, 1), [1, 16, 32, 32], [1, 16, 32, 32])
    onnx.save_model(model, path)
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
