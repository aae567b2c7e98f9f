"""Choose band edges so that no two chunks have a large tensor of the same shape.

Why: ONNX Runtime's allocation planner hands a freed buffer to a later tensor of exactly the
same shape (``SameSize``). When chunk ``j`` and a later chunk ``k`` both have a tensor of some
shape, the later one takes the earlier one's buffer, and that buffer stays allocated from
chunk ``j`` to chunk ``k``. With equal bands every layer's buffer is chained through all chunks,
so a whole chunk's tensors are alive at once (``docs/chunk.md``). Staggered bands (sizes
growing by a fixed step) avoid most of that but make the last band large, and a small step
still collides after strided layers divide the difference away. This module searches band
edges near the equal split, chunk by chunk, so that each chunk's large tensors (at least
``min_elems`` elements) share no shape with any earlier chunk's; the estimator then judges
the result like any other candidate.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

from memshrink.transforms.chunking.region import Region, chunk_rows, output_extent
from memshrink.transforms.chunking.rules import Refuse

Signature = frozenset[tuple[int, ...]]


def chunk_shapes(region: Region, k: int, count: int, edges: Sequence[int]) -> list[tuple[int, ...]]:
    """Shapes of the tensors chunk ``k`` creates (node outputs and the slices it reads), less
    those a chunk computes whole (deep layers whose halo covers the map): every chunk has
    those, no band edge can make them differ."""
    rows = chunk_rows(region, k, count, edges=edges)
    out: list[tuple[int, ...]] = []
    for node, rng in rows.node_range.items():
        f = region.facts[node]
        ax = region.out_axis[node]
        for s in f.out_shapes:
            if s is not None and rng[1] - rng[0] < s[ax]:
                out.append(tuple(rng[1] - rng[0] if i == ax else d for i, d in enumerate(s)))
        for i, c in enumerate(rows.clipped[node]):
            x, s = node.inputs[i], f.in_shapes[i]
            a = region.in_axes[node][i]
            if c is None or x is None or s is None or a is None:
                continue
            if (
                rows.value_range.get(x) != c and c[1] - c[0] < s[a]
            ):  # a slice of a wider range: its own tensor
                out.append(tuple(c[1] - c[0] if j == a else d for j, d in enumerate(s)))
    return out


def _signature(
    region: Region, k: int, count: int, edges: Sequence[int], min_elems: int
) -> Signature:
    return frozenset(s for s in chunk_shapes(region, k, count, edges) if prod(s) >= min_elems)


def distinct_edges(region: Region, count: int, min_elems: int) -> list[int] | None:
    """Band edges that keep every chunk's large shapes apart (``exact_edges``), else the
    greedy ones that collide least (``greedy_edges``)."""
    return exact_edges(region, count, min_elems) or greedy_edges(region, count, min_elems)


def exact_edges(
    region: Region, count: int, min_elems: int, max_tries: int = 2000
) -> list[int] | None:
    """Band edges (``count + 1`` rows on the scale of ``output_extent``) near the equal split
    whose chunks share no shape of at least ``min_elems`` elements; None if none was found
    within ``max_tries`` chunk evaluations.

    Depth-first over chunks: chunk ``k``'s end is tried at the equal split of the rows left,
    then one row off either side, and so on up to a quarter band; the last chunk ends at the
    extent. A chunk whose large shapes collide with an earlier chunk's is backtracked.
    """
    extent = output_extent(region)
    if extent < count:
        return None
    tries = 0
    edges = [0] * (count + 1)
    edges[count] = extent
    seen: list[Signature] = []

    def place(k: int) -> bool:
        nonlocal tries
        start, left = edges[k], count - k
        for end in _ends(start, left, extent, count, 4):
            tries += 1
            if tries > max_tries:
                return False
            edges[k + 1] = end
            try:
                sig = _signature(region, k, count, edges, min_elems)
            except Refuse:
                continue
            if any(sig & s for s in seen):
                continue
            seen.append(sig)
            if left == 1 or place(k + 1):
                return True
            seen.pop()
        return False

    return list(edges) if place(0) else None


def _ends(start: int, left: int, extent: int, count: int, spread: int) -> list[int]:
    """Where a chunk starting at ``start`` may end: the equal split of the rows left first,
    then up to 1/``spread`` of a band either side, nearest first."""
    if left == 1:
        return [extent]
    ideal = start + round((extent - start) / left)
    span = max(1, (extent // count) // spread)
    ends = [ideal + d for i in range(span + 1) for d in ((i, -i) if i else (0,))]
    return [e for e in ends if start < e < extent - (left - 1)]


def greedy_edges(region: Region, count: int, min_elems: int, spread: int = 4) -> list[int] | None:
    """Band edges (``count + 1`` rows on the scale of ``output_extent``) near the equal split
    whose chunks share as few large shapes (at least ``min_elems`` elements) as possible.

    Greedy over chunks: chunk ``k``'s end is tried at the equal split of the rows left and up
    to 1/``spread`` of a band either side; the end whose large shapes collide least (in
    elements) with earlier chunks' wins, the nearer one on ties. The last chunk ends at the
    extent. None when the extent has fewer rows than chunks or a band would be empty.
    """
    extent = output_extent(region)
    if extent < count:
        return None
    edges = [0] * (count + 1)
    edges[count] = extent
    seen: set[tuple[int, ...]] = set()
    for k in range(count):
        best: tuple[int, int, Signature] | None = None
        for end in _ends(edges[k], count - k, extent, count, spread):
            edges[k + 1] = end
            try:
                sig = _signature(region, k, count, edges, min_elems)
            except Refuse:
                continue
            clash = sum(prod(s) for s in sig if s in seen)
            if best is None or clash < best[0]:
                best = (clash, end, sig)
            if clash == 0:
                break
        if best is None:
            return None
        edges[k + 1] = best[1]
        seen |= best[2]
    return edges
