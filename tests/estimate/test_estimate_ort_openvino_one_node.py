"""The ORT OpenVINO EP's one-node clusters and scalar ``Mod`` (``ort_openvino.subgraph_ids``,
docs/estimate.md EP rule 26): known answers on hand-built graphs, and ORT's verbose node
placements where the EP's interpreter exists (that test skips cleanly without it)."""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import pytest
from interpreters import NO_OVEP, ovep_python
from onnx import TensorProto, helper

from memshrink.estimate.graph import build_view
from memshrink.estimate.ort_openvino import on_ort_cpu, subgraph_ids

REPO = Path(__file__).resolve().parents[2]


def _model(nodes: list[onnx.NodeProto], x_type: int = TensorProto.FLOAT) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", x_type, [4, 8])],
        [helper.make_tensor_value_info("y", x_type, [4, 8])],
        [],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def lone_first() -> onnx.ModelProto:
    """Relu -> IsNaN -> Cast -> Relu -> Sigmoid: the Relu is a cluster of one that is not the
    last and shares no edge with the next one (IsNaN sits between): ORT's CPU EP runs it."""
    return _model(
        [
            helper.make_node("Relu", ["x"], ["a"]),
            helper.make_node("IsNaN", ["a"], ["b"]),
            helper.make_node("Cast", ["b"], ["c"], to=TensorProto.FLOAT),
            helper.make_node("Relu", ["c"], ["d"]),
            helper.make_node("Sigmoid", ["d"], ["y"]),
        ]
    )


def lone_last() -> onnx.ModelProto:
    """Relu -> Sigmoid -> IsNaN -> Cast: the Cast is a cluster of one, but the last: kept."""
    return _model(
        [
            helper.make_node("Relu", ["x"], ["a"]),
            helper.make_node("Sigmoid", ["a"], ["b"]),
            helper.make_node("IsNaN", ["b"], ["n"]),
            helper.make_node("Cast", ["n"], ["y"], to=TensorProto.FLOAT),
        ]
    )


def lone_joins_next() -> onnx.ModelProto:
    """Relu -> IsNaN -> Where(isnan, x, Relu) -> Relu -> Sigmoid: the first Relu is alone in its
    cluster, but the Where of the next cluster reads it: it joins that cluster (the source's
    rule; ORT 1.24.1 then refuses this graph, "the graph is not acyclic": the joined cluster
    both feeds and reads the IsNaN)."""
    return _model(
        [
            helper.make_node("Relu", ["x"], ["a"]),
            helper.make_node("IsNaN", ["a"], ["b"]),
            helper.make_node("Where", ["b", "x", "a"], ["c"]),
            helper.make_node("Relu", ["c"], ["d"]),
            helper.make_node("Sigmoid", ["d"], ["y"]),
        ]
    )


def _int_mod(shape: list[int]) -> onnx.ModelProto:
    """int64 Add -> Mod -> Add on ``shape``."""
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "one"], ["a"]),
            helper.make_node("Mod", ["a", "three"], ["m"]),
            helper.make_node("Add", ["m", "one"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.INT64, shape)],
        [helper.make_tensor_value_info("y", TensorProto.INT64, shape)],
        [
            helper.make_tensor("one", TensorProto.INT64, [], [1]),
            helper.make_tensor("three", TensorProto.INT64, [], [3]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def scalar_mod() -> onnx.ModelProto:
    """A Mod of a 0-d tensor (Swin-V2's window padding: ``Mod(Gather(Shape(x)), 8)``)."""
    return _int_mod([])


def tensor_mod() -> onnx.ModelProto:
    return _int_mod([4, 8])


def _placed(model: onnx.ModelProto) -> tuple[int, list[str]]:
    """(OpenVINO subgraphs, op types on ORT CPU) as ``subgraph_ids`` predicts them."""
    g = build_view(model).graph
    sub = subgraph_ids(g)
    cpu = sorted(n.op_type for i, n in enumerate(g.nodes) if i not in sub)
    return len(set(sub.values())), cpu


def test_a_lone_node_before_the_last_cluster_runs_on_ort_cpu() -> None:
    assert _placed(lone_first()) == (1, ["IsNaN", "Relu"])


def test_a_lone_last_cluster_stays_on_openvino() -> None:
    assert _placed(lone_last()) == (2, ["IsNaN"])


def test_a_lone_node_feeding_the_next_cluster_joins_it() -> None:
    g = build_view(lone_joins_next()).graph
    sub = subgraph_ids(g)
    assert _placed(lone_joins_next()) == (1, ["IsNaN"])
    assert sub[0] == sub[2]  # the first Relu computes with the Where's cluster


def test_a_scalar_mod_runs_on_ort_cpu_a_tensor_mod_does_not() -> None:
    g = build_view(scalar_mod()).graph
    assert [n.op_type for n in g.nodes if on_ort_cpu(n, g)] == ["Mod"]
    assert not any(on_ort_cpu(n) for n in g.nodes)  # the rank needs the graph
    # the Add before the Mod is then a lone cluster that does not touch the last one
    assert _placed(scalar_mod()) == (1, ["Add", "Mod"])
    assert _placed(tensor_mod()) == (1, [])


def test_the_real_ep_places_them_so(tmp_path: Path) -> None:
    """ORT 1.24.1's verbose placements (``docs/bench/ep_placement_scan.py``) of the same graphs."""
    py = ovep_python()
    if py is None:
        pytest.skip(NO_OVEP)
    sys.path.insert(0, str(REPO / "docs" / "bench"))
    import ep_placement_scan

    for build in (lone_first, lone_last, scalar_mod, tensor_mod):
        path = tmp_path / f"{build.__name__}.onnx"
        onnx.save(build(), path)
        row = ep_placement_scan.scan(path, py, timeout=60)
        subgraphs, cpu = _placed(build())
        assert row["subgraphs"] == subgraphs, (build.__name__, row)
        assert sorted(row["cpu"]) == cpu, (build.__name__, row)  # type: ignore[call-overload]


def _padded_slice(width: int | str) -> onnx.ModelProto:
    """y = x[:, :, : (W % 3) + 1] with W = Shape(x)[2], Swin-V2's shape arithmetic in small."""
    graph = helper.make_graph(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "two"], ["w"]),
            helper.make_node("Mod", ["w", "three"], ["m"]),
            helper.make_node("Add", ["m", "one"], ["a"]),
            helper.make_node("Unsqueeze", ["a", "zero"], ["end"]),
            helper.make_node("Slice", ["x", "zero", "end", "two1"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            helper.make_tensor("two", TensorProto.INT64, [], [2]),
            helper.make_tensor("two1", TensorProto.INT64, [1], [2]),
            helper.make_tensor("three", TensorProto.INT64, [], [3]),
            helper.make_tensor("one", TensorProto.INT64, [], [1]),
            helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_folded_scalar_mod_cuts_nothing() -> None:
    """Static dims: the Mod of ``Shape(x)[2]`` is folded before partitioning (SAM's window
    padding at 1024^2: one subgraph, as measured); a symbolic width keeps it, on ORT CPU."""
    g = build_view(_padded_slice(16)).graph
    assert not any(on_ort_cpu(n, g) for n in g.nodes)
    g = build_view(_padded_slice("w"), dims={"w": 16}).graph
    assert [n.op_type for n in g.nodes if on_ort_cpu(n, g)] == ["Mod"]
