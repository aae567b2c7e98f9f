"""ORT's level-1 ``ReshapeFusion`` as ``ort_optimized.reshape_fusion`` emulates it, checked
against ORT 1.32's own optimized-model dump of the same graph."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate.graph import build_view
from memshrink.estimate.ort_optimized import optimize


def _model() -> onnx.ModelProto:
    """``rA = Reshape(y, [y.shape[0], z.shape[1], 4, 16])`` (z's dim 1 is y's: fusable), and
    two Reshapes whose targets are equal copies (CSE merges them: two readers, not fused)."""

    def c(name: str, v: object) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(v, dtype=np.int64), name)

    mk = helper.make_node
    nodes = [
        mk("Relu", ["x"], ["y"]),
        mk("Sigmoid", ["x"], ["z"]),
        mk("Shape", ["y"], ["sA"]),
        mk("Gather", ["sA", "i0"], ["gA0"]),
        mk("Unsqueeze", ["gA0", "ax"], ["uA0"]),
        mk("Shape", ["z"], ["sZ"]),
        mk("Gather", ["sZ", "i1"], ["gZ1"]),
        mk("Unsqueeze", ["gZ1", "ax"], ["uZ1"]),
        mk("Concat", ["uA0", "uZ1", "c4", "c16"], ["cA"], axis=0),
        mk("Reshape", ["y", "cA"], ["rA"]),
    ]
    inits = [c("i0", 0), c("i1", 1), c("ax", [0]), c("c4", [4]), c("c16", [16])]
    for k, op in ((1, "Tanh"), (2, "Exp")):
        nodes += [
            mk(op, ["x"], [f"w{k}"]),
            mk("Shape", ["z"], [f"s{k}"]),
            mk("Gather", [f"s{k}", f"j0_{k}"], [f"g0_{k}"]),
            mk("Unsqueeze", [f"g0_{k}", "ax"], [f"u0_{k}"]),
            mk("Gather", [f"s{k}", f"j1_{k}"], [f"g1_{k}"]),
            mk("Unsqueeze", [f"g1_{k}", "ax"], [f"u1_{k}"]),
            mk("Concat", [f"u0_{k}", f"u1_{k}", f"e_{k}", f"f_{k}"], [f"c{k}"], axis=0),
            mk("Reshape", [f"w{k}", f"c{k}"], [f"r{k}"]),
        ]
        inits += [c(f"j0_{k}", 0), c(f"j1_{k}", 1), c(f"e_{k}", [8]), c(f"f_{k}", [8])]
    g = helper.make_graph(
        nodes,
        "rf",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", 64])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("rA", "r1", "r2")],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


def test_reshape_fusion_as_ort_dumps_it(tmp_path):
    m = _model()
    src, dump = str(tmp_path / "rf.onnx"), str(tmp_path / "rf_opt.onnx")
    onnx.save(m, src)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = dump
    ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    ran = onnx.load(dump)
    targets = {n.input[0]: n.input[1] for n in ran.graph.node if n.op_type == "Reshape"}
    made = {o for n in ran.graph.node for o in n.output}
    # ORT: rA's target became a constant, r1 / r2 share one computed Concat
    assert targets["y"] not in made and targets["w1"] == targets["w2"] in made

    opt = optimize(build_view(m, dims={"b": 2, "s": 8}).graph, level="extended")
    assert opt.counts.get("ReshapeFusion") == 1
    g = opt.graph
    produced = {o for n in g.nodes for o in n.outputs}
    by_data = {n.inputs[0]: n.inputs[1] for n in g.nodes if n.op_type == "Reshape"}
    assert by_data["y"] not in produced  # fused: a weight now
    assert by_data["w1"] in produced and by_data["w2"] in produced  # kept (not merged here)
    # the fused target's Shape -> Gather -> Unsqueeze chains are gone with it
    assert not {"sA", "gA0", "uA0", "sZ", "gZ1", "uZ1", "cA"} & produced
