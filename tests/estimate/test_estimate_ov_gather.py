"""OpenVINO: a Gather that reads an activation stays a runtime node with its own compile anon
(session 10, ``ov_per_gather``; docs/estimate.md, "Session 10: Gather nodes").

Known answers: counts on hand-built graphs, and the measured slope of 4 vs 68 scalar-index
Gathers of one dynamic-batch input (the verifier's child, bf16).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from estimate.test_estimate_openvino import _save
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.openvino import OV_CALIBRATION
from memshrink.estimate.ov_kinds import activation_gathers

MiB = 1 << 20


def _gathers(k: int) -> onnx.ModelProto:
    """k scalar-index Gathers of x [B, 64, 16] along axis 1, joined by a Concat (the shape of
    an unrolled scan reading one step per token)."""
    nodes, inits = [], []
    for i in range(k):
        inits.append(numpy_helper.from_array(np.array(i, np.int64), f"i{i}"))
        nodes.append(helper.make_node("Gather", ["x", f"i{i}"], [f"g{i}"], axis=1))
    nodes.append(helper.make_node("Concat", [f"g{i}" for i in range(k)], ["y"], axis=1))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 64, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def test_only_gathers_of_activations_count(tmp_path: Path) -> None:
    """A Gather of the input counts; one of a Shape (folded or a shape-subgraph node) and an
    embedding lookup of a weight by a Constant index (folded) do not."""
    idx = numpy_helper.from_array(np.array(0, np.int64), "i")
    emb = numpy_helper.from_array(np.zeros((8, 4), np.float32), "e")
    nodes = [
        helper.make_node("Gather", ["x", "i"], ["a"], axis=0),  # activation: counts
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i"], ["d"], axis=0),  # shape read: no
        helper.make_node("Gather", ["e", "i"], ["r"], axis=0),  # weight by a constant: no
        helper.make_node("Add", ["a", "r"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("d", TensorProto.INT64, None),
        ],
        [idx, emb],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    g = build_view(_save(m, tmp_path / "m.onnx")).graph
    assert activation_gathers(g) == 1
    g2 = build_view(_save(_gathers(5), tmp_path / "g5.onnx"), dims={"B": 3}).graph
    assert activation_gathers(g2) == 5


def test_a_body_gather_of_an_outer_activation_counts(tmp_path: Path) -> None:
    """A Loop body's Gather of an outer activation (its producer indexes the outer graph's
    nodes, not the body's: a detector's RoI loop crashed the first version) counts once."""
    body = helper.make_graph(
        [
            helper.make_node("Gather", ["r", "i"], ["g"], axis=0),
            helper.make_node("Add", ["s_in", "g"], ["s_out"]),
            helper.make_node("Identity", ["c_in"], ["c_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("s_in", TensorProto.FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("s_out", TensorProto.FLOAT, None),
        ],
    )
    n = numpy_helper.from_array(np.array(3, np.int64), "n")
    nodes = [  # the Relu is outer node 3: past the body's three nodes
        helper.make_node("Identity", ["x"], ["x1"]),
        helper.make_node("Identity", ["x1"], ["x2"]),
        helper.make_node("Identity", ["x2"], ["x3"]),
        helper.make_node("Relu", ["x3"], ["r"]),
        helper.make_node("Loop", ["n", "", "x0"], ["y"], body=body),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
            helper.make_tensor_value_info("x0", TensorProto.FLOAT, [4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [n],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    g = build_view(_save(m, tmp_path / "loop.onnx")).graph
    assert activation_gathers(g) == 1


def test_gather_chain_compile_slope(tmp_path: Path) -> None:
    """Measured (verifier's child, bf16, B = 3): compile peak 31.37 MiB with 4 Gathers, 33.88
    with 68 (+2.51); infer 1 the same +2.51. Predicted: 64 x ``ov_per_gather`` plus the
    ov.Model's share of the 128 more nodes (read rule), within 0.3 MiB of the measurement."""
    stages = {}
    for k in (4, 68):
        est = estimate(_save(_gathers(k), tmp_path / f"g{k}.onnx"), backend="openvino",
                       dims={"B": 3})  # fmt: skip
        stages[k] = {s.name: s.peak for s in est.prediction.stages}
    for st in ("compile_model", "run_1"):
        slope = (stages[68][st] - stages[4][st]) / MiB
        assert slope == pytest.approx(2.51, abs=0.3, rel=0)
        assert slope > 64 * OV_CALIBRATION["ov_per_gather"] / MiB
