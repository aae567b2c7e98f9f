"""Offset planners: place buffers in one arena so that buffers alive together never overlap.

* ``naive`` — no reuse: the sum of all buffers.
* ``greedy_by_size`` — largest first, each at the lowest offset free of every already placed
  buffer whose lifetime overlaps (the classic TFLite/"greedy by size" planner).
* ``best_fit`` — in allocation order, the smallest gap that fits among the blocks alive now,
  the free tail below the high-water mark counting as a gap, else the end: the rule of ONNX
  Runtime's ``MemPatternPlanner`` (``mem_pattern_planner.h``, non-counter ``TraceAllocation``).
* ``lower_bound`` — the most bytes alive at any step; every plan is at least this.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memshrink.estimate.lifetimes import Buffer, lower_bound


@dataclass
class Placement:
    buffer: Buffer
    offset: int


def naive(bufs: Sequence[Buffer]) -> int:
    return sum(b.size for b in bufs)


def _overlap(a: Buffer, b: Buffer) -> bool:
    return a.start <= b.end and b.start <= a.end


def greedy_by_size(bufs: Sequence[Buffer]) -> tuple[int, list[Placement]]:
    n_steps = max((b.end for b in bufs), default=-1) + 1
    at_step: list[list[Placement]] = [[] for _ in range(n_steps)]
    placed: list[Placement] = []
    for b in sorted(bufs, key=lambda x: (-x.size, x.start, x.id)):
        if b.size == 0:
            placed.append(Placement(b, 0))
            continue
        seen: dict[int, tuple[int, int]] = {}
        for s in range(b.start, b.end + 1):
            for p in at_step[s]:
                seen[p.buffer.id] = (p.offset, p.offset + p.buffer.size)
        offset = 0
        for lo, hi in sorted(seen.values()):
            if lo - offset >= b.size:
                break
            offset = max(offset, hi)
        pl = Placement(b, offset)
        placed.append(pl)
        for s in range(b.start, b.end + 1):
            at_step[s].append(pl)
    total = max((p.offset + p.buffer.size for p in placed), default=0)
    return total, placed


def best_fit(bufs: Sequence[Buffer], align: int = 64) -> tuple[int, list[Placement]]:
    """ORT ``MemPatternPlanner``: trace allocations in order, frees after their last step.

    Candidates are the gaps between the blocks alive now *and* the free tail between the last
    live block and the high-water mark (``buffer_size_``); the least waste wins, earlier on
    ties; with none, the block goes at the end of the live blocks. The tail candidate is why a
    small tensor can sit high in the block and push a later large one above it: ORT 1.32's
    pattern for deeplab-800 is 82.24, 84.80, 159.04 or 161.60 MB by process (the order of its
    hash-numbered ``ReorderOutput`` nodes), and this rule replays each of 10 traced processes
    exactly (docs/estimate.md, "The memory-pattern block's tail gap").
    """
    events: list[tuple[int, int, int, Buffer]] = []
    for b in bufs:
        events.append((b.start, 1, b.id, b))  # alloc at start (after frees of start-1)
        events.append((b.end, 2, b.id, b))  # free after step end
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    blocks: list[tuple[int, int, int]] = []  # (offset, size, buffer id), sorted as ORT's list
    where: dict[int, Placement] = {}
    peak = 0
    for _, kind, bid, b in events:
        if kind == 2:
            blocks = [blk for blk in blocks if blk[2] != bid]
            continue
        size = -(-b.size // align) * align if b.size else 0
        if size == 0:
            where[bid] = Placement(b, 0)
            continue
        current = 0
        best, waste = None, None
        for off, sz, _ in blocks:
            if off >= current:
                gap = off - current
                if gap >= size and (waste is None or gap - size < waste):
                    best, waste = current, gap - size
            current = max(current, off + sz)
        tail = peak - current
        if tail >= size and (waste is None or tail - size < waste):
            best = current
        offset = current if best is None else best
        peak = max(peak, offset + size)
        # ORT inserts before the first block at a higher offset, or at the same offset and
        # at least as large (``blocks_.insert``)
        pos = next(
            (i for i, (o, s, _) in enumerate(blocks) if o > offset or (o == offset and s >= size)),
            len(blocks),
        )
        blocks.insert(pos, (offset, size, bid))
        where[bid] = Placement(b, offset)
    return peak, [where[b.id] for b in bufs if b.id in where]


def check_no_overlap(placements: Sequence[Placement]) -> bool:
    """True when no two simultaneously live buffers share a byte (used by the tests)."""
    ps = [p for p in placements if p.buffer.size]
    for i, a in enumerate(ps):
        for b in ps[i + 1 :]:
            if _overlap(a.buffer, b.buffer) and (
                a.offset < b.offset + b.buffer.size and b.offset < a.offset + a.buffer.size
            ):
                return False
    return True


def all_planners(bufs: Sequence[Buffer], n_steps: int) -> dict[str, int]:
    return {
        "naive": naive(bufs),
        "greedy_by_size": greedy_by_size(bufs)[0],
        "best_fit": best_fit(bufs)[0],
        "lower_bound": lower_bound(bufs, n_steps),
    }
