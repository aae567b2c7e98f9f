"""Inputs that declare ``dim_value: -1`` (older converters' "unknown"; the spec reserves
negatives) bind and optimize like unnamed dims.

Found by the session-12 sweep row ``unnamed-minus1-dims``: ``estimate`` asked for ``--shape
x=...``, then every command refused it ("dim 2 is fixed to -1 in the model, got 96"); and with
that fixed, ``inplace`` declared the Conv outputs' height and width as 0 (ONNX's inference
computed them from -1), so ORT CPU refused the rewritten model ("Incompatible dimensions").
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from memshrink.bindings import bind_input_shapes
from memshrink.estimate.graph import build_view
from memshrink.manager import PassContext, PassManager
from memshrink.model import load
from memshrink.writer import save_model


def conv_minus1(path) -> None:
    """x [unknown, 3, -1, -1] -> Conv 3x3 stride 2 -> Relu -> Mul(itself): y."""
    rng = np.random.default_rng(0)
    g = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("Mul", ["r", "c"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", 1, [None, 3, -1, -1])],
        [helper.make_tensor_value_info("y", 1, [-1, 8, -1, -1])],
        [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    onnx.save(m, str(path))


def test_a_minus1_dim_binds_like_an_unnamed_one():
    got = bind_input_shapes([("x", [None, 3, -1, -1])], shapes={"x": (4, 3, 96, 96)})
    assert got == {"x": (4, 3, 96, 96)}


def test_minus1_dims_are_unknown_to_the_estimator(tmp_path):
    path = tmp_path / "m.onnx"
    conv_minus1(path)
    g = build_view(str(path), shapes={"x": (4, 3, 96, 96)}).graph
    assert g.tensors["c"].shape == (4, 8, 48, 48)  # not (4, 8, 0, 0) from -1


def test_all_on_minus1_dims_still_runs_on_ort(tmp_path):
    src, dst = tmp_path / "m.onnx", tmp_path / "m.all.onnx"
    conv_minus1(src)
    ctx = PassContext(shapes={"x": (4, 3, 96, 96)})
    model, _ = PassManager("inplace").run(load(str(src)), ctx)
    save_model(model, dst)
    x = np.random.default_rng(1).standard_normal((4, 3, 96, 96)).astype(np.float32)
    a = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    b = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(a[0], b[0])  # bit-identical: atol=0, rtol=0
    dims = {
        vi.name: [d.dim_value if d.HasField("dim_value") else d.dim_param for d in
                  vi.type.tensor_type.shape.dim]
        for vi in onnx.load(str(dst)).graph.value_info
    }  # fmt: skip
    assert all(0 not in v for v in dims.values()), dims


def test_simplify_declares_no_zero_dims_from_minus1(tmp_path):
    """onnxsim's inference, fed the -1, declared the stride-2 Conv's output [?, 8, 0, 0]; the
    EP then reused buffers by that shape. After: unknown dims, and the interface keeps its
    -1 (input and output)."""
    pytest.importorskip("onnxsim")
    src, dst = tmp_path / "m.onnx", tmp_path / "m.sim.onnx"
    conv_minus1(src)
    model, report = PassManager("simplify").run(load(str(src)), PassContext())
    save_model(model, dst)
    out = onnx.load(str(dst))
    for vi in out.graph.value_info:
        for d in vi.type.tensor_type.shape.dim:
            assert not (d.HasField("dim_value") and d.dim_value <= 0), (vi.name, report.passes)
    io = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in (*out.graph.input, *out.graph.output)
    }
    assert io["x"][2:] == [-1, -1] and io["y"] == [-1, 8, -1, -1]
