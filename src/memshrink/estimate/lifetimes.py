"""Tensor lifetimes over a schedule: which buffers exist, how big, from which step to which.

A *buffer* is memory a runtime allocates for one or more tensors: a tensor produced by an alias
op (Reshape, Squeeze, Unsqueeze, Flatten, Identity) shares its input's buffer, and so may an
in-place op's output (the runtime's rules decide; see ``ort.py``). A buffer lives from the step
that produces its first tensor to the last step that reads any of its tensors; graph outputs
live to the end. Steps are positions in the schedule; a tensor read last at step ``s`` is freed
after ``s``, so it overlaps the outputs made at ``s``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from memshrink.estimate.graph import GraphInfo, NodeInfo

ALIAS_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"})
INPLACE_META = "memshrink.inplace"  # written by the ``inplace`` pass: "<input> -> <output>"


@dataclass
class Buffer:
    """One allocation: ``size`` bytes alive over steps ``[start, end]`` (inclusive)."""

    id: int
    size: int
    start: int
    end: int
    tensors: list[str] = field(default_factory=list)
    producer: int | None = None  # node index of the first tensor's producer
    is_output: bool = False
    transient: bool = False  # working memory inside one node (control-flow bodies, kernel scratch)
    scratch: bool = False  # kernel temporaries taken from the arena outside the plan
    heap: bool = False  # a scratch buffer the kernel mallocs itself (std::vector), not the arena

    def live_at(self, step: int) -> bool:
        return self.start <= step <= self.end


def positions(order: Sequence[int]) -> dict[int, int]:
    return {node: step for step, node in enumerate(order)}


def last_use(g: GraphInfo, pos: dict[int, int], name: str) -> int | None:
    t = g.tensors[name]
    steps = [pos[c] for c in t.consumers if c in pos]
    return max(steps) if steps else None


def alias_source(node: NodeInfo, out_index: int) -> str | None:
    """The input whose buffer this output shares: alias ops' first output, or the pair the
    ``inplace`` pass recorded in ``metadata_props`` (the runtime's in-place plan)."""
    if node.op_type in ALIAS_OPS and node.domain in ("", "ai.onnx") and out_index == 0:
        return node.inputs[0] if node.inputs and node.inputs[0] else None
    rec = node.meta.get(INPLACE_META)
    if rec and "->" in rec:
        src, _, dst = (x.strip() for x in rec.partition("->"))
        if dst == node.outputs[out_index] and src in node.inputs:
            return src
    return None


def subgraph_peak(node: NodeInfo, *, shared_outputs: bool = False) -> int:
    """Working memory of a control-flow node's bodies, planned inside the node's step.

    If: the larger branch; with ``shared_outputs`` (ORT) less the branch's outputs: ORT's
    ``IfImpl`` hands the branch the node's output buffers through its fetch allocator, so they
    are the If's own outputs, which the outer plan counts already (an If forwarding a
    [40000, 256] float: 91.8 MiB run 1 measured, 89.0 predicted so, 128.1 without; OpenVINO's
    If node copies its branch's outputs and keeps them: 307.5 measured, so not there;
    docs/estimate.md, "Session 12: scatter graphs"). Loop/Scan: one iteration of the body
    (iterations reuse it). The body's own peak is its lower bound with aliases — a body is
    small next to its node's span.
    """
    best = 0
    for sub in node.subgraphs:
        order = list(range(len(sub.nodes)))
        bufs = tensor_buffers(sub, order)
        if shared_outputs and node.op_type == "If":
            bufs = [b for b in bufs if not b.is_output]
        best = max(best, lower_bound(bufs, len(order)))
    return best


def tensor_buffers(g: GraphInfo, order: Sequence[int], *, aliases: bool = True) -> list[Buffer]:
    """Buffers of all activations (graph inputs and initializers excluded), aliases merged.

    Unknown sizes count as 0 (the caller lists them as unknowns). Control-flow bodies add a
    transient buffer at their node's step.
    """
    pos = positions(order)
    end_step = len(order) - 1
    root: dict[str, Buffer] = {}
    bufs: list[Buffer] = []
    for step, idx in enumerate(order):
        node = g.nodes[idx]
        for k, name in enumerate(node.outputs):
            if not name:
                continue
            t = g.tensors[name]
            src = alias_source(node, k) if aliases else None
            if src is not None and not t.is_output:
                if src in root:
                    b = root[src]
                    b.tensors.append(name)
                    root[name] = b
                    lu = last_use(g, pos, name)
                    if lu is not None:
                        b.end = max(b.end, lu)
                    continue
                src_t = g.tensors.get(src)
                if node.op_type in ALIAS_OPS and src_t is not None and src_t.kind != "activation":
                    continue  # a view of a graph input or weight: no new memory
            lu = last_use(g, pos, name)
            end = end_step if t.is_output else (lu if lu is not None else step)
            b = Buffer(len(bufs), t.nbytes or 0, step, max(end, step), [name], idx, t.is_output)
            bufs.append(b)
            root[name] = b
        if node.subgraphs:
            extra = subgraph_peak(node)
            if extra:
                bufs.append(
                    Buffer(len(bufs), extra, step, step, [f"{node.name}/body"], idx, transient=True)
                )
    return bufs


def live_bytes(bufs: Sequence[Buffer], n_steps: int) -> list[int]:
    """Bytes alive at each step (difference array: O(buffers + steps))."""
    diff = [0] * (n_steps + 1)
    for b in bufs:
        diff[b.start] += b.size
        diff[b.end + 1] -= b.size
    out, acc = [], 0
    for s in range(n_steps):
        acc += diff[s]
        out.append(acc)
    return out


def lower_bound(bufs: Sequence[Buffer], n_steps: int) -> int:
    """No plan can use less than the most bytes simultaneously alive."""
    return max(live_bytes(bufs, n_steps), default=0)
