"""ONNX Runtime CPU with the arena off (``enable_cpu_mem_arena=0``): runs replayed through glibc.

Without the arena every tensor is a ``posix_memalign(64)`` of its own, freed at its last use,
so what a run leaves resident is glibc's business (``glibc_heap``): the first large block at or
above the dynamic mmap threshold is mmapped and its free *raises* the threshold to its size
(up to 32 MiB), so the next run's block of that size comes from the heap top; an aligned
block's trailing spare sits in the tcache after its free and keeps the hole from merging into
the top, and the same-size aligned request of the run after needs 96 bytes more than the hole:
it is carved from the top again. Each run after the first then leaves one more copy of such a
tensor resident.

Traced (``docs/bench/malloc_trace.c`` on an LSTM, S 400 x B 64 x H 128; docs/estimate.md,
"Session 13: weights inside bodies", "The arena off"): every run's 13.1 MB ``Y`` is carved above the last one
(``5591d567fd80``, ``…62ffe00``, ``…6f7fe80``) while the 52 MB gate buffer (over 32 MiB) is
mmapped and returned each run; run 1 / 2 / 3 peaks +62.6 / +75.3 / +87.8 MiB over the session.
The kernel takes its output before its temporaries (S 200 x B 32 x H 256, traced under
``memshrink profile``: ``Y`` 6.5 MB, then the 26.2 MB gate buffer, whose free lifts the
threshold past both), so the replay allocates a step's outputs first.
"""

from __future__ import annotations

from memshrink.estimate.glibc_heap import GlibcHeap
from memshrink.estimate.ort import OrtPlan


def arena_off_runs(
    plan: OrtPlan, n_steps: int, heap: GlibcHeap, *, hold_outputs: bool = True, runs: int = 3
) -> tuple[int, int]:
    """(run 1, last run) peak bytes over ``heap``'s state when the runs start (a clone of the
    heap session creation left, so its threshold and holes are the process's)."""
    by_start: dict[int, list] = {}
    by_end: dict[int, list] = {}
    for b in plan.buffers:
        by_start.setdefault(b.start, []).append(b)
        by_end.setdefault(b.end, []).append(b)
    base = heap.resident
    held: list[int] = []
    peaks: list[int] = []
    for _ in range(runs):
        heap.peak = heap.resident
        live: dict[int, int] = {}
        outs: list[int] = []
        for s in range(n_steps):
            temps = []
            # a kernel takes its outputs first (``context->Output``), then its temporaries
            for b in sorted(by_start.get(s, []), key=lambda b: b.scratch):
                if not b.size:
                    continue
                h = heap.alloc(b.size, aligned=not b.heap)
                if b.scratch:
                    temps.append(h)
                elif b.is_output:
                    outs.append(h)
                else:
                    live[b.id] = h
            for h in temps:
                heap.free(h)
            for b in by_end.get(s, []):
                if b.id in live:
                    heap.free(live.pop(b.id))
        for h in held:  # the caller drops the previous run's outputs when this run returns
            heap.free(h)
        held = outs
        if not hold_outputs:
            for h in held:
                heap.free(h)
            held = []
        peaks.append(heap.peak - base)
    return max(0, peaks[0]), max(0, peaks[-1])
