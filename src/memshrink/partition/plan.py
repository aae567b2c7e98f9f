"""Choose where to cut a model into sequential parts, from shapes only (no weight is read).

Why these cut points: every runtime copy we want to bound (ORT's heap copy of embedded weights,
the OpenVINO EP's proto-to-string round trip, OpenVINO's weight reordering) scales with the
weights a session sees, so parts should carry balanced weight bytes; and whatever crosses a cut
is held between two sessions (and, streamed, across a session's creation), so cuts go where few,
small activations are live. A part is a contiguous range of the top-level node order, so a node
with subgraphs (If/Loop/Scan) always stays whole inside one part.

``Constant`` nodes are *floating*: they are not cut points' business — each part that reads a
Constant gets its own copy of the node (its tensor is still stored once on disk). So are the
data-movement nodes (``FLOATING_OPS``) that read only weights and floating values, such as the
``Identity(weight)`` aliases torch's legacy exporter writes for equal weights: crossing a cut
as a part output, such a value is a constant OpenVINO folds, and the compiled part then has no
output by that name (Qwen2-MoE streamed in 4 parts: "OpenVINO model has no output named
'm.model.norm.weight'", where the original runs; session 13).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from memshrink.errors import PassError, UsageError

#: Extra cost of each tensor crossing a cut (bytes-equivalent): fewer crossings win ties.
TENSOR_PENALTY = 64 << 10
#: Assumed size of a crossing activation whose size is unknown (unbound symbolic dims).
UNKNOWN_BYTES = 1 << 20
#: A cut may move this far (fraction of a part's target weight) from the balanced position
#: to find a cheaper crossing.
WINDOW = 0.25


@dataclass
class GraphFacts:
    """What the planner knows about the top-level graph (computed once per plan)."""

    nodes: list[ir.Node]
    floating: list[bool]  # Constant nodes, copied into each part that reads them
    reads: list[set[ir.Value]]  # top-scope values each node reads (subgraphs included)
    tensors: list[dict[int, int]]  # id(tensor) -> bytes of every weight each node uses
    value_bytes: dict[ir.Value, int | None]
    index: dict[int, int] = field(default_factory=dict)  # id(node) -> its position


@dataclass
class PartitionPlan:
    """Cut positions over the top-level node order: part i is nodes[bounds[i]:bounds[i+1]]."""

    bounds: list[int]
    node_ids: list[int]  # id() of the nodes at planning time, to detect a stale plan
    options: dict[str, Any] = field(default_factory=dict)
    part_weight_bytes: list[int] = field(default_factory=list)
    cuts: list[dict[str, Any]] = field(default_factory=list)  # what crosses each cut
    weight_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    # a writer setting, not a planning one: weights OpenVINO folds go to part_NNN.folded.data
    folded_file: bool = True

    @property
    def num_parts(self) -> int:
        return len(self.bounds) - 1

    def is_current(self, model: ir.Model) -> bool:
        return [id(n) for n in model.graph] == self.node_ids

    def to_dict(self) -> dict[str, Any]:
        return {
            "parts": self.num_parts,
            "bounds": self.bounds,
            "part_weight_bytes": self.part_weight_bytes,
            "largest_part_bytes": max(self.part_weight_bytes or [0]),
            "weight_bytes": self.weight_bytes,
            "cuts": self.cuts,
            "notes": self.notes,
        }


#: Deterministic, weight-only data movement a part may recompute from its own copy of the
#: weight (no inputs of the graph, no subgraphs): floating like a Constant.
FLOATING_OPS = frozenset(
    {"Identity", "Cast", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten"}
)


def _is_floating(
    node: ir.Node,
    graph_outputs: set[ir.Value],
    graph_inputs: set[ir.Value] | frozenset[ir.Value] = frozenset(),
    floated: set[ir.Value] | frozenset[ir.Value] = frozenset(),
) -> bool:
    """A Constant, or a ``FLOATING_OPS`` node whose every input is a weight (not one fed as a
    graph input) or the output of a floating node (``floated``); never a graph output."""
    if node.domain not in ("", "ai.onnx") or any(o in graph_outputs for o in node.outputs):
        return False
    if node.op_type == "Constant":
        return True
    if node.op_type not in FLOATING_OPS or not any(v is not None for v in node.inputs):
        return False
    return all(
        v is None or v in floated or (v.is_initializer() and v not in graph_inputs)
        for v in node.inputs
    )


def _node_tensors(node: ir.Node) -> dict[int, int]:
    """Tensors a node carries itself: attributes and its subgraphs' initializers/attributes."""
    found: dict[int, int] = {}

    def visit_attrs(n: ir.Node) -> None:
        for attr in n.attributes.values():
            if attr.type == ir.AttributeType.TENSOR and attr.value is not None:
                found[id(attr.value)] = int(attr.value.nbytes)
            elif attr.type == ir.AttributeType.TENSORS:
                for t in attr.value:
                    found[id(t)] = int(t.nbytes)
            elif attr.type == ir.AttributeType.GRAPH:
                visit_graph(attr.as_graph())
            elif attr.type == ir.AttributeType.GRAPHS:
                for g in attr.as_graphs():
                    visit_graph(g)

    def visit_graph(g: ir.Graph) -> None:
        for v in g.initializers.values():
            if v.const_value is not None:
                found[id(v.const_value)] = int(v.const_value.nbytes)
        for n in g:
            visit_attrs(n)

    visit_attrs(node)
    return found


def _subgraph_reads(node: ir.Node) -> list[ir.Value]:
    out: list[ir.Value] = []
    for attr in node.attributes.values():
        graphs: list[ir.Graph] = []
        if attr.type == ir.AttributeType.GRAPH:
            graphs = [attr.as_graph()]
        elif attr.type == ir.AttributeType.GRAPHS:
            graphs = list(attr.as_graphs())
        for g in graphs:
            for inner in ir.traversal.RecursiveGraphIterator(g):
                out.extend(v for v in inner.inputs if v is not None)
    return out


def graph_facts(model: ir.Model, sizes: Mapping[str, int | None]) -> GraphFacts:
    graph = model.graph
    nodes = list(graph)
    outputs = set(graph.outputs)
    top: set[ir.Value] = set(graph.inputs) | set(graph.initializers.values())
    for n in nodes:
        top.update(n.outputs)
    floating: list[bool] = []
    floated: set[ir.Value] = set()
    fed = set(graph.inputs)
    for n in nodes:  # in graph order: a floating node's floating inputs come first
        floating.append(_is_floating(n, outputs, fed, floated))
        if floating[-1]:
            floated.update(n.outputs)
    reads: list[set[ir.Value]] = []
    tensors: list[dict[int, int]] = []
    for n in nodes:
        r = {v for v in n.inputs if v is not None and v in top}
        r.update(v for v in _subgraph_reads(n) if v in top)
        reads.append(r)
        t = _node_tensors(n)
        for v in r:
            if v.const_value is not None and v.is_initializer():
                t[id(v.const_value)] = int(v.const_value.nbytes)
        tensors.append(t)
    value_bytes: dict[ir.Value, int | None] = {}
    for n in nodes:
        for v in n.outputs:
            value_bytes[v] = sizes.get(v.name or "") if v.name else None
            if value_bytes[v] is None:
                value_bytes[v] = _static_bytes(v)
    index = {id(n): i for i, n in enumerate(nodes)}
    return GraphFacts(nodes, floating, reads, tensors, value_bytes, index)


def _static_bytes(v: ir.Value) -> int | None:
    if v.dtype is None or v.shape is None:
        return None
    n = 1
    for d in v.shape:
        if not isinstance(d, int):
            return None
        n *= d
    try:
        return int(math.ceil(n * v.dtype.itemsize))
    except (AttributeError, ValueError, TypeError):  # STRING has no fixed size
        return None


def activation_sizes(
    model: ir.Model,
    shapes: Mapping[str, Sequence[int]] | None = None,
    dims: Mapping[str, int] | None = None,
) -> tuple[dict[str, int | None], list[str]]:
    """Bytes of every activation with input dims bound (sidecar, then ``shapes``/``dims``).

    Uses the estimator's weight-free shape inference; unbound dims leave sizes unknown (None).
    """
    notes: list[str] = []
    try:
        from memshrink.bindings import load_sidecar
        from memshrink.estimate.graph import build_view
        from memshrink.model import source_path

        bound: dict[str, Sequence[int]] = {}
        src = source_path(model)
        sidecar = load_sidecar(src) if src else None
        if sidecar is not None:
            for spec in sidecar.inputs:
                bound[spec.name] = spec.shape
        bound.update(shapes or {})
        view = build_view(model, shapes=bound or None, dims=dims, allow_partial=True)
        sizes = {name: t.nbytes for name, t in view.graph.tensors.items()}
        if view.graph.unknown:
            notes.append(
                f"{len(view.graph.unknown)} activations have unknown sizes (unbound dims?); "
                f"cuts count them as {UNKNOWN_BYTES >> 20} MiB each"
            )
        return sizes, notes
    except Exception as exc:  # noqa: BLE001 - planning still works by counting tensors
        notes.append(f"shape inference unavailable ({type(exc).__name__}: {exc}); cuts by count")
        return {}, notes


def _floating_tensors(facts: GraphFacts, v: ir.Value) -> dict[int, int]:
    """The weights behind a floating value: a Constant's own tensor, or what a floating
    data-movement node reads (transitively): they count where the value is read."""
    out: dict[int, int] = {}
    todo = [v]
    while todo:
        p = todo.pop().producer()
        if p is None:
            continue
        i = facts.index.get(id(p))
        if i is None or not facts.floating[i]:
            continue
        out.update(facts.tensors[i] if p.op_type != "Constant" else _node_tensors(p))
        todo.extend(facts.reads[i])
    return out


def _crossing(facts: GraphFacts) -> tuple[np.ndarray, np.ndarray]:
    """Cost of cutting before node b (index b of the result): crossing bytes and count."""
    n = len(facts.nodes)
    last_use: dict[ir.Value, int] = {}
    for i, r in enumerate(facts.reads):
        for v in r:
            last_use[v] = max(last_use.get(v, -1), i)
    diff_bytes = np.zeros(n + 1, dtype=np.float64)
    diff_count = np.zeros(n + 1, dtype=np.int64)
    for i, node in enumerate(facts.nodes):
        if facts.floating[i]:
            continue
        for v in node.outputs:
            last = last_use.get(v, -1)
            if last <= i or v.is_graph_output():
                continue
            size = facts.value_bytes.get(v)
            cost = UNKNOWN_BYTES if size is None else size
            # live across every boundary b with i < b <= last
            diff_bytes[i + 1] += cost
            diff_bytes[last + 1] -= cost
            diff_count[i + 1] += 1
            diff_count[last + 1] -= 1
    return np.cumsum(diff_bytes)[:n], np.cumsum(diff_count)[:n]


def _weights_by_first_use(facts: GraphFacts) -> np.ndarray:
    """Prefix sum of weight bytes in node order, each tensor counted at its first use."""
    seen: set[int] = set()
    per_node = np.zeros(len(facts.nodes), dtype=np.float64)
    for i, tensors in enumerate(facts.tensors):
        if facts.floating[i]:
            continue  # a Constant's tensor counts where it is read
        for tid, nb in tensors.items():
            if tid not in seen:
                seen.add(tid)
                per_node[i] += nb
        for v in facts.reads[i]:
            for tid, nb in _floating_tensors(facts, v).items():
                if tid not in seen:
                    seen.add(tid)
                    per_node[i] += nb
    prefix = np.zeros(len(facts.nodes) + 1, dtype=np.float64)
    np.cumsum(per_node, out=prefix[1:])
    return prefix


def _choose_cuts(prefix: np.ndarray, cost: np.ndarray, count: np.ndarray, k: int) -> list[int]:
    n = len(prefix) - 1
    total = prefix[-1]
    bounds = [0]
    for j in range(1, k):
        prev = bounds[-1]
        remaining_parts = k - j + 1
        lo, hi = prev + 1, n - (k - j)  # leave at least one node per remaining part
        if lo > hi:
            break
        target = (total - prefix[prev]) / remaining_parts
        ideal = prefix[prev] + target
        cand = np.arange(lo, hi + 1)
        dev = np.abs(prefix[cand] - ideal)
        ok = dev <= WINDOW * max(target, 1.0)
        if not ok.any():
            ok = dev <= dev.min() + 1.0
        score = cost[cand] + count[cand] * TENSOR_PENALTY + 0.01 * dev
        score = np.where(ok, score, np.inf)
        bounds.append(int(cand[int(np.argmin(score))]))
    bounds.append(n)
    return bounds


def _part_weights(facts: GraphFacts, bounds: list[int]) -> list[int]:
    out = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        tensors: dict[int, int] = {}
        for i in range(a, b):
            if facts.floating[i]:
                continue
            tensors.update(facts.tensors[i])
            for v in facts.reads[i]:
                tensors.update(_floating_tensors(facts, v))
        out.append(sum(tensors.values()))
    return out


def plan_partition(
    model: ir.Model,
    *,
    parts: int = 0,
    part_budget: int = 0,
    shapes: Mapping[str, Sequence[int]] | None = None,
    dims: Mapping[str, int] | None = None,
) -> PartitionPlan:
    """Cut ``model`` into ``parts`` parts, or into as many as keep each part's weights under
    ``part_budget`` bytes (best effort: one node's weights can't be split)."""
    if parts < 0 or part_budget < 0:
        raise UsageError("partition: parts and part_budget must be positive")
    if not parts and not part_budget:
        raise UsageError(
            "partition: set parts (e.g. -O partition.parts=8) or part_budget "
            "(e.g. -O partition.part_budget=128MiB)"
        )
    sizes, notes = activation_sizes(model, shapes, dims)
    facts = graph_facts(model, sizes)
    n = sum(1 for f in facts.floating if not f)
    if n == 0:
        raise PassError("partition: the graph has no nodes to partition")
    cost, count = _crossing(facts)
    prefix = _weights_by_first_use(facts)
    total = float(prefix[-1])
    n_nodes = len(facts.nodes)
    if parts:
        k = min(parts, n_nodes)
        bounds = _choose_cuts(prefix, cost, count, k)
        weights = _part_weights(facts, bounds)
    else:
        # No cut can split one node's weights: that is the floor of the largest part.
        floor = max(_part_weights(facts, [i, i + 1])[0] for i in range(n_nodes))
        goal = max(part_budget, floor)
        k = max(1, math.ceil(total / part_budget))
        best: tuple[list[int], list[int]] | None = None
        for kk in range(k, min(n_nodes, 4 * k + 8) + 1):
            b = _choose_cuts(prefix, cost, count, kk)
            w = _part_weights(facts, b)
            if best is None or max(w) < max(best[1]):
                best = (b, w)
            if max(w) <= goal:
                break
        assert best is not None
        bounds, weights = best
        if max(weights) > part_budget:
            notes.append(
                f"largest part holds {max(weights)} bytes of weights, over the budget "
                f"{part_budget}"
                + (": one node's weights cannot be split" if max(weights) <= floor else "")
            )
    bounds = _trim_floating_edges(bounds, facts)
    bounds = _merge_light(bounds, facts, part_budget if not parts else 0)
    weights = _part_weights(facts, bounds)
    cuts = []
    for cut in bounds[1:-1]:
        live = _live_at(facts, cut)
        cuts.append(
            {
                "before_node": cut,
                "tensors": [v.name for v in live],
                "bytes": int(sum((facts.value_bytes.get(v) or 0) for v in live)),
            }
        )
    return PartitionPlan(
        bounds=bounds,
        node_ids=[id(node) for node in facts.nodes],
        options={"parts": parts, "part_budget": part_budget},
        part_weight_bytes=weights,
        cuts=cuts,
        weight_bytes=int(total),
        notes=notes,
    )


def _trim_floating_edges(bounds: list[int], facts: GraphFacts) -> list[int]:
    """Drop parts made only of floating Constants (they'd have nothing to run)."""
    out = [bounds[0]]
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        if all(facts.floating[i] for i in range(a, b)) and len(out) > 1:
            out[-1] = b  # merge into the previous part
            continue
        out.append(b)
    if len(out) > 2 and all(facts.floating[i] for i in range(out[0], out[1])):
        del out[1]
    return out


def _merge_light(bounds: list[int], facts: GraphFacts, limit: int) -> list[int]:
    """Merge neighbouring parts while the merged part stays within ``limit`` weight bytes;
    a part with almost no weights (< 2% of the mean part) always joins its neighbour: a
    session for nothing costs time and saves no memory."""
    total = _part_weights(facts, [bounds[0], bounds[-1]])[0]
    light = 0.02 * total / max(1, len(bounds) - 1)
    out = list(bounds[:2])
    for b in bounds[2:]:
        a0, a1 = out[-2], out[-1]
        w_prev = _part_weights(facts, [a0, a1])[0]
        w_next = _part_weights(facts, [a1, b])[0]
        merged = _part_weights(facts, [a0, b])[0]
        if w_prev <= light or w_next <= light or merged <= limit:
            out[-1] = b
        else:
            out.append(b)
    return out


def _live_at(facts: GraphFacts, b: int) -> list[ir.Value]:
    """Activations produced before node ``b`` and read at or after it (graph outputs too)."""
    later: set[ir.Value] = set()
    for i in range(b, len(facts.nodes)):
        later.update(facts.reads[i])
    live = []
    for i in range(b):
        if facts.floating[i]:
            continue
        for v in facts.nodes[i].outputs:
            if v in later:
                live.append(v)
    return live
