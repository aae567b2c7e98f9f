"""OpenVINO, dynamic shapes: a Conv+BN fusion's Constant is made at compile, its copy later.

The fusion is a graph transformation of ``compile_model``; only the Conv primitive (and the
re-laid-out weight copy) waits for the first infer's shape (docs/estimate.md, "Real exports,
session 8").
"""

from __future__ import annotations

from pathlib import Path

import pytest
from estimate.test_estimate_openvino import _conv_chain, _save

from memshrink.estimate import estimate
from memshrink.estimate.host import ov_default_precision

MiB = 1 << 20
WEIGHTS = 6 * 512 * 512 * 9 * 4  # 6 x Conv 512x512x3x3, f32: 54 MiB
HINT = {p: {"INFERENCE_PRECISION_HINT": p} for p in ("f32", "bf16")}


def _dynamic_chain(bn: bool):  # type: ignore[no-untyped-def]
    m = _conv_chain(6, 512, 14, bn=bn)
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    return m


@pytest.mark.parametrize(("precision", "copy"), [("f32", 1.0), ("bf16", 0.5)])
def test_dynamic_bn_fusion_constant_at_compile_copy_at_first_infer(
    tmp_path: Path, precision: str, copy: float
) -> None:
    path = _save(_dynamic_chain(True), tmp_path / "bn.onnx")
    plain = _save(_dynamic_chain(False), tmp_path / "plain.onnx")
    opts = HINT[precision]
    st = {s.name: s for s in estimate(path, backend="openvino", dims={"N": 1},
                                      session_options=opts).prediction.stages}  # fmt: skip
    ref = {s.name: s for s in estimate(plain, backend="openvino", dims={"N": 1},
                                       session_options=opts).prediction.stages}  # fmt: skip
    # compile: the fused f32 Constant (1x), nothing of the plain chain's
    fused = st["compile_model"].weights_anon - ref["compile_model"].weights_anon
    assert fused == pytest.approx(WEIGHTS, rel=0.001, abs=0)
    # first infer: the copy in the inference precision on top (static rule 2x - low-p saving)
    run = st["run_1"].weights_anon - st["compile_model"].weights_anon
    assert run == pytest.approx(copy * WEIGHTS, rel=0.001, abs=0)


@pytest.mark.slow
def test_dynamic_bn_fusion_measured(tmp_path: Path) -> None:
    if ov_default_precision() != "bf16":
        pytest.skip("measured on a bf16 host")
    from memshrink.verify import profile

    # measured 2026-11-27 (verifier's child, bf16): compile 146.8 MiB (anon 62.7: the fused
    # Constants), infer 1 122.6 (the mapped file is released with the ov.Model: every
    # original weight was replaced by its fused Constant). Predicted compile 144.8; rel 5 %.
    path = _save(_dynamic_chain(True), tmp_path / "bn.onnx")
    run = profile(path, backends=("openvino",), dims={"N": 1}, runs=1).to_dict()["runs"][0]
    meas = {s["name"]: int(s["peak_delta"]) for s in run["stages"]}
    pred = estimate(path, backend="openvino", dims={"N": 1}).stage_peaks()
    assert pred["compile_model"] == pytest.approx(meas["compile"], rel=0.05, abs=0)
