"""``posix_memalign(64)``'s chunk and trailing spare from the block's address
(``glibc_heap.aligned_chunk``, ``trailing_spare``) and the ``classes`` replay they give.

Known answers from glibc 2.36's ``_int_memalign`` arithmetic and an ``LD_PRELOAD`` trace of
embedded multibranch in the verifier's child (docs/estimate.md, "Session 12"): 221,184-byte
filters carved from the top one after another sit 221,312 bytes apart in a process whose
blocks keep no spare, and every block of such a run keeps the same spare size."""

from __future__ import annotations

from memshrink.estimate.glibc_heap import (
    CLASSES,
    aligned_chunk,
    replay,
    request2size,
    trailing_spare,
)
from memshrink.estimate.ort_heap import CreationBlocks

MiB = 1 << 20


def test_aligned_chunk_is_request2size_of_the_padded_request():
    # _int_malloc(request2size(n) + 64 + 32), rounded again: n + 128 for n = 0 mod 64
    assert aligned_chunk(221184) == 221312  # traced: consecutive filters 221,312 bytes apart
    assert aligned_chunk(884736) == 884736 + 128
    assert aligned_chunk(100) == request2size(request2size(100) + 96) == 224
    assert aligned_chunk(221184) % 64 == 0  # a run carved from the top keeps its class


def test_trailing_spare_by_address_class():
    # user pointer = chunk + 16 + lead; the lead is at least 32 bytes (MINSIZE) when not 0
    n = 221184
    assert [trailing_spare(a, n) for a in (0, 16, 32, 48)] == [64, 80, 0, 112]
    assert trailing_spare(48 + 64 * 1000, n) == 112  # only the address mod 64 counts


def _run(k: int, n: int) -> CreationBlocks:
    """``k`` equal aligned blocks carved from the top, one live block after them, then all
    ``k`` freed (a phase of session copies or conversions)."""
    b = CreationBlocks()
    b.alloc("big", 9 * MiB)  # mmapped and freed: the threshold rises, the rest is heap-served
    b.free("big")
    for i in range(k):
        b.alloc(f"c{i}", n, aligned=True)
    b.alloc("live", MiB)
    b.free(*(f"c{i}" for i in range(k)))
    return b


def test_a_run_of_blocks_pins_or_merges_as_a_whole():
    """The class is one per run: with a spare every block's hole stays apart (no 2n request
    fits), without one (the 80-byte-lead class) the k holes merge into one region."""
    n = 8 * MiB
    b = _run(6, n)
    heaps = [replay(b, spares="classes", seed=s) for s in range(CLASSES)]
    fits = [h.clone().place(2 * n) == "hole" for h in heaps]
    # exactly one of the four heap starts leaves no spare (base 32: chunk + 16 = 48 mod 64)
    assert fits == [False, False, True, False]
    whole = heaps[2]
    assert whole.clone().place(6 * n) == "hole"  # the run's region is one hole
    # same heap extent in every class: the blocks were carved from the top either way
    assert len({h.top for h in heaps}) == 1


def test_classes_replays_are_the_extremes_not_a_middle():
    """Every class replay's heap equals the all-pinned or the consolidated one, never a
    mix (the per-block coins of ``partly_pinned`` make mixes no traced process had)."""
    b = _run(8, 8 * MiB)
    pinned = replay(b, spares="pinned").holes
    merged = replay(b, spares="consolidated").holes
    for s in range(CLASSES):
        h = replay(b, spares="classes", seed=s)
        assert h.holes in (pinned, merged)
        assert (h.clone().place(16 * MiB) == "hole") == (s == 2)
