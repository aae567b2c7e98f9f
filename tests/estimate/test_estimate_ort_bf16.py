"""bfloat16 graphs on ONNX Runtime CPU: ``estimate`` says the session cannot be made
(``ort_bf16``; docs/estimate.md, "Session 13: bfloat16 on ORT CPU").

Known answer from the runtime itself: ORT refuses the MatMul + Add graph and loads the
Transpose + Reshape one, and the estimator names exactly the refused nodes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.text import format_estimate

BF16 = TensorProto.BFLOAT16


def _graph(compute: bool, dtype: int = BF16) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", dtype, [4, 8])
    y = helper.make_tensor_value_info("y", dtype, None)
    if compute:
        w = helper.make_tensor("w", dtype, [8, 8], np.ones(64, np.float32).tolist())
        nodes = [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("Add", ["m", "x"], ["y"]),
        ]
        inits = [w]
    else:
        shape = numpy_helper.from_array(np.array([8, 4], np.int64), "s")
        nodes = [
            helper.make_node("Transpose", ["x"], ["t"]),
            helper.make_node("Reshape", ["t", "s"], ["y"]),
        ]
        inits = [shape]
    m = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 20)]
    )
    m.ir_version = 10
    return m


def test_ort_refuses_what_the_estimate_names(tmp_path: Path) -> None:
    refused, loads = tmp_path / "mm.onnx", tmp_path / "tr.onnx"
    onnx.save(_graph(True), refused)
    onnx.save(_graph(False), loads)
    with pytest.raises(Exception, match="implementation"):
        ort.InferenceSession(str(refused), providers=["CPUExecutionProvider"])
    ort.InferenceSession(str(loads), providers=["CPUExecutionProvider"])  # loads
    est = estimate(str(refused), backend="ort")
    assert est.prediction.details["ort_cpu_refuses"] == {"MatMul": 1, "Add": 1}
    assert (
        "REFUSED: ONNX Runtime's CPU provider has no bfloat16 kernel for Add (1), MatMul (1)"
        in (format_estimate(est))
    )
    assert "ort_cpu_refuses" not in estimate(str(loads), backend="ort").prediction.details


def test_an_f32_graph_is_not_flagged(tmp_path: Path) -> None:
    path = tmp_path / "f32.onnx"
    onnx.save(_graph(True, TensorProto.FLOAT), path)
    assert "ort_cpu_refuses" not in estimate(str(path), backend="ort").prediction.details
