"""``cone_nodes`` visits only the producers of the cone's inputs, not every node before the end,
and ``core_nodes`` never enters a weighted node (both made ``chunk``'s search quadratic); their
answers must be the definitions' (the full reverse walk; the cone less what is upstream of its
weighted nodes)."""

from __future__ import annotations

import random

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from memshrink.transforms.chunking.cone import cone_nodes, node_positions
from memshrink.transforms.chunking.weightless import core_nodes, weighted


def _full_walk(end: ir.Value) -> list[ir.Node]:
    """The definition: every node before ``end``'s producer, in reverse file order, joins when
    all its readers are in the cone and no output is a graph output."""
    first = end.producer()
    assert first is not None and first.graph is not None
    graph = first.graph
    inside = {first}
    seen = False
    for n in reversed(list(graph)):
        if n is first:
            seen = True
            continue
        if not seen or n.op_type == "Constant":
            continue
        uses = [u for v in n.outputs for u in v.uses()]
        if (
            uses
            and all(u.node in inside for u in uses)
            and not any(v.is_graph_output() for v in n.outputs)
        ):
            inside.add(n)
    return [n for n in graph if n in inside]


def _random_dag(seed: int, n: int = 60, weights: bool = False) -> ir.Model:
    """Relu/Add DAG over [2, 3] values; with ``weights``, some MatMuls by a 3x3 initializer."""
    rng = random.Random(seed)
    values = ["x"]
    nodes = []
    for i in range(n):
        if weights and rng.random() < 0.25:
            nodes.append(helper.make_node("MatMul", [rng.choice(values[-6:]), "w"], [f"v{i}"]))
        elif rng.random() < 0.5 or len(values) < 2:
            nodes.append(helper.make_node("Relu", [rng.choice(values[-6:])], [f"v{i}"]))
        else:
            a, b = rng.sample(values, 2)
            nodes.append(helper.make_node("Add", [a, b], [f"v{i}"]))
        values.append(f"v{i}")
    outs = {values[-1], *rng.sample(values[1:], 3)}
    vi = [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2, 3]) for o in sorted(outs)]
    w = [numpy_helper.from_array(np.eye(3, dtype=np.float32), "w")] if weights else []
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])], vi, w
    )
    return ir.serde.deserialize_model(helper.make_model(g))


def test_the_heap_walk_equals_the_full_reverse_walk_on_random_dags() -> None:
    checked = 0
    for seed in range(25):
        model = _random_dag(seed)
        positions = node_positions(model.graph)
        for node in model.graph:
            end = node.outputs[0]
            want = _full_walk(end)
            assert cone_nodes(end) == want
            assert cone_nodes(end, positions) == want
            checked += len(want)
    assert checked > 1000  # the DAGs have real cones, not single nodes


def test_a_residual_block_cone_stops_at_the_shared_input() -> None:
    """inp -> x -> a -> b; y = Add(b, x); side = Relu(x). The cone of y is a, b and the Add:
    x is also read by ``side``, outside the cone, so its producer stays out."""
    nodes = [
        helper.make_node("Relu", ["inp"], ["x"]),
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Add", ["b", "x"], ["y"]),
        helper.make_node("Relu", ["x"], ["side"]),
    ]
    f = TensorProto.FLOAT
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("inp", f, [1])],
        [helper.make_tensor_value_info("y", f, [1]), helper.make_tensor_value_info("side", f, [1])],
    )  # fmt: skip
    model = ir.serde.deserialize_model(helper.make_model(g))
    y = next(n for n in model.graph if n.op_type == "Add").outputs[0]
    assert [n.outputs[0].name for n in cone_nodes(y)] == ["a", "b", "y"]


def _core_by_definition(end: ir.Value, graph: ir.Graph) -> list[ir.Node]:
    """The cone less its weighted nodes and every cone node upstream of one."""
    nodes = _full_walk(end)
    drop = {n for n in nodes if weighted(n, graph)}
    inside, stack = set(nodes), list(drop)
    while stack:
        n = stack.pop()
        for x in n.inputs:
            p = None if x is None else x.producer()
            if p is not None and p in inside and p not in drop:
                drop.add(p)
                stack.append(p)
    return [n for n in nodes if n not in drop]


def test_the_core_walk_equals_cone_less_upstream_of_weighted_nodes() -> None:
    checked = 0
    for seed in range(25):
        model = _random_dag(seed, weights=True)
        positions = node_positions(model.graph)
        for node in model.graph:
            end = node.outputs[0]
            want = _core_by_definition(end, model.graph)
            assert core_nodes(end, model.graph, positions) == want
            checked += len(want)
    assert checked > 300
