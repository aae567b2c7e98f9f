"""OpenVINO's inference precision: which one the estimator assumes, and what bf16 changes.

The CPU plugin computes in bf16 by default on hosts with native bf16 (AVX512-BF16, AMX); the
re-laid-out Conv weight copies and the float activations between the graph's inputs and
outputs are then half their f32 bytes (docs/estimate.md, "OpenVINO on a bf16 host").
"""

from __future__ import annotations

from pathlib import Path

import pytest
from estimate.test_estimate_openvino import _conv_chain, _save

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.host import normalize_precision, ov_default_precision
from memshrink.estimate.openvino import (
    inference_precision,
    io_bytes,
    output_reorders,
    ov_buffers,
    precision_tail,
)
from memshrink.estimate.schedule import schedule

ov = pytest.importorskip("openvino")
MiB = 1 << 20


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("<Type: 'bfloat16'>", "bf16"),
        ("bf16", "bf16"),
        ("f16", "f16"),
        ("FP16", "f16"),
        ("<Type: 'float32'>", "f32"),
        ("f32", "f32"),
        ("", "f32"),
    ],
)
def test_precision_names_are_normalized(text: str, want: str) -> None:
    assert normalize_precision(text) == want


def test_default_precision_follows_cpu_flags() -> None:
    amx = frozenset({"avx512f", "amx_bf16"})
    assert ov_default_precision(frozenset({"avx2", "avx512f"}), "x86_64") == "f32"
    assert ov_default_precision(frozenset({"avx512f", "avx512_bf16"}), "x86_64") == "bf16"
    assert ov_default_precision(amx, "x86_64") == "bf16"
    assert ov_default_precision(frozenset({"asimd", "asimdhp"}), "aarch64") == "f16"


def test_host_default_is_the_plugins_own() -> None:
    plugin = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT")
    assert ov_default_precision() == normalize_precision(plugin)


def test_an_explicit_hint_wins_over_the_host() -> None:
    assert inference_precision({"INFERENCE_PRECISION_HINT": "bf16"})[0] == "bf16"
    assert inference_precision({"INFERENCE_PRECISION_HINT": "f32"})[0] == "f32"
    assert inference_precision({})[0] == ov_default_precision()


def test_bf16_halves_conv_copies_and_inner_activations() -> None:
    model = _conv_chain(4, 256, 28)  # 4 x 2.25 MiB f32 Conv weights, 784 KiB activations
    view = build_view(model)
    f32 = estimate(model, backend="openvino", session_options={"INFERENCE_PRECISION_HINT": "f32"})
    bf16 = estimate(model, backend="openvino", session_options={"INFERENCE_PRECISION_HINT": "bf16"})
    saved = f32.stage_peaks()["compile_model"] - bf16.stage_peaks()["compile_model"]
    assert saved == pytest.approx(4 * 2.25 * MiB / 2, abs=0.01 * MiB)
    order = schedule(view.graph, "openvino")
    full = {t: b.size for b in ov_buffers(view.graph, order) for t in b.tensors}
    half = {t: b.size for b in ov_buffers(view.graph, order, precision="bf16") for t in b.tensors}
    assert half["x/reorder"] * 2 == full["x/reorder"]
    tail = precision_tail(view.graph)
    assert tail == {"r3", "y"}  # the last Conv's Relu and the ReduceMean head
    inner = [t for t in full if t not in ("x/reorder", "y", "r3", "c3") and full[t]]
    assert inner and all(half[t] * 2 == full[t] for t in inner)
    assert half.get("y") == full.get("y")  # the output is converted back to f32
    assert half["c3"] == full["c3"]  # the last Conv writes its fused Relu's f32 output


def test_the_ort_openvino_ep_stays_f32() -> None:
    # The EP passes precision FP32 to OpenVINO on CPU, whatever the host supports: its
    # prediction is the same on any host and under any native default.
    model = _conv_chain(4, 256, 28)
    ep = estimate(model, backend="ort-openvino").prediction
    f32 = estimate(model, backend="openvino", session_options={"INFERENCE_PRECISION_HINT": "f32"})
    bf16 = estimate(model, backend="openvino", session_options={"INFERENCE_PRECISION_HINT": "bf16"})
    assert f32.prediction.details["inference_precision"] == "f32"
    assert bf16.prediction.details["inference_precision"] == "bf16"
    assert any("inference precision f32" in a for a in ep.assumptions)


@pytest.mark.slow
def test_bf16_host_measured_conv_copies(tmp_path: Path) -> None:
    if ov_default_precision() != "bf16":
        pytest.skip("this host's OpenVINO CPU plugin does not default to bf16")
    from memshrink.verify import profile

    # 6 x 512x512x3x3 Conv weights (54 MiB, external): the copy is bf16, 27 MiB
    # (measured 2026-11-27: compile 121.1 MiB at bf16, 148.6 at f32). rel 5 %.
    path = _save(_conv_chain(6, 512, 14), tmp_path / "plain.onnx")
    run = profile(path, backends=("openvino",), runs=1).to_dict()["runs"][0]
    assert "bfloat16" in run["assumptions"]["inference_precision"]
    meas = {st["name"]: int(st["peak_delta"]) for st in run["stages"]}
    pred = estimate(path, backend="openvino", session_options={"reshape": 1}).stage_peaks()
    assert pred["compile_model"] == pytest.approx(meas["compile"], rel=0.05)
