"""Execution orders the runtimes actually use, emulated on the graph as written.

The order decides which tensors are alive together, so the estimator must follow the runtime,
not a textbook topological sort:

* ``file`` — node order in the file.
* ``ort_default`` — ONNX Runtime's DEFAULT order (``graph_viewer.cc``): a reverse depth-first
  search from the leaf nodes (nodes none of whose outputs feed another node), leaves pushed in
  index order and each node's producers pushed in ascending index order, so the highest-index
  branch is finished first; a node is emitted when it is left (post-order).
* ``ort_priority`` — PRIORITY_BASED: Kahn's algorithm, Shape/Size first, then the lowest node
  index; on a topologically sorted file with no fusion this is file order.
* ``openvino`` — an approximation of the CPU plugin's sort: depth-first post-order from the
  graph outputs in order, visiting a node's inputs in argument order, except that a Conv that
  absorbs a residual Add visits the summed input after its own (``ov_order``).

ONNX Runtime's graph optimizations replace and renumber nodes: for ORT CPU the estimator takes
these orders on the rewritten graph (``ort_optimized.py``), which is how PRIORITY_BASED comes to
run about ``D(F)`` and DEFAULT about ``D(D(F))`` of a file order ``F`` on fused CNNs; the
``reorder``/``recompute`` passes score the graph as written with all three.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence

from memshrink.errors import UsageError
from memshrink.estimate.graph import GraphInfo

SCHEDULES = ("file", "ort_default", "ort_priority", "openvino")


def sorted_producers(g: GraphInfo) -> list[list[int]]:
    """Per node: the sorted, de-duplicated indices of the nodes producing its inputs (the
    predecessors ORT's orders walk; ``transforms.reorder`` searches over them too)."""
    out: list[list[int]] = []
    for node in g.nodes:
        ps = set()
        for n in node.inputs + node.implicit_inputs:
            t = g.tensors.get(n) if n else None
            if t is not None and t.producer is not None:
                ps.add(t.producer)
        out.append(sorted(ps))
    return out


def reverse_dfs(keys: Sequence[int], preds: Mapping[int, Sequence[int]]) -> list[int]:
    """ORT DEFAULT's walk: from the nodes nobody consumes (in ``keys`` order), a depth-first
    post-order over ``preds`` (ascending: the highest index ends on top of the stack and runs
    first). Shared by the written graph and ``ort_optimized``'s rewritten one."""
    has_consumer = {p for k in keys for p in preds[k]}
    stack: list[tuple[int, bool]] = [(i, False) for i in keys if i not in has_consumer]
    visited: set[int] = set()
    order: list[int] = []
    while stack:
        idx, leave = stack.pop()
        if leave:
            order.append(idx)
            continue
        if idx in visited:
            continue
        visited.add(idx)
        stack.append((idx, True))
        stack.extend((p, False) for p in preds[idx])
    return order


def ort_default(g: GraphInfo) -> list[int]:
    prods = sorted_producers(g)
    return reverse_dfs(range(len(g.nodes)), dict(enumerate(prods)))


def ort_priority(g: GraphInfo) -> list[int]:
    prods = sorted_producers(g)
    indeg = [len(ps) for ps in prods]
    succ: list[list[int]] = [[] for _ in g.nodes]
    for i, ps in enumerate(prods):
        for p in ps:
            succ[p].append(i)

    def key(i: int) -> tuple[int, int]:
        return (0 if g.nodes[i].op_type in ("Shape", "Size") else 1, i)

    heap = [key(i) for i in range(len(g.nodes)) if indeg[i] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _, i = heapq.heappop(heap)
        order.append(i)
        for s in succ[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, key(s))
    if len(order) != len(g.nodes):
        raise UsageError("the graph has a cycle; no execution order exists")
    return order


def dfs_postorder(
    g: GraphInfo,
    producers: list[list[int]],
    choose: Callable[[int, list[int]], list[int]] | None = None,
) -> list[int]:
    """Depth-first post-order from the graph outputs, dangling nodes last: every node once.

    ``producers[i]`` lists node ``i``'s producers in the order they run; ``choose(node,
    branches)`` may reorder the unvisited ones at a join (``reorder``'s branch search).
    """
    visited = [False] * len(g.nodes)
    order: list[int] = []
    roots = [g.tensors[o].producer for o in g.outputs if o in g.tensors]
    for root in [r for r in roots if r is not None] + list(range(len(g.nodes))):
        if visited[root]:
            continue
        stack: list[tuple[int, bool]] = [(root, False)]
        while stack:
            idx, leave = stack.pop()
            if leave:
                order.append(idx)
                continue
            if visited[idx]:
                continue
            visited[idx] = True
            stack.append((idx, True))
            ps = [p for p in producers[idx] if not visited[p]]
            if choose is not None and len(ps) > 1:
                ps = choose(idx, ps)
            for p in reversed(ps):  # first in ps runs first
                stack.append((p, False))
    return order


def argument_producers(g: GraphInfo) -> list[list[int]]:
    """Each node's producers in argument order (implicit subgraph inputs last)."""
    out = []
    for node in g.nodes:
        ps = []
        for n in node.inputs + node.implicit_inputs:
            t = g.tensors.get(n) if n else None
            if t is not None and t.producer is not None:
                ps.append(t.producer)
        out.append(ps)
    return out


def openvino(g: GraphInfo) -> list[int]:
    """OpenVINO's topological order: DFS from the outputs, first argument visited first, over
    the plugin's fused graph (a Conv + Sum visits the summed input last: ``ov_order``)."""
    from memshrink.estimate.ov_order import openvino_order  # ov_order imports this module

    return openvino_order(g)


def schedule(g: GraphInfo, name: str) -> list[int]:
    """Return node indices in the named runtime's execution order (folded nodes left out:
    the runtime computed them once at load time)."""
    if name == "file":
        order = list(range(len(g.nodes)))
    elif name == "ort_default":
        order = ort_default(g)
    elif name == "ort_priority":
        order = ort_priority(g)
    elif name == "openvino":
        order = openvino(g)
    else:
        raise UsageError(f"unknown schedule {name!r}; choose one of {', '.join(SCHEDULES)}")
    return [i for i in order if i not in g.folded] if g.folded else order
