"""Named dims ORT's shape inference loses through ``Slice`` (``estimate.ort_symdims``): no
buffer reuse on them, as ORT 1.32's run 1 allocates (measured counts written in)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate.api import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.ort_symdims import LOST, ort_view

ATT = 2 * 4 * 196 * 196 * 4  # one [2, 4, 196, 196] f32 attention tensor, bytes


def _attention(batch_from: str) -> onnx.ModelProto:
    """x[batch, 196, 64] -> Reshape to [b, 196, 4, 16] with b taken from Shape(x) by
    ``Gather + Unsqueeze`` or by ``Slice`` -> q @ k -> Add(bias) -> 4 elementwise ops."""
    mk = helper.make_node
    inits = [
        numpy_helper.from_array(np.zeros((4, 196, 196), np.float32), "b"),
        numpy_helper.from_array(np.array([0], np.int64), "st"),
        numpy_helper.from_array(np.array([1], np.int64), "en"),
        numpy_helper.from_array(np.array(0, np.int64), "i0"),
        numpy_helper.from_array(np.array([0], np.int64), "ax"),
        numpy_helper.from_array(np.array([196, 4, 16], np.int64), "tail"),
    ]
    if batch_from.startswith("slice"):
        head = [mk("Shape", ["x"], ["sh"]), mk("Slice", ["sh", "st", "en"], ["b1"])]
    else:
        head = [
            mk("Shape", ["x"], ["sh"]),
            mk("Gather", ["sh", "i0"], ["b0"], axis=0),
            mk("Unsqueeze", ["b0", "ax"], ["b1"]),
        ]
    nodes = head + [
        mk("Concat", ["b1", "tail"], ["shp"], axis=0), mk("Reshape", ["x", "shp"], ["r"]),
        mk("Transpose", ["r"], ["q"], perm=[0, 2, 1, 3]),
        mk("Transpose", ["r"], ["k"], perm=[0, 2, 3, 1]), mk("MatMul", ["q", "k"], ["mm"]),
        mk("Add", ["mm", "b"], ["a"]), mk("Relu", ["a"], ["a2"]),
        mk("Sigmoid", ["a2"], ["a3"]), mk("Exp", ["a3"], ["a4"]), mk("Exp", ["a4"], ["a5"]),
        mk("MatMul", ["a5", "q"], ["y"]),
    ]  # fmt: skip
    g = helper.make_graph(
        nodes, "att", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 196, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    if batch_from == "slice_declared":  # a dynamo export's value_info
        g.value_info.append(
            helper.make_tensor_value_info("r", TensorProto.FLOAT, ["batch", 196, 4, 16])
        )
    if batch_from.startswith("slice_empty"):  # declared, but the batch dim left empty
        vi = [helper.make_tensor_value_info("r", TensorProto.FLOAT, [None, 196, 4, 16])]
        att_dim0 = {"slice_empty": None, "slice_empty_all": None, "slice_empty_named": "batch"}
        if batch_from != "slice_empty":  # every attention tensor declared too (wav2vec2's)
            vi += [
                helper.make_tensor_value_info(
                    t, TensorProto.FLOAT, [att_dim0[batch_from], 4, 196, 196]
                )
                for t in ("mm", "a", "a2", "a3", "a4", "a5")
            ]
        g.value_info.extend(vi)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("batch_from", "measured"),
    [
        ("gather", 2),
        ("slice", 6),
        ("slice_declared", 2),
        ("slice_empty", 6),
        ("slice_empty_all", 6),
        ("slice_empty_named", 2),
    ],
)
def test_reuse_follows_what_ort_can_name(batch_from, measured):
    """Known answers (ORT 1.32, x = [2, 196, 64], arena off, run 1's memaligns of one
    attention tensor, docs/bench/malloc_trace.c): 2 through Gather + Unsqueeze, where the
    chain reuses, 6 through Slice, where ORT's tensors have no ``batch`` name, and 2 again
    when the file declares the Reshape's output shape. A declaration that leaves the batch
    dim empty names nothing (6, also with every attention tensor declared that way, as
    wav2vec2's dynamo export does), unless the attention tensors' declarations name it (2).
    The estimator's plan allocates as many buffers of that size."""
    e = estimate(_attention(batch_from), backend="ort", shapes={"x": [2, 196, 64]})
    plan = e.prediction.details["plan"]
    assert sum(b.size == ATT for b in plan.buffers) == measured


def test_only_dims_behind_a_slice_are_unnamed():
    """``batch`` is renamed on the Reshape's output and what follows it, not on the input,
    and not at all when the batch came through Gather + Unsqueeze."""
    sl = ort_view(build_view(_attention("slice"), shapes={"x": [2, 196, 64]}).graph)
    assert sl is not None
    assert sl.tensors["x"].sym_shape[0] == "batch"
    assert sl.tensors["r"].sym_shape[0] == LOST and sl.tensors["a5"].sym_shape[0] == LOST
    assert ort_view(build_view(_attention("gather"), shapes={"x": [2, 196, 64]}).graph) is None


def test_a_declared_empty_dim_is_unnamed_and_a_declared_name_kept():
    """Only the dims a declaration leaves empty are renamed: ``r`` declared
    ``[?, 196, 4, 16]`` loses its batch name; ``mm`` declared ``[?, 4, 196, 196]`` keeps
    nothing named but 196 values, and ``mm`` declared ``[batch, ...]`` is left alone."""
    g = build_view(_attention("slice_empty_all"), shapes={"x": [2, 196, 64]}).graph
    sl = ort_view(g)
    assert sl is not None
    assert g.declared_empty["r"] == frozenset({0})
    assert sl.tensors["r"].sym_shape[0] == LOST and sl.tensors["mm"].sym_shape[0] == LOST
    named = ort_view(build_view(_attention("slice_empty_named"), shapes={"x": [2, 196, 64]}).graph)
    assert named is not None
    assert named.tensors["r"].sym_shape[0] == LOST
    assert named.tensors["mm"].sym_shape[0] == "batch"
