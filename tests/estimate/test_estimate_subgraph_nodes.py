"""If / Loop / Scan bodies cost per node like the main graph: ORT makes a session state with
kernels for each body, OpenVINO's frontend reads each into its own ov.Model.

Found on an Optimum-style merged decoder (one If over two ~600-node GPT-2 graphs, session
12): counting only the main graph's one If node, ORT CPU's session was predicted 11.2 MiB
against 16.1 measured and OpenVINO's read_model 9.5 against 16.7 (docs/estimate.md,
"Session 12: subgraph nodes").
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.backends import CALIBRATION
from memshrink.estimate.graph import build_view, node_count
from memshrink.estimate.ov_read import read_counts


def _chain(tag: str, op: str, k: int) -> onnx.GraphProto:
    nodes, prev = [], "x"
    for i in range(k):
        nodes.append(helper.make_node(op, [prev], [f"{tag}{i}"]))
        prev = f"{tag}{i}"
    return helper.make_graph(nodes, tag, [], [helper.make_tensor_value_info(prev, 1, [2, 8])])


def if_model(k: int) -> onnx.ModelProto:
    """An If whose branches are chains of ``k`` Relu / Neg nodes reading the outer ``x``."""
    g = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
            helper.make_node("Greater", ["s", "zero"], ["c"]),
            helper.make_node(
                "If", ["c"], ["y"], then_branch=_chain("t", "Relu", k),
                else_branch=_chain("e", "Neg", k),
            ),
        ],
        "g",
        [helper.make_tensor_value_info("x", 1, [2, 8])],
        [helper.make_tensor_value_info("y", 1, [2, 8])],
        [numpy_helper.from_array(np.array(0, np.float32), "zero")],
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def test_node_count_walks_branch_bodies(tmp_path):
    path = str(tmp_path / "if40.onnx")
    onnx.save(if_model(40), path)
    g = build_view(path).graph
    assert len(g.nodes) == 3
    assert node_count(g) == 3 + 2 * 40


def test_ort_session_overhead_counts_body_nodes(tmp_path):
    """78 more body nodes: 78 x ``ort_session_anon_per_node`` more at session creation."""
    peaks = []
    for k in (1, 40):
        path = str(tmp_path / f"if{k}.onnx")
        onnx.save(if_model(k), path)
        st = {s.name: s for s in estimate(path, backend="ort").prediction.stages}
        peaks.append(st["session_creation"].overhead)
    assert peaks[1] - peaks[0] == pytest.approx(
        78 * CALIBRATION["ort_session_anon_per_node"], abs=64 * 1024
    )  # abs: the transient term also grows 100 B a node (x 78 < 8 KiB)


def test_read_counts_follow_the_frontends_body_ops(tmp_path):
    """ov ops (not Constants) of the model and of both bodies, as OpenVINO's frontend makes
    them: from 1 to 40 nodes a branch, 78 more, exactly (``get_then_body`` /
    ``get_else_body``); a body's Parameter and Result count too."""
    ov = pytest.importorskip("openvino")

    def ov_ops(model) -> collections.Counter:
        tot: collections.Counter = collections.Counter()
        for op in model.get_ops():
            tot[op.get_type_name()] += 1
            if op.get_type_name() == "If":
                tot.update(ov_ops(op.get_then_body()))
                tot.update(ov_ops(op.get_else_body()))
        return tot

    ours, theirs = [], []
    for k in (1, 40):
        path = str(tmp_path / f"if{k}.onnx")
        onnx.save(if_model(k), path)
        c = ov_ops(ov.Core().read_model(path))
        theirs.append(sum(v for t, v in c.items() if t != "Constant"))
        ours.append(read_counts(build_view(path).graph)[0])
    assert theirs[1] - theirs[0] == 78
    assert ours[1] - ours[0] == 78
