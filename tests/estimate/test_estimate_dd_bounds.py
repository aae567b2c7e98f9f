"""Upper bounds for data-dependent sizes (``estimate.dd_bounds``): NonZero, NonMaxSuppression,
TopK with a computed K, an If around an NMS, and the ``--dim-bound`` override. Known answers
from the rules in the module docstring, on graphs built here."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from memshrink.errors import UsageError
from memshrink.estimate.api import estimate
from memshrink.estimate.cli import _dim_bounds
from memshrink.estimate.graph import build_view

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _nonzero_chain() -> onnx.ModelProto:
    """x[4, 256] > 0 -> NonZero [2, N] -> Transpose [N, 2] -> Cast f32 -> Mul 2."""
    return _model(
        [
            helper.make_node("Greater", ["x", "zero"], ["m"]),
            helper.make_node("NonZero", ["m"], ["nz"]),
            helper.make_node("Transpose", ["nz"], ["t"], perm=[1, 0]),
            helper.make_node("Cast", ["t"], ["c"], to=F),
            helper.make_node("Mul", ["c", "two"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", F, [4, 256])],
        [helper.make_tensor_value_info("y", F, None)],
        [
            numpy_helper.from_array(np.float32(0), "zero"),
            numpy_helper.from_array(np.float32(2), "two"),
        ],
    )


def test_nonzero_bound_is_numel_and_reaches_the_chain():
    """1,024 elements -> at most 1,024 indices: nz [2, 1024] int64 = 16 KiB, y [1024, 2] f32 =
    8 KiB; nothing left unknown, and the assumptions name the source and its rule."""
    est = estimate(_nonzero_chain())
    g = est.view.graph
    assert g.tensors["nz"].shape == (2, 1024) and g.tensors["nz"].nbytes == 16384
    assert g.tensors["y"].shape == (1024, 2) and g.tensors["y"].nbytes == 8192
    assert not est.partial and est.unknowns == []
    assert set(g.bounded) == {"nz", "t", "c", "y"}
    line = next(a for a in est.to_dict()["assumptions"] if "data-dependent" in a)
    assert "nz: NonZero: numel of its input = 1024" in line and "3 sized from them" in line


def test_dim_bound_override_replaces_the_rule():
    """--dim-bound nz=10: the data-dependent dim only (rank 2 stays): nz [2, 10], y [10, 2]."""
    g = estimate(_nonzero_chain(), dim_bounds={"nz": 10}).view.graph
    assert g.tensors["nz"].shape == (2, 10) and g.tensors["y"].shape == (10, 2)
    assert g.bounded["nz"] == "--dim-bound"


def test_bound_raises_run_activations_by_the_bounded_bytes():
    """The bounded tensors enter ORT CPU's plan: run 1's activations grow by at least the
    largest one alone (16 KiB) against an override of 1 index."""
    big = estimate(_nonzero_chain()).prediction.stages[1].activations
    small = estimate(_nonzero_chain(), dim_bounds={"nz": 1}).prediction.stages[1].activations
    assert big - small >= 16384 - 16


def _nms(max_per_class: np.ndarray | None) -> onnx.ModelProto:
    """boxes [2, 50, 4], scores [2, 3, 50] -> NMS (max per class a constant, or a graph input
    whose value is unknown) -> Gather column 2 -> Cast f32."""
    inits = [numpy_helper.from_array(np.array(2, np.int64), "col")]
    inputs = [
        helper.make_tensor_value_info("boxes", F, [2, 50, 4]),
        helper.make_tensor_value_info("scores", F, [2, 3, 50]),
    ]
    if max_per_class is None:
        inputs.append(helper.make_tensor_value_info("mpc", I64, [1]))
    else:
        inits.append(numpy_helper.from_array(max_per_class, "mpc"))
    return _model(
        [
            helper.make_node("NonMaxSuppression", ["boxes", "scores", "mpc"], ["sel"]),
            helper.make_node("Gather", ["sel", "col"], ["idx"], axis=1),
            helper.make_node("Cast", ["idx"], ["y"], to=F),
        ],
        inputs,
        [helper.make_tensor_value_info("y", F, None)],
        inits,
    )


@pytest.mark.parametrize(
    ("mpc", "n"),
    [
        (np.array([10], np.int64), 2 * 3 * 10),  # batch x classes x min(10, 50)
        (np.array([1000], np.int64), 2 * 3 * 50),  # capped by the 50 boxes
        (None, 2 * 3 * 50),  # value unknown: every box of every class
    ],
)
def test_nms_bound(mpc, n):
    g = build_view(_nms(mpc)).graph
    assert g.tensors["sel"].shape == (n, 3)
    assert g.tensors["y"].shape == (n,)
    assert g.tensors["y"].nbytes == 4 * n


def _topk(k_from_data: bool) -> onnx.ModelProto:
    """x[2, 100] -> TopK on axis 1 with K = min(30, ReduceMax(int(x))) (data: unknown) or
    K = min(30, Shape(x)[1]) (a shape computation: evaluated) -> Relu of the values."""
    src = ["xi"] if k_from_data else ["sh1"]
    nodes = [
        helper.make_node("Cast", ["x"], ["xi"], to=I64),
        helper.make_node("Shape", ["x"], ["shp"]),
        helper.make_node("Gather", ["shp", "one"], ["sh1"], axis=0),
        helper.make_node("ReduceMax", src, ["mx"], keepdims=1),
        helper.make_node("Reshape", ["mx", "one1"], ["mx1"]),
        helper.make_node("Min", ["mx1", "thirty"], ["k"]),
        helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1),
        helper.make_node("Relu", ["v"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array([1], np.int64), "one1"),
        numpy_helper.from_array(np.array([30], np.int64), "thirty"),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", F, [2, 100])],
        [
            helper.make_tensor_value_info("y", F, None),
            helper.make_tensor_value_info("i", I64, None),
        ],
        inits,
    )


def test_topk_with_evaluated_k_is_exact():
    """K = min(30, 100) = 30 is a shape computation: exact, not a bound."""
    g = build_view(_topk(False)).graph
    assert g.tensors["y"].shape == (2, 30)
    assert "v" not in g.bounded


def test_topk_with_data_k_is_bounded_by_the_axis():
    """K from the data: at most the axis length, 100: values and indices [2, 100]."""
    g = build_view(_topk(True)).graph
    assert g.tensors["v"].shape == (2, 100) and g.tensors["i"].shape == (2, 100)
    assert g.tensors["y"].shape == (2, 100)
    assert g.bounded["v"] == "TopK: K unknown: axis length 100"


def test_if_around_nms_takes_the_larger_branch():
    """torchvision's batched NMS: If(empty) then [0] else NMS(...)[:, 2] -> a Cast after it.
    boxes [1, 40, 4], one class, max 100 per class (a Constant inside the branch): the else
    branch is at most min(100, 40) = 40, the If's output [40]."""
    then_g = helper.make_graph(
        [
            helper.make_node(
                "Constant", [], ["e"], value=numpy_helper.from_array(np.zeros(0, np.int64))
            )
        ],
        "then",
        [],
        [helper.make_tensor_value_info("e", I64, [0])],
    )
    else_g = helper.make_graph(
        [
            helper.make_node(
                "Constant", [], ["mpc"], value=numpy_helper.from_array(np.array([100], np.int64))
            ),
            helper.make_node("NonMaxSuppression", ["boxes", "scores", "mpc"], ["sel"]),
            helper.make_node("Gather", ["sel", "col"], ["keep"], axis=1),
        ],
        "else",
        [],
        [helper.make_tensor_value_info("keep", I64, None)],
    )
    m = _model(
        [
            helper.make_node("ReduceSum", ["scores"], ["s"], keepdims=0),
            helper.make_node("Less", ["s", "zero"], ["cond"]),
            helper.make_node("If", ["cond"], ["k"], then_branch=then_g, else_branch=else_g),
            helper.make_node("Cast", ["k"], ["y"], to=F),
        ],
        [
            helper.make_tensor_value_info("boxes", F, [1, 40, 4]),
            helper.make_tensor_value_info("scores", F, [1, 1, 40]),
        ],
        [helper.make_tensor_value_info("y", F, None)],
        [
            numpy_helper.from_array(np.array(2, np.int64), "col"),
            numpy_helper.from_array(np.float32(0), "zero"),
        ],
    )
    est = estimate(m)
    assert est.view.graph.tensors["k"].shape == (40,)
    assert est.view.graph.tensors["y"].shape == (40,)
    assert not est.partial


def test_no_bound_stays_partial():
    """Range(0, ReduceMax(int(x))): a length only the data knows and no rule bounds: unknown,
    so the estimate stays partial."""
    m = _model(
        [
            helper.make_node("Cast", ["x"], ["xi"], to=I64),
            helper.make_node("ReduceMax", ["xi"], ["mx"], keepdims=0),
            helper.make_node("Range", ["z", "mx", "o"], ["r"]),
            helper.make_node("Cast", ["r"], ["y"], to=F),
        ],
        [helper.make_tensor_value_info("x", F, [8])],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(np.array(0, np.int64), n) for n in ("z",)]
        + [numpy_helper.from_array(np.array(1, np.int64), "o")],
    )
    est = estimate(m, allow_partial=True)
    assert est.partial and "y" in est.unknowns
    assert not [a for a in est.to_dict()["assumptions"] if "data-dependent" in a]


def test_cli_dim_bound_parsing():
    assert _dim_bounds(["boxes_nms=100", "a=b=3"]) == {"boxes_nms": 100, "a=b": 3}
    with pytest.raises(UsageError):
        _dim_bounds(["nz"])
    with pytest.raises(UsageError):
        _dim_bounds(["nz=-1"])


def test_table_says_bounded():
    """The console table says, before the figures, that some sizes are bounds."""
    text = estimate(_nonzero_chain()).format_table()
    assert "BOUNDED: 4 tensor(s)" in text and "NonZero" in text


def test_loop_scan_output_is_trip_count_times_one_iteration():
    """Loop with M = 5 (a constant) whose body emits x + i ([3] f32) as a scan output: ONNX's
    inference leaves the first dim unknown; the rule gives [5, 3]."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c_in"], ["c_out"]),
            helper.make_node("Cast", ["i"], ["fi"], to=F),
            helper.make_node("Add", ["x", "fi"], ["s"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("s", F, [3]),
        ],
    )
    m = _model(
        [
            helper.make_node("Loop", ["M", "cond"], ["scan"], body=body),
            helper.make_node("Relu", ["scan"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", F, [3])],
        [helper.make_tensor_value_info("y", F, None)],
        [
            numpy_helper.from_array(np.array(5, np.int64), "M"),
            numpy_helper.from_array(np.array(True), "cond"),
        ],
    )
    g = build_view(m).graph
    assert g.tensors["scan"].shape == (5, 3) and g.tensors["y"].shape == (5, 3)
    assert g.bounded["scan"] == "Loop: trip count 5 x one iteration"


def test_passes_never_write_a_bound_into_the_model():
    """The bound is for memory only: ``inplace`` must not declare it (ORT would plan a
    data-dependent tensor as static) and ``chunk`` must not slice by it."""
    from memshrink.transforms.chunk import _shapes
    from memshrink.transforms.inplace import declared_shapes

    est = estimate(_nonzero_chain())
    assert not set(declared_shapes(est.view, None)) & set(est.view.graph.bounded)
    shapes = _shapes(est)
    assert shapes["nz"] is None and shapes["y"] is None and shapes["m"] == (4, 256)


def test_dim_bound_on_a_tensor_that_is_no_source_is_an_error():
    """A typo, or a tensor whose size is known, must not be ignored silently."""
    with pytest.raises(UsageError, match="--dim-bound names y"):
        estimate(_nonzero_chain(), dim_bounds={"y": 3})
