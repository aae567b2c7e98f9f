"""An ``unk__N`` dim the file declares is a name ORT reads; one the estimator's own shape
inference makes up is not (ORT's inference leaves that dim empty and never reuses on it).

Found on an SD-style U-Net's ``optimize --passes all`` output (session 12): its value_info
declares the [2, 4, 1024, 1024] attention scores ``[unk__42, 4, unk__31, unk__35]``; ORT ran
the Softmax in place (run 1 51.8 MiB measured) where the estimator, dropping every ``unk__``
name, predicted a second 32 MiB buffer (81.3 MiB; after: 49.3).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import helper, numpy_helper

from memshrink.estimate import ort
from memshrink.estimate.graph import build_view


def scores(declare: bool) -> onnx.ModelProto:
    """x [2, 4, 512, 64] -> Reshape to a computed shape (Slice of Shape: ONNX's inference
    names the dims ``unk__N``) -> Softmax -> Relu -> Neg; with ``declare`` the file's value_info names
    the dims of the tensors in between ``unk__7``, ``unk__8``, as a tool that ran
    shape inference writes them."""
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["sh"]),
        n("Slice", ["sh", "zero", "two"], ["bh"]),
        n("Concat", ["bh", "tail"], ["shape"], axis=0),
        n("Reshape", ["x", "shape"], ["r"]),
        n("Softmax", ["r"], ["p"], axis=-1),
        n("Relu", ["p"], ["q"]),
        n("Neg", ["q"], ["y"]),
    ]
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    vi = []
    if declare:
        vi = [
            helper.make_tensor_value_info(t, 1, ["unk__7", "unk__8", 512, 64])
            for t in ("r", "p", "q")
        ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", 1, [2, 4, 512, 64])],
        [helper.make_tensor_value_info("y", 1, None)],
        [i64("zero", [0]), i64("two", [2]), i64("tail", [512, 64])],
        value_info=vi,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def test_declared_unk_dims_count_as_names(tmp_path):
    """The declared ``unk__7`` / ``unk__8`` are names for ORT's SameSize (in-place and reuse
    match on them); an ``unk__N`` the file does not declare still matches nothing."""
    path = str(tmp_path / "d.onnx")
    onnx.save(scores(True), path)
    g = build_view(path).graph
    assert g.declared_unk == frozenset({"unk__7", "unk__8"})
    assert not ort._unnamed("unk__7", g) and not ort._unnamed("unk__8", g)
    assert ort._unnamed("unk__9", g) and ort._unnamed("unk__7")  # no graph: made up
    # the same tensors with the declared names as their dims (what a symbolic batch leaves):
    # SameSize holds on the declared names, not on a made-up one
    for name, dims in (("p", ("unk__7", "unk__8", 512, 64)), ("q", ("unk__7", "unk__8", 512, 64))):
        g.tensors[name] = dataclasses.replace(g.tensors[name], sym_shape=dims)
    assert ort._same_size(g, "p", "q") and ort._size_key(g, "p") is not None
    g.tensors["q"] = dataclasses.replace(g.tensors["q"], sym_shape=("unk__9", "unk__8", 512, 64))
    assert not ort._same_size(g, "p", "q") and ort._size_key(g, "q") is None
    assert not onnx_free_declared(tmp_path).declared_unk


def onnx_free_declared(tmp_path):
    """The same model without its value_info declares no ``unk__`` name."""
    path = str(tmp_path / "u.onnx")
    onnx.save(scores(False), path)
    return build_view(path).graph
