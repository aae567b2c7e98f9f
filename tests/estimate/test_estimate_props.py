"""Property test on random DAGs: offset plans never overlap live tensors and never beat the bound."""

from __future__ import annotations

import onnx
import onnx.helper as oh
from hypothesis import given, settings
from hypothesis import strategies as st

from memshrink.estimate import ort as ortsim
from memshrink.estimate.graph import build_view
from memshrink.estimate.lifetimes import lower_bound, tensor_buffers
from memshrink.estimate.planners import best_fit, check_no_overlap, greedy_by_size, naive
from memshrink.estimate.schedule import SCHEDULES, schedule

F = onnx.TensorProto.FLOAT


@st.composite
def random_dag(draw):  # type: ignore[no-untyped-def]
    n = draw(st.integers(2, 14))
    widths = [draw(st.sampled_from([8, 16, 64, 256])) for _ in range(n)]
    nodes, names = [], ["x"]
    shapes = {"x": 64}
    for i in range(n):
        w = widths[i]
        a = draw(st.sampled_from(names))
        tmp = f"p{i}"
        # Project any earlier tensor to width w (Slice keeps it one op), then combine.
        nodes.append(oh.make_node("Tile", [a, f"rep{i}"], [tmp]))
        shapes[tmp] = shapes[a] * 4
        op = draw(st.sampled_from(["Relu", "Sigmoid", "Neg", "Add"]))
        out = f"t{i}"
        if op == "Add":
            nodes.append(oh.make_node("Add", [tmp, tmp], [out]))
        else:
            nodes.append(oh.make_node(op, [tmp], [out]))
        shapes[out] = shapes[tmp]
        names.append(out)
        del w
    inits = [oh.make_tensor(f"rep{i}", onnx.TensorProto.INT64, [2], [1, 4]) for i in range(n)]
    # Every tensor stays bounded: Tile doubles width; cap by reducing outputs.
    outs = draw(st.lists(st.sampled_from(names[1:]), min_size=1, max_size=3, unique=True))
    g = oh.make_graph(
        nodes,
        "r",
        [oh.make_tensor_value_info("x", F, [1, 64])],
        [oh.make_tensor_value_info(o, F, None) for o in outs],
        initializer=inits,
    )
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


@settings(max_examples=40, deadline=None)
@given(random_dag(), st.sampled_from(SCHEDULES))
def test_offset_plans_are_valid_and_above_lower_bound(m, sched):
    v = build_view(m)
    order = schedule(v.graph, sched)
    assert sorted(order) == list(range(len(v.graph.nodes)))
    pos = {n: i for i, n in enumerate(order)}
    for node in v.graph.nodes:  # topological
        for name in node.inputs:
            t = v.graph.tensors.get(name)
            if t is not None and t.producer is not None:
                assert pos[t.producer] < pos[node.index]
    bufs = tensor_buffers(v.graph, order)
    lb = lower_bound(bufs, len(order))
    for total, placements in (greedy_by_size(bufs), best_fit(bufs, align=1)):
        assert check_no_overlap(placements)
        assert total >= lb
    assert naive(bufs) >= lb
    # The runtime plan's buffers never overlap in its own best-fit layout either.
    plan = ortsim.plan(v.graph, order)
    total, placements = best_fit([b for b in plan.buffers if b.size], align=64)
    assert check_no_overlap(placements)
    sim = ortsim.simulate(plan, len(order))
    assert sim.steady_state >= sim.run_1 >= 0
