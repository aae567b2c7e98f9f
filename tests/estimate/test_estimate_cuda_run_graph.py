"""CUDA EP: the activations of the graph ORT's CUDA session runs, after its level 1 and 2
transformers (``cuda.run_graph``, ``ort_optimized.optimize(ep="cuda")``; session 15)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.ort_optimized import optimize

MiB = 1 << 20
F = TensorProto.FLOAT


def _scalar(name: str, v: float) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(v, np.float32), name)


def _gelu_model() -> onnx.ModelProto:
    """x [1024, 4096] f32 (16 MiB) -> the Erf form of GELU -> ReduceSum."""
    g = helper.make_graph(
        [helper.make_node("Div", ["x", "s2"], ["d"]),
         helper.make_node("Erf", ["d"], ["e"]),
         helper.make_node("Add", ["e", "one"], ["a"]),
         helper.make_node("Mul", ["x", "a"], ["m"]),
         helper.make_node("Mul", ["m", "half"], ["gelu"]),
         helper.make_node("ReduceSum", ["gelu"], ["y"], keepdims=0)],
        "gelu",
        [helper.make_tensor_value_info("x", F, [1024, 4096])],
        [helper.make_tensor_value_info("y", F, [])],
        [_scalar("s2", 2**0.5), _scalar("one", 1.0), _scalar("half", 0.5)],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_cuda_plans_the_fused_gelu():
    # ORT's GeluFusion runs for the CUDA EP too: one Gelu writes one 16 MiB output; the graph as
    # written planned Div, Erf, Add and the first Mul apart (two 16 MiB buffers alive at once)
    est = estimate(_gelu_model(), backend="cuda")
    plan = est.prediction.details["plan"]
    big = sorted(b.size for b in plan.buffers if b.size >= MiB)
    assert big == [16 * MiB]
    ops = {n.op_type for n in optimize(build_view(_gelu_model()).graph, ep="cuda").graph.nodes}
    assert "Gelu" in ops and "Erf" not in ops


def _gemm_conv_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((8, 8), np.float32), "w")
    k = numpy_helper.from_array(np.ones((4, 4, 3, 3), np.float32), "k")
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["g"]),
         helper.make_node("Relu", ["g"], ["y1"]),
         helper.make_node("Conv", ["c", "k"], ["h"], pads=[1, 1, 1, 1]),
         helper.make_node("Sigmoid", ["h"], ["h1"]),
         helper.make_node("Conv", ["h1", "k"], ["h2"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["h2"], ["y2"])],
        "gc",
        [helper.make_tensor_value_info("x", F, [8, 8]),
         helper.make_tensor_value_info("c", F, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y1", F, [8, 8]),
         helper.make_tensor_value_info("y2", F, [1, 4, 8, 8])],
        [w, k],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_cuda_fuses_only_what_its_kernels_run():
    # FusedGemm has only a CPU kernel; the CUDA FusedConv takes Relu only
    # (gemm_activation_fusion.cc / conv_activation_fusion.cc); ORT CPU fuses all three
    g = build_view(_gemm_conv_model()).graph
    cpu = sorted(n.op_type for n in optimize(g, level="extended").graph.nodes)
    gpu = sorted(n.op_type for n in optimize(g, ep="cuda").graph.nodes)
    assert cpu == ["FusedConv", "FusedConv", "FusedGemm"]
    assert gpu == ["Conv", "FusedConv", "Gemm", "Relu", "Sigmoid"]
