"""Sparse initializers survive load -> passes -> save (onnx_ir drops the field; we densify)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from memshrink.manager import PassContext, PassManager
from memshrink.model import load
from memshrink.writer import save_model


def _model(coordinates: bool) -> onnx.ModelProto:
    values = numpy_helper.from_array(np.array([1.0, 2.0, 3.0], np.float32), "S")
    idx = np.array([[0, 1], [1, 3], [2, 2]] if coordinates else [1, 7, 10], np.int64)
    sparse = helper.make_sparse_tensor(values, numpy_helper.from_array(idx, "i"), [3, 4])
    then = helper.make_graph(  # the subgraph reads the sparse constant from the outer scope
        [helper.make_node("Add", ["x", "S"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [3, 4])],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [3, 4])],
    )
    g = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        sparse_initializer=[sparse],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_sparse_initializers_are_densified_exactly(tmp_path: Path) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for coordinates in (False, True):
        src = tmp_path / f"s{coordinates}.onnx"
        onnx.save_model(_model(coordinates), src)
        model, _ = PassManager("safe").run(load(src), PassContext())
        dst = tmp_path / f"o{coordinates}.onnx"
        save_model(model, dst)
        feeds = {"x": x, "c": np.array(True)}
        (ref,) = ort.InferenceSession(str(src)).run(None, feeds)
        (got,) = ort.InferenceSession(str(dst)).run(None, feeds)
        np.testing.assert_array_equal(got, ref)  # atol=0: densifying is exact
