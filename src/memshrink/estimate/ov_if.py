"""OpenVINO CPU: an ``If`` whose condition follows from static dims is gone after compile.

Exporters guard reshapes with conditions on a tensor's rank or on one of its dims
(``if x.dim() == 0`` / ``if x.shape[-1] == 1: squeeze``: torch's scatter-based GNN layers,
a head's ``squeeze(-1)``). OpenVINO's frontend computes such a condition by shape inference
when the dims it reads are static, even with other dims symbolic, and replaces the ``If`` by
the taken branch: the runtime graph has no ``If`` node, a branch of views (Reshape, Squeeze,
Identity ...) is a view of the outer tensor, and nothing is copied. A condition on a symbolic
dim keeps the ``If`` (its node copies the branch's outputs, ``lifetimes.subgraph_peak``).
Measured (docs/estimate.md, "Session 15: If nodes folded at compile"): Relu -> If(Squeeze |
Reshape) -> Sigmoid on x [N, 1], N = 4,000,000 symbolic, infer 3 over the baseline: condition
on the static last dim 94.6 MiB with one If and 95.0 with four (no If in the runtime graph),
on N 126.5 / 188.1 (one ``If`` node each).
"""

from __future__ import annotations

from collections.abc import Sequence

from memshrink.estimate.graph import GraphInfo, NodeInfo

# Ops a folded branch may hold and stay a view of the outer tensor (no code, no copy).
VIEWS = frozenset({"Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Constant"})
_CMP = {
    "Equal": lambda a, b: a == b,
    "Less": lambda a, b: a < b,
    "Greater": lambda a, b: a > b,
    "LessOrEqual": lambda a, b: a <= b,
    "GreaterOrEqual": lambda a, b: a >= b,
}
# Shape-value ops that pass their input's values through (a flat list is kept)
_PASS = frozenset({"Squeeze", "Unsqueeze", "Reshape", "Flatten", "Identity", "Cast"})
Vals = tuple[int | None, ...]  # a small int tensor's flat values; None = not known at compile


def _producers(g: GraphInfo) -> dict[str, NodeInfo]:
    """Every output's node, folded ones included (``fold_constants`` drops their producer)."""
    return {o: n for n in g.nodes for o in n.outputs if o}


def _values(
    g: GraphInfo, name: str, prod: dict[str, NodeInfo] | None = None, depth: int = 0
) -> Vals | None:
    """Flat values of a small integer tensor as OpenVINO's shape inference knows them before
    the first infer: symbolic dims are unknown (None); None for the whole when not a shape
    computation."""
    prod = _producers(g) if prod is None else prod
    t = g.tensors.get(name) if name else None
    if t is None or depth > 32:
        return None
    if t.small is not None:
        return tuple(t.small)
    node = prod.get(name)
    if node is None:
        return None
    op = node.op_type
    ins = node.inputs
    if op in ("Shape", "Size") and ins:
        src = g.tensors.get(ins[0])
        dims = src.sym_shape if src is not None else None
        if dims is None:
            return None
        vals = tuple(d if isinstance(d, int) else None for d in dims)
        if op == "Size":
            return (None,) if None in vals else (_prod(vals),)
        lo, hi = node.attrs.get("start", 0), node.attrs.get("end")
        return vals[lo:hi] if isinstance(lo, int) and (hi is None or isinstance(hi, int)) else None
    if op in _PASS and ins:
        return _values(g, ins[0], prod, depth + 1)
    if op == "Gather" and len(ins) == 2 and node.attrs.get("axis", 0) == 0:
        data, idx = _values(g, ins[0], prod, depth + 1), _values(g, ins[1], prod, depth + 1)
        if data is None or idx is None:
            return None
        n = len(data)
        picks = [i for i in idx if i is not None and -n <= i < n]
        return tuple(data[i] for i in picks) if len(picks) == len(idx) else None
    if op in _CMP and len(ins) == 2:
        a, b = _values(g, ins[0], prod, depth + 1), _values(g, ins[1], prod, depth + 1)
        if a is None or b is None or (len(a) != len(b) and 1 not in (len(a), len(b))):
            return None
        n = max(len(a), len(b))
        a, b = a * n if len(a) == 1 else a, b * n if len(b) == 1 else b
        return tuple(
            None if x is None or y is None else int(_CMP[op](x, y))
            for x, y in zip(a, b, strict=True)
        )
    if op == "Not" and ins:
        v = _values(g, ins[0], prod, depth + 1)
        return None if v is None else tuple(None if x is None else int(not x) for x in v)
    return None


def _prod(vals: Sequence[int | None]) -> int:
    n = 1
    for v in vals:
        n *= v or 0
    return n


def taken_branch(g: GraphInfo, node: NodeInfo) -> GraphInfo | None:
    """The branch OpenVINO keeps in place of ``node`` when its condition is known at compile
    (from static dims and constants), else None."""
    if node.op_type != "If" or not node.inputs or len(node.subgraph_attrs) != 2:
        return None
    cond = _values(g, node.inputs[0])
    if cond is None or len(cond) != 1 or cond[0] is None:
        return None
    want = "then_branch" if cond[0] else "else_branch"
    for name, sub in zip(node.subgraph_attrs, node.subgraphs, strict=False):
        if name == want:
            return sub
    return None


def view_sources(g: GraphInfo, node: NodeInfo) -> list[str] | None:
    """For an ``If`` folded at compile whose taken branch holds only views: the outer tensor
    each output is a view of (its buffer), in output order; else None."""
    sub = taken_branch(g, node)
    if sub is None or any(n.op_type not in VIEWS for n in sub.nodes):
        return None
    srcs: list[str] = []
    for out in sub.outputs:
        t = sub.tensors.get(out)
        if t is not None and t.producer is not None and sub.nodes[t.producer].op_type == "Identity":
            srcs.append("")
            continue
        name = out
        for _ in range(len(sub.nodes) + 1):
            t = sub.tensors.get(name)
            if t is None or t.producer is None:
                break
            p = sub.nodes[t.producer]
            if p.op_type == "Constant" or not p.inputs:
                return None
            name = p.inputs[0]
        if name in sub.tensors and sub.tensors[name].producer is not None:
            return None
        if name not in g.tensors:
            return None
        srcs.append(name)
    return srcs if len(srcs) == len(node.outputs) else None
