"""OpenVINO ``read_model``'s library pages: the code the ONNX frontend runs, not the graph's size.

The feature tests need no runtime; the last test measures a small MLP's ``read_model`` in the
verifier's fresh child, the kind of graph the old rule (4.8 MiB + 0.05 per op type)
over-predicted by 15 % (docs/estimate.md, "Session 11: read_model's library pages").
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.openvino import OV_CALIBRATION
from memshrink.estimate.ov_read_pages import read_features, read_lib_pages
from memshrink.model import load, save

MiB = 1 << 20
n = helper.make_node


def _model(nodes: list, inits: list, x_shape: list | None = None) -> onnx.ModelProto:
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "g", [vi("x", TensorProto.FLOAT, x_shape or [2, 8, 16, 16])],
        [vi("y", TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _f32(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.full(shape, 0.01, np.float32), name)


def _features(m: onnx.ModelProto) -> tuple[int, bool, bool, int]:
    return read_features(build_view(m, allow_partial=True).graph)


def _mlp(width: int = 64) -> onnx.ModelProto:
    nodes = [n("MatMul", ["x", "w"], ["a"]), n("Add", ["a", "b"], ["r"]), n("Relu", ["r"], ["y"])]
    return _model(nodes, [_f32("w", width, width), _f32("b", width)], [4, width])


def test_a_conv_bias_computes_a_shape_a_plain_conv_does_not() -> None:
    plain = _model([n("Conv", ["x", "w"], ["y"])], [_f32("w", 4, 8, 3, 3)])
    biased = _model([n("Conv", ["x", "w", "b"], ["y"])], [_f32("w", 4, 8, 3, 3), _f32("b", 4)])
    assert _features(plain) == (0, False, False, 1)
    assert _features(biased) == (2, False, False, 1)


def test_a_reduce_over_all_axes_reads_a_shape() -> None:
    axes = numpy_helper.from_array(np.array([1], np.int64), "ax")
    over_all = _model([n("ReduceSum", ["x"], ["y"])], [])
    over_one = _model([n("ReduceSum", ["x", "ax"], ["y"])], [axes])
    assert _features(over_all)[0] == 1  # Range(0, rank) of ShapeOf
    assert _features(over_one)[0] == 0


def test_if_bodies_are_translated_too() -> None:
    vi = helper.make_tensor_value_info
    then = helper.make_graph([n("Sigmoid", ["x"], ["t"])], "then", [], [vi("t", 1, None)])
    other = helper.make_graph([n("Tanh", ["x"], ["e"])], "else", [], [vi("e", 1, None)])
    nodes = [
        n("ReduceMax", ["x"], ["s"], keepdims=0),
        n("Greater", ["s", "z"], ["c"]),
        n("If", ["c"], ["y"], then_branch=then, else_branch=other),
    ]
    zero = numpy_helper.from_array(np.array(0, np.float32), "z")
    # ReduceMax, Greater, If and the bodies' Sigmoid, Tanh; If brings the reshape block.
    assert _features(_model(nodes, [zero])) == (2, False, False, 5)


def test_known_answers_against_session_10s_measurements() -> None:
    # Measured read_model file pages (verifier's child, MiB): a MatMul + Add + Relu MLP 3.94-4.00
    # (four sweep rows), ResNet-tiny 5.42 (Conv with bias, Gemm, MaxPool, Reshape, ...).
    c = OV_CALIBRATION
    mlp = read_lib_pages(build_view(_mlp(), allow_partial=True).graph, c) / MiB
    assert mlp == pytest.approx(3.59 + 0.249 * math.sqrt(3), rel=1e-3, abs=0)
    assert mlp == pytest.approx(3.97, rel=0.05, abs=0)
    nodes = [
        n("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        n("Relu", ["c"], ["r"]),
        n("MaxPool", ["r"], ["p"], kernel_shape=[2, 2]),
        n("Add", ["p", "p"], ["a"]),
        n("ReduceMean", ["a", "ax"], ["m"], keepdims=0),
        n("Reshape", ["m", "s"], ["f"]),
        n("Gemm", ["f", "wg", "bg"], ["y"], transB=1),
    ]
    inits = [
        _f32("w", 8, 8, 3, 3), _f32("b", 8), _f32("wg", 4, 8), _f32("bg", 4),
        numpy_helper.from_array(np.array([2, 3], np.int64), "ax"),
        numpy_helper.from_array(np.array([2, 8], np.int64), "s"),
    ]  # fmt: skip
    cnn = read_lib_pages(build_view(_model(nodes, inits), allow_partial=True).graph, c) / MiB
    assert cnn == pytest.approx(5.42, rel=0.05, abs=0)


@pytest.mark.slow
def test_small_mlp_read_model_measured(tmp_path: Path) -> None:
    # The old rule predicted 6.8 MiB for such a graph, measured 5.8-5.9 (+16 %).
    pytest.importorskip("openvino")
    from memshrink.verify import profile

    path = tmp_path / "mlp.onnx"
    save(load(_mlp(512)), str(path), external=True)
    run = profile(str(path), backends=("openvino",), runs=1).runs[0]
    assert run.status == "ok", run.error
    read = next(s for s in run.to_dict()["stages"] if s["name"] == "read")
    pred = estimate(str(path), backend="openvino").stage_peaks()
    # atol 0.7 MiB, rtol 0: this read stage is bimodal across processes (8 fresh processes:
    # 6.00 MB twice, 6.56-6.65 MB six times; the prediction is 6.05 MB): one mode's lazy pages
    assert pred["read_model"] == pytest.approx(read["peak_delta"], rel=0, abs=0.7 * 2**20)


@pytest.mark.parametrize("axis", [1, 2, -1])
def test_flatten_past_axis_one_is_a_shape_computation(tmp_path: Path, axis: int) -> None:
    # Flatten(axis >= 2) multiplies ShapeOf's leading dims: 5 ops and 5 Constants (LeViT's
    # 46 flatten(2) were 180 ops and 184 Constants the count missed, -1.4 MiB of read anon).
    ov = pytest.importorskip("openvino")
    from collections import Counter

    from memshrink.estimate.ov_read import read_counts

    m = _model([n("Flatten", ["x"], ["y"], axis=axis)], [], ["batch", 8, 16, 16])
    path = tmp_path / "flatten.onnx"
    onnx.save(m, str(path))
    ops = Counter(o.get_type_name() for o in ov.Core().read_model(str(path)).get_ops())
    n_ops, inside, external = read_counts(build_view(str(path), allow_partial=True).graph)
    assert n_ops == sum(ops.values()) - ops["Constant"]
    assert inside + external == ops["Constant"]


def _conv_chain(k: int, bias: bool, group: int = 1) -> onnx.ModelProto:
    nodes, inits, x = [], [], "x"
    for i in range(k):
        inits.append(_f32(f"w{i}", 16, 16 // group, 3 if group > 1 else 1, 3 if group > 1 else 1))
        ins = [x, f"w{i}"]
        if bias:
            inits.append(_f32(f"b{i}", 16))
            ins.append(f"b{i}")
        pads = [1, 1, 1, 1] if group > 1 else [0, 0, 0, 0]
        nodes.append(n("Conv", ins, [f"y{i}"], group=group, pads=pads))
        x = f"y{i}"
    nodes.append(n("Identity", [x], ["y"]))
    return _model(nodes, inits, ["b", 16, 8, 8])


@pytest.mark.parametrize(
    ("bias", "group", "measured"),
    [(False, 1, 0.0093), (True, 1, 0.0374), (True, 16, 0.0634)],
)
def test_conv_read_anon_per_conv(tmp_path: Path, bias: bool, group: int, measured: float) -> None:
    # Chains of 32 and 256 Convs 16 -> 16, external, read_model only (fresh processes,
    # RssAnon after - before, MiB per Conv): plain 0.0093, with a bias 0.0374 (the generic
    # per-op costs said 0.0498), depthwise with a bias 0.0634.
    from memshrink.estimate.ov_read import proto_bytes, read_anon

    per = []
    for k in (32, 256):
        path = tmp_path / f"c{k}.onnx"
        save(load(_conv_chain(k, bias, group)), str(path), external=True)
        view = build_view(str(path), allow_partial=True)
        structure = proto_bytes(str(path), view.weight_bytes - view.external_weight_bytes)
        per.append(read_anon(view.graph, OV_CALIBRATION, structure) / MiB)
    assert (per[1] - per[0]) / 224 == pytest.approx(measured, rel=0.10, abs=0)


def test_depthwise_conv_without_bias_splits_its_weight(tmp_path: Path) -> None:
    ov = pytest.importorskip("openvino")
    from collections import Counter

    from memshrink.estimate.ov_read import read_counts

    path = tmp_path / "dw.onnx"
    onnx.save(_conv_chain(1, False, 16), str(path))
    ops = Counter(o.get_type_name() for o in ov.Core().read_model(str(path)).get_ops())
    n_ops, inside, external = read_counts(build_view(str(path), allow_partial=True).graph)
    assert n_ops == sum(ops.values()) - ops["Constant"]  # GroupConvolution + 5 from ShapeOf
    assert inside + external == ops["Constant"]


@pytest.mark.parametrize("zero_point", [False, True])
def test_blockwise_dequantize_is_a_shape_computation(tmp_path: Path, zero_point: bool) -> None:
    # A block-wise DequantizeLinear (opset 21, int4 weights) is Convert, Unsqueeze, ShapeOf,
    # Reshape to blocks, Multiply, Reshape back (+ Convert / Unsqueeze / Subtract with a zero
    # point): the counts are the frontend's own ``get_ops()``, and the computed reshape brings
    # the shape block of library pages (the int4 MLP's read_model 6.5 -> 7.8 MiB predicted,
    # 7.6-8.0 measured).
    ov = pytest.importorskip("openvino")
    from collections import Counter

    from memshrink.estimate.ov_read import read_counts

    rng = np.random.default_rng(0)
    w4 = helper.make_tensor("w4", TensorProto.INT4, [64, 32], rng.integers(-8, 8, 64 * 32).tolist())
    inits = [w4, numpy_helper.from_array(np.ones((2, 32), np.float32), "s")]
    ins = ["w4", "s"]
    if zero_point:
        inits.append(helper.make_tensor("z", TensorProto.INT4, [2, 32], [1] * 64))
        ins.append("z")
    nodes = [
        n("DequantizeLinear", ins, ["wf"], axis=0, block_size=32),
        n("MatMul", ["x", "wf"], ["y"]),
    ]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    path = tmp_path / "dq4.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]), str(path))
    ops = Counter(o.get_type_name() for o in ov.Core().read_model(str(path)).get_ops())
    graph = build_view(str(path), allow_partial=True).graph
    n_ops, inside, external = read_counts(graph)
    assert n_ops == sum(ops.values()) - ops["Constant"]
    assert inside + external == ops["Constant"]
    assert read_features(graph)[0] == 2  # reshapes by a computed shape


@pytest.mark.parametrize(
    ("op", "states", "lens"), [("LSTM", True, False), ("LSTM", False, True), ("GRU", True, False)]
)
def test_rnn_read_counts_match_the_frontend(
    tmp_path: Path, op: str, states: bool, lens: bool
) -> None:
    # An LSTM / GRU is its Sequence op plus layout Transposes / Squeezes and a Broadcast from
    # ShapeOf per absent state / absent lengths (torch's LSTM + GRU export: 36 ops counted
    # before, 80 made; read_model 8.3 -> 8.6 MiB predicted, 9.2 measured).
    ov = pytest.importorskip("openvino")
    from collections import Counter

    from memshrink.estimate.ov_read import read_counts

    d, hid, gates = 2, 8, 4 if op == "LSTM" else 3
    vi = helper.make_tensor_value_info
    inits = [
        _f32("W", d, gates * hid, 4), _f32("R", d, gates * hid, hid), _f32("B", d, 2 * gates * hid)
    ]  # fmt: skip
    ins, gin = (
        ["x", "W", "R", "B", "sl" if lens else "", "h0" if states else ""],
        [vi("x", TensorProto.FLOAT, ["s", "b", 4])],
    )
    if lens:
        gin.append(vi("sl", TensorProto.INT32, ["b"]))
    if states:
        gin.append(vi("h0", TensorProto.FLOAT, [d, "b", hid]))
        if op == "LSTM":
            ins.append("c0")
            gin.append(vi("c0", TensorProto.FLOAT, [d, "b", hid]))
    while not ins[-1]:
        ins.pop()
    node = n(op, ins, ["y"], hidden_size=hid, direction="bidirectional")
    g = helper.make_graph([node], "g", gin, [vi("y", TensorProto.FLOAT, None)], inits)
    path = tmp_path / "rnn.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), str(path))
    ops = Counter(o.get_type_name() for o in ov.Core().read_model(str(path)).get_ops())
    n_ops, inside, external = read_counts(build_view(str(path), allow_partial=True).graph)
    assert n_ops == sum(ops.values()) - ops["Constant"]
    assert inside + external == ops["Constant"]


def test_dynamic_quantization_read_counts_match_the_frontend(tmp_path: Path) -> None:
    # ORT's dynamic quantization: DynamicQuantizeLinear is 27 ov ops and 8 Constants (min /
    # max over ShapeOf -> Range axes, scale, zero point, Round / Clamp / Convert), a
    # MatMulInteger with both zero points 6 ops (the quantized BERT: 290 ops counted before,
    # 609 made; read 10.4 -> 11.8 MiB predicted, 11.5 measured).
    ov = pytest.importorskip("openvino")
    from collections import Counter

    from memshrink.estimate.ov_read import read_counts

    inits = [
        numpy_helper.from_array(np.zeros((64, 32), np.int8), "W"),
        numpy_helper.from_array(np.array(0, np.int8), "wz"),
    ]
    nodes = [
        n("DynamicQuantizeLinear", ["x"], ["q", "s", "z"]),
        n("MatMulInteger", ["q", "W", "z", "wz"], ["i"]),
        n("Cast", ["i"], ["y"], to=TensorProto.FLOAT),
    ]
    vi = helper.make_tensor_value_info
    g = helper.make_graph(
        nodes, "g", [vi("x", TensorProto.FLOAT, ["b", 16, 64])],
        [vi("y", TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    path = tmp_path / "dq.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    ops = Counter(o.get_type_name() for o in ov.Core().read_model(str(path)).get_ops())
    n_ops, inside, external = read_counts(build_view(str(path), allow_partial=True).graph)
    assert n_ops == sum(ops.values()) - ops["Constant"]
    assert inside + external == ops["Constant"]
