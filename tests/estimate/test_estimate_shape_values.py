"""Shapes computed from the input's shape (``estimate.shape_values``): window padding and
in-model resizing as Swin and torchvision detectors export them."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate.api import estimate
from memshrink.estimate.graph import build_view


def _const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))


def _window_pad(window: int = 7) -> onnx.ModelProto:
    """x[N, C, H, W] -> Pad H and W up to a multiple of ``window`` with pads computed as
    ``(w - H % w) % w`` through float Casts (what ONNX's data propagation cannot follow) ->
    Relu. H and W are symbolic in the file."""
    f, i64 = np.float32, np.int64
    nodes = [
        _const("w", np.array(window, f)),
        _const("i2", np.array([2], i64)),
        _const("z2", np.zeros(2, i64)),
        _const("z4", np.zeros(4, i64)),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i2"], ["h"]),
        helper.make_node("Cast", ["h"], ["hf"], to=TensorProto.FLOAT),
        helper.make_node("Mod", ["hf", "w"], ["m"], fmod=1),
        helper.make_node("Sub", ["w", "m"], ["d"]),
        helper.make_node("Mod", ["d", "w"], ["pf"], fmod=1),
        helper.make_node("Cast", ["pf"], ["p"], to=TensorProto.INT64),
        helper.make_node("Concat", ["z2", "p", "p"], ["pe"], axis=0),  # end pads: 0 0 p p
        helper.make_node("Concat", ["z4", "pe"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads"], ["xp"]),
        helper.make_node("Relu", ["xp"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "pad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, "H", "H"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_window_padding_shape_is_computed():
    """Known answer: H = 100, window 7 -> pads 5: Relu's output [1, 64, 105, 105]."""
    view = build_view(_window_pad(), dims={"H": 100})
    assert view.graph.tensors["xp"].shape == (1, 64, 105, 105)
    assert view.graph.tensors["y"].shape == (1, 64, 105, 105)
    assert not [n for n, t in view.graph.tensors.items() if t.shape is None]


def test_padded_activation_is_counted():
    """The padded tensors (2.7 MiB each) now enter the plan: run 1 holds at least one of them
    (it held nothing but the input before)."""
    pred = estimate(_window_pad(), dims={"H": 100}).prediction
    assert pred.stages[1].activations >= 105 * 105 * 64 * 4


def test_data_dependent_shape_is_not_evaluated_but_bounded():
    """NonZero's output size depends on the values: not evaluated (nothing is read); at
    session creation it stays unknown, and the run's size is its upper bound (``dd_bounds``):
    x[4, 8] -> at most 32 non-zeros."""
    g = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Transpose", ["nz"], ["y"])],
        "nz",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    view = build_view(m, allow_partial=True)
    y = view.graph.tensors["y"]
    assert y.shape == (32, 2)
    assert not isinstance(y.sym_shape[0], int)  # type: ignore[index]
    assert view.graph.bounded["nz"].startswith("NonZero")
