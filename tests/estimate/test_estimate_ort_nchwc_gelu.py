"""ORT 1.32's NCHWc transformer runs the contrib Erf ``Gelu`` on a blocked tensor as it is
(like ``QuickGelu``), so a following nearest ``Resize`` becomes an NCHWc ``Upsample``; checked
against ORT's own optimized-model dump (graphsurgeon-stale-valueinfo's tail)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate.graph import build_view
from memshrink.estimate.ort_optimized import NCHWC_DOMAIN, optimize
from memshrink.estimate.ort_weights import nchwc_block_size


def _model() -> onnx.ModelProto:
    w = np.ones((32, 3, 3, 3), np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Gelu", ["c"], ["g"], domain="com.microsoft"),
        helper.make_node(
            "Resize",
            ["g", "roi", "scales"],
            ["r"],
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),  # fmt: skip
        helper.make_node("ReduceMean", ["r"], ["y"], axes=[2, 3], keepdims=0),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 32, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(w, "W"),
            numpy_helper.from_array(np.array([], np.float32), "roi"),
            numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
        ],
    )
    g.value_info.extend(  # the contrib op's output shape, as exporters declare it
        [
            helper.make_tensor_value_info("g", TensorProto.FLOAT, [2, 32, 32, 24]),
            helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 32, 64, 48]),
        ]
    )
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 11), helper.make_opsetid("com.microsoft", 1)]
    )
    m.ir_version = 6
    return m


@pytest.mark.skipif(nchwc_block_size() <= 1, reason="no NCHWc on this CPU (not x86-64)")
def test_gelu_keeps_the_blocked_layout_as_ort_dumps_it(tmp_path):
    m = _model()
    src, dump = str(tmp_path / "m.onnx"), str(tmp_path / "m_opt.onnx")
    onnx.save(m, src)
    so = ort.SessionOptions()
    so.optimized_model_filepath = dump
    ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])

    def ops(nodes: list) -> list[tuple[str, str]]:
        return sorted((n.op_type, n.domain) for n in nodes)

    want = ops(onnx.load(dump).graph.node)
    assert ("Upsample", NCHWC_DOMAIN) in want  # ORT: Gelu and the Resize stay blocked
    got = ops(optimize(build_view(m).graph, level="all").graph.nodes)
    assert got == want
