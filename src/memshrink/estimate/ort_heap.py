"""The large heap events of ORT CPU session creation (``CreationBlocks``), for the glibc replay.

ORT's BFC arena takes its regions from ``malloc`` (``posix_memalign``). glibc serves a request
from a free heap chunk when one fits (best fit), whatever its size; only when none does is a
request at or above the dynamic mmap threshold mmapped (fresh pages) or a smaller one carved
from the top of the heap (fresh pages too). Session creation frees many weight copies
(``ort_weights``): those that were heap-served leave resident holes, and an arena region
placed in one adds no RSS.

Measured with ORT's verbose arena log (region addresses) and ``/proc/self/smaps``: ResNet-50
b16 (embedded) puts its first 64 MiB region inside ``[heap]`` (heap size unchanged) and the
second one in a fresh mapping; batch-1 ResNet-50 (embedded or external) puts all its regions
in the heap with no growth; ZFNet's 8 MiB regions extend the heap top (its 9 MiB filters were
all mmapped: equal to the threshold); Inception, DenseNet, ShuffleNet and VGG-19 regions are
fresh mappings (no hole large enough). ``glibc_heap`` replays the events (best fit,
coalescing, the threshold, the aligned blocks' pinned spares); ``glibc_heap.hole_shares``
says which regions fit. An earlier replay here (no pinned spares: every freed neighbour
merged) credited resnet50-960 nested bands' run 1 with 21 MiB in every process; processes
whose 4 MiB holes were pinned measured about 6 (docs/estimate.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

CHUNK_OVERHEAD = 16  # malloc chunk header


@dataclass
class CreationBlocks:
    """The large heap events of ORT CPU session creation, in order (from ``ort_weights``)."""

    events: list[tuple[str, str, int]] = field(default_factory=list)  # (op, key, bytes)
    # op: alloc | free | touch (the block's written bytes grow to ``bytes``)
    aligned: set[str] = field(default_factory=set)  # keys from ORT's allocator (posix_memalign)
    copies: set[str] = field(default_factory=set)  # embedded: session state's initializer copies
    threshold: int = 0  # glibc's dynamic mmap threshold when creation starts (0: its default)
    # blocks written only in part when allocated (a protobuf string's doubled capacity): the
    # bytes written then; an mmapped block's untouched pages are not resident
    written: dict[str, int] = field(default_factory=dict)

    def alloc(
        self,
        key: str,
        n: int,
        *,
        aligned: bool = False,
        copy: bool = False,
        written: int | None = None,
    ) -> None:
        if n > 0:
            self.events.append(("alloc", key, n + CHUNK_OVERHEAD))
            if aligned:
                self.aligned.add(key)
            if copy:
                self.copies.add(key)
            if written is not None and written < n:
                self.written[key] = written

    def touch(self, key: str, written: int) -> None:
        """The block ``key`` has now been written up to ``written`` bytes."""
        self.events.append(("touch", key, written))

    def free(self, *keys: str) -> None:
        self.events.extend(("free", k, 0) for k in keys)
