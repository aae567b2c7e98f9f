"""A Loop's iterations through the CUDA arena, request by request (ONNX Runtime ``loop.cc``).

Why not one body-sized block: ORT's ``LoopImpl`` runs the body once per iteration; each
iteration's carried outputs (fetches) are new arena tensors, and they become the next
iteration's feeds, released only after that iteration ran. After the last iteration the
Loop's outputs are allocated and the last fetches copied into them, then feeds and fetches
are released; per-iteration scan outputs stay until they are concatenated into the output.
From the second iteration on, the body runs with its own memory pattern (ORT keeps one per
subgraph session state and input shapes): its planned tensors come from one block of the first
iteration's best-fit peak, requested when the iteration starts and freed when it ends; its
outputs are still requested one by one. So while a Loop runs, the arena holds the previous
iteration's carried state *and* the current body's tensors, and at the end the last feed, the
last fetch and the output. Traced on an H200 (every request to the EP's allocator, session
14, ``docs/bench/cuda_alloc_trace.py``): torch.jit.script's Loop of a Gemm, Tanh, Mul and an
If (x [65536, 32] f32, 2 iterations) requested the Gemm's and Tanh's 8 MiB outputs in
iteration 0 and one 16 MiB block in iteration 1 (arena regions 1 + 8 + 8 + 16 + 32 MiB); a
3-iteration Loop carrying a 16 MiB tensor requested x, then per iteration its 16 MiB output
(iteration 0's freed after iteration 1), then the 16 MiB output: four 16 MiB tensors alive at
the end; the arena log of a Loop whose body adds a 16 MiB temporary grew 16 + 16 + 32 + 64 MiB
regions (one body's lower bound, the rule before session 15, predicted 1 + 16 + 16 + 64).
"""

from __future__ import annotations

from typing import Literal

from memshrink.estimate.graph import GraphInfo, NodeInfo

#: iterations replayed one by one; beyond, the accumulated scan outputs are one request
MAX_REPLAYED = 64
#: a Loop whose trip count is not a known value: replayed this many times (two are enough for
#: the feeds' double buffering; a third repeats the second's pattern)
UNKNOWN_TRIPS = 3

Event = tuple[Literal["a", "f", "outputs"], object, int]


def trip_count(g: GraphInfo, node: NodeInfo) -> int | None:
    """The Loop's ``M`` when it is a known value (an initializer or folded constant)."""
    if not node.inputs or not node.inputs[0]:
        return None
    t = g.tensors.get(node.inputs[0])
    if t is None or not t.small:
        return None
    return max(int(t.small[0]), 0)


def loop_events(g: GraphInfo, node: NodeInfo) -> list[Event]:
    """Arena requests of one Loop node's execution, in order: ``("a", key, bytes)``,
    ``("f", key, 0)`` and one ``("outputs", None, 0)`` where the Loop's own outputs (planned
    in the outer graph) are allocated, before the last feeds and fetches are released."""
    from memshrink.estimate import ort as ortsim
    from memshrink.estimate.planners import best_fit

    if node.op_type != "Loop" or not node.subgraphs:
        return [("outputs", None, 0)]
    body = node.subgraphs[0]
    order = list(range(len(body.nodes)))
    plan = ortsim.plan(body, order, fusions=False, cpu=False)
    n_carried = max(len(node.inputs) - 2, 0)
    out_pos = {name: i for i, name in enumerate(body.outputs)}
    starts: dict[int, list[int]] = {}
    ends: dict[int, list[int]] = {}
    bufs = [b for b in plan.buffers if b.size and not b.scratch]
    for b in bufs:
        starts.setdefault(b.start, []).append(b.id)
        ends.setdefault(b.end, []).append(b.id)
    size = {b.id: b.size for b in bufs}

    def role(bid: int) -> str:  # body outputs: the condition and carried values, then scans
        b = next(x for x in bufs if x.id == bid)
        pos = [out_pos[t] for t in b.tensors if t in out_pos]
        if not b.is_output or not pos:
            return "temp"
        return "scan" if min(pos) > n_carried else "carried"

    roles = {b.id: role(b.id) for b in bufs}
    trips = trip_count(g, node)
    n = UNKNOWN_TRIPS if trips is None else trips
    replayed = min(n, MAX_REPLAYED)
    events: list[Event] = []
    prev: list[object] = []  # the previous iteration's carried fetches = this one's feeds
    scans: list[object] = []
    temps = [b for b in bufs if roles[b.id] == "temp"]
    block = best_fit(temps, ortsim.ALLOC_ALIGN)[0] if temps else 0
    for k in range(replayed):
        cur: list[object] = []
        pattern = k > 0 and block > 0  # the body's own memory pattern from its second run
        if pattern:
            events.append(("a", (k, "block"), block))
        for s in order:
            for bid in starts.get(s, []):
                key = (k, bid)
                if roles[bid] == "temp" and pattern:
                    continue
                events.append(("a", key, size[bid]))
                if roles[bid] == "carried":
                    cur.append(key)
                elif roles[bid] == "scan":
                    scans.append(key)
            for bid in ends.get(s, []):
                if roles[bid] == "temp" and not pattern:
                    events.append(("f", (k, bid), 0))
        if pattern:
            events.append(("f", (k, "block"), 0))
        if k < replayed - 1:
            events += [("f", key, 0) for key in prev]
            prev = cur
        else:
            last = cur
    scan_bytes = sum(size[bid] for bid in size if roles[bid] == "scan")
    if n > replayed and scan_bytes:
        events.append(("a", "scan-rest", scan_bytes * (n - replayed)))
        scans.append("scan-rest")
    events.append(("outputs", None, 0))
    if replayed:
        events += [("f", key, 0) for key in [*prev, *last, *scans]]
    return events
