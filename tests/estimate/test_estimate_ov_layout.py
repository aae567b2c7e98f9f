"""OpenVINO's layout Reorders between a Conv and a planar Reshape (``estimate/ov_layout.py``).

Known answers on a GroupNorm block as exporters write it (Conv -> Reshape -> InstanceNorm ->
Reshape -> SiLU -> Conv): the plugin's runtime graph has ``Conv (acdb) -> Reorder (abcd) ->
Reshape`` and ``Eltwise (abcd) -> Reorder (acdb) -> Conv`` (docs/estimate.md, "Session 12:
layout Reorders").
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate.graph import build_view
from memshrink.estimate.lifetimes import ALIAS_OPS, positions
from memshrink.estimate.openvino import KEEPS_LAYOUT, ov_buffers, precision_tail
from memshrink.estimate.ov_layout import layout_copies, layouts
from memshrink.estimate.schedule import schedule


def _gn_block(group_norm: bool = True) -> onnx.ModelProto:
    """x[1, 4, 8, 8] -> Conv 4->8 ``a`` -> (GroupNorm(2) as Reshape / InstanceNorm / Reshape,
    or nothing) -> SiLU -> Conv 8->8 ``c`` -> ReduceMean ``y``."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array([1, 2, -1], np.int64), "sg"),
        numpy_helper.from_array(np.array([1, 8, 8, 8], np.int64), "sb"),
        numpy_helper.from_array(np.ones(2, np.float32), "gs"),
        numpy_helper.from_array(np.zeros(2, np.float32), "gb"),
    ]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1], name="A")]
    cur = "a"
    if group_norm:
        nodes += [
            helper.make_node("Reshape", ["a", "sg"], ["r"], name="R"),
            helper.make_node("InstanceNormalization", ["r", "gs", "gb"], ["n"], name="N"),
            helper.make_node("Reshape", ["n", "sb"], ["rb"], name="RB"),
        ]
        cur = "rb"
    nodes += [
        helper.make_node("Sigmoid", [cur], ["s"], name="S"),
        helper.make_node("Mul", [cur, "s"], ["m"], name="M"),
        helper.make_node("Conv", ["m", "w2"], ["c"], pads=[1, 1, 1, 1], name="C"),
        helper.make_node("ReduceMean", ["c"], ["y"], keepdims=1, name="Y"),
    ]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _copies(model: onnx.ModelProto, half: bool = True, dynamic: bool = False):
    g = build_view(model).graph
    order = schedule(g, "openvino")
    pos = positions(order)
    bufs = ov_buffers(g, order, dynamic, "bf16" if half else "f32")
    tail = precision_tail(g) if half else set()
    extra = layout_copies(g, order, pos, half, tail, KEEPS_LAYOUT, ALIAS_OPS, bufs, dynamic)
    return g, pos, bufs, extra


def test_layouts_follow_conv_and_planar_makers() -> None:
    g = build_view(_gn_block()).graph
    lay = layouts(g, schedule(g, "openvino"), KEEPS_LAYOUT)
    # the Conv writes channels-last; the Reshape back to 4-D is planar and the SiLU keeps it
    assert lay["a"] == "cl" and lay["c"] == "cl"
    assert lay["rb"] == "planar" and lay["s"] == "planar" and lay["m"] == "planar"
    assert "r" not in lay  # 3-D: no layout question


def test_group_norm_block_gets_two_reorders_of_full_size() -> None:
    g, pos, bufs, extra = _copies(_gn_block())
    by_name = {b.tensors[0]: b for b in extra}
    assert sorted(by_name) == ["a/to_planar", "m/to_cl"]
    # 8 x 8 x 8 floats = 2048 B in f32, 1024 B in bf16 (neither is in the f32 tail)
    assert by_name["a/to_planar"].size == 1024 and by_name["m/to_cl"].size == 1024
    # the planar copy lives from the Reshape to the InstanceNorm (the view's only reader);
    # the channels-last copy from the SiLU's Mul to the Conv
    node = {g.nodes[i].name: i for i in pos}
    assert (by_name["a/to_planar"].start, by_name["a/to_planar"].end) == (
        pos[node["R"]], pos[node["N"]],
    )  # fmt: skip
    assert (by_name["m/to_cl"].start, by_name["m/to_cl"].end) == (pos[node["M"]], pos[node["C"]])
    # the Conv's own output no longer lives to the InstanceNorm: it ends at the Reshape
    owner = next(b for b in bufs if "a" in b.tensors)
    assert owner.end == pos[node["R"]]


def test_f32_precision_keeps_full_size_and_plain_chain_has_none() -> None:
    _, _, _, extra = _copies(_gn_block(), half=False)
    assert sorted(b.size for b in extra) == [2048, 2048]
    # Conv -> SiLU -> Conv never leaves the channels-last layout: no Reorder
    _, _, _, none = _copies(_gn_block(group_norm=False))
    assert none == []
