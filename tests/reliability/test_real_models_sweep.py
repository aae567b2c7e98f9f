"""The real-model sweep's estimate-vs-measured column pairs the right stages.

``docs/bench/real_models_sweep.py`` maps the estimator's stage names to the verifier's per
backend (``EST_STAGES``). If either side renames a stage, the ``est-err`` column would go
silently empty; this test runs both on a tiny model and checks every mapped name exists on
both sides, and that the summary counts misses as the docs say (over 10 %; or over 10 % and
over 2 MiB).
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))

import real_models_sweep as sweep  # noqa: E402

MiB = 1 << 20


def _tiny(path: Path) -> Path:
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, path)
    return path


@pytest.mark.parametrize("backend", ["cpu", "openvino"])
def test_estimate_and_verify_stage_names_match_the_sweeps_map(tmp_path: Path, backend: str) -> None:
    from memshrink.estimate import estimate
    from memshrink.verify import profile

    path = _tiny(tmp_path / "m.onnx")
    predicted = estimate(str(path), backend=backend).stage_peaks()
    run = profile(str(path), backends=(backend,)).runs[0].to_dict()
    assert run["status"] == "ok", run["error"]
    measured = {s["name"] for s in run["stages"]}
    for est_stage, verify_stage in sweep.EST_STAGES[backend].items():
        assert est_stage in predicted, (est_stage, sorted(predicted))
        assert verify_stage in measured, (verify_stage, sorted(measured))


def test_ovep_stage_names_are_ort_stages() -> None:
    # the EP runs in ORT's child (run_ort): same stage names as the CPU EP
    assert sweep.EST_STAGES["ort-openvino"] == sweep.EST_STAGES["cpu"]


def test_measured_keeps_only_runs_that_went_through() -> None:
    report = {
        "runs": [
            {"model": "original", "backend": "cpu", "status": "ok",
             "stages": [{"name": "session", "peak_delta": 5 * MiB}]},
            {"model": "rewritten", "backend": "cpu", "status": "failed", "stages": []},
        ]
    }  # fmt: skip
    assert sweep._measured(report) == {("original", "cpu"): {"session": 5 * MiB}}


def test_summary_counts_misses_by_percent_and_by_noise_floor() -> None:
    def e(pred: float, meas: float) -> dict:
        p, m = int(pred * MiB), int(meas * MiB)
        return {"model": "original", "backend": "cpu", "stage": "run_1",
                "pred": p, "meas": m, "err": (p - m) / m}  # fmt: skip

    rows = [
        {"model": "a", "est_vs_meas": [e(105, 100)]},  # within 10 %
        {"model": "b", "est_vs_meas": [e(6, 4)]},  # +50 % but 2 MiB: noise
        {"model": "c", "est_vs_meas": [e(130, 100)]},  # a miss either way
    ]
    line = sweep.estimate_summary(rows).splitlines()[-1]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[:5] == ["cpu", "run_1", "3", "1", "2"], cells
    assert cells[6].startswith("+50% (+2 MiB) b (original)"), cells
