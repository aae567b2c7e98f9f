"""Ground truth from ONNX Runtime's own profiler: its real execution order and tensor sizes."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from memshrink.estimate import estimate

HEAD = '<ir_version: 8, opset_import: ["" : 17]>\n'


def _branchy() -> onnx.ModelProto:
    # Parallel branches of different sizes written "all big ops first", and a join.
    text = (
        HEAD
        + """g (float[2,4096] x) => (float[1,1] y, float[2,4096] z) {
        a0 = Sigmoid(x)
        a1 = Tanh(x)
        a2 = Relu(x)
        r0 = ReduceSum(a0)
        r1 = ReduceMax(a1)
        r2 = ReduceMin(a2)
        s = Add(r0, r1)
        y = Add(s, r2)
        c = Concat<axis = 1>(a0, a1)
        z = Slice(c, starts, ends, axes)
    }"""
    )
    m = onnx.parser.parse_model(text)
    for name, val in (("starts", 0), ("ends", 4096), ("axes", 1)):
        m.graph.initializer.append(
            onnx.helper.make_tensor(name, onnx.TensorProto.INT64, [1], [val])
        )
    for i, n in enumerate(m.graph.node):
        n.name = f"n{i}_{n.op_type}"
    return m


def _profile(path: str, order: str, tmp_path) -> list[dict]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / f"prof_{order}")
    if order == "priority":
        so.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).random((2, 4096), dtype=np.float32)
    sess.run(None, {"x": x})
    prof = sess.end_profiling()
    with open(prof) as f:
        events = json.load(f)
    return [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]


@pytest.mark.parametrize("order,sched", [("default", "ort_default"), ("priority", "ort_priority")])
def test_order_and_sizes_match_ort_profiler(tmp_path, order, sched):
    m = _branchy()
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    nodes = _profile(path, order, tmp_path)
    real = [e["name"].removesuffix("_kernel_time") for e in nodes]
    est = estimate(path, schedule=sched)
    g = est.view.graph
    predicted = [g.nodes[i].name for i in est.prediction.order]
    assert predicted == real
    for e in nodes:
        node = next(n for n in g.nodes if n.name == e["name"].removesuffix("_kernel_time"))
        ours = sum(g.tensors[o].nbytes or 0 for o in node.outputs)
        assert int(e["args"]["output_size"]) == ours  # exact bytes, atol=0
