"""Disjoint sets over a ``parent`` map: nodes that a runtime merges into one compiled piece.

Why: both OpenVINO estimators group nodes the way the runtime does (Snippets subgraphs in the
CPU plugin, the EP's connected clusters), and both need the same root lookup.
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def find_root(parent: dict[T, T], x: T) -> T:
    """The root of ``x``'s set, halving the path on the way (``parent[root] == root``)."""
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x
