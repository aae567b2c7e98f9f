"""OpenVINO: Transpose / Reshape / Softmax / activation MatMul nodes cost compile anon of their
own (session 13, ``ov_per_plain_node``, opt-in ``memshrink.ov_plain_nodes``; docs/estimate.md,
"Session 13: plain runtime nodes").

Known answers: counts on hand-built graphs, and the charge's slope over query pieces.
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
from memshrink.estimate.openvino import (
    OV_CALIBRATION,
    PLAIN_NODES,
    mha_folded_transposes,
    mha_internal,
)
from memshrink.estimate.ov_plain import plain_nodes

MiB = 1 << 20
F = TensorProto.FLOAT


def _count(m: onnx.ModelProto, tmp_path: Path) -> int:
    g = build_view(_save(m, tmp_path / "m.onnx")).graph
    inner = mha_internal(g)
    return plain_nodes(g, inner, mha_folded_transposes(g, inner))


def _graph(nodes: list, inits: list, x: list[int]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, x)],
        [helper.make_tensor_value_info("y", F, None)],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def test_plain_nodes_of_activations_count_folded_and_mha_ones_do_not(tmp_path: Path) -> None:
    """x -> Transpose -> Reshape -> Softmax -> MatMul(a, a) counts 4; a Reshape of a weight
    (folded), the MatMul by that weight (an FC), the three nodes of a tokenized MHA block
    with its Kᵀ Transpose (one MHA Subgraph), a Transpose of the last two dims read by a
    MatMul (folded into it) and a Reshape of a Reshape (merged) count none."""
    inits = [
        numpy_helper.from_array(np.array([8, 16], np.int64), "s2"),
        numpy_helper.from_array(np.zeros((16, 8), np.float32), "w"),
    ]
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),  # 1
        helper.make_node("Reshape", ["t", "s2"], ["r0"]),  # 2
        helper.make_node("Reshape", ["r0", "s2"], ["r"]),  # a view of a view: no
        helper.make_node("Softmax", ["r"], ["p"], axis=-1),  # 3
        helper.make_node("Reshape", ["w", "s2"], ["wr"]),  # folded: no
        helper.make_node("MatMul", ["p", "w"], ["f"]),  # FC: no
        helper.make_node("Transpose", ["f"], ["ft"], perm=[1, 0]),  # into the MatMul: no
        helper.make_node("MatMul", ["f", "ft"], ["a"]),  # 4: [8, 8] x [8, 8]
        # a tokenized MHA block on [1, 8, 8] views: none of its nodes count
        helper.make_node("Unsqueeze", ["a", "ax0"], ["a3"]),  # 5
        helper.make_node("Transpose", ["a3"], ["kt"], perm=[0, 2, 1]),  # Kᵀ folded: no
        helper.make_node("MatMul", ["a3", "kt"], ["sc"]),
        helper.make_node("Softmax", ["sc"], ["pm"], axis=-1),
        helper.make_node("MatMul", ["pm", "a3"], ["y"]),
    ]
    inits.append(numpy_helper.from_array(np.array([0], np.int64), "ax0"))
    assert _count(_graph(nodes, inits, [16, 8]), tmp_path) == 5


def _pieces(k: int) -> onnx.ModelProto:
    """An attention core on [1, 64, 4 * 16] whose Q is cut into k pieces before its Reshape /
    Transpose (as ``chunk`` writes it), each piece guarded (``Equal -> Where``: no MHA
    tokenization), joined after the output's Transpose / Reshape."""
    b, s, h, d = 1, 64, 4, 16
    r = s // k
    inits = [
        numpy_helper.from_array(np.array([b, s, h, d], np.int64), "shp"),
        numpy_helper.from_array(np.array([b, r, h, d], np.int64), "shpp"),
        numpy_helper.from_array(np.array([b, r, h * d], np.int64), "shpo"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
    ]
    nodes = [
        helper.make_node("Reshape", ["x", "shp"], ["kr"]),
        helper.make_node("Transpose", ["kr"], ["k"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("Split", ["x"], [f"xq{i}" for i in range(k)], axis=1, num_outputs=k),
    ]
    for i in range(k):
        nodes += [
            helper.make_node("Reshape", [f"xq{i}", "shpp"], [f"qr{i}"]),
            helper.make_node("Transpose", [f"qr{i}"], [f"q{i}"], perm=[0, 2, 1, 3]),
            helper.make_node("MatMul", [f"q{i}", "kt"], [f"s{i}"]),
            helper.make_node("Softmax", [f"s{i}"], [f"p{i}"], axis=-1),
            helper.make_node("Equal", [f"p{i}", f"p{i}"], [f"e{i}"]),
            helper.make_node("Where", [f"e{i}", f"p{i}", "zero"], [f"g{i}"]),
            helper.make_node("MatMul", [f"g{i}", "k"], [f"o{i}"]),
            helper.make_node("Transpose", [f"o{i}"], [f"ot{i}"], perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", [f"ot{i}", "shpo"], [f"or{i}"]),
        ]
    nodes.append(helper.make_node("Concat", [f"or{i}" for i in range(k)], ["y"], axis=1))
    return _graph(nodes, inits, [b, s, h * d])


def test_each_query_piece_adds_its_seven_plain_nodes(tmp_path: Path) -> None:
    """Per piece: two Reshapes, two Transposes, two MatMuls, a Softmax (7); the shared K
    Reshape / Transpose count once (2), its Kᵀ Transpose none (folded into the MatMuls)."""
    assert _count(_pieces(1), tmp_path) == 2 + 7
    assert _count(_pieces(8), tmp_path) == 2 + 7 * 8


def test_the_charge_grows_by_the_plain_nodes_of_each_piece(tmp_path: Path) -> None:
    """With ``memshrink.ov_plain_nodes=1``, compile anon grows by ``ov_per_plain_node``
    (0.02 MiB) for each of the 7 x 7 more nodes of 8 pieces against 1, on top of the Subgraph
    each piece's guard adds; without it nothing is charged."""
    per = OV_CALIBRATION["ov_per_plain_node"]
    assert per == pytest.approx(0.02 * MiB, rel=0, abs=1)
    e, off = {}, {}
    for k in (1, 8):
        p = _save(_pieces(k), tmp_path / f"k{k}.onnx")
        e[k] = estimate(p, backend="openvino", session_options={PLAIN_NODES: "1"})
        off[k] = estimate(p, backend="openvino")
    d = {k: v.prediction.details for k, v in e.items()}
    assert d[8]["plain_nodes"] - d[1]["plain_nodes"] == 49
    sub = (d[8]["subgraphs"] - d[1]["subgraphs"]) * OV_CALIBRATION["ov_per_subgraph"]
    read = e[8].stage_peaks()["read_model"] - e[1].stage_peaks()["read_model"]
    grow = e[8].stage_peaks()["compile_model"] - e[1].stage_peaks()["compile_model"]
    lib = d[8]["lib_pages"] - d[1]["lib_pages"]
    assert grow - read - lib - sub == pytest.approx(49 * per, rel=0, abs=2048)
    # opt-in: by default the nodes are counted, not charged
    for k in (1, 8):
        on, base = e[k].stage_peaks(), off[k].stage_peaks()
        charged = d[k]["plain_nodes"] * per
        assert on["compile_model"] - base["compile_model"] == pytest.approx(charged, abs=1, rel=0)
