"""OpenVINO CPU: an Expand read only by element-wise ops takes no buffer of its own.

The plugin's Eltwise nodes broadcast their inputs, so an ``Expand`` whose every reader is an
element-wise op costs nothing measurable: the runtime graph still lists a bf16 ``Broadcast``
node (ordered after the Eltwise), but the process holds what the graph without the Expand
holds. Measured
(docs/estimate.md, "Session 15: If nodes folded at compile", Broadcasts at bf16): MatMul ->
ReduceMax -> Expand to [N, 256] -> Add -> MatMul on x [N, 256], N = 65,536 symbolic, infer 3
329.6 MiB against 328.6 for the same graph without the Expand (one bf16 [N, 256] would be
32 MiB).
"""

from __future__ import annotations

from memshrink.estimate.graph import GraphInfo
from memshrink.estimate.ov_kinds import ELTWISE


def absorbed(g: GraphInfo) -> dict[str, str]:
    """{Expand output: its data input} for each Expand of an activation whose readers are all
    element-wise ops (and which is not a graph output)."""
    out: dict[str, str] = {}
    for node in g.nodes:
        if node.op_type != "Expand" or node.index in g.folded or not node.outputs:
            continue
        name, src = node.outputs[0], node.inputs[0] if node.inputs else ""
        t, s = g.tensors.get(name), g.tensors.get(src)
        if t is None or s is None or t.is_output or not t.consumers or s.kind == "initializer":
            continue
        if all(g.nodes[c].op_type in ELTWISE for c in t.consumers):
            out[name] = src
    return out
