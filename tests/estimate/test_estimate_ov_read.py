"""OpenVINO ``read_model``: the ov ops its ONNX frontend makes, and the memory they hold.

Checked against the real frontend: the op counts against ``read_model(...).get_ops()``, the
peak against ``memshrink.verify.profile``'s fresh child (exact ``VmHWM``).
"""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.ov_read import read_counts
from memshrink.model import load, save

ov = pytest.importorskip("openvino")

MiB = 1 << 20


def _f32(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.full(shape, 0.01, np.float32), name)


def _i64(name: str, vals: list[int] | int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(vals, np.int64), name)


def _mixed() -> onnx.ModelProto:
    """One of each op the frontend expands or folds: Conv with and without bias, a grouped
    Conv, Gemm, LayerNormalization, Slice, Gather, Transpose, Shape(start, end), an Identity
    of an initializer and a Constant node, beside plain ops."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("Conv", ["c1", "w2"], ["c2"], kernel_shape=[1, 1]),
        n("Conv", ["c2", "wg", "bg"], ["c3"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=8),
        n("Relu", ["c3"], ["yc"]),
        n("Gemm", ["g", "wm", "bm"], ["yg"], transB=1),
        n("LayerNormalization", ["t", "ln_s", "ln_b"], ["t1"], axis=-1),
        n("Identity", ["mm"], ["mm_id"]),
        n("MatMul", ["t1", "mm_id"], ["t2"]),
        n("Constant", [], ["k"], value=_f32("kv", ())),
        n("Mul", ["t2", "k"], ["t3"]),
        n("Transpose", ["t3"], ["t4"], perm=[0, 2, 1]),
        n("Slice", ["t4", "st", "en"], ["t5"]),
        n("Shape", ["t5"], ["s"], start=0, end=2),
        n("Gather", ["s", "i0"], ["s0"], axis=0),
        n("Unsqueeze", ["s0", "ax"], ["s1"]),
        n("Concat", ["s1", "rest"], ["shp"], axis=0),
        n("Reshape", ["t5", "shp"], ["yt"]),
    ]
    inits = [
        _f32("w1", (8, 8, 3, 3)), _f32("b1", (8,)), _f32("w2", (8, 8, 1, 1)),
        _f32("wg", (8, 1, 3, 3)), _f32("bg", (8,)), _f32("wm", (16, 32)), _f32("bm", (16,)),
        _f32("ln_s", (32,)), _f32("ln_b", (32,)), _f32("mm", (32, 32)),
        _i64("st", [0]), _i64("en", [8]), _i64("i0", 0), _i64("ax", [0]), _i64("rest", [-1]),
    ]  # fmt: skip
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "mixed",
        [
            vi("x", TensorProto.FLOAT, [1, 8, 16, 16]),
            vi("g", TensorProto.FLOAT, [2, 32]),
            vi("t", TensorProto.FLOAT, [2, 16, 32]),
        ],
        [vi(o, TensorProto.FLOAT, None) for o in ("yc", "yg", "yt")],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _torchscript_like(units: int) -> onnx.ModelProto:
    """What the TorchScript exporter writes around every Reshape: Shape -> Gather -> Unsqueeze
    -> Concat -> Reshape on Constant nodes, plus an Identity of a weight and a bias Add, the
    nodes carrying ~300 B of names and metadata each (what made the per-node rule +50 %)."""
    nodes, inits = [], []
    x = "x"
    for i in range(units):
        p = f"/encoder/layer.{i}/attention/self"

        def const(name: str, arr: np.ndarray) -> str:
            nodes.append(
                helper.make_node("Constant", [], [name], value=numpy_helper.from_array(arr))
            )
            return name

        inits.append(_f32(f"{p}/bias", (64,)))
        nodes.append(helper.make_node("Identity", [f"{p}/bias"], [f"{p}/bias_id"]))
        nodes.append(helper.make_node("Add", [x, f"{p}/bias_id"], [f"{p}/Add_output_0"]))
        nodes.append(helper.make_node("Shape", [f"{p}/Add_output_0"], [f"{p}/Shape_output_0"]))
        i0 = const(f"{p}/Constant_output_0", np.array(0, np.int64))
        nodes.append(
            helper.make_node("Gather", [f"{p}/Shape_output_0", i0], [f"{p}/Gather_output_0"])
        )
        ax = const(f"{p}/Constant_1_output_0", np.array([0], np.int64))
        nodes.append(
            helper.make_node("Unsqueeze", [f"{p}/Gather_output_0", ax], [f"{p}/Unsq_output_0"])
        )
        rest = const(f"{p}/Constant_2_output_0", np.array([-1, 64], np.int64))
        nodes.append(
            helper.make_node(
                "Concat", [f"{p}/Unsq_output_0", rest], [f"{p}/Concat_output_0"], axis=0
            )
        )
        y = f"{p}/Reshape_output_0"
        node = helper.make_node("Reshape", [f"{p}/Add_output_0", f"{p}/Concat_output_0"], [y])
        helper.set_metadata_props(node, {"namespace": f"{p}: torch.nn.Linear " + "." * 120})
        nodes.append(node)
        x = y
    # One 1 MiB weight, so the file reads as external data, as the real exports do.
    inits.append(_f32("head", (64, 4096)))
    nodes.append(helper.make_node("MatMul", [x, "head"], ["logits"]))
    graph = helper.make_graph(
        nodes,
        "ts",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16, 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_read_counts_match_the_frontends_ops(tmp_path: Path) -> None:
    path = tmp_path / "mixed.onnx"
    save(load(_mixed()), str(path), external=True)
    ops = collections.Counter(o.get_type_name() for o in ov.Core().read_model(path).get_ops())
    n_ops, inside, external = read_counts(build_view(str(path)).graph)
    # Exact: the expansion table is the frontend's own count (Conv+bias 9 ops, Gemm 4, ...).
    assert n_ops == sum(ops.values()) - ops["Constant"]
    assert inside + external == ops["Constant"]
    assert external == 3  # w1, wm, mm: the tensors of 1 KiB or more, memory-mapped


@pytest.mark.slow
def test_read_model_of_a_torchscript_like_export(tmp_path: Path) -> None:
    # 300 units = 2,700 ONNX nodes, 900 of them Constant and 300 Identity of a weight.
    from memshrink.verify import profile

    path = tmp_path / "ts.onnx"
    save(load(_torchscript_like(300)), str(path), external=True)
    run = profile(str(path), backends=("openvino",), runs=1, dims={"batch": 2}).runs[0]
    assert run.status == "ok", run.error
    read = next(s for s in run.to_dict()["stages"] if s["name"] == "read")
    pred = estimate(str(path), backend="openvino", dims={"batch": 2}).stage_peaks()
    assert pred["read_model"] == pytest.approx(read["peak_delta"], rel=0.10, abs=0)


@pytest.mark.slow
def test_embedded_read_is_twice_the_weights_and_the_graph(tmp_path: Path) -> None:
    # 8 MatMuls by 1 MiB weights stored in the .onnx: the parsed ModelProto and one Constant
    # per tensor, 2 x 8 MiB, plus what the same graph costs with external data; no fixed
    # "parser state" on top (the 9 MiB once added made this +40 %).
    from memshrink.verify import profile

    nodes, inits, x = [], [], "x"
    for i in range(8):
        inits.append(
            numpy_helper.from_array(
                np.random.default_rng(i).standard_normal((512, 512)).astype(np.float32), f"w{i}"
            )
        )
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"y{i}"]))
        x = f"y{i}"
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "emb", [vi("x", TensorProto.FLOAT, [4, 512])], [vi(x, TensorProto.FLOAT, None)],
        inits,
    )  # fmt: skip
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "emb.onnx"
    onnx.save(m, str(path))
    run = profile(str(path), backends=("openvino",), runs=1).runs[0]
    assert run.status == "ok", run.error
    read = next(s for s in run.to_dict()["stages"] if s["name"] == "read")
    pred = estimate(str(path), backend="openvino").stage_peaks()
    assert pred["read_model"] == pytest.approx(read["peak_delta"], rel=0.10, abs=0)
