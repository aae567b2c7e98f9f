"""ORT CPU keeps one packed copy of a weight per session state that packs it (``ort_weights.
pack_events``): the main graph and each If / Loop body have their own.

Measured (``memshrink profile``, 3 fresh processes each, a 4 MiB [1024, 1024] W; docs/estimate.md,
"Session 14: one packed copy per session state"), MiB over the empty process, session / run 1:
W packed by a main-graph MatMul only 17.6 / 17.8 embedded, 17.4 / 13.9 external; by a main-graph
MatMul and one in an If branch 21.7 / 22.2 and 21.4 / 18.3 (one copy more, anon +4.0); by a
MatMul in each branch 21.7 / 22.1 embedded. Main predicted all of them like the main-graph one.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from fixtures_onnx import save_model_as
from onnx import helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.ort_bodies import flatten_bodies
from memshrink.estimate.ort_weights import pack_events, prepacked
from memshrink.estimate.weights import split_weights

N = 1024
W_BYTES = N * N * 4
MiB = 1 << 20


def _vi(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, 1, [2, N])


def _branch(tag: str, matmul: bool) -> onnx.GraphProto:
    node = helper.make_node("MatMul", ["x", "W"], [f"{tag}y"]) if matmul else (
        helper.make_node("Neg", ["x"], [f"{tag}y"])
    )  # fmt: skip
    return helper.make_graph([node], tag, [], [_vi(f"{tag}y")])


def _model(kind: str) -> onnx.ModelProto:
    """``main``: y = x @ W; ``mainif``: an If whose then-branch computes x @ W (else -x), plus
    x @ W in the main graph; ``if2``: an If computing x @ W in both branches."""
    w = numpy_helper.from_array(np.ones((N, N), np.float32), "W")
    zero = numpy_helper.from_array(np.array(0, np.float32), "zero")
    pre = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
    ]
    if kind == "main":
        nodes, inits = [helper.make_node("MatMul", ["x", "W"], ["y"])], [w]
    elif kind == "mainif":
        nodes = pre + [
            helper.make_node(
                "If", ["c"], ["y0"], then_branch=_branch("t", True), else_branch=_branch("e", False)
            ),
            helper.make_node("MatMul", ["x", "W"], ["m"]),
            helper.make_node("Add", ["y0", "m"], ["y"]),
        ]
        inits = [zero, w]
    else:
        nodes = pre + [
            helper.make_node(
                "If", ["c"], ["y"], then_branch=_branch("t", True), else_branch=_branch("e", True)
            )
        ]
        inits = [zero, w]
    g = helper.make_graph(nodes, "g", [_vi("x")], [_vi("y")], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def _save(tmp_path, kind: str, external: bool) -> str:
    return save_model_as(_model(kind), tmp_path, kind, external)


def _stages(path: str) -> dict:
    return {s.name: s for s in estimate(path, backend="ort").prediction.stages}


def test_pack_events_one_first_per_scope(tmp_path):
    flat, _ = flatten_bodies(build_view(_save(tmp_path, "mainif", True)).graph, embedded=False)
    w = split_weights(flat)
    events = pack_events(flat, w)
    # the main graph's MatMul (node 3) first, then the then-branch's (appended after the 5
    # main nodes): each the first of its session state, the branch's the last of all
    assert [(n, first, last, bool(scope)) for _, n, first, last, scope in events] == [
        ("W", True, False, False),
        ("W", True, True, True),
    ]
    kept, _ = prepacked(flat, w)
    assert kept == 2 * W_BYTES  # [1024, 1024]: N already a multiple of 16


@pytest.mark.parametrize("external", [True, False])
def test_main_and_branch_keep_a_packed_copy_each(tmp_path, external):
    main = _stages(_save(tmp_path, "main", external))
    both = _stages(_save(tmp_path, "mainif", external))
    for name in ("session_creation", "run_1", "steady_state"):
        extra = both[name].weights_anon - main[name].weights_anon
        assert extra == pytest.approx(W_BYTES, abs=0.1 * MiB)
    # measured run 1: 18.3 external, 22.2 embedded (MiB over the empty process)
    meas = (18.3 if external else 22.2) * MiB
    assert both["run_1"].peak == pytest.approx(meas, rel=0.05)


def test_both_branches_keep_a_packed_copy_each_embedded(tmp_path):
    main = _stages(_save(tmp_path, "main", False))
    both = _stages(_save(tmp_path, "if2", False))
    extra = both["run_1"].weights_anon - main["run_1"].weights_anon
    assert extra == pytest.approx(W_BYTES, abs=0.1 * MiB)
    assert both["run_1"].peak == pytest.approx(22.1 * MiB, rel=0.05)  # measured


def test_two_main_graph_readers_keep_one_copy(tmp_path):
    """A second kernel in the same session state packs a duplicate that is freed: kept once."""
    g = helper.make_graph(
        [
            helper.make_node("Neg", ["x"], ["nx"]),
            helper.make_node("MatMul", ["x", "W"], ["a"]),
            helper.make_node("MatMul", ["nx", "W"], ["b"]),
            helper.make_node("Add", ["a", "b"], ["y"]),
        ],
        "g", [_vi("x")], [_vi("y")],
        [numpy_helper.from_array(np.ones((N, N), np.float32), "W")],
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    path = str(tmp_path / "main2.onnx")
    onnx.save(m, path)
    flat = build_view(path).graph
    w = split_weights(flat)
    events = pack_events(flat, w)
    assert [(first, last) for _, _, first, last, _ in events] == [(True, False), (False, True)]
    kept, transient = prepacked(flat, w)
    assert kept == W_BYTES
    assert transient == 2 * W_BYTES  # the source and the duplicate at the second packing
