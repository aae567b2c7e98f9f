"""ORT's memory-pattern planner counts the free tail below its high-water mark as a gap.

Known answers measured on ORT 1.32 (docs/estimate.md, "The memory-pattern block's tail gap"):
deeplab-800's run 1 traced with the arena off under an ``LD_PRELOAD`` malloc logger (every
64-byte-aligned allocation and free, the graph output left out as ORT leaves it out), and the
block ORT allocated in run 2 of the same process.
"""

from __future__ import annotations

import pytest

from memshrink.estimate.lifetimes import Buffer
from memshrink.estimate.planners import best_fit, check_no_overlap

# Run 1 of deeplab-800 up to the ASPP head: +size allocates the next buffer (numbered from 1),
# -k frees buffer k. The four processes differ only where ORT's hash-numbered ReorderOutput
# nodes put the ASPP branches: the three frees after ``cat`` and the one after ``conv2d_60``.
_HEAD = [40960000, 10240000, -1, 40960000, 10240000, -4, -2, 20480000, 20480000, -3, 5120000]
_HEAD += [-6, 5120000, -7, -8, 10240000, 10240000, -5, 2560000, -10, 2560000, 20480000, 5120000]
_HEAD += [-9, 5120000, -14, -15, 2560000, 2560000, 2560000, 20480000, -13, 8192, -19, 8192, -20]
_HEAD += [1024, -21, 1024, -22, -23, 12800000]


def _trace(after_cat: tuple[int, int, int], after_head: int) -> list[int]:
    return [*_HEAD, *(-k for k in after_cat), 12800000, -24, -25, -12, 320000, -after_head]


def _buffers(trace: list[int]) -> list[Buffer]:
    """One step per event: a buffer starts at its allocation and ends just before its free;
    the trace ends with the Upsample's 81.92 MB output, then conv2d_60 and it are freed."""
    trace = [*trace, 81920000, -26, -27]
    bufs: list[Buffer] = []
    for t, x in enumerate(trace):
        if x > 0:
            bufs.append(Buffer(len(bufs) + 1, x, t, len(trace)))
        else:
            bufs[-x - 1].end = t - 1
    return bufs


@pytest.mark.parametrize(
    ("after_cat", "after_head", "ort_block"),
    [
        ((17, 16, 11), 18, 82_240_000),
        ((16, 18, 17), 11, 84_800_000),
        ((17, 18, 11), 16, 159_040_000),
        ((16, 18, 11), 17, 161_600_000),
    ],
)
def test_best_fit_replays_ort_pattern_block_of_traced_processes(after_cat, after_head, ort_block):
    bufs = _buffers(_trace(after_cat, after_head))
    peak, placements = best_fit(bufs, align=64)
    assert peak == ort_block  # exact (atol = 0): the size ORT requested in run 2
    assert check_no_overlap(placements)


def test_tail_gap_beats_a_looser_inner_gap():
    """Live [0,10) and [50,60), high-water 96: a 35-byte tensor wastes 5 in the inner gap and 1
    in the tail [60,96), so ORT puts it at 60 (the pre-tail rule put it at 10)."""
    bufs = [
        Buffer(0, 10, 0, 9),  # stays live
        Buffer(1, 40, 0, 1),  # frees [10,50)
        Buffer(2, 10, 0, 9),  # stays live at 50
        Buffer(3, 36, 0, 1),  # raises the high-water mark to 96, then frees
        Buffer(4, 35, 2, 9),
    ]
    peak, placements = best_fit(bufs, align=1)
    assert {p.buffer.id: p.offset for p in placements}[4] == 60
    assert peak == 96
