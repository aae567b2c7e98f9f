"""OpenVINO under a bf16 / f16 inference precision: a Gather-family node whose data is a weight
keeps its output in f32 (the plugin leaves an input from a Constant in f32, and Gather / GatherND
/ GatherElements write their data's precision), and a Reorder makes a half-size copy for the
low-precision reader (docs/estimate.md, "Session 13: weight gathers at bf16").

Known answers: buffer sizes on hand-built graphs, and the measured infer-1 growth of a GatherND
of [4, 192, 64] expert weights by [T, 2, 1] into a batched MatMul (Mixtral's ``batched_mm``
experts; the verifier's child on this bf16 host: +38 MiB at T = 256, +74 at T = 512, where
every edge at half predicted +13 / +26).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate.graph import build_view
from memshrink.estimate.openvino import ov_buffers, weight_gathers
from memshrink.estimate.schedule import schedule

MiB = 1 << 20


def _gathernd_bmm(tokens: int, const_idx: bool = False) -> onnx.ModelProto:
    """GatherND of expert weights [4, 192, 64] by idx [T, 2, 1] -> MatMul with x [T, 2, 64, 1]."""
    w = numpy_helper.from_array(np.ones((4, 192, 64), np.float32), "w")
    inits = [w]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [tokens, 2, 64, 1])]
    if const_idx:
        inits.append(numpy_helper.from_array(np.zeros((tokens, 2, 1), np.int64), "idx"))
    else:
        inputs.append(helper.make_tensor_value_info("idx", TensorProto.INT64, [tokens, 2, 1]))
    nodes = [
        helper.make_node("GatherND", ["w", "idx"], ["g"]),
        helper.make_node("MatMul", ["g", "x"], ["m"]),
        helper.make_node("Relu", ["m"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def _sizes(model: onnx.ModelProto, precision: str) -> dict[str, int]:
    g = build_view(model).graph
    bufs = ov_buffers(g, schedule(g, "openvino"), dynamic=False, precision=precision)
    return {b.tensors[0]: b.size for b in bufs if b.size and b.tensors}


def test_a_gathered_weight_stays_f32_and_gets_a_half_copy_at_bf16() -> None:
    g_bytes = 256 * 2 * 192 * 64 * 4  # 24 MiB
    bf16 = _sizes(_gathernd_bmm(256), "bf16")
    assert bf16["g"] == g_bytes  # f32, not halved
    assert bf16["g/lowp"] == g_bytes // 2  # the Reorder's bf16 copy for the MatMul
    f32 = _sizes(_gathernd_bmm(256), "f32")
    assert f32["g"] == g_bytes and "g/lowp" not in f32  # nothing to convert at f32


def test_only_weight_data_with_computed_indices_counts() -> None:
    """A Gather of an activation follows the ordinary rule (bf16), and one of a weight by a
    constant index folds at compile: neither is a weight gather."""
    g = build_view(_gathernd_bmm(8, const_idx=True)).graph
    assert weight_gathers(g) == set()
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 8])
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [4])
    e = numpy_helper.from_array(np.ones((100, 8), np.float32), "e")
    nodes = [
        helper.make_node("Gather", ["x", "i"], ["a"]),  # activation data
        helper.make_node("Gather", ["e", "i"], ["b"]),  # weight data, computed index
        helper.make_node("Add", ["a", "b"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [x, i], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [e]
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    assert weight_gathers(build_view(m).graph) == {"b"}


def test_the_measured_gathernd_growth_is_predicted_within_10_percent() -> None:
    """Peak of the activation plan against the measured infer-1 growth over compile (MiB,
    2026-11-27, bf16 host): 38 at T = 256, 74 at T = 512 (the MatMul's output and the rest are
    under 1 MiB here)."""
    for tokens, measured in ((256, 38), (512, 74)):
        g = build_view(_gathernd_bmm(tokens)).graph
        bufs = ov_buffers(g, schedule(g, "openvino"), dynamic=False, precision="bf16")
        steps = {s for b in bufs for s in (b.start, b.end)}
        peak = max(sum(b.size for b in bufs if b.live_at(s)) for s in steps) / MiB
        assert abs(peak - measured) <= 0.10 * measured, (tokens, peak)
