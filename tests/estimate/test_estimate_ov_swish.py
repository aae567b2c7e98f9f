"""OpenVINO: SiLU as ``x * Sigmoid(x)`` fuses into the Conv, an all-zero shared bias is no bias,
and the first infer of a dynamic model reuses the dropped ov.Model's heap.

docs/estimate.md, "Session 9: EfficientNet / RegNetY first infer" (runtime models and
measurements of timm EfficientNet-B0 and RegNetY-200MF on the bf16 host).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import estimate, openvino
from memshrink.estimate.graph import build_view
from memshrink.estimate.openvino import (
    OV_CALIBRATION,
    _shared_bias,
    fused_away,
    swish_pairs,
)

MiB = 1 << 20
F32 = {"INFERENCE_PRECISION_HINT": "f32"}


def _chain(act: str, n: int = 4, c: int = 32, hw: int = 56, dyn: bool = False,
           bias: str = "own") -> onnx.ModelProto:  # fmt: skip
    """n x (Conv 1x1 c->c + activation) on [B, c, hw, hw]; ``act`` "relu" or "silu" (the
    exporter's Sigmoid + Mul); ``bias`` "own" (distinct non-zero), "shared" (one non-zero
    tensor) or "zero" (one all-zero tensor for every Conv, what dedup-weights makes)."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    if bias != "own":
        b = np.zeros(c, np.float32) if bias == "zero" else rng.standard_normal(c).astype("f4")
        inits.append(numpy_helper.from_array(b, "b"))
    x = "x"
    for i in range(n):
        w = (rng.standard_normal((c, c, 1, 1)) * 0.1).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        bn = "b"
        if bias == "own":
            bn = f"b{i}"
            inits.append(numpy_helper.from_array(rng.standard_normal(c).astype("f4"), bn))
        nodes.append(helper.make_node("Conv", [x, f"w{i}", bn], [f"c{i}"]))
        if act == "relu":
            nodes.append(helper.make_node("Relu", [f"c{i}"], [f"y{i}"]))
        else:
            nodes.append(helper.make_node("Sigmoid", [f"c{i}"], [f"s{i}"]))
            nodes.append(helper.make_node("Mul", [f"c{i}", f"s{i}"], [f"y{i}"]))
        x = f"y{i}"
    nodes.append(helper.make_node("ReduceMean", [x], ["out"], axes=[2, 3], keepdims=0))
    shape = ["N" if dyn else 1, c, hw, hw]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _save(m: onnx.ModelProto, path: Path) -> str:
    onnx.save(m, str(path))
    return str(path)


def _stages(path: str, dyn: bool) -> dict:  # type: ignore[type-arg]
    est = estimate(path, backend="openvino", dims={"N": 1} if dyn else None, session_options=F32)
    return {s.name: s for s in est.prediction.stages}


def test_silu_pairs_found_and_fused(tmp_path: Path) -> None:
    g = build_view(_save(_chain("silu"), tmp_path / "s.onnx")).graph
    xs, ss = swish_pairs(g)
    assert sorted(xs) == [f"c{i}" for i in range(4)]
    assert sorted(ss) == [f"s{i}" for i in range(4)]
    assert {f"c{i}" for i in range(4)} | {f"s{i}" for i in range(4)} <= fused_away(g)


def test_silu_not_fused_when_x_has_another_reader(tmp_path: Path) -> None:
    m = _chain("silu", n=1)
    m.graph.output.append(helper.make_tensor_value_info("c0", TensorProto.FLOAT, None))
    g = build_view(_save(m, tmp_path / "s.onnx")).graph
    assert swish_pairs(g) == ({}, {})


@pytest.mark.parametrize("dyn", [False, True])
def test_silu_chain_activations_as_relu_chain(tmp_path: Path, dyn: bool) -> None:
    # x * Sigmoid(x) after a Conv is one Swish post-op: the activation plan is the Relu chain's
    silu = _stages(_save(_chain("silu", dyn=dyn), tmp_path / "s.onnx"), dyn)
    relu = _stages(_save(_chain("relu", dyn=dyn), tmp_path / "r.onnx"), dyn)
    assert silu["run_1"].activations == pytest.approx(relu["run_1"].activations, rel=0, abs=0)
    assert silu["run_1"].activations > 0


@pytest.mark.parametrize(("bias", "shared"), [("own", False), ("shared", True), ("zero", False)])
def test_zero_shared_bias_is_no_bias(tmp_path: Path, bias: str, shared: bool) -> None:
    # runtime model, 4 Conv+Relu sharing one bias: 4 Subgraph (static) / Eltwise (dynamic)
    # nodes beside the Convs; with an all-zero shared bias none (measured 2026-11-27)
    g = build_view(_save(_chain("relu", bias=bias), tmp_path / "b.onnx")).graph
    convs = [n for n in g.nodes if n.op_type == "Conv"]
    assert all(_shared_bias(g, n) == shared for n in convs)


def _run1_without_reuse(est) -> int:  # type: ignore[no-untyped-def]
    pred = openvino.predict(est.view, est.prediction.order, F32, est.prediction.schedule,
                            calibration={"ov_model_heap_reuse": 0.0})  # fmt: skip
    run1 = next(s for s in pred.stages if s.name == "run_1")
    return int(run1.peak)


def test_dynamic_first_infer_reuses_the_ov_model_heap(tmp_path: Path) -> None:
    # dynamic: what the first infer allocates (here the 4 Conv copies, 4 x 32 x 32 x 4 bytes,
    # and the one shared Conv configuration's JIT) lands in the heap the dropped ov.Model
    # freed, up to 0.55 x its own anon (~1.8 MiB here, so the allocations bind)
    path = _save(_chain("relu", dyn=True), tmp_path / "d.onnx")
    est = estimate(path, backend="openvino", dims={"N": 1}, session_options=F32)
    expect = 4 * 32 * 32 * 4 + int(OV_CALIBRATION["ov_per_conv_config"] * 1)
    got = _run1_without_reuse(est) - est.stage_peaks()["run_1"]
    assert got == pytest.approx(expect, rel=0, abs=2)
    # static shapes make everything at compile: nothing to reuse
    st = estimate(path, backend="openvino", dims={"N": 1}, session_options={**F32, "reshape": 1})
    assert _run1_without_reuse(st) == st.stage_peaks()["run_1"]


@pytest.mark.slow
def test_silu_chain_measured_as_relu_chain(tmp_path: Path) -> None:
    """Measured 2026-11-27 (verifier's child, bf16 host, 6 x Conv 1x1 64->64 at 112², symbolic
    batch = 1): infer 1 52.7 MiB with SiLU, 52.4 with Relu; predicted 54.6 (main 57.8)."""
    from memshrink.verify import profile

    meas = {}
    for act in ("silu", "relu"):
        path = _save(_chain(act, n=6, c=64, hw=112, dyn=True), tmp_path / f"{act}.onnx")
        run = profile(path, backends=("openvino",), dims={"N": 1}, runs=1).to_dict()["runs"][0]
        meas[act] = {s["name"]: int(s["peak_delta"]) for s in run["stages"]}["infer1"]
        if act == "silu":
            pred = estimate(path, backend="openvino", dims={"N": 1}).stage_peaks()["run_1"]
            assert pred == pytest.approx(meas[act], rel=0.08, abs=0)
    assert meas["silu"] == pytest.approx(meas["relu"], rel=0, abs=2 * MiB)
