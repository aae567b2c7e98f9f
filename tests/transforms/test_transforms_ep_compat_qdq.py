"""ep-compat on a QDQ graph: an IsNaN of a value that cannot be NaN becomes a scalar ``false``.

Why: a static-QDQ export guards ``DequantizeLinear(QuantizeLinear(Softmax))`` with IsNaN. The
Xor form's ``Equal(x, x)`` reads that DQ output twice, and ORT gives each consumer edge its own
DQ (``EnsureUniqueDQForNodeUnit``): one more float copy of x, and a QDQ BERT's ORT CPU steady
state rose 27.6 -> 34.8 MiB (docs/activation-passes.md, ep-compat). A DQ of an integer with a
finite constant scale is never NaN, so the guard is constant false. Comparisons are bitwise.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import memshrink
from memshrink.manager import PassContext, PassManager
from memshrink.runtime.backends import make_runner

SHAPE = [2, 4, 16, 16]


def _qdq_model(path: Path, scale: float = 1 / 255, source: str = "dq") -> Path:
    """``Softmax -> Q -> DQ -> Where(IsNaN(dq), 0, dq) -> Q -> DQ`` (``source="dq"``), or the
    guard on ``Cast(int32 input)`` (``source="cast"``)."""
    nodes = [
        helper.make_node("Softmax", ["x"], ["s"], axis=-1),
        helper.make_node("QuantizeLinear", ["s", "sc", "zp"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "sc", "zp"], ["dq"]),
        helper.make_node("Cast", ["i"], ["ci"], to=TensorProto.FLOAT),
    ]
    guarded = "dq" if source == "dq" else "ci"
    nodes += [
        helper.make_node("IsNaN", [guarded], ["nan"], name="isnan"),
        helper.make_node("Where", ["nan", "zero", guarded], ["w"]),
        helper.make_node("QuantizeLinear", ["w", "sc2", "zp"], ["q2"]),
        helper.make_node("DequantizeLinear", ["q2", "sc2", "zp"], ["y"]),
    ]
    inits = [
        helper.make_tensor("sc", TensorProto.FLOAT, [], [scale]),
        helper.make_tensor("sc2", TensorProto.FLOAT, [], [1 / 127]),
        helper.make_tensor("zp", TensorProto.UINT8, [], [0]),
        helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE),
            helper.make_tensor_value_info("i", TensorProto.INT32, SHAPE),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _rewrite(src: Path, dst: Path) -> dict:
    model, report = PassManager(["ep-compat"]).run(memshrink.load(src), PassContext())
    memshrink.save(model, dst)
    onnx.checker.check_model(onnx.load(dst), full_check=True)
    return report.passes[0].stats


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(SHAPE).astype(np.float32) * 4
    x[0, 1, 2, :] = -np.inf  # a fully masked row: Softmax gives NaN; Q/DQ makes it finite
    x[1, 0, 3, 5] = np.nan
    return {"x": x, "i": rng.integers(-(2**31), 2**31 - 1, SHAPE, dtype=np.int32)}


def _ort(path: Path, optimized: Path | None = None) -> np.ndarray:
    so = ort.SessionOptions()
    if optimized is not None:
        so.optimized_model_filepath = str(optimized)
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return sess.run(["y"], _feeds())[0]


def _activation_dqs(path: Path) -> int:
    """DequantizeLinear nodes of the guarded activation ``q`` in ORT's level-1 graph."""
    return sum(
        n.op_type == "DequantizeLinear" and n.input[0] == "q" for n in onnx.load(path).graph.node
    )


@pytest.mark.parametrize("source", ["dq", "cast"])
@pytest.mark.parametrize("backend", ["cpu", "openvino"])
def test_guard_of_a_value_that_cannot_be_nan_becomes_false(
    tmp_path: Path, source: str, backend: str
) -> None:
    src = _qdq_model(tmp_path / "m.onnx", source=source)
    dst = tmp_path / "out.onnx"
    stats = _rewrite(src, dst)
    assert stats["isnan_rewritten"] == 1 and stats["never_nan"] == 1
    assert stats["xor_equal"] == 0 and stats["where_swap"] == 0
    assert stats["ep_subgraphs_after"] == 1  # predicted: no node left to ORT CPU
    ops = [n.op_type for n in onnx.load(dst).graph.node]
    assert not {"IsNaN", "Equal", "Xor"} & set(ops)
    before = make_runner(str(src), backend).run(["y"], _feeds())[0]
    after = make_runner(str(dst), backend).run(["y"], _feeds())[0]
    assert np.array_equal(before.view(np.uint32), after.view(np.uint32))  # atol = rtol = 0


def test_ort_gets_one_dq_copy_fewer_not_one_more(tmp_path: Path) -> None:
    """Known answer for the cause: ORT's level 1 gives each edge of ``dq`` its own DQ; the
    original has two (IsNaN, Where), the Xor form had three (Equal twice, Where), now one."""
    src = _qdq_model(tmp_path / "m.onnx")
    dst = tmp_path / "out.onnx"
    _rewrite(src, dst)
    _ort(src, tmp_path / "src.opt.onnx")
    _ort(dst, tmp_path / "dst.opt.onnx")
    assert _activation_dqs(tmp_path / "src.opt.onnx") == 2
    assert _activation_dqs(tmp_path / "dst.opt.onnx") == 1


@pytest.mark.parametrize("scale", [float("nan"), float("inf")])
def test_a_scale_that_can_make_nan_keeps_a_real_test(tmp_path: Path, scale: float) -> None:
    """inf * (q - zp = 0) and NaN * anything are NaN: the guard is not constant there."""
    src = _qdq_model(tmp_path / "m.onnx", scale=scale)
    stats = _rewrite(src, tmp_path / "out.onnx")
    assert stats["never_nan"] == 0 and stats["xor_equal"] == 1
