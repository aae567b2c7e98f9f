"""``irgraphs.graphs``: the same graphs, in the same order, as onnx-ir's ``Model.graphs()``."""

from __future__ import annotations

import onnx
import onnx.helper as oh
import onnx_ir as ir

from memshrink.irgraphs import graphs, subgraphs

F = onnx.TensorProto.FLOAT


def _body(tag: str, inner: onnx.GraphProto | None = None) -> onnx.GraphProto:
    nodes = [oh.make_node("Identity", ["x"], [f"{tag}_y"])]
    if inner is not None:  # an If nested in this body, both branches the same inner graph
        nodes.append(
            oh.make_node("If", ["c"], [f"{tag}_z"], then_branch=inner, else_branch=_body(f"{tag}e"))
        )
    return oh.make_graph(nodes, tag, [], [oh.make_tensor_value_info(f"{tag}_y", F, [2])])


def _nested() -> ir.Model:
    """Main: If(then: body with a nested If, else: plain), then a Loop-free second If."""
    main = oh.make_graph(
        [
            oh.make_node("Relu", ["x"], ["r"]),
            oh.make_node(
                "If", ["c"], ["a"], then_branch=_body("t1", _body("t1i")), else_branch=_body("e1")
            ),
            oh.make_node("If", ["c"], ["b"], then_branch=_body("t2"), else_branch=_body("e2")),
        ],
        "main",
        [
            oh.make_tensor_value_info("x", F, [2]),
            oh.make_tensor_value_info("c", onnx.TensorProto.BOOL, []),
        ],
        [oh.make_tensor_value_info("r", F, [2])],
    )
    proto = oh.make_model(main, opset_imports=[oh.make_opsetid("", 17)])
    return ir.serde.deserialize_model(proto)


def test_graphs_are_onnx_irs_in_its_order() -> None:
    model = _nested()
    ours = [g.name for g in graphs(model)]
    assert ours == [g.name for g in model.graphs()]
    # depth first, node then attribute order (make_node sorts them: else_branch first)
    assert ours == ["main", "e1", "t1", "t1e", "t1i", "e2", "t2"]
    assert [id(g) for g in graphs(model)] == [id(g) for g in model.graphs()]
    assert subgraphs(model.graph) == list(model.graph.subgraphs())


def test_a_flat_model_has_its_main_graph_only() -> None:
    proto = oh.make_model(
        oh.make_graph(
            [oh.make_node("Relu", ["x"], ["y"])],
            "flat",
            [oh.make_tensor_value_info("x", F, [2])],
            [oh.make_tensor_value_info("y", F, [2])],
        )
    )
    model = ir.serde.deserialize_model(proto)
    assert [g.name for g in graphs(model)] == ["flat"]
