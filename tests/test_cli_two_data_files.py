"""The two-file output of ``external-data`` (``OUT.data`` + ``OUT.folded.data``) from a user's
side: ``optimize`` names both files and says to keep them with the model; the folder moved
elsewhere still estimates and runs; the model copied without its folded file is a one-line
error that names the missing file."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from memshrink.cli import main
from memshrink.model import load
from memshrink.writer import data_files


def _model() -> onnx.ModelProto:
    """Conv(cw1) -> BatchNormalization (OpenVINO folds cw1: the folded file),
    Conv(cw2) -> Relu (kept as is: the main data file)."""
    rng = np.random.default_rng(0)

    def w(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "cw1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "g", "b", "mu", "var"], ["n1"]),
        helper.make_node("Conv", ["n1", "cw2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["y"]),
    ]
    inits = [
        w("cw1", 16, 16, 3, 3), w("cw2", 16, 16, 3, 3), w("g", 16), w("b", 16), w("mu", 16),
        numpy_helper.from_array(np.ones(16, np.float32), "var"),
    ]  # fmt: skip
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16, 8, 8])], inits,
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def test_optimize_names_both_data_files_and_the_moved_folder_works(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    src = tmp_path / "in.onnx"
    onnx.save_model(_model(), src)
    before = src.read_bytes()
    (tmp_path / "a").mkdir()
    out = tmp_path / "a" / "m.onnx"
    assert main(["optimize", str(src), str(out), "--passes", "prune,external-data"]) == 0
    text = capsys.readouterr().out
    assert f"wrote {out} + {out}.data + {out}.folded.data in " in text
    assert "note: m.onnx reads its weights from m.onnx.data and m.onnx.folded.data; " in text
    assert src.read_bytes() == before  # the input untouched

    moved = tmp_path / "elsewhere"
    shutil.move(tmp_path / "a", moved)
    m = moved / "m.onnx"
    assert {f.name for f in data_files(load(m))} == {"m.onnx.data", "m.onnx.folded.data"}
    assert main(["estimate", str(m), "--backend", "openvino"]) == 0
    x = np.random.default_rng(1).standard_normal((2, 16, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(_run(m, x), _run(src, x), atol=0, rtol=0)  # same bytes and graph

    # the model and its main data file without the folded one: a clear error, exit 6
    part = tmp_path / "partial"
    part.mkdir()
    for name in ("m.onnx", "m.onnx.data"):
        shutil.copy(moved / name, part / name)
    capsys.readouterr()
    assert main(["estimate", str(part / "m.onnx")]) == 6
    assert "'m.onnx.folded.data' is missing" in capsys.readouterr().err


def test_data_files_of_an_embedded_model_is_empty(tmp_path: Path) -> None:
    src = tmp_path / "in.onnx"
    onnx.save_model(_model(), src)
    assert data_files(load(src)) == []
