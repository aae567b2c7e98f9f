"""glibc heap replay of ORT CPU session creation: which arena regions land in freed weight holes.

ORT's BFC arena takes its regions from ``malloc`` (``posix_memalign``). glibc serves a request
from a free heap chunk when one fits (best fit), whatever its size; only when none does is a
request at or above the dynamic mmap threshold mmapped (fresh pages) or a smaller one carved
from the top of the heap (fresh pages too). Freeing an mmapped chunk of up to 32 MiB raises the
threshold to its size. Session creation frees many weight copies (``ort_weights``): those that
were heap-served leave resident holes, and an arena region placed in one adds no RSS.

Measured with ORT's verbose arena log (region addresses) and ``/proc/self/smaps``: ResNet-50
b16 (embedded) puts its first 64 MiB region inside ``[heap]`` (heap size unchanged) and the
second one in a fresh mapping; batch-1 ResNet-50 (embedded or external) puts all its regions
in the heap with no growth; ZFNet's 8 MiB regions extend the heap top (its 9 MiB filters were
all mmapped: equal to the threshold); Inception, DenseNet, ShuffleNet and VGG-19 regions are
fresh mappings (no hole large enough). This module replays the creation sequence by address
(best fit, coalescing, the threshold) from shapes only and reports which regions fit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

MiB = 1 << 20
MMAP_THRESHOLD_START = 128 * 1024  # glibc DEFAULT_MMAP_THRESHOLD
MMAP_THRESHOLD_MAX = 32 * MiB  # DEFAULT_MMAP_THRESHOLD_MAX, 64-bit
CHUNK_OVERHEAD = 16  # malloc chunk header
PAGE = 4096
MEMALIGN_OVERHEAD = 64 + 32  # posix_memalign(64, n): alignment slack + MINSIZE


@dataclass
class _Seg:
    addr: int
    size: int
    free: bool


@dataclass
class Heap:
    """Address-ordered emulation of glibc's main arena for large blocks (small ones ignored)."""

    threshold: int = MMAP_THRESHOLD_START
    segs: list[_Seg] = field(default_factory=list)
    top: int = 0
    mmapped: dict[int, int] = field(default_factory=dict)  # handle -> size of mmapped blocks
    next_mmap: int = -1

    @property
    def holes(self) -> int:
        """Free bytes below the top: resident, reusable."""
        return sum(s.size for s in self.segs if s.free)

    def alloc(self, n: int) -> tuple[int, str]:
        """Place a block of ``n`` bytes: returns (handle, 'hole' | 'top' | 'mmap')."""
        best: _Seg | None = None
        at = -1
        for i, s in enumerate(self.segs):
            if s.free and s.size >= n and (best is None or s.size < best.size):
                best, at = s, i
        if best is not None:
            if best.size > n:  # (an index, not segs.index: dataclass equality is by value)
                self.segs.insert(at + 1, _Seg(best.addr + n, best.size - n, True))
                best.size = n
            best.free = False
            return best.addr, "hole"
        if n >= self.threshold:
            h = self.next_mmap
            self.next_mmap -= 1
            # sysmalloc maps ALIGN_UP(n + SIZE_SZ, page): the chunk's size, which a free
            # turns into the new threshold, so a later request of the same size is heap-served
            self.mmapped[h] = -(-(n + 8) // PAGE) * PAGE
            return h, "mmap"
        self.segs.append(_Seg(self.top, n, False))
        self.top += n
        return self.segs[-1].addr, "top"

    def free(self, handle: int) -> None:
        if handle in self.mmapped:
            n = self.mmapped.pop(handle)
            if self.threshold < n <= MMAP_THRESHOLD_MAX:
                self.threshold = n
            return
        i = next(k for k, s in enumerate(self.segs) if s.addr == handle and not s.free)
        self.segs[i].free = True
        if i + 1 < len(self.segs) and self.segs[i + 1].free:
            self.segs[i].size += self.segs.pop(i + 1).size
        if i > 0 and self.segs[i - 1].free:
            self.segs[i - 1].size += self.segs.pop(i).size
            i -= 1
        last = self.segs[-1]
        if last.free and last.size >= 2 * self.threshold:  # trim: the top goes back to the OS
            self.top = last.addr
            self.segs.pop()


@dataclass
class CreationBlocks:
    """The large heap events of ORT CPU session creation, in order (from ``ort_weights``)."""

    events: list[tuple[str, str, int]] = field(default_factory=list)  # (op, key, bytes)
    # op: alloc | free
    aligned: set[str] = field(default_factory=set)  # keys from ORT's allocator (posix_memalign)
    copies: set[str] = field(default_factory=set)  # embedded: session state's initializer copies

    def alloc(self, key: str, n: int, *, aligned: bool = False, copy: bool = False) -> None:
        if n > 0:
            self.events.append(("alloc", key, n + CHUNK_OVERHEAD))
            if aligned:
                self.aligned.add(key)
            if copy:
                self.copies.add(key)

    def free(self, *keys: str) -> None:
        self.events.extend(("free", k, 0) for k in keys)


def replay(blocks: CreationBlocks) -> Heap:
    """The heap after session creation's large allocations and frees (external data; embedded
    weights are replayed by ``glibc_heap.embedded_modes``)."""
    heap = Heap()
    live: dict[str, int] = {}
    for op, key, n in blocks.events:
        if op == "alloc":
            live[key], _ = heap.alloc(n)
        elif key in live:
            heap.free(live.pop(key))
    return heap


def regions_in_holes(blocks: CreationBlocks, regions: Iterable[int]) -> list[bool]:
    """Replay creation, then place each arena region (in extension order): True where glibc
    serves it from a free heap chunk (resident already: its pages add nothing)."""
    heap = replay(blocks)
    return [heap.alloc(r + MEMALIGN_OVERHEAD)[1] == "hole" for r in regions]
