"""The real-model sweep's estimate-vs-measured column keeps the right runs and counts misses
as the docs say (over 10 %; or over 10 % and over 2 MiB). Its stage pairing is the library's
``VERIFY_STAGES``, checked against both sides in ``tests/estimate/test_estimate_verify_stages.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))

import real_models_sweep as sweep  # noqa: E402

MiB = 1 << 20


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


def test_ep_cell_is_judged_on_the_eps_runs_not_on_its_cpu_reference() -> None:
    """The EP column verifies ``cpu,ort-openvino`` (cpu: the reference verify's precision rule
    calibrates against) and is judged on the EP's runs alone: cpu failing on both models
    (exit 5) leaves the EP's match an ok; an EP mismatch is 3; an EP run failing is 5."""

    def run(model: str, backend: str, status: str = "ok") -> dict:
        return {"model": model, "backend": backend, "status": status, "stages": []}

    ep_ok = [run("original", "ort-openvino"), run("rewritten", "ort-openvino")]
    cpu_failed = [run("original", "cpu", "failed"), run("rewritten", "cpu", "failed")]
    match = [{"backend": "ort-openvino", "status": "match"}]
    rc, cut = sweep._only({"runs": cpu_failed + ep_ok, "comparisons": match}, "ort-openvino")
    assert rc == 0 and [r["backend"] for r in cut["runs"]] == ["ort-openvino"] * 2
    mismatch = [
        {"backend": "cpu", "status": "match"},
        {"backend": "ort-openvino", "status": "mismatch"},
    ]
    assert sweep._only({"runs": ep_ok, "comparisons": mismatch}, "ort-openvino")[0] == 3
    broke = [run("original", "ort-openvino"), run("rewritten", "ort-openvino", "failed")]
    assert sweep._only({"runs": broke, "comparisons": []}, "ort-openvino")[0] == 5


def _run(model: str, backend: str, status: str, peak_mib: float) -> dict:
    stages = [{"name": "run3", "peak_delta": int(peak_mib * MiB)}] if status == "ok" else []
    return {"model": model, "backend": backend, "status": status, "stages": stages}


def test_a_backend_refusing_both_models_hides_no_rise_or_mismatch_on_another() -> None:
    """Session 15: OpenVINO refused a QDQ BERT (original and rewrite alike) while ORT CPU's
    steady state rose 28 -> 35 MiB; verify exits 5, and the cell said BACKEND."""
    runs = [
        _run("original", "cpu", "ok", 28),
        _run("rewritten", "cpu", "ok", 35),
        _run("original", "openvino", "failed", 0),
        _run("rewritten", "openvino", "failed", 0),
    ]
    cell, note = sweep.judge_report(5, {"runs": runs, "comparisons": []})
    assert cell == "WORSE" and "cpu peak 28->35 MiB" in note
    flat = runs[:1] + [_run("rewritten", "cpu", "ok", 28)] + runs[2:]
    assert sweep.judge_report(5, {"runs": flat, "comparisons": []})[0] == "BACKEND"
    wrong = {
        "backend": "cpu",
        "reference": "original@cpu",
        "candidate": "rewritten@cpu",
        "status": "mismatch",
        "outputs": [{"name": "y", "ok": False}],
    }
    assert sweep.judge_report(5, {"runs": flat, "comparisons": [wrong]})[0] == "WRONG"
    # the EP's run against ORT CPU's reference (the original failed on the EP): not ours
    other = {**wrong, "backend": "ort-openvino", "candidate": "rewritten@ort-openvino"}
    assert sweep.judge_report(5, {"runs": flat, "comparisons": [other]})[0] == "BACKEND"
