"""OpenVINO CPU: a decomposed GELU is one op, and on an FC's output that FC's post-op.

Why: exporters spell GELU out in element-wise ops (the Erf form ``x * 0.5 * (1 + erf(x /
sqrt 2))``; the tanh form ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))`` with
``Pow`` or ``x * x * x``, as the TorchScript exporter writes ``GELU(approximate="tanh")``).
OpenVINO's ``GeluFusion`` transformations make each one ``Gelu`` op before the plugin plans
memory, and the CPU plugin fuses a ``Gelu`` into the FullyConnected that makes ``x``. Planned
op by op, the chain's inner tensors (three of ``x``'s size alive at once, since ``x`` is read
at the start and at the end) were charged; the runtime model has one FullyConnected named
``a,g`` (bias Add .. last Mul) writing only the GELU's result (one transformer MLP, dynamic
[batch, seq], bf16 host; docs/estimate.md, "Session 13: split transformer MLPs").

Matched by structure only: the ops reachable from ``x`` through element-wise ops that read
nothing but ``x``, scalar constants and each other, with exactly one ``Erf`` / ``Tanh`` among
them and exactly one result read outside. No weight is read.
"""

from __future__ import annotations

from dataclasses import dataclass

from memshrink.estimate.graph import GraphInfo

#: element-wise ops a decomposed GELU is written with
OPS = frozenset({"Mul", "Add", "Sub", "Div", "Pow", "Erf", "Tanh"})
#: a GELU has 6-10 ops (Erf form 5-6 with the half; tanh form 8-9)
MAX_OPS = 10


@dataclass
class Gelu:
    """One decomposed GELU: its input, its inner results, its result."""

    x: str
    inner: list[str]
    output: str


def const_scalar(g: GraphInfo, name: str) -> bool:
    """A one-element initializer (a GELU's 0.5, sqrt(2/pi), ...; a Mul's scale)."""
    t = g.tensors.get(name)
    return (
        t is not None
        and t.kind == "initializer"
        and t.shape is not None
        and not any(d != 1 for d in t.shape)
    )


def gelus(g: GraphInfo) -> list[Gelu]:
    """Every decomposed GELU (``Gelu`` per match, in graph order of ``x``'s producer)."""
    out: list[Gelu] = []
    for x, t in g.tensors.items():
        if t.kind not in ("activation", "input") or len(set(t.consumers)) < 2:
            continue
        found = _match(g, x)
        if found is not None:
            out.append(found)
    return out


def _match(g: GraphInfo, x: str) -> Gelu | None:
    made = {x}
    members: list[int] = []
    frontier = sorted(set(g.tensors[x].consumers))
    seen: set[int] = set()
    while frontier:  # grow in graph order while every activation input is already made
        grew = False
        for c in list(dict.fromkeys(frontier)):
            node = g.nodes[c]
            if c in seen:
                continue
            if node.op_type not in OPS or not node.outputs or not node.outputs[0]:
                return None if c in g.tensors[x].consumers else _close(g, x, members, made)
            ins = [i for i in node.inputs if i]
            if all(i in made or const_scalar(g, i) for i in ins):
                seen.add(c)
                members.append(c)
                made.add(node.outputs[0])
                frontier = [k for k in frontier if k != c]
                frontier.extend(
                    k for k in set(g.tensors[node.outputs[0]].consumers) if k not in seen
                )
                grew = True
                if len(members) > MAX_OPS:
                    return None
        if not grew:
            break
    return _close(g, x, members, made)


def _close(g: GraphInfo, x: str, members: list[int], made: set[str]) -> Gelu | None:
    """A GELU when ``x``'s readers are all members, one member is Erf/Tanh and exactly one
    member's result is read outside (or is a graph output)."""
    ms = set(members)
    if not set(g.tensors[x].consumers) <= ms or len(members) < 5:
        return None
    if sum(g.nodes[m].op_type in ("Erf", "Tanh") for m in members) != 1:
        return None
    exits = [
        g.nodes[m].outputs[0]
        for m in members
        if g.tensors[g.nodes[m].outputs[0]].is_output
        or not set(g.tensors[g.nodes[m].outputs[0]].consumers) <= ms
    ]
    if len(exits) != 1:
        return None
    inner = [g.nodes[m].outputs[0] for m in members if g.nodes[m].outputs[0] != exits[0]]
    return Gelu(x, inner, exits[0])
