"""GPU memory of a stage over the empty CUDA session at the *same* stage.

Why: the empty-session baseline (a one-``Identity`` session in its own process) is measured after
its run, so it includes what any first run loads (handles, lazily loaded kernels: 72 MiB on the
H200 of docs/estimate.md, "CUDA EP"). A model's ``session`` stage has not run yet, so subtracting
the after-run figure printed a negative delta for every small model (MobileNetV2 -56 MiB, a tiny
MatMul -68), which says nothing about the model. Each stage is therefore compared with the empty
session at that stage: ``session`` with the empty session's ``session``, a run with the empty
session after its run. What is still below it (NVML's 2 MiB granularity, a kernel the empty
session loaded and the model did not) is shown as 0 and flagged, never as a negative size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SESSION_STAGE = "session"


@dataclass(frozen=True)
class GpuDelta:
    stage: str
    peak: int  # absolute NVML per-process bytes
    baseline: int  # the empty session's bytes this stage is compared with
    raw: int  # peak - baseline, may be negative
    delta: int  # raw, clamped at 0

    @property
    def clamped(self) -> bool:
        return self.raw < 0


def matched_baseline(stage: str, stages: Mapping[str, int] | None, fallback: int) -> int:
    """The empty session's bytes at ``stage``: its ``session`` figure for ``session``, its
    highest (after its run) for any run stage; ``fallback`` (the after-run baseline) when the
    per-stage figures are unknown (reports written before they were recorded)."""
    if not stages:
        return fallback
    if stage == SESSION_STAGE and SESSION_STAGE in stages:
        return int(stages[SESSION_STAGE])
    return max(int(v) for v in stages.values())


def gpu_deltas(
    stages: Sequence[Mapping[str, Any]], fallback: int, empty_stages: Mapping[str, int] | None
) -> list[GpuDelta]:
    """One ``GpuDelta`` per stage that has a GPU peak (``stage['gpu']['peak']``)."""
    out = []
    for s in stages:
        peak = (s.get("gpu") or {}).get("peak")
        if peak is None:
            continue
        base = matched_baseline(str(s["name"]), empty_stages, fallback)
        raw = int(peak) - base
        out.append(GpuDelta(str(s["name"]), int(peak), base, raw, max(raw, 0)))
    return out
