"""flush-subnormals: exactly the subnormal f32 values become 0, streamed, reported."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
from fixtures_onnx import run_ort
from onnx import TensorProto, helper, numpy_helper

import memshrink
from memshrink.manager import PassContext, PassManager

SUB = np.float32(1e-40)  # subnormal: below float32 tiny (1.18e-38)


def _model(tmp_path: Path, w: np.ndarray, external: bool) -> Path:
    n = w.shape[0]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, w.shape[1]])],
        [numpy_helper.from_array(w, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save_model(model, path, save_as_external_data=external, size_threshold=0)
    return path


def _weights(rows: int) -> np.ndarray:
    w = np.random.default_rng(0).standard_normal((rows, 64)).astype(np.float32)
    w[0, :5] = SUB
    w[1, 3] = -np.float32(3e-39)
    w[2, 0] = np.float32(1.2e-38)  # normal (just above tiny): must stay
    return w


def test_flushes_exactly_the_subnormals_streamed(tmp_path: Path) -> None:
    w = _weights(1024)  # 256 KiB: rewritten through the spill file, not the heap
    src = _model(tmp_path, w, external=True)
    model, report = PassManager(["flush-subnormals"]).run(memshrink.load(src), PassContext())
    stats = report.passes[0].stats
    assert stats["values_changed"] == 6 and stats["tensors_changed"] == 1
    assert stats["max_change"] == float(np.float32(3e-39))
    assert isinstance(model.graph.initializers["W"].const_value, ir.ExternalTensor)
    out = tmp_path / "out.onnx"
    memshrink.save(model, out)
    got = numpy_helper.to_array(onnx.load(out).graph.initializer[0])
    expected = w.copy()
    expected[np.abs(expected) < np.finfo(np.float32).tiny] = 0
    assert np.array_equal(got, expected)  # every other value bit-identical
    x = {"x": np.random.default_rng(1).standard_normal((2, 1024)).astype(np.float32)}
    # outputs move by at most sum(|x| * 3e-39): atol 1e-30, rtol 0
    np.testing.assert_allclose(run_ort(out, x)[0], run_ort(src, x)[0], atol=1e-30, rtol=0)


def test_no_subnormals_leaves_tensors_untouched(tmp_path: Path) -> None:
    w = np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32)
    model = memshrink.load(_model(tmp_path, w, external=False))
    before = model.graph.initializers["W"].const_value
    model, report = PassManager(["flush-subnormals"]).run(model, PassContext())
    assert report.passes[0].modified is False
    assert report.passes[0].stats["values_changed"] == 0
    assert model.graph.initializers["W"].const_value is before


def test_small_tensor_in_memory(tmp_path: Path) -> None:
    w = _weights(8)
    model, report = PassManager(["flush-subnormals"]).run(
        memshrink.load(_model(tmp_path, w, external=False)), PassContext()
    )
    assert report.passes[0].stats["values_changed"] == 6
    arr = model.graph.initializers["W"].const_value.numpy()
    assert np.count_nonzero(np.abs(arr) < np.finfo(np.float32).tiny) == np.count_nonzero(arr == 0)
    assert arr[2, 0] == np.float32(1.2e-38)
