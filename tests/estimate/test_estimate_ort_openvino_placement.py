"""Which nodes the ORT OpenVINO EP leaves to ORT's CPU EP (``ort_openvino.UNSUPPORTED``): QOperator
quantized ops and Scan, checked on hand-built graphs, and against ORT's verbose node placements
where the EP's interpreter exists (the measured test skips cleanly without it)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from interpreters import NO_OVEP, ovep_python
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.ort_openvino import on_ort_cpu, subgraph_ids

REPO = Path(__file__).resolve().parents[2]


def _q_wrapped(op: str) -> onnx.ModelProto:
    """Relu -> QuantizeLinear -> ``op`` (uint8) -> DequantizeLinear -> Relu on [1, 16, 8, 8]."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(np.array(0.1, np.float32), "s"),
        numpy_helper.from_array(np.array(128, np.uint8), "z"),
    ]
    ms = op != "QLinearConv"
    if op == "QLinearConv":
        w = rng.integers(0, 255, (16, 16, 3, 3)).astype(np.uint8)
        inits.append(numpy_helper.from_array(w, "w"))
        core = helper.make_node(
            op, ["q", "s", "z", "w", "s", "z", "s", "z"], ["qo"], pads=[1, 1, 1, 1]
        )
    else:  # a binary com.microsoft op
        core = helper.make_node(
            op, ["q", "s", "z", "q", "s", "z", "s", "z"], ["qo"], domain="com.microsoft"
        )
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "s", "z"], ["q"]),
        core,
        helper.make_node("DequantizeLinear", ["qo", "s", "z"], ["d"]),
        helper.make_node("Relu", ["d"], ["y"]),
    ]
    shape = [1, 16, 8, 8]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        inits,
    )
    ops = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
    model = helper.make_model(graph, opset_imports=ops)
    model.ir_version = 8
    return model


@pytest.mark.parametrize("op", ["QLinearConv", "QLinearAdd"])
def test_qoperator_ops_run_on_ort_cpu_between_two_subgraphs(op: str) -> None:
    g = build_view(_q_wrapped(op)).graph
    assert [n.op_type for n in g.nodes if on_ort_cpu(n)] == [op]
    assert len(set(subgraph_ids(g).values())) == 2  # Relu+Q before it, DQ+Relu after it
    pred = estimate(_q_wrapped(op), backend="ort-openvino").prediction
    assert pred.details["ovep_subgraphs"] == 2


def test_the_real_ep_places_them_so(tmp_path: Path) -> None:
    """ORT 1.24.1's verbose placements (``docs/bench/ep_placement_scan.py``): the op alone on
    [CPUExecutionProvider] (QLinearConv with the Transposes of ORT's NHWC layout), 2 subgraphs."""
    py = ovep_python()
    if py is None:
        pytest.skip(NO_OVEP)
    sys.path.insert(0, str(REPO / "docs" / "bench"))
    import ep_placement_scan

    for op in ("QLinearConv", "QLinearAdd"):
        path = tmp_path / f"{op}.onnx"
        onnx.save(_q_wrapped(op), path)
        row = ep_placement_scan.scan(path, py, timeout=60)
        assert row["subgraphs"] == 2, row
        assert set(row["cpu"]) - {"Transpose"} == {op}, row  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("op", "domain"),
    [
        ("Scan", ""),
        ("StringNormalizer", ""),
        ("Tokenizer", "com.microsoft"),
        ("TfIdfVectorizer", ""),
    ],
)
def test_scan_and_text_ops_run_on_ort_cpu(op: str, domain: str) -> None:
    """Seen on [CPUExecutionProvider] in ORT's verbose placements (a Relu -> Scan -> Relu
    micro-graph; the sweep's TF-IDF pipeline, whose only OpenVINO subgraph is a Cast)."""
    from memshrink.estimate.graph import NodeInfo

    assert on_ort_cpu(NodeInfo(0, "n", op, domain, ["x"], ["y"]))
