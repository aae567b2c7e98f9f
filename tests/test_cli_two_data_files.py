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
from fixtures_onnx import conv_bn_conv

from memshrink.cli import main
from memshrink.model import load
from memshrink.writer import data_files


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def test_optimize_names_both_data_files_and_the_moved_folder_works(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    src = tmp_path / "in.onnx"
    onnx.save_model(conv_bn_conv(), src)
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
    onnx.save_model(conv_bn_conv(), src)
    assert data_files(load(src)) == []
