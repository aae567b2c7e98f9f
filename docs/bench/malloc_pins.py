"""Which aligned blocks' spares pinned, and why, in ``malloc_trace.py`` logs.

    python docs/bench/malloc_pins.py DIR/log0 [DIR/log1 ...] [--threshold 266240]

Why: ``glibc_heap`` assumes an aligned block's trailing spare pins (keeps the block's hole
apart from its neighbour) in 3 address rotations of 4; zoo Inception v2's heap says about a
third pinned (docs/estimate.md, "Which aligned spares pin"). ``malloc_trace.c`` logs, for every
``posix_memalign``/``aligned_alloc``, the tcache counts of the 48-128-byte bins before the call
and the chunk after the block (its spare), and for every free the next chunk's size and whether
it is in use or in the tcache. Per log this prints, for the blocks of >= 64 KiB, by role
(``src``: freed right after its new copy, the Conv fusion's and NCHWc's sources, recognised as
the aligned call followed by a plain malloc; ``kept``: the rest) and by the spare's bin at the
allocation (``room``, ``full``, ``nospare``), how many were pinned at their free (the next chunk
in use: tcache, fastbin or a live small block) and how many merged; then the heap left by the
trace replayed through ``glibc_heap.GlibcHeap`` with no spare pinned, with each block pinned as
the log says, and with every spare pinned.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from malloc_trace import MARK, session_events  # noqa: E402

from memshrink.estimate.glibc_heap import GlibcHeap  # noqa: E402

MiB = 1 << 20
BIN = {48: 0, 64: 1, 80: 2, 96: 3, 112: 4, 128: 5}  # spare chunk size -> digit of the counts


def _events(log: str) -> list[list[str]]:
    return [
        e
        for e in session_events(log)
        if e[0] == "f" or (int(e[2]) >= 1024 and not MARK <= int(e[2]) < MARK + 20)
    ]


def pins(ev: list[list[str]]) -> dict[int, str]:
    """Per aligned allocation (event index), its state at its free: ``pinned`` (the next chunk
    is in use), ``merged``, ``nospare`` (no trailing spare was split off) or ``top`` (mmapped,
    or next to the top)."""
    live: dict[str, int] = {}
    out: dict[int, str] = {}
    for i, e in enumerate(ev):
        if e[0] in "mcaAr":
            live[e[1]] = i
            continue
        j = live.pop(e[1], None)
        if j is None or ev[j][0] not in "aA":
            continue
        a = ev[j]
        if len(e) < 7 or e[6] == "-":
            out[j] = "top"
        elif int(a[3], 16) & ~7 != (int(a[2]) + 8 + 15) & ~15:
            out[j] = "nospare"
        else:
            out[j] = "pinned" if e[6].split(":")[1] == "1" else "merged"
    return out


def by_role(ev: list[list[str]], state: dict[int, str]) -> dict[tuple[str, str], Counter[str]]:
    out: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for j, s in state.items():
        a = ev[j]
        if int(a[2]) < 65536 or len(a) < 8 or a[6] == "-":
            continue
        role = "src" if j + 1 < len(ev) and ev[j + 1][0] == "m" else "kept"
        spare = int(a[7])
        if s == "nospare" or spare not in BIN:
            where = "nospare"
        else:
            where = "full" if int(a[6][BIN[spare]], 16) >= 7 else "room"
        out[(role, where)][s] += 1
    return out


def replay(ev: list[list[str]], pinned: set[int], threshold: int) -> GlibcHeap:
    """The trace through the replay's heap, ``pinned`` the aligned allocations whose spare pins."""
    heap = GlibcHeap(threshold, 2 * threshold)
    live: dict[str, int] = {}
    for i, e in enumerate(ev):
        if e[0] == "f" or (e[0] == "r" and e[5] != "0"):
            old = e[1] if e[0] == "f" else e[5]
            if old in live:
                heap.free(live.pop(old))
            if e[0] == "f":
                continue
        aligned = e[0] in "aA"
        live[e[1]] = heap.alloc(int(e[2]), aligned=aligned, pin=i in pinned)
    return heap


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--threshold", type=int, default=260 * 1024, help="mmap threshold at creation")
    a = ap.parse_args(argv)
    for log in a.logs:
        ev = _events(log)
        state = pins(ev)
        print(log)
        for (role, where), c in sorted(by_role(ev, state).items()):
            print(
                f"  {role:4s} bin {where:8s} " + " ".join(f"{k} {v}" for k, v in sorted(c.items()))
            )
        aligned = {i for i, e in enumerate(ev) if e[0] in "aA"}
        real = {i for i, s in state.items() if s == "pinned"}
        heaps = [replay(ev, p, a.threshold) for p in (set(), real, aligned)]
        print("  heap top, MiB: no pins / as logged / all pinned " + " / ".join(
            f"{h.resident / MiB:.1f}" for h in heaps))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
