"""``reorder``: write a memory-aware execution order into the file, one both ORT orders follow.

Why: the order decides which activations are alive together. ONNX Runtime's PRIORITY_BASED
order is file order (Kahn, lowest index first); its DEFAULT order is a reverse depth-first
search from the leaves in which, at every join, the producer with the *highest* index runs
first (``estimate/schedule.py``). So one written order ``F`` yields two executed orders, ``F``
and ``D(F)``, and ``D(F)`` runs the branches of every join in the mirror order of ``F`` — no file
order makes both identical once the graph has parallel branches. The pass therefore picks the
file order whose *worse* executed order has the lowest predicted peak
(``max(peak(F), peak(D(F)))``), from these candidates:

* the file as written, and its DEFAULT order written back (``D(F)``);
* a greedy list schedule with look-ahead: among ready nodes take the one whose chain of
  single-consumer successors (up to ``lookahead`` nodes) reaches the lowest running memory,
  so a branch that expands a tensor is finished (reduced) before the next branch expands;
* for each join with at most ``exact_branches`` independent producer branches, every
  permutation of the branches' order in a depth-first schedule (an exact search over the
  small parallel region, scored on the whole graph);
* ``D`` of each of these.

Peaks are those of ONNX Runtime's own allocation plan (``estimate/ort.py``: aliases, in-place,
same-shape free list) over the graph as written. Runtimes that ignore file order (OpenVINO
builds its own topological order) are reported in the stats. Outputs are bit-identical: only the
node order changes.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir

from memshrink.errors import UnboundDimensionError
from memshrink.estimate import ort as ortsim
from memshrink.estimate.graph import GraphInfo, ModelView, NodeInfo, TensorInfo, build_view
from memshrink.estimate.schedule import (
    dfs_postorder,
    ort_default,
    ort_priority,
    sorted_producers,
)
from memshrink.manager import Pass, PassContext, PassResult
from memshrink.transforms import register
from memshrink.transforms.predicted import guarded, pipeline_bindings
from memshrink.transforms.saved_layout import clone_with_meta, saved_embedded

VIEW_KEY = "activation.view"


# --------------------------------------------------------------------------- shared helpers


def bound_view(model: ir.Model, context: PassContext) -> ModelView | str:
    """The estimator's view of ``model`` with bound shapes, cached on the context.

    Returns a reason string instead (the pass then does nothing) when input dims are unbound
    (bindings come from the context, ``--shape``/``--dim``, or the source model's sidecar), or
    when the view's nodes are no longer the model's: the passes index both alike.
    """

    def compute() -> ModelView | str:
        try:
            return build_view(model, **pipeline_bindings(model, context))
        except UnboundDimensionError as exc:
            return f"input dims unbound ({exc}); pass --shape/--dim"

    result: ModelView | str = context.analysis(VIEW_KEY, compute)
    if not isinstance(result, str) and len(result.graph.nodes) != len(model.graph):
        return "graph view out of sync with the model"
    return result


def permuted(g: GraphInfo, order: Sequence[int]) -> GraphInfo:
    """``g`` with its nodes renumbered so that ``order`` is the file order (shallow copies)."""
    remap = {old: new for new, old in enumerate(order)}
    nodes = []
    for new, old in enumerate(order):
        n = object.__new__(NodeInfo)
        n.__dict__ = {**g.nodes[old].__dict__, "index": new}
        nodes.append(n)
    tensors = {}
    for name, t in g.tensors.items():
        t2 = object.__new__(TensorInfo)
        t2.__dict__ = {
            **t.__dict__,
            "producer": remap[t.producer] if t.producer is not None else None,
            "consumers": [remap[c] for c in t.consumers],
        }
        tensors[name] = t2
    return GraphInfo(nodes, tensors, g.inputs, g.outputs, g.initializers, g.unknown)


def ort_live_peak(g: GraphInfo, order: Sequence[int]) -> int:
    """Peak bytes of ONNX Runtime's planned activation buffers alive together in ``order``."""
    plan = ortsim.plan(g, order)
    diff = [0] * (len(order) + 1)
    for b in plan.buffers:
        diff[b.start] += b.size
        diff[b.end + 1] -= b.size
    acc = peak = 0
    for d in diff[:-1]:
        acc += d
        peak = max(peak, acc)
    return peak


@dataclass
class OrderScore:
    """Predicted peaks of one written order under both ORT execution orders."""

    order: list[int]  # file order (indices into the original graph)
    priority: int  # peak when ORT runs PRIORITY_BASED: F
    default: int  # peak when ORT runs DEFAULT: D(F)
    relaid: int  # DEFAULT after ORT renumbers rewritten nodes in D(F) order: D(D(F))
    source: str

    @property
    def worst(self) -> int:
        return max(self.priority, self.default, self.relaid)

    def as_dict(self) -> dict[str, int]:
        return {"priority": self.priority, "default": self.default, "relaid": self.relaid}


def score_order(g: GraphInfo, order: Sequence[int], source: str) -> OrderScore:
    """Peaks of the three orders ORT may run for written order ``F``.

    ORT's layout and fusion transformers (NCHWc, Conv+activation, ...) replace nodes by new ones
    numbered in the order they visit them, which is ``D(F)``: after them PRIORITY_BASED runs
    about ``D(F)`` and DEFAULT about ``D(D(F))`` (measured on the multi-branch model, see
    docs/activation-passes.md). A robust order keeps all three low.
    """
    pg = permuted(g, order)
    d = ort_default(pg)
    p2 = permuted(pg, d)
    return OrderScore(
        list(order),
        ort_live_peak(pg, ort_priority(pg)),
        ort_live_peak(pg, d),
        ort_live_peak(p2, ort_default(p2)),
        source,
    )


def default_as_file(g: GraphInfo, order: Sequence[int]) -> list[int]:
    """``D(F)``: the DEFAULT order ORT runs when ``order`` is written, in original indices."""
    pg = permuted(g, order)
    return [order[i] for i in ort_default(pg)]


# --------------------------------------------------------------------------- candidates


def _out_bytes(g: GraphInfo, idx: int) -> int:
    total = 0
    for name in g.nodes[idx].outputs:
        t = g.tensors.get(name) if name else None
        if t is not None and t.kind == "activation":
            total += t.nbytes or 0
    return total


def greedy_order(g: GraphInfo, lookahead: int = 8) -> list[int]:
    """List scheduling that keeps running memory low, looking ``lookahead`` nodes down chains."""
    prods = sorted_producers(g)
    succ: list[list[int]] = [[] for _ in g.nodes]
    for i, ps in enumerate(prods):
        for p in ps:
            succ[p].append(i)
    indeg = [len(ps) for ps in prods]
    pending: dict[str, int] = {}
    for name, t in g.tensors.items():
        if t.kind == "activation":
            pending[name] = len(set(t.consumers)) + (1 if t.is_output else 0)
    sizes = {n: (t.nbytes or 0) for n, t in g.tensors.items() if t.kind == "activation"}

    def delta(idx: int, used: dict[str, int]) -> int:
        d = _out_bytes(g, idx)
        for name in set(g.nodes[idx].inputs + g.nodes[idx].implicit_inputs):
            if name in pending and pending[name] - used.get(name, 0) == 1:
                d -= sizes.get(name, 0)
        return d

    def chain_score(idx: int) -> tuple[int, int]:
        """Lowest running delta reached along idx's chain of sole successors."""
        used: dict[str, int] = {}  # uses consumed along the chain (overlay on ``pending``)
        run = 0
        best: int | None = None
        first: int | None = None
        cur: int | None = idx
        done: set[int] = set()
        steps = 0
        while cur is not None and steps <= lookahead:
            d = delta(cur, used)
            first = d if first is None else first
            run += d
            best = run if best is None else min(best, run)
            done.add(cur)
            for name in set(g.nodes[cur].inputs + g.nodes[cur].implicit_inputs):
                if name in pending:
                    used[name] = used.get(name, 0) + 1
            nxt = [s for s in succ[cur] if all(p in done or p in scheduled for p in prods[s])]
            cur = nxt[0] if len(succ[cur]) == 1 and len(nxt) == 1 else None
            steps += 1
        return best or 0, first or 0

    scheduled: set[int] = set()
    ready = [i for i in range(len(g.nodes)) if indeg[i] == 0]
    order: list[int] = []
    last: int | None = None
    while ready:
        # The memory score first, then continuing the node just run (depth-first locality).
        keys = []
        for i in ready:
            best, first = chain_score(i)
            cont = 0 if last is not None and last in prods[i] else 1
            keys.append((best, cont, first, i))
        pick = min(keys)[3]
        ready.remove(pick)
        order.append(pick)
        scheduled.add(pick)
        last = pick
        for name in set(g.nodes[pick].inputs + g.nodes[pick].implicit_inputs):
            if name in pending:
                pending[name] -= 1
        for s in succ[pick]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return order


def dfs_order(
    g: GraphInfo, choose: Callable[[int, list[int]], list[int]] | None = None
) -> list[int]:
    """Depth-first post-order from the graph outputs; ``choose(node, producers)`` orders the
    branches of each join (default: ascending node index). Every node appears exactly once."""
    return dfs_postorder(g, sorted_producers(g), choose)


def _ancestors(prods: list[list[int]], idx: int) -> set[int]:
    seen: set[int] = set()
    stack = [idx]
    while stack:
        n = stack.pop()
        for p in prods[n]:
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return seen


def exact_region_orders(
    g: GraphInfo, base: list[int], max_branches: int, seconds: float
) -> list[OrderScore]:
    """Exact search over the branch order of small parallel regions.

    For each join whose producers have pairwise different ancestor sets (independent branches)
    and at most ``max_branches`` of them, try every permutation in a depth-first schedule and
    keep the best on the whole graph; joins are improved one after another (coordinate
    descent) until ``seconds`` have passed.
    """
    prods = sorted_producers(g)
    choice: dict[int, list[int]] = {}

    def choose(idx: int, ps: list[int]) -> list[int]:
        pref = choice.get(idx)
        if pref is None:
            return ps
        rank = {p: k for k, p in enumerate(pref)}
        return sorted(ps, key=lambda p: rank.get(p, len(rank)))

    deadline = time.monotonic() + seconds
    best = score_order(g, dfs_order(g, choose), "dfs")
    results = [best]

    # Widest joins over the biggest inputs first: that is where the branch order matters.
    def weight(i: int) -> tuple[int, int]:
        nbytes = sum(_out_bytes(g, p) for p in prods[i])
        return (-len(prods[i]), -nbytes)

    joins = sorted((i for i in base if 1 < len(prods[i]) <= max_branches), key=weight)
    for j in joins:
        if time.monotonic() > deadline:
            break
        current = choice.get(j, prods[j])
        for perm in itertools.permutations(prods[j]):
            if list(perm) == current or time.monotonic() > deadline:
                continue
            choice[j] = list(perm)
            cand = score_order(g, dfs_order(g, choose), "exact-branches")
            if cand.worst < best.worst:
                best = cand
                current = list(perm)
        choice[j] = current
    if best is not results[0]:
        results.append(best)
    return results


def choose_order(
    g: GraphInfo, *, lookahead: int = 8, exact_branches: int = 5, seconds: float = 20.0
) -> tuple[OrderScore, OrderScore, list[OrderScore]]:
    """Score the candidates; return (original, best, all scored)."""
    n = len(g.nodes)
    original = score_order(g, list(range(n)), "original")
    cands = [original]
    seeds = [list(range(n)), greedy_order(g, lookahead)]
    cands.append(score_order(g, seeds[1], "greedy"))
    if exact_branches >= 2 and seconds > 0:
        cands.extend(exact_region_orders(g, seeds[1], exact_branches, seconds))
    for c in list(cands):
        d = default_as_file(g, c.order)
        cands.append(score_order(g, d, f"D({c.source})"))
    best = min(
        cands,
        key=lambda c: (c.worst, c.priority + c.default + c.relaid, c.source != "original"),
    )
    return original, best, cands


def _steady_states(
    model: ir.Model, context: PassContext, guard: Sequence[str] = ()
) -> tuple[int, ...]:
    """Predicted ORT steady-state activations (DEFAULT, PRIORITY_BASED), then the steady-state
    peak on each ``guard`` backend, in the layout the pipeline saves (``saved_layout``)."""
    from memshrink.estimate import estimate
    from memshrink.estimate.cuda import guard_options

    bindings = pipeline_bindings(model, context)
    out = []
    runs = [("ort", {}), ("ort", {"execution_order": "PRIORITY_BASED"})]
    # A guard compares orders: the file order's replay is enough (no weight-order sampling).
    for backend, opts in runs + [(b, guard_options() if b == "cuda" else {}) for b in guard]:
        est = estimate(
            model, backend=backend, session_options=opts, embedded=saved_embedded(model),
            **bindings,
        )  # fmt: skip
        stage = next(s for s in est.prediction.stages if s.name == "steady_state")
        out.append(int(stage.activations if backend == "ort" else stage.peak))
    return tuple(out)


def confirm_order(
    model: ir.Model,
    context: PassContext,
    ranked: Sequence[OrderScore],
    original: OrderScore,
    tries: int,
    min_gain: float,
    guard: Sequence[str] = (),
) -> tuple[OrderScore | None, dict[str, Any]]:
    """Of the ``tries`` best-ranked orders, the one with the lowest full prediction (arena,
    memory pattern, ORT's optimized graph: ``memshrink.estimate``) of DEFAULT's steady state
    (then PRIORITY_BASED's), among those that keep DEFAULT's from rising and lower the worse
    of the two by ``min_gain``; else None.

    Why: the ranking scores planned live peaks of the graph as written. What ORT's arena
    holds can move the other way: on a chunked U-Net the best-ranked order (live peak -5 %)
    raised DEFAULT's predicted steady state from 400 to 455 MiB and measured 370 -> 440.
    DEFAULT first: it is the order ORT runs unless told otherwise. An order must also keep
    the steady-state peak of every ``guard`` backend from rising: on the CUDA EP a multibranch
    order that ORT CPU liked doubled the steady state (BFC arena: the memory-pattern block no
    longer fit the first run's regions; 140 -> 268 MiB of GPU memory measured, 129 -> 257
    predicted). Where the pipeline targets the CUDA EP (``optimize --backend cuda``), its
    steady state must drop: an order ORT CPU's plan prefers but the CUDA figure does not see
    still moves the CUDA EP's memory-pattern block (an fp16 GPT-2, predicted 33 -> 33 MiB,
    measured run 3 14 -> 30 on an H100, session 15).
    """
    names = ["default", "priority", *guard]
    base = _steady_states(model, context, guard)
    report: dict[str, Any] = {"before": dict(zip(names, base, strict=True)), "tried": {}}
    seen: set[tuple[int, ...]] = {tuple(original.order)}
    best: tuple[tuple[int, ...], OrderScore] | None = None
    for cand in ranked:
        key = tuple(cand.order)
        if key in seen:
            continue
        seen.add(key)
        if len(report["tried"]) >= tries:
            break
        trial = clone_with_meta(model)
        apply_order(trial, cand.order)
        after = _steady_states(trial, context, guard)
        report["tried"][f"{cand.source}#{len(report['tried'])}"] = dict(
            zip(names, after, strict=True)
        )
        ort_after, ort_base = after[:2], base[:2]
        ok = (
            after[0] <= base[0]
            and max(ort_after) <= max(ort_base) * (1 - min_gain)
            and all(
                a < b if name == context.backend == "cuda" else a <= b
                for name, a, b in zip(guard, after[2:], base[2:], strict=True)
            )
        )
        if ok and (best is None or ort_after < best[0]):
            best = (ort_after, cand)
    return (best[1] if best else None), report


# --------------------------------------------------------------------------- the pass


def _ir_dependencies(nodes: Sequence[ir.Node]) -> list[set[int]]:
    """Producers of each node's inputs, read from the IR itself (including values captured
    by subgraphs), so the estimator's view — which folds weight-only nodes away — can never
    drop a real dependency."""
    produced_by = {id(out): i for i, n in enumerate(nodes) for out in n.outputs}
    deps: list[set[int]] = []
    for n in nodes:
        values = [v for v in n.inputs if v is not None]
        for attr in n.attributes.values():
            graphs = (
                [attr.as_graph()]
                if attr.type == ir.AttributeType.GRAPH
                else list(attr.as_graphs())
                if attr.type == ir.AttributeType.GRAPHS
                else []
            )
            for sub in graphs:
                for inner in ir.traversal.RecursiveGraphIterator(sub):
                    values.extend(v for v in inner.inputs if v is not None)
        deps.append({produced_by[id(v)] for v in values if id(v) in produced_by})
    return deps


def apply_order(model: ir.Model, order: Sequence[int]) -> None:
    """Rewrite the main graph's node list in ``order`` (indices of the current node list).

    The order is followed as closely as the real dependencies allow: a node is placed only
    after everything it reads (Kahn's algorithm, ties broken by the requested position).
    """
    import heapq

    graph = model.graph
    nodes = list(graph)
    rank = {idx: r for r, idx in enumerate(order)}
    deps = _ir_dependencies(nodes)
    waiting = [len(d) for d in deps]
    users: list[list[int]] = [[] for _ in nodes]
    for i, d in enumerate(deps):
        for p in d:
            users[p].append(i)
    ready = [(rank.get(i, len(nodes) + i), i) for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    final: list[int] = []
    while ready:
        _, i = heapq.heappop(ready)
        final.append(i)
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, (rank.get(u, len(nodes) + u), u))
    if len(final) != len(nodes):  # a cycle can't come from a valid graph; keep it as it was
        return
    graph.remove(nodes, safe=False)
    graph.extend(nodes[i] for i in final)


@register
class ReorderPass(Pass):
    name = "reorder"
    summary = (
        "Write a memory-aware node order into the file so ORT's DEFAULT and PRIORITY_BASED "
        "orders both keep the activation peak low."
    )
    targets = ("activations",)
    exact = True

    @dataclass
    class Options:
        lookahead: int = 8  # greedy: nodes followed down a chain before judging a choice
        exact_branches: int = 5  # joins with at most this many branches are searched exactly
        search_seconds: float = (
            2.0  # time for the exact search over parallel regions (raise for better orders)
        )
        min_gain: float = 0.01  # rewrite only when the worse ORT order's peak drops this much
        confirm: int = 4  # best-ranked orders re-scored by the full estimator (0 = trust ranking)
        # backends whose predicted steady-state peak a confirmed order must not raise (plus
        # the pipeline's target, optimize --backend, when it is not ORT CPU)
        guard_backends: str = "cuda"

    def run(self, model: ir.Model, context: PassContext) -> PassResult:
        view = bound_view(model, context)
        if isinstance(view, str):
            return PassResult(False, {"reason": view})
        g = view.graph
        if len(g.nodes) < 3:
            return PassResult(False, {"reason": "fewer than 3 nodes: nothing to order"})
        o = self.options
        context.progress(f"reorder: scoring orders of {len(g.nodes)} nodes")
        original, best, cands = choose_order(
            g, lookahead=o.lookahead, exact_branches=o.exact_branches, seconds=o.search_seconds
        )
        stats: dict[str, Any] = {
            "predicted_peak_before": original.as_dict(),
            "predicted_peak_after": best.as_dict(),
            "chosen": best.source,
            "candidates": {c.source: c.as_dict() for c in cands},
            "openvino": "ignores file order (builds its own topological order): no effect",
        }
        if best.order == original.order or best.worst > original.worst * (1 - o.min_gain):
            stats["reason"] = "no order lowers the predicted peak of the worse ORT order"
            return PassResult(False, stats)
        if o.confirm > 0:
            ranked = sorted(cands, key=lambda c: (c.worst, c.priority + c.default + c.relaid))
            try:
                guard = guarded(o.guard_backends, context)
                confirmed = confirm_order(
                    model, context, ranked, original, o.confirm, o.min_gain, guard
                )
            except Exception as exc:  # noqa: BLE001 - no full estimate: trust the ranking
                confirmed = (best, {"skipped": f"{type(exc).__name__}: {exc}"})
            stats["steady_state"] = confirmed[1]
            if confirmed[0] is None:
                stats["reason"] = (
                    "no order lowers the estimator's predicted ORT steady state (arena and "
                    "memory-pattern block included) under both execution orders without "
                    f"raising the steady state on {','.join(guard) or 'no other backend'}"
                    + (
                        " (or, on the target cuda, without lowering it)"
                        if context.backend == "cuda"
                        else ""
                    )
                )
                return PassResult(False, stats)
            best = confirmed[0]
            stats["chosen"] = best.source
            stats["predicted_peak_after"] = best.as_dict()
        apply_order(model, best.order)
        stats["peak_ratio"] = round(best.worst / original.worst, 4) if original.worst else None
        return PassResult(True, stats)
