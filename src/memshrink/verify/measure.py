"""Exact per-stage memory of the current process (Linux), reusable by any script.

Why this way (see MEASURING.md): ``VmHWM`` is the kernel's exact RSS high-water mark and
writing ``5`` to ``/proc/self/clear_refs`` resets it to the current RSS, so resetting before a
stage and reading after gives the stage's exact peak with no sampling. ``VmHWM`` mixes anonymous
(heap, cannot be dropped) and file-mapped (clean, evictable) pages, so a background thread also
samples ``RssAnon``/``RssFile`` for their peaks; those two are sampled, the RSS peak is exact.

Stdlib only: this module runs inside the measuring child, possibly under another interpreter.

    meter = Meter()
    with meter.stage("session"):
        sess = ort.InferenceSession(path)
    print(meter.stages[-1].to_dict())
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

_FIELDS = ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem")
SAMPLE_INTERVAL_S = 0.001


def read_status() -> dict[str, int]:
    """Current ``VmHWM``/``VmRSS``/``RssAnon``/``RssFile``/``RssShmem`` of this process, bytes."""
    out = dict.fromkeys(_FIELDS, 0)
    with open("/proc/self/status", "rb") as f:
        for line in f:
            key, _, rest = line.partition(b":")
            k = key.decode()
            if k in out:
                out[k] = int(rest.split()[0]) * 1024  # reported in kB
    return out


def reset_peak() -> bool:
    """Reset ``VmHWM`` to the current RSS; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class _Sampler(threading.Thread):
    """Polls RssAnon/RssFile (and an optional extra probe, e.g. GPU memory) for their maxima."""

    def __init__(self, probe: Callable[[], int | None] | None, interval: float) -> None:
        super().__init__(daemon=True)
        self.probe = probe
        self.interval = interval
        self.anon_peak = 0
        self.file_peak = 0
        self.probe_peak: int | None = None
        self._stop_evt = threading.Event()

    def sample(self) -> None:
        s = read_status()
        self.anon_peak = max(self.anon_peak, s["RssAnon"])
        self.file_peak = max(self.file_peak, s["RssFile"])
        if self.probe is not None:
            v = self.probe()
            if v is not None:
                self.probe_peak = v if self.probe_peak is None else max(self.probe_peak, v)

    def run(self) -> None:
        while not self._stop_evt.is_set():
            self.sample()
            self._stop_evt.wait(self.interval)

    def stop(self) -> None:
        self._stop_evt.set()
        self.join()
        self.sample()


@dataclass
class StageMeasure:
    """One stage: RSS before/exact peak/after, anon and file split, seconds (all bytes)."""

    name: str
    seconds: float
    before: int
    peak: int
    after: int
    anon_before: int
    anon_peak: int
    anon_after: int
    file_before: int
    file_peak: int
    file_after: int
    peak_method: str = "VmHWM reset via /proc/self/clear_refs (exact)"
    gpu: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Meter:
    """Measures named stages of this process; ``baseline`` is the RSS when it was created."""

    def __init__(
        self,
        interval: float = SAMPLE_INTERVAL_S,
        gpu_probe: Callable[[], int | None] | None = None,
    ) -> None:
        self.interval = interval
        self.gpu_probe = gpu_probe
        self.stages: list[StageMeasure] = []
        self.exact = reset_peak()
        self.baseline = read_status()

    @contextmanager
    def stage(self, name: str) -> Iterator[StageMeasure | None]:
        """Measure the body as stage ``name``; the record is appended when the body ends."""
        # Reset first, then read "before": the high-water mark can then never be below it
        # (memory freed between a read and a later reset made peak < before).
        exact = reset_peak()
        before = read_status()
        gpu_before = self.gpu_probe() if self.gpu_probe else None
        sampler = _Sampler(self.gpu_probe, self.interval)
        sampler.sample()
        sampler.start()
        t0 = time.perf_counter()
        try:
            yield None
        finally:
            seconds = time.perf_counter() - t0
            sampler.stop()
            after = read_status()
            peak = after["VmHWM"] if exact else max(sampler.anon_peak + sampler.file_peak, 0)
            gpu = None
            if self.gpu_probe is not None:
                gpu_after = self.gpu_probe()
                seen = [v for v in (sampler.probe_peak, gpu_after) if v is not None]
                gpu = {
                    "before": gpu_before,
                    "peak": max(seen) if seen else None,
                    "after": gpu_after,
                }
            self.stages.append(
                StageMeasure(
                    name=name,
                    seconds=seconds,
                    before=before["VmRSS"],
                    # The kernel's RSS counters lag by a few pages per thread, so the
                    # high-water mark can read just below a neighbouring VmRSS reading.
                    peak=max(peak, before["VmRSS"], after["VmRSS"]),
                    after=after["VmRSS"],
                    anon_before=before["RssAnon"],
                    anon_peak=max(sampler.anon_peak, after["RssAnon"]),
                    anon_after=after["RssAnon"],
                    file_before=before["RssFile"],
                    file_peak=max(sampler.file_peak, after["RssFile"]),
                    file_after=after["RssFile"],
                    peak_method=(
                        "VmHWM reset via /proc/self/clear_refs (exact)"
                        if exact
                        else f"RssAnon+RssFile sampled every {self.interval * 1000:g} ms"
                    ),
                    gpu=gpu,
                )
            )
