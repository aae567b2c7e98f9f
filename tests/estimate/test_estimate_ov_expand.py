"""OpenVINO: an Expand read only by element-wise ops takes no buffer (``ov_expand``;
docs/estimate.md, "Session 15: If nodes folded at compile", Broadcasts at bf16).

Known answers: which Expands are absorbed, and the run's activations without the expanded
tensor's bytes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from estimate.test_estimate_openvino import _save
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.ov_expand import absorbed

MiB = 1 << 20
F = TensorProto.FLOAT
N = 4096  # rows: the expanded [N, 256] tensor is 4 MiB in f32, 2 MiB at bf16


def _model(reader: str | None) -> onnx.ModelProto:
    """MatMul -> ReduceMax -> Expand to [N, 256] -> Add (or ``reader``) -> MatMul on
    x [N, 256], N symbolic; ``None``: the same without the Expand (the Add broadcasts)."""
    w = numpy_helper.from_array(np.full((256, 256), 0.01, np.float32), "w")
    shp = numpy_helper.from_array(np.array([1, 256], np.int64), "shp")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["a"]),
        helper.make_node("ReduceMax", ["a"], ["r"], axes=[1], keepdims=1),
    ]
    if reader is None:
        nodes.append(helper.make_node("Add", ["a", "r"], ["s"]))
    else:
        nodes.append(helper.make_node("Expand", ["r", "shp"], ["e"]))
        ins = ["a", "e"] if reader == "Add" else ["e"]
        nodes.append(
            helper.make_node(reader, ins, ["s"], **({"axis": 1} if reader == "Softmax" else {}))
        )
    nodes.append(helper.make_node("MatMul", ["s", "w"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, ["N", 256])],
        [helper.make_tensor_value_info("y", F, None)],
        [w, shp],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_only_an_expand_read_by_eltwise_ops_is_absorbed(tmp_path: Path) -> None:
    g = build_view(_save(_model("Add"), tmp_path / "a.onnx"), dims={"N": N}).graph
    assert absorbed(g) == {"e": "r"}
    g = build_view(_save(_model("Softmax"), tmp_path / "b.onnx"), dims={"N": N}).graph
    assert absorbed(g) == {}


def test_absorbed_expand_costs_what_the_broadcasting_add_costs(tmp_path: Path) -> None:
    """Measured: infer 3 329.6 MiB with the Expand, 328.6 without (N = 65,536): the run's
    activations with the Expand equal those without it (atol 64 KiB: the [N, 1] input)."""
    act = {}
    for key, reader in (("expand", "Add"), ("plain", None)):
        path = _save(_model(reader), tmp_path / f"{key}.onnx")
        e = estimate(path, backend="openvino", shapes={"x": (N, 256)})
        act[key] = next(s for s in e.prediction.stages if s.name == "run_1").activations
    assert abs(act["expand"] - act["plain"]) <= 64 * 1024, act
