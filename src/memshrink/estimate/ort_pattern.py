"""ORT CPU's memory-pattern block over the orders a process can run (hash-numbered nodes).

ORT's NCHWc transformer adds its final ``ReorderOutput`` nodes while walking an
``unordered_map`` keyed by NodeArg pointers, so their node indices, and with them the DEFAULT
order among sibling branches that end in one, change from process to process (ORT's profiler:
deeplab-800's four ASPP branches ran in 14 different orders in 18 processes). The op sequence
and every tensor size stay the same, but the memory-pattern planner's layout does not
(``planners.best_fit``: a small tensor in the free tail below the high-water mark can push a
later large one above it). deeplab-800's block is 82.24, 84.80, 159.04 or 161.60 MB, each for
6 of the 24 branch orders. 18 traced processes each got the block this replay gives for their
order. This module replays the schedule with those indices permuted and returns each distinct
order's block.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from memshrink.estimate.graph import GraphInfo
from memshrink.estimate.ort_optimized import NCHWC_DOMAIN
from memshrink.estimate.schedule import reverse_dfs, sorted_producers

PERMUTATIONS = 120  # index permutations tried (all of them when there are fewer)
MAX_ORDERS = 24  # distinct orders planned at most (each costs one allocation plan)


@dataclass
class PatternBand:
    """The block per distinct order; ``orders[i]`` gave ``blocks[i]`` (bytes)."""

    orders: list[list[int]]
    blocks: list[int]
    hash_nodes: int  # hash-numbered nodes whose indices were permuted

    @property
    def low(self) -> int:
        return min(self.blocks)

    @property
    def high(self) -> int:
        return max(self.blocks)

    def share_at_least(self, size: int) -> float:
        return sum(b >= size for b in self.blocks) / len(self.blocks)


def hash_numbered(g: GraphInfo) -> list[int]:
    """Nodes whose index ORT assigns in hash order: the NCHWc transformer's ``ReorderOutput``."""
    return [
        i
        for i, n in enumerate(g.nodes)
        if n.op_type == "ReorderOutput" and n.domain == NCHWC_DOMAIN
    ]


def default_order(g: GraphInfo, rank: Mapping[int, int]) -> list[int]:
    """``schedule.ort_default`` with node ``i`` numbered ``rank.get(i, i)``."""

    def key(i: int) -> int:
        return rank.get(i, i)

    preds = {i: sorted(ps, key=key) for i, ps in enumerate(sorted_producers(g))}
    return reverse_dfs(sorted(range(len(g.nodes)), key=key), preds)


def orders(g: GraphInfo, seed: int = 0) -> list[list[int]]:
    """The distinct DEFAULT orders under permuted hash-numbered indices (up to ``MAX_ORDERS``;
    all permutations when there are at most ``PERMUTATIONS``, else that many seeded ones)."""
    nodes = hash_numbered(g)
    if len(nodes) < 2:
        return []
    if math.factorial(len(nodes)) <= PERMUTATIONS:
        perms: list[list[int]] = [list(p) for p in itertools.permutations(nodes)]
    else:
        rng = random.Random(seed)
        perms = [list(nodes)] + [rng.sample(nodes, len(nodes)) for _ in range(PERMUTATIONS - 1)]
    seen: dict[tuple[int, ...], list[int]] = {}
    for perm in perms:
        o = default_order(g, dict(zip(nodes, perm, strict=True)))
        seen.setdefault(tuple(o), o)
        if len(seen) >= MAX_ORDERS:
            break
    return list(seen.values())


def pattern_band(g: GraphInfo, block_of: Callable[[list[int]], int]) -> PatternBand | None:
    """Each distinct order's block (``block_of(order)``); None when the order cannot vary."""
    os_ = orders(g)
    if len(os_) < 2:
        return None
    return PatternBand(os_, [block_of(o) for o in os_], len(hash_numbered(g)))
