"""OpenVINO, f16 weights: decompressed to f32 Constants, and the FC rules apply to those.

A model exported at fp16 (``.half()``) has f16 weights; the CPU plugin decompresses them to f32
Constants (2x the f16 bytes), packs / transposes *those*, and the f16 data file's pages are
gone by the compile peak (docs/estimate.md, "Real exports, session 8").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from estimate.test_estimate_openvino import _save
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.host import ov_default_precision

MiB = 1 << 20
HINT = {p: {"INFERENCE_PRECISION_HINT": p} for p in ("f32", "bf16")}


def _fc16(n: int = 4, k: int = 2048) -> onnx.ModelProto:
    """n x MatMul of a [K, N] f16 weight (8 MiB each) on [B, 256, K] f16: dynamic batch."""
    rng = np.random.default_rng(0)
    nodes, inits, cur = [], [], "x"
    for i in range(n):
        w = (rng.standard_normal((k, k)) * 0.01).astype(np.float16)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [cur, f"w{i}"], [f"m{i}"]))
        cur = f"m{i}"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["B", 256, k])],
        [helper.make_tensor_value_info(cur, TensorProto.FLOAT16, None)],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


@pytest.mark.parametrize(
    ("precision", "compile_mib", "run_mib"),
    # 32 MiB f16 -> 64 MiB f32 Constants; f32: packed at compile (1x f32); bf16: the [K, N]
    # weight transposed at compile (0.5x f32), packed at the first infer (0.5x f32)
    [("f32", 128, 128), ("bf16", 96, 128)],
)
def test_f16_weights_are_packed_as_their_f32_decompression(
    tmp_path: Path, precision: str, compile_mib: int, run_mib: int
) -> None:
    path = _save(_fc16(), tmp_path / "fc16.onnx")
    est = estimate(path, backend="openvino", dims={"B": 1}, session_options=HINT[precision])
    st = {s.name: s for s in est.prediction.stages}
    assert st["compile_model"].weights_anon == compile_mib * MiB
    assert st["run_1"].weights_anon == run_mib * MiB
    assert st["compile_model"].weights_file == 0  # the f16 file's pages are not held


@pytest.mark.slow
def test_f16_weights_measured(tmp_path: Path) -> None:
    if ov_default_precision() != "bf16":
        pytest.skip("measured on a bf16 host")
    from memshrink.verify import profile

    # measured 2026-11-27 (bf16): compile 131.6 MiB (anon 104.5), infer 1 173.4; predicted
    # 130.3 / 174.3 (before: 146.3 / 174.3, the f16 file mapped and packs of f16 size).
    path = _save(_fc16(), tmp_path / "fc16.onnx")
    run = profile(path, backends=("openvino",), dims={"B": 1}, runs=1).to_dict()["runs"][0]
    meas = {s["name"]: int(s["peak_delta"]) for s in run["stages"]}
    pred = estimate(path, backend="openvino", dims={"B": 1}).stage_peaks()
    assert pred["compile_model"] == pytest.approx(meas["compile"], rel=0.05, abs=0)
    assert pred["run_1"] == pytest.approx(meas["infer1"], rel=0.05, abs=0)
