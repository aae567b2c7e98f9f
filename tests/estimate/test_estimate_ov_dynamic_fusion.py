"""OpenVINO CPU, dynamic shapes: the plain Eltwise fusion's cycle check, and Resize's layout.

Known answers for two rules found on session 14's EP misses (docs/estimate.md, "ORT OpenVINO
EP", "Session 15"):

* With a dynamic dim there are no Snippets, so element-wise chains fuse only through
  ``FuseEltwiseAndSimple``, which refuses a child that reads a node the chain already reads.
  ConvNeXt-V2's GRN ``gamma * (x * Nx) + beta + x`` keeps its final ``+ x`` apart (runtime
  model, dynamic batch: one Eltwise ``Power, nx, gm, gm1, ga1`` and ``ga2`` alone; static: one
  Snippets Subgraph with all six).
* ``Resize`` (OpenVINO's ``Interpolate``) writes channels-last on this AVX-512 host and reads a
  planar input through a channels-last copy: SegFormer's decode head has ``Reshape -> Reorder
  (abcd_acdb) -> Interpolate -> Concat -> Conv`` with no Reorder between Concat and Conv.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from interpreters import NO_OVEP, measured_ep_stages, ovep_python
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import estimate, openvino
from memshrink.estimate.graph import build_view
from memshrink.estimate.lifetimes import ALIAS_OPS, positions
from memshrink.estimate.openvino import KEEPS_LAYOUT, ov_buffers
from memshrink.estimate.ov_eltwise import fused_eltwise
from memshrink.estimate.ov_layout import layout_copies, layouts
from memshrink.estimate.schedule import schedule

B, HW, C = 2, 16, 32  # batch, spatial side, channels (channels-last after the FC)
MiB = 1 << 20


def _grn(batch: int | str = "batch", hw: int = HW, c: int = C, f: int = C) -> onnx.ModelProto:
    """x [b, hw, hw, c] -> MatMul ``a`` (to f channels) -> GRN (ConvNeXt-V2, as the HF export
    writes it) -> MatMul ``y`` (back to c)."""
    rng = np.random.default_rng(0)

    def arr(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    inits = [
        arr("w1", c, f),
        arr("w2", f, c),
        arr("gw", 1, 1, 1, f),
        arr("gb", 1, 1, 1, f),
        numpy_helper.from_array(np.array([1, 2], np.int64), "ax12"),
        numpy_helper.from_array(np.array([-1], np.int64), "axm1"),
        numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["a"]),
        helper.make_node("ReduceL2", ["a", "ax12"], ["r2"], keepdims=1),
        helper.make_node("ReduceMean", ["r2", "axm1"], ["rm"], keepdims=1),
        helper.make_node("Add", ["rm", "eps"], ["re"]),
        helper.make_node("Div", ["r2", "re"], ["nx"]),
        helper.make_node("Mul", ["a", "nx"], ["gm"]),
        helper.make_node("Mul", ["gw", "gm"], ["gm1"]),
        helper.make_node("Add", ["gm1", "gb"], ["ga1"]),
        helper.make_node("Add", ["ga1", "a"], ["ga2"]),
        helper.make_node("MatMul", ["ga2", "w2"], ["y"]),
    ]
    shape = [batch, hw, hw, c]
    g = helper.make_graph(
        nodes, "grn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits,
    )  # fmt: skip
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def _names(g, members: list[int]) -> list[str]:  # type: ignore[no-untyped-def]
    return [g.nodes[m].outputs[0] for m in members]


def test_plain_fusion_stops_before_a_child_reading_the_chains_parent() -> None:
    g = build_view(_grn(), shapes={"x": [B, HW, HW, C]}).graph
    (snippets,) = fused_eltwise(g)
    assert _names(g, snippets.members) == ["nx", "gm", "gm1", "ga1", "ga2"]
    (plain,) = fused_eltwise(g, plain=True)
    # ga2 = ga1 + a: its parent `a` (the MatMul) already feeds the chain (gm = a * nx); the
    # runtime model's fused node is ``Power (nx), gm, gm1, ga1``
    assert _names(g, plain.members) == ["nx", "gm", "gm1", "ga1"] and plain.output == "ga1"


def test_dynamic_grn_keeps_three_full_tensors_alive_at_the_last_add() -> None:
    full = B * HW * HW * C * 4  # 64 KiB
    for batch, alive in (("batch", 3), (B, 2)):
        view = build_view(_grn(batch), shapes={"x": [B, HW, HW, C]})
        g = view.graph
        order = schedule(g, "openvino")
        dyn = openvino.is_dynamic(view, {})
        assert dyn == (batch == "batch")
        bufs = ov_buffers(g, order, False, "f32", plain_eltwise=dyn)
        step = positions(order)[g.tensors["ga2"].producer]
        live = sum(b.size for b in bufs if b.start <= step <= b.end and b.size >= full)
        # dynamic: a, ga1 and ga2; static (one Snippets Subgraph): a and ga2
        assert live == alive * full, (batch, live / full)


def test_dynamic_grn_matches_the_real_ep(tmp_path: Path) -> None:
    """[8, 56, 56, 40] -> MatMul to 160 channels (15.3 MiB) -> GRN -> MatMul, dynamic batch.
    EP run 1 measured 106 MiB; predicted 92.7 with the chain fused through (-12.5 %), 108.1
    now. Skips without the EP's venv."""
    py = ovep_python()
    if py is None:
        pytest.skip(NO_OVEP)
    path = tmp_path / "grn.onnx"
    onnx.save(_grn("batch", 56, 40, 160), path)
    shapes = {"x": (8, 56, 56, 40)}
    meas = measured_ep_stages(path, py, shapes=shapes)
    pred = estimate(str(path), backend="ort-openvino", shapes=shapes).stage_peaks()
    assert pred["run_1"] == pytest.approx(meas["run1"], rel=0.06, abs=0)


def _decode_head() -> onnx.ModelProto:
    """x [1, 64, 16] (tokens) -> Reshape to [1, 16, 8, 8] (planar) -> Resize x2 -> Concat with
    a Conv's output -> Conv ``y``: SegFormer's decode head in small."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(np.array([1, 16, 8, 8], np.int64), "shp"),
        numpy_helper.from_array(np.array([1, 16, 16, 16], np.int64), "sizes"),
        numpy_helper.from_array(rng.standard_normal((16, 3, 1, 1)).astype(np.float32), "wc"),
        numpy_helper.from_array(rng.standard_normal((8, 32, 1, 1)).astype(np.float32), "wf"),
    ]
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
        helper.make_node("Reshape", ["t", "shp"], ["p"]),
        helper.make_node("Resize", ["p", "", "", "sizes"], ["u"], mode="linear"),
        helper.make_node("Conv", ["img", "wc"], ["c"]),
        helper.make_node("Concat", ["u", "c"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "wf"], ["y"]),
    ]
    g = helper.make_graph(
        nodes, "head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 16]),
         helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_resize_writes_channels_last_and_copies_its_planar_input() -> None:
    g = build_view(_decode_head()).graph
    order = schedule(g, "openvino")
    lay = layouts(g, order, KEEPS_LAYOUT)
    assert lay["p"] == "planar" and lay["u"] == "cl" and lay["cat"] == "cl"
    bufs = ov_buffers(g, order, False, "f32")
    extra = layout_copies(g, order, positions(order), False, set(), KEEPS_LAYOUT, ALIAS_OPS, bufs)
    by_name = {b.tensors[0]: b.size for b in extra}
    # one Reorder of the Resize's input (16 x 8 x 8 floats), none of the 4x larger Concat
    assert by_name == {"p/to_cl": 16 * 8 * 8 * 4}


def _nhwc_concat() -> onnx.ModelProto:
    """tf2onnx's NHWC CNN in small: a planar Transpose ``p`` [1, 8, 16, 16] and a Conv's output
    ``c`` concatenated (planar one first) and read by a Conv ``y``."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 1, 1)).astype(np.float32), "wc"),
        numpy_helper.from_array(rng.standard_normal((4, 16, 1, 1)).astype(np.float32), "wf"),
    ]
    nodes = [
        helper.make_node("Transpose", ["x"], ["p"], perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["img", "wc"], ["c"]),
        helper.make_node("Concat", ["p", "c"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "wf"], ["y"]),
    ]
    g = helper.make_graph(
        nodes, "nhwc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 16, 8]),
         helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_concat_takes_the_majority_layout_and_reorders_its_planar_input() -> None:
    g = build_view(_nhwc_concat()).graph
    order = schedule(g, "openvino")
    lay = layouts(g, order, KEEPS_LAYOUT)
    # votes: p planar, c channels-last, the Conv reading it channels-last
    assert lay["p"] == "planar" and lay["cat"] == "cl"
    bufs = ov_buffers(g, order, False, "f32")
    extra = layout_copies(g, order, positions(order), False, set(), KEEPS_LAYOUT, ALIAS_OPS, bufs)
    # the planar input's Reorder (8 x 16 x 16 floats), not one of the twice larger Concat
    assert {b.tensors[0]: b.size for b in extra} == {"p/to_cl": 8 * 16 * 16 * 4}


def test_nhwc_concat_matches_the_real_ep(tmp_path: Path) -> None:
    """The same graph at [1, 256, 256, 64] with dynamic h, w (16 MiB per input, a 32 MiB
    Concat): EP run 1 measured 127.9 MiB, predicted 165.0 with a copy of the Concat (+29 %),
    133.0 now (+4 %). Skips without the EP's venv."""
    py = ovep_python()
    if py is None:
        pytest.skip(NO_OVEP)
    model = _nhwc_concat()
    for inp, shape in zip(model.graph.input, ([1, "h", "w", 64], [1, 3, "h", "w"]), strict=True):
        inp.CopyFrom(helper.make_tensor_value_info(inp.name, TensorProto.FLOAT, shape))
    rng = np.random.default_rng(0)
    model.graph.initializer[0].CopyFrom(
        numpy_helper.from_array(rng.standard_normal((64, 3, 1, 1)).astype(np.float32), "wc")
    )
    model.graph.initializer[1].CopyFrom(
        numpy_helper.from_array(rng.standard_normal((16, 128, 1, 1)).astype(np.float32), "wf")
    )
    model.ir_version = 8  # the EP's ORT 1.24 reads IR <= 13
    path = tmp_path / "nhwc.onnx"
    onnx.save(model, path)
    shapes = {"x": (1, 256, 256, 64), "img": (1, 3, 256, 256)}
    meas = measured_ep_stages(path, py, shapes=shapes)
    pred = estimate(str(path), backend="ort-openvino", shapes=shapes).stage_peaks()
    assert pred["run_1"] == pytest.approx(meas["run1"], rel=0.08, abs=0)
