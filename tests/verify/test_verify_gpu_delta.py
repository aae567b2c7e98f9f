"""GPU deltas against the empty CUDA session at the same stage, with figures recorded on the
H200 (docs/estimate.md, "CUDA EP", rule 5 and the results table): the empty session holds
594 MiB after creation and 666 MiB after its run; a tiny MatMul model measured 598 MiB at
session creation (-68 over the after-run baseline the report used to subtract) and 684 after
run 1; MobileNetV2 610 at session creation (-56)."""

from __future__ import annotations

from memshrink.verify.gpu_delta import gpu_deltas, matched_baseline
from memshrink.verify.report import ProfileReport, _gpu_lines
from memshrink.verify.runner import RunResult

MiB = 1 << 20
EMPTY = {"session": 594 * MiB, "run1": 666 * MiB}


def _stages(**peaks_mib: int) -> list[dict]:
    host = {"before": 0, "peak": 0, "after": 0, "anon_peak": 0, "file_peak": 0, "seconds": 0.0}
    return [{"name": k, **host, "gpu": {"peak": v * MiB}} for k, v in peaks_mib.items()]


def _run(label: str, empty: dict[str, int] | None, **peaks_mib: int) -> RunResult:
    gpu = {"empty_session_baseline": 666 * MiB, "empty_session_stages": empty}
    return RunResult(
        label, "m.onnx", "cuda", "ok", child={"gpu": gpu, "stages": _stages(**peaks_mib)}
    )


def test_each_stage_is_compared_with_the_same_stage_of_the_empty_session() -> None:
    assert matched_baseline("session", EMPTY, 1) == 594 * MiB
    assert matched_baseline("run3", EMPTY, 1) == 666 * MiB
    assert matched_baseline("session", None, 666 * MiB) == 666 * MiB  # old reports
    d = gpu_deltas(_stages(session=598, run1=684, run2=684), 666 * MiB, EMPTY)
    assert [(x.stage, x.delta // MiB, x.clamped) for x in d] == [
        ("session", 4, False),  # was -68 against the after-run baseline
        ("run1", 18, False),
        ("run2", 18, False),
    ]


def test_a_figure_below_the_empty_session_is_clamped_and_flagged() -> None:
    d = gpu_deltas(_stages(session=592, run1=684), 666 * MiB, EMPTY)
    assert (d[0].raw, d[0].delta, d[0].clamped) == (-2 * MiB, 0, True)
    lines = _gpu_lines([_run("rewritten", EMPTY, session=592, run1=684)])
    text = "\n".join(lines)
    assert "session ~0 [592], run1 +18 [684]" in text
    assert "empty session 594 / 666 MiB (session / after its run)" in text
    assert "~0: below the empty session at that stage (rewritten session 2 MiB)" in text
    assert "-" not in text.split("\n")[1].split(";")[1]  # no negative size printed


def test_report_of_a_tiny_model_prints_no_negative_delta() -> None:
    runs = [
        _run("original", EMPTY, session=610, run1=700, run2=700, run3=700),
        _run("model", None, session=610, run1=700),  # no per-stage figures: old behaviour
    ]
    report = ProfileReport("m.onnx", ("cuda",), {"runs": 3}, [], runs[:1])
    gpu = [ln for ln in report.format_table().splitlines() if ln.startswith("  original")][-1]
    assert "session +16 [610], run1 +34 [700]" in gpu
    assert "session ~0 [610]" in "\n".join(_gpu_lines(runs[1:]))  # -56, clamped and flagged
