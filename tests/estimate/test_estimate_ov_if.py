"""OpenVINO: an If whose condition follows from static dims is replaced by its branch at
compile (``ov_if``; docs/estimate.md, "Session 15: If nodes folded at compile").

Known answers: which branch is taken, the outer tensor a view branch stands for, and the
activation plan without the body's working memory and the If's output copy.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from estimate.test_estimate_openvino import _save
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.ov_if import taken_branch, view_sources

MiB = 1 << 20
F = TensorProto.FLOAT
N = 1 << 20  # rows of x [N, 1]: 4 MiB in f32


def _guarded(axis: int, then_op: str = "Squeeze") -> onnx.ModelProto:
    """Relu -> If(Shape(h)[axis] == 1: Squeeze(h, 1) | Reshape(h, [-1])) -> Sigmoid on
    x [N, 1], N symbolic: the torch ``if x.shape[-1] == 1: x = x.squeeze(-1)`` pattern."""
    c = lambda v, n: numpy_helper.from_array(np.array(v, np.int64), n)  # noqa: E731
    then = helper.make_graph(
        [helper.make_node(then_op, ["h", "one"] if then_op == "Squeeze" else ["h"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", F, None)],
    )
    other = helper.make_graph(
        [helper.make_node("Reshape", ["h", "m1"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", F, None)],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["h"]),
        helper.make_node("Shape", ["h"], ["s"]),
        helper.make_node("Gather", ["s", "ax"], ["g"], axis=0),
        helper.make_node("Equal", ["g", "one"], ["eq"]),
        helper.make_node("Squeeze", ["eq"], ["cond"]),
        helper.make_node("If", ["cond"], ["o"], then_branch=then, else_branch=other),
        helper.make_node("Sigmoid", ["o"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, ["N", 1])],
        [helper.make_tensor_value_info("y", F, None)],
        [c([axis], "ax"), c([1], "one"), c([-1], "m1")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _if_node(path: str) -> tuple:
    g = build_view(path, dims={"N": N}).graph
    return g, next(n for n in g.nodes if n.op_type == "If")


def test_condition_on_a_static_dim_picks_the_branch(tmp_path: Path) -> None:
    """x [N, 1]: Shape(h)[-1] == 1 is known at compile (then: Squeeze of h); on the
    symbolic dim 0 it is not (the If stays, as the runtime graph shows)."""
    g, node = _if_node(_save(_guarded(-1), tmp_path / "a.onnx"))
    sub = taken_branch(g, node)
    assert sub is not None and [n.op_type for n in sub.nodes] == ["Squeeze"]
    assert view_sources(g, node) == ["h"]
    g, node = _if_node(_save(_guarded(0), tmp_path / "b.onnx"))
    assert taken_branch(g, node) is None and view_sources(g, node) is None


def test_a_branch_with_code_is_not_a_view(tmp_path: Path) -> None:
    """The taken branch computes (a Relu): it is inlined, not a view of the outer tensor."""
    g, node = _if_node(_save(_guarded(-1, "Relu"), tmp_path / "m.onnx"))
    assert taken_branch(g, node) is not None
    assert view_sources(g, node) is None


def test_folded_if_takes_no_body_and_no_copy(tmp_path: Path) -> None:
    """Static condition: the If's output is a view of h, so the run holds no body buffer and
    no copy of h: the activations fall by at least h's bytes (4 MiB f32, 2 MiB at bf16)
    against the same graph guarded on the symbolic dim."""
    shapes = {"x": (N, 1)}
    folded = estimate(_save(_guarded(-1), tmp_path / "a.onnx"), backend="openvino", shapes=shapes)
    kept = estimate(_save(_guarded(0), tmp_path / "b.onnx"), backend="openvino", shapes=shapes)
    act = lambda e: next(s for s in e.prediction.stages if s.name == "run_1").activations  # noqa: E731
    assert act(kept) - act(folded) >= 2 * MiB - 1024  # atol 1 KiB
