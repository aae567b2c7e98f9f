"""OpenVINO per-node compile costs: tokenized MHA blocks and the deferred JIT of dynamic Convs.

Known answers from the rules (``OV_CALIBRATION``: ``ov_per_mha``, ``ov_per_conv_config``),
measured on ``docs/bench/ov_pernode_bench.py`` micro-graphs (docs/estimate.md, "Session 8:
per-node costs").
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
from memshrink.estimate.host import ov_default_precision
from memshrink.estimate.openvino import OV_CALIBRATION, mha_count, predict

MiB = 1 << 20
HINT = {p: {"INFERENCE_PRECISION_HINT": p} for p in ("f32", "bf16")}


def _heads(n: int, softmax: bool = True, batch: int | str = 1) -> onnx.ModelProto:
    """n identical attention heads on [B, 32, 784]: MatMul(x, x^T) -> Softmax -> MatMul(., x)."""
    nodes, cur = [], "x"
    for i in range(n):
        nodes.append(helper.make_node("Transpose", [cur], [f"t{i}"], perm=[0, 2, 1]))
        nodes.append(helper.make_node("MatMul", [cur, f"t{i}"], [f"q{i}"]))
        s = f"q{i}"
        if softmax:
            nodes.append(helper.make_node("Softmax", [s], [f"s{i}"], axis=-1))
            s = f"s{i}"
        nodes.append(helper.make_node("MatMul", [s, cur], [f"y{i}"]))
        cur = f"y{i}"
    graph = helper.make_graph(
        nodes,
        "heads",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 32, 784])],
        [helper.make_tensor_value_info(cur, TensorProto.FLOAT, None)],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def _convs(n: int, batch: int | str) -> onnx.ModelProto:
    """n 1x1 Conv+Relu, each a new (cin, cout): n distinct configurations."""
    rng = np.random.default_rng(0)
    nodes, inits, cur, c = [], [], "x", 16
    for i in range(n):
        w = (rng.standard_normal((c + 1, c, 1, 1)) * 0.05).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("Conv", [cur, f"w{i}"], [f"c{i}"], kernel_shape=[1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        cur, c = f"r{i}", c + 1
    graph = helper.make_graph(
        nodes,
        "convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16, 28, 28])],
        [helper.make_tensor_value_info(cur, TensorProto.FLOAT, None)],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def test_mha_count_needs_the_softmax(tmp_path: Path) -> None:
    """Each MatMul -> Softmax -> MatMul is one tokenized block; without the Softmax, none."""
    with_sm = build_view(_save(_heads(3), tmp_path / "a.onnx")).graph
    without = build_view(_save(_heads(3, softmax=False), tmp_path / "b.onnx")).graph
    assert mha_count(with_sm, dynamic=False) == 3
    assert mha_count(without, dynamic=False) == 0


@pytest.mark.parametrize("precision", ["bf16", "f32"])
def test_each_mha_block_costs_its_kernel_at_compile(tmp_path: Path, precision: str) -> None:
    """Measured: 120 identical heads +0.41 MiB each at bf16, +0.52 at f32; the same MatMuls
    without the Softmax +0.056 / +0.054. Predicted: the extra 8 blocks' kernels exactly."""
    key = "ov_per_mha_f32" if precision == "f32" else "ov_per_mha"
    cm = {}
    for n in (4, 12):
        est = estimate(_save(_heads(n), tmp_path / f"h{n}.onnx"), backend="openvino",
                       session_options=HINT[precision])  # fmt: skip
        st = {s.name: s for s in est.prediction.stages}
        assert est.prediction.details["mha_subgraphs"] == n
        cm[n] = st["compile_model"].overhead
    base = {}
    for n in (4, 12):
        est = estimate(_save(_heads(n, softmax=False), tmp_path / f"m{n}.onnx"),
                       backend="openvino", session_options=HINT[precision])  # fmt: skip
        base[n] = {s.name: s for s in est.prediction.stages}["compile_model"].overhead
    extra = (cm[12] - cm[4]) - (base[12] - base[4])
    # plus the 8 Softmax nodes' own ov.Model share (``ov_read_per_op``; structure bytes ~1 KiB)
    want = 8 * (OV_CALIBRATION[key] + OV_CALIBRATION["ov_read_per_op"])
    assert extra == pytest.approx(want, abs=0.005 * MiB, rel=0)


def test_dynamic_conv_jit_waits_for_the_first_infer(tmp_path: Path) -> None:
    """Symbolic batch: the distinct configurations' JIT moves from compile to infer 1
    (measured: compile +0.12 / infer 1 +0.30 per distinct Conv; static +0.29 at compile)."""
    n = 10
    stat = estimate(_save(_convs(n, 1), tmp_path / "s.onnx"), backend="openvino")
    dyn = estimate(_save(_convs(n, "N"), tmp_path / "d.onnx"), backend="openvino", dims={"N": 1})
    s = {x.name: x for x in stat.prediction.stages}
    d = {x.name: x for x in dyn.prediction.stages}
    jit = int(OV_CALIBRATION["ov_per_conv_config"] * n)
    assert dyn.prediction.details["kernel_configs"] == n
    f32 = ov_default_precision() == "f32"  # the FC code goes with the primitives at f32
    lib = int(OV_CALIBRATION["ov_deferred_lib_f32" if f32 else "ov_deferred_lib"])
    # the two files differ only in the input's dim ("N" vs 1): a few structure bytes; and at
    # bf16 a dynamic kernel costs its node only at compile (``ov_per_kernel_dyn``, session 14)
    node = 0 if f32 else n * (OV_CALIBRATION["ov_per_kernel"] - OV_CALIBRATION["ov_per_kernel_dyn"])
    node += 0 if f32 else OV_CALIBRATION["ov_compile_anon_dyn_less"]  # the lower base
    assert dyn.prediction.details["dyn_nodes"] == 0
    want = s["compile_model"].overhead - jit - lib - node
    assert d["compile_model"].overhead == pytest.approx(want, abs=0.01 * MiB, rel=0)
    # run stages: the same, once the first infer's reuse of the ov.Model's heap (a rule of
    # its own, ``ov_model_heap_reuse``) is left out
    kept = predict(dyn.view, dyn.prediction.order, {}, dyn.prediction.schedule,
                   calibration={"ov_model_heap_reuse": 0.0})  # fmt: skip
    run1 = next(x for x in kept.stages if x.name == "run_1")
    want = s["run_1"].overhead - node
    assert run1.overhead == pytest.approx(want, abs=0.01 * MiB, rel=0)
    assert d["run_1"].overhead < run1.overhead
