"""external-data keeps weights read inside Loop / Scan bodies embedded.

Found by the real-model sweep (scan-cumulative, verify-all-ovep): ONNX Runtime's OpenVINO EP
(1.24) resolves the external-data location of a weight read inside a Loop or Scan body against
the process's working directory, so the rewritten model failed ("invalid external data")
where the embedded original ran. Weights outside those bodies still move out.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from interpreters import NO_OVEP, ovep_python
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from memshrink.manager import PassContext, PassManager
from memshrink.model import load, save
from tests.fixtures_onnx import run_ort

REPO = Path(__file__).resolve().parents[2]


def _loop_model(path: Path) -> Path:
    """y = Loop(3){ s = s @ W } (x @ Win): W is read from the outer scope by the body."""
    rng = np.random.default_rng(0)
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["s_in", "W"], ["s_out"]),
            helper.make_node("Identity", ["c_in"], ["c_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", T.INT64, []),
            helper.make_tensor_value_info("c_in", T.BOOL, []),
            helper.make_tensor_value_info("s_in", T.FLOAT, [1, 64]),
        ],
        [
            helper.make_tensor_value_info("c_out", T.BOOL, []),
            helper.make_tensor_value_info("s_out", T.FLOAT, [1, 64]),
        ],
    )
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "Win"], ["h"]),
            helper.make_node("Loop", ["n", "t", "h"], ["y"], body=body),
        ],
        "loop",
        [helper.make_tensor_value_info("x", T.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", T.FLOAT, [1, 64])],
        [
            numpy_helper.from_array(0.1 * rng.standard_normal((64, 64)).astype(np.float32), "W"),
            numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "Win"),
            numpy_helper.from_array(np.array(3, np.int64), "n"),
            numpy_helper.from_array(np.array(True), "t"),
        ],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def _scan_model(path: Path) -> Path:
    """y = Scan over T of s = tanh(s @ W + x_t), after x @ Win: W read from the outer scope."""
    rng = np.random.default_rng(0)
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["s_in", "W"], ["sw"]),
            helper.make_node("Add", ["sw", "x_t"], ["a"]),
            helper.make_node("Tanh", ["a"], ["s_out"]),
            helper.make_node("Identity", ["s_out"], ["y_t"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("s_in", T.FLOAT, [1, 64]),
            helper.make_tensor_value_info("x_t", T.FLOAT, [1, 64]),
        ],
        [
            helper.make_tensor_value_info("s_out", T.FLOAT, [1, 64]),
            helper.make_tensor_value_info("y_t", T.FLOAT, [1, 64]),
        ],
    )
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "Win"], ["xp"]),
            helper.make_node("Scan", ["s0", "xp"], ["sf", "ys"], body=body, num_scan_inputs=1),
        ],
        "scan",
        [helper.make_tensor_value_info("x", T.FLOAT, [5, 1, 64])],
        [
            helper.make_tensor_value_info("ys", T.FLOAT, [5, 1, 64]),
            helper.make_tensor_value_info("sf", T.FLOAT, [1, 64]),
        ],
        [
            numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "W"),
            numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "Win"),
            numpy_helper.from_array(np.zeros((1, 64), np.float32), "s0"),
        ],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def _optimize(src: Path, out: Path) -> None:
    model = load(src)
    PassManager("external-data").run(model, PassContext())
    save(model, out)


_EP_RUN = (
    "import sys, numpy as np, onnxruntime as ort\n"
    "s = ort.InferenceSession(sys.argv[1], providers=['OpenVINOExecutionProvider'])\n"
    "s.run(None, {'x': np.ones((5, 1, 64), np.float32)})\n"
)


def _run_on_ep(model: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [str(ovep_python()), "-c", _EP_RUN, str(model)],
        cwd=cwd, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip


def test_loop_body_weight_stays_embedded_others_move_out(tmp_path: Path) -> None:
    src = _loop_model(tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    _optimize(src, out)
    saved = onnx.load(out, load_external_data=False)
    where = {t.name: t.data_location for t in saved.graph.initializer}
    assert where["W"] == T.DEFAULT  # read by the Loop body: embedded
    assert where["Win"] == T.EXTERNAL  # main graph only: moved out
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)}
    for a, b in zip(run_ort(src, feeds), run_ort(out, feeds), strict=True):
        np.testing.assert_array_equal(a, b)  # atol = rtol = 0


@pytest.mark.parametrize("build", [_loop_model, _scan_model])
def test_loop_and_scan_body_weights_stay_embedded(tmp_path: Path, build) -> None:  # type: ignore[no-untyped-def]
    src = build(tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    _optimize(src, out)
    where = {
        t.name: t.data_location for t in onnx.load(out, load_external_data=False).graph.initializer
    }
    assert (where["W"], where["Win"]) == (T.DEFAULT, T.EXTERNAL)


@pytest.mark.skipif(ovep_python() is None, reason=NO_OVEP)
def test_rewritten_scan_model_runs_on_the_openvino_ep_from_another_folder(tmp_path: Path) -> None:
    src = _scan_model(tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    _optimize(src, out)
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()  # not the model's folder: the EP looked for the data file here
    p = _run_on_ep(src, cwd)
    assert p.returncode == 0, p.stderr[-600:]  # the embedded original runs
    p = _run_on_ep(out, cwd)
    assert p.returncode == 0, p.stderr[-600:]


def test_a_loop_weight_already_in_a_data_file_stays_there(tmp_path: Path) -> None:
    # embedding it would add its bytes to the heap on ORT CPU; the original had the EP's
    # problem already, so the rewrite changes nothing there
    src = _scan_model(tmp_path / "m.onnx")
    m = onnx.load(src)
    onnx.save_model(m, src, save_as_external_data=True, location="m.bin", size_threshold=1024)
    out = tmp_path / "o.onnx"
    _optimize(src, out)
    where = {
        t.name: t.data_location for t in onnx.load(out, load_external_data=False).graph.initializer
    }
    assert (where["W"], where["Win"]) == (T.EXTERNAL, T.EXTERNAL)
    feeds = {"x": np.random.default_rng(1).standard_normal((5, 1, 64)).astype(np.float32)}
    for a, b in zip(run_ort(src, feeds), run_ort(out, feeds), strict=True):
        np.testing.assert_array_equal(a, b)  # atol = rtol = 0


def test_partitioned_save_keeps_loop_body_weights_embedded(tmp_path: Path) -> None:
    """The folder writer honours the same list: each part keeps its Loop body's weights inline
    (the EP would resolve a part's data file against the working directory too)."""
    from memshrink.writer import save_model

    src = _loop_model(tmp_path / "m.onnx")
    opts = {"partition": {"parts": 2}}
    model, _ = PassManager(["external-data", "partition"], options=opts).run(load(src))
    out = tmp_path / "parts"
    save_model(model, out)
    where: dict[str, int] = {}
    for part in sorted(out.glob("part_*.onnx")):
        for t in onnx.load(part, load_external_data=False).graph.initializer:
            where[t.name] = t.data_location
    assert (where["W"], where["Win"]) == (T.DEFAULT, T.EXTERNAL)
