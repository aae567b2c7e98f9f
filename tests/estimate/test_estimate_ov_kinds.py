"""OpenVINO library pages by plugin node kind, the first infer's deferred pages, and the
DynamicQuantizeLinear kernels (session 10; docs/estimate.md, "Session 10").

Known answers from the rules (``OV_CALIBRATION``: ``ov_lib*``, ``ov_deferred_lib``,
``ov_per_dyn_quant``) on hand-built graphs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from estimate.test_estimate_openvino import _save
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.openvino import OV_CALIBRATION, lib_pages, predict
from memshrink.estimate.ov_kinds import node_kinds

MiB = 1 << 20
C = OV_CALIBRATION


def _model(nodes: list, inits: list, x: list, y: str = "y") -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def _w(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.full(shape, 0.01, np.float32), name)


def _loop_gemm(batch: int | str = "N") -> onnx.ModelProto:
    """What torch.jit.script exports for a loop: the only Gemm lives in the Loop body, next to
    a Tanh; the outer graph has a Constant and the Loop."""
    body = helper.make_graph(
        [
            helper.make_node("Gemm", ["s_in", "w"], ["m"]),
            helper.make_node("Tanh", ["m"], ["s_out"]),
            helper.make_node("Identity", ["c_in"], ["c_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("s_in", TensorProto.FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("s_out", TensorProto.FLOAT, None),
        ],
    )
    n = helper.make_node("Constant", [], ["n"], value=helper.make_tensor("n", 7, [], [3]))
    loop = helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)
    return _model([n, loop], [_w("w", 64, 64)], [batch, 64])


def test_node_kinds_see_bodies_and_skip_code_free_ops(tmp_path: Path) -> None:
    """Loop body ops count (Gemm -> fc, Tanh -> eltwise); Constant / Identity make no code."""
    g = build_view(_save(_loop_gemm(2), tmp_path / "l.onnx")).graph
    assert node_kinds(g) == {"loop", "fc", "eltwise"}
    # every element-wise op is one kind; a MatMul by an activation is "matmul", by a weight "fc"
    nodes = [
        helper.make_node("Add", ["x", "x"], ["a"]),
        helper.make_node("Mul", ["a", "x"], ["b"]),
        helper.make_node("Sigmoid", ["b"], ["c"]),
        helper.make_node("Reshape", ["c", "s"], ["d"]),
        helper.make_node("MatMul", ["d", "w"], ["e"]),
        helper.make_node("MatMul", ["e", "e"], ["y"]),
    ]
    shape = numpy_helper.from_array(np.array([4, 4], np.int64), "s")
    g2 = build_view(_save(_model(nodes, [_w("w", 4, 4), shape], [4, 4]), tmp_path / "e.onnx"))
    assert node_kinds(g2.graph) == {"eltwise", "fc", "matmul"}


def test_lib_pages_take_the_fc_base_from_a_loop_body(tmp_path: Path) -> None:
    """Measured: a Gemm inside a Loop body touches oneDNN's matmul code like one outside it
    (static compile file pages 29.96 MiB, an element-wise graph 23.9). Known answer:
    ``ov_lib`` + 3 kinds."""
    g = build_view(_save(_loop_gemm(2), tmp_path / "l.onnx")).graph
    assert lib_pages(g, C) == int(C["ov_lib"] + 3 * C["ov_lib_per_op_type"])
    relu = _model([helper.make_node("Relu", ["x"], ["y"])], [], [2, 64])
    g2 = build_view(_save(relu, tmp_path / "r.onnx")).graph
    assert lib_pages(g2, C) == int(C["ov_lib_eltwise"] + C["ov_lib_per_op_type"])
    conv = _model(
        [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3])],
        [_w("w", 8, 3, 3, 3)],
        [1, 3, 16, 16],
    )
    g3 = build_view(_save(conv, tmp_path / "c.onnx")).graph
    assert lib_pages(g3, C) == int(C["ov_lib_conv"] + C["ov_lib_per_op_type"])


@pytest.mark.parametrize(("precision", "key"), [("bf16", "ov_deferred_lib"),
                                                  ("f32", "ov_deferred_lib")])  # fmt: skip
def test_dynamic_shapes_defer_library_pages_without_deferred_weights(
    tmp_path: Path, precision: str, key: str
) -> None:
    """Measured at bf16 on 19 dynamic models: the first infer touches 0.4-4.6 MiB (mean 2.8)
    of the library pages a static compile touches, weights or not (an element-wise Relu 1.8,
    the Loop-of-Gemm 2.5); at f32 the same without Conv / FC (session 12, OpenVINO 2026.4 file
    pages static / dynamic compile: Relu 23.4 / 21.5, 4 element-wise 23.3 / 21.8 at f32 and
    bf16 alike; the f32 6 MiB is the Conv / FC code). A symbolic-batch Relu: compile = static
    compile - the shift, and the run stage is the static one's."""
    opts = {"INFERENCE_PRECISION_HINT": precision}
    relu = {b: _model([helper.make_node("Relu", ["x"], ["y"])], [], [b, 64]) for b in (2, "N")}
    s = estimate(_save(relu[2], tmp_path / "s.onnx"), backend="openvino", session_options=opts)
    d = estimate(_save(relu["N"], tmp_path / "d.onnx"), backend="openvino", dims={"N": 2},
                 session_options=opts)  # fmt: skip
    st = {x.name: x for x in s.prediction.stages}
    dy = {x.name: x for x in d.prediction.stages}
    lib = int(C[key])
    # session 14: at bf16 the dynamic Relu is a runtime node of its own (``ov_per_dyn_node``)
    node = d.prediction.details["dyn_nodes"] * C["ov_per_dyn_node"]
    if precision == "bf16":  # ... and the dynamic base is lower (``ov_compile_anon_dyn_less``)
        node -= C["ov_compile_anon_dyn_less"]
    assert d.prediction.details["dyn_nodes"] == (1 if precision == "bf16" else 0)
    want = st["compile_model"].overhead - lib + node
    assert dy["compile_model"].overhead == pytest.approx(want, abs=0.01 * MiB, rel=0)
    want = st["run_1"].overhead + node
    assert dy["run_1"].overhead == pytest.approx(want, abs=0.01 * MiB, rel=0)


def _dql(n: int) -> onnx.ModelProto:
    """n chained DynamicQuantizeLinear -> DequantizeLinear on [2, 16, 64]."""
    nodes, cur = [], "x"
    for i in range(n):
        nodes.append(helper.make_node("DynamicQuantizeLinear", [cur], [f"q{i}", f"s{i}", f"z{i}"]))
        nodes.append(helper.make_node("DequantizeLinear", [f"q{i}", f"s{i}", f"z{i}"], [f"d{i}"]))
        cur = f"d{i}"
    return _model(nodes, [], [2, 16, 64], y=cur)


@pytest.mark.parametrize("precision", ["bf16", "f32"])
def test_each_dynamic_quantize_costs_its_kernels_at_compile(tmp_path: Path, precision: str) -> None:
    """Measured: 4 vs 12 chained DQL -> DequantizeLinear compile 8.88 vs 13.28 MiB anon over
    read_model, bf16 and f32 alike (session 12, bf16, verifier's child: compile 36.9 vs 41.9
    MiB, read 7.0 vs 7.7). Predicted: the 8 more DQLs' kernels, plus the ov.Model the
    frontend made of the 16 more nodes (a DQL is 27 ov ops and 8 Constants, ``ov_read``),
    held through compile: the read stage's difference (no new op kind, same pages)."""
    opts = {"INFERENCE_PRECISION_HINT": precision}
    cm, rd = {}, {}
    for n in (4, 12):
        est = estimate(_save(_dql(n), tmp_path / f"q{n}.onnx"), backend="openvino",
                       session_options=opts)  # fmt: skip
        stages = {s.name: s for s in est.prediction.stages}
        cm[n], rd[n] = stages["compile_model"].overhead, stages["read_model"].overhead
    want = 8 * C["ov_per_dyn_quant"] + (rd[12] - rd[4])
    assert cm[12] - cm[4] == pytest.approx(want, abs=0.01 * MiB, rel=0)
    # against the measured 5.0 MiB of compile (41.9 - 36.9): within 0.5 MiB
    assert (cm[12] - cm[4]) / MiB == pytest.approx(5.0, abs=0.5, rel=0)


def _f16_fcs(n: int) -> onnx.ModelProto:
    """n x MatMul(x, Cast(W)) with W f16 1024^2 (2 MiB each) on a symbolic [B, S, 1024]."""
    nodes, inits, cur = [], [], "x"
    for i in range(n):
        w = np.full((1024, 1024), 0.01, np.float16)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("Cast", [f"w{i}"], [f"c{i}"], to=TensorProto.FLOAT))
        nodes.append(helper.make_node("MatMul", [cur, f"c{i}"], [f"m{i}"]))
        cur = f"m{i}"
    return _model(nodes, inits, ["B", "S", 1024], y=cur)


def test_deferred_packs_reuse_the_dropped_f16_constants(tmp_path: Path) -> None:
    """Measured (4 x 2 MiB f16 weights, embedded, bf16): infer 1 72.8 MiB with symbolic dims
    against 80.1 static; the f16 originals go with the dropped ov.Model and the first infer's
    bf16 packs (8 MiB) land in their blocks. Known answer, the graph rule left out
    (``ov_model_heap_reuse`` 0): embedded run 1 is the mapped file's minus min(f16 bytes,
    deferred packs) = 8 MiB; a mapped file frees none."""
    emb = str(tmp_path / "h.onnx")
    onnx.save(_f16_fcs(4), emb)
    paths = {True: emb, False: _save(_f16_fcs(4), tmp_path / "hx.onnx")}  # external data
    opts = {"INFERENCE_PRECISION_HINT": "bf16"}
    run1 = {}
    for e, path in paths.items():
        est = estimate(path, backend="openvino", dims={"B": 1, "S": 128}, session_options=opts)
        p = predict(est.view, est.prediction.order, opts, est.prediction.schedule,
                    calibration={"ov_model_heap_reuse": 0.0})  # fmt: skip
        run1[e] = next(s for s in p.stages if s.name == "run_1").overhead
    # the two files' structure differs by the external-data locations (~1 KiB)
    assert run1[False] - run1[True] == pytest.approx(8 * MiB, abs=0.02 * MiB, rel=0)
