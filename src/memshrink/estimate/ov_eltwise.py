"""OpenVINO CPU: chains of element-wise ops on two activations fused into one Eltwise node.

Why: the plugin's ``FuseEltwiseAndSimple`` fuses an Eltwise node whose only reader is another
Eltwise into that reader, again and again, while the fused node has at most
``MAX_ELTWISE_INPUTS`` (7) parent edges. The fused node runs once, after its *last* input is
made, so every input of the chain stays alive until then, and the chain's inner results never
exist. ``chunk``'s channel split writes exactly such a chain: ``acc_k = acc_(k-1) + reduce_k``,
then the reduce's bias and the block's residual Add. Runtime model of one transformer MLP
split x4 (dynamic [batch, seq], bf16 host): four FullyConnected pieces, each followed by a
Reorder to f32, and one ``Eltwise`` named ``Add__ch1_4,Add__ch2_4,Add__ch3_4,r,y`` at the
end: the four f32 partial sums are alive together. Measured (docs/estimate.md, "Session 13:
split transformer MLPs"): N=2048 rows, H=256, F=1024, OpenVINO steady state 59.1 MiB whole,
59.3 / 65.1 / 72.2 MiB split x2 / x4 / x8, which the per-Add plan predicted falling.

Inputs that are graph inputs, Constants (a per-channel bias counts as an edge; a scalar one
is folded into the op, ``ConvertToPowerStatic``) and the chain's own results are told apart
by ``GraphInfo`` kinds only: no weight is read.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from memshrink.estimate.graph import GraphInfo
from memshrink.estimate.lifetimes import Buffer

#: ``MAX_ELTWISE_INPUTS`` in the CPU plugin (``jit_eltwise_call_args_ptrs.hpp``)
MAX_INPUTS = 7
#: binary element-wise ops the plugin runs as one ``Eltwise`` node
BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Sum"})


@dataclass
class FusedEltwise:
    """One fused Eltwise node: its member ops (graph order), the tensors it reads from outside
    (activations only: those whose lifetime the fusion extends), and its output."""

    members: list[int]
    inputs: list[str]
    output: str


def _acts(g: GraphInfo, node_inputs: Sequence[str]) -> list[str]:
    return [
        i
        for i in node_inputs
        if i and i in g.tensors and g.tensors[i].kind in ("activation", "input")
    ]


def _edges(g: GraphInfo, node_inputs: Sequence[str]) -> list[str]:
    """Parent edges an op brings: activations and non-scalar constants (scalars fold)."""
    out = []
    for i in node_inputs:
        t = g.tensors.get(i) if i else None
        if t is None:
            continue
        runtime = t.kind in ("activation", "input") and not t.folded
        if runtime or (t.shape is not None and any(d != 1 for d in t.shape)):
            out.append(i)
    return out


def _single_reader(g: GraphInfo, name: str) -> int | None:
    t = g.tensors[name]
    readers = set(t.consumers)
    if len(readers) != 1 or t.is_output:
        return None
    return next(iter(readers))


def _parent(g: GraphInfo, name: str) -> int | str:
    """The plugin node an edge comes from: its producer, or the tensor itself (a graph input's
    Parameter, a weight's Constant)."""
    p = g.tensors[name].producer
    return name if p is None else p


def fused_eltwise(
    g: GraphInfo, exclude: Collection[int] = (), plain: bool = False
) -> list[FusedEltwise]:
    """Chains of binary element-wise ops that start at an op on two activations and absorb
    each single reader that is a binary element-wise op too, while the fused node reads at
    most ``MAX_INPUTS`` edges. Only chains of two or more members are returned (a lone op is
    planned as it is). ``exclude``: nodes already one op of another kind (a GELU's).

    ``plain``: the ops stay plain ``Eltwise`` nodes (dynamic shapes: no Snippets), fused by
    ``FuseEltwiseAndSimple`` alone, which refuses a child that reads a node the chain already
    reads ("avoid cycle dependencies", ``graph_optimizer.cpp``): ConvNeXt-V2's GRN
    ``y = gamma * (x * Nx) + beta + x`` stops before the final ``+ x``, so ``x``, the fused
    result and the sum are alive together (runtime model, dynamic batch: ``Power, Nx, gm, gm1,
    ga1`` as one Eltwise and ``ga2`` alone; static: one Snippets ``Subgraph``)."""
    taken: set[int] = set(exclude)
    groups: list[FusedEltwise] = []
    for node in g.nodes:
        if node.index in taken or node.op_type not in BINARY or not node.outputs:
            continue
        if len(set(_acts(g, node.inputs))) < 2 or not node.outputs[0]:
            continue
        members = [node.index]
        edges = list(dict.fromkeys(_edges(g, node.inputs)))
        parents = {_parent(g, e) for e in edges}
        out = node.outputs[0]
        while True:
            c = _single_reader(g, out)
            if c is None or c in taken or g.nodes[c].op_type not in BINARY:
                break
            child = g.nodes[c]
            if not child.outputs or not child.outputs[0]:
                break
            others = [e for e in dict.fromkeys(_edges(g, child.inputs)) if e != out]
            if plain and any(_parent(g, e) in parents for e in others):
                break
            more = [e for e in others if e not in edges]
            if len(edges) + len(more) > MAX_INPUTS:
                break
            members.append(c)
            edges += more
            parents.update(_parent(g, e) for e in more)
            out = child.outputs[0]
        if len(members) < 2:
            continue
        taken.update(members)
        inner = {g.nodes[m].outputs[0] for m in members[:-1]}
        acts = [e for e in edges if e not in inner and g.tensors[e].kind in ("activation", "input")]
        groups.append(FusedEltwise(members, acts, out))
    return groups


def extend_lifetimes(
    g: GraphInfo,
    groups: Sequence[FusedEltwise],
    owner: Mapping[str, Buffer],
    pos: Mapping[int, int],
) -> set[str]:
    """Move each fused node's inputs' ends to the step of its last member and drop the chain's
    inner results (their buffers hold nothing else). Returns the inputs read by a fused node
    (the caller keeps those in f32 when the node is in the precision tail)."""
    read: set[str] = set()
    for grp in groups:
        steps = [pos[m] for m in grp.members if m in pos]
        if not steps:
            continue
        last = max(steps)
        for name in grp.inputs:
            b = owner.get(name)
            if b is not None and b.end < last:
                b.end = last
            read.add(name)
        inner = {g.nodes[m].outputs[0] for m in grp.members[:-1]}
        for name in [*inner, grp.output]:
            b = owner.get(name)
            if b is None or not set(b.tensors) <= inner | {grp.output}:
                continue  # shared with an op the chain does not own: planned as it is
            if grp.output in b.tensors:
                b.start = max(b.start, last)
            else:
                b.size = 0
    return read
