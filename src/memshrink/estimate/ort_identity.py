"""ONNX Runtime's ``EliminateIdentity`` on weights: an Identity of an initializer is a name.

``fold_constants`` marks an ``Identity`` whose input is a weight as folded, and its output
becomes a folded weight of its own: an anon copy in the weight rules (``folded_anon``) and,
when a Conv reads it, a second weight that NCHWc rewrites while the source's copy stays.
ORT's level-1 rewrite rule removes the node instead and the consumer reads the source
initializer itself (``optimizer/identity_elimination.cc``; ORT 1.32's optimized dump of
timm's RegNetY legacy export: 69 such Identities gone, 7.41 MiB of initializers left against
7.22 MiB stored, where the estimator counted 3.4 MiB of folded copies and 9.9 MiB of NCHWc
filters besides the sources). Legacy torch exports write one for every weight the exporter
deduplicated or renamed.
"""

from __future__ import annotations

import dataclasses

from memshrink.estimate.graph import GraphInfo


def eliminate(g: GraphInfo) -> GraphInfo | None:
    """A new graph whose consumers of ``Identity(initializer)`` read the initializer (the
    Identity's output left as a folded weight nobody reads, which every rule skips), or None
    when nothing changes. Identities that feed a graph output or a subgraph stay."""
    renames: dict[str, str] = {}
    gone: list[int] = []  # the Identity nodes removed (kept as input-less folded nodes)
    for i in sorted(g.folded):
        node = g.nodes[i]
        if node.op_type != "Identity" or node.domain not in ("", "ai.onnx"):
            continue
        if len(node.inputs) != 1 or len(node.outputs) != 1 or not node.inputs[0]:
            continue
        src, out = node.inputs[0], node.outputs[0]
        src = renames.get(src, src)
        t_src, t_out = g.tensors[src], g.tensors[out]
        if t_src.kind != "initializer" or t_src.folded or t_out.is_output:
            continue
        if any(out in g.nodes[c].implicit_inputs for c in t_out.consumers):
            continue
        renames[out] = src
        gone.append(i)
    if not renames:
        return None
    nodes = list(g.nodes)
    for i in gone:  # no input: nothing is read to fold it (no creation transient)
        nodes[i] = dataclasses.replace(nodes[i], inputs=[])
    tensors = dict(g.tensors)
    moved: dict[str, list[int]] = {}
    for out, src in renames.items():
        for c in g.tensors[out].consumers:
            node = nodes[c]
            nodes[c] = dataclasses.replace(
                node, inputs=[renames.get(n, n) if n == out else n for n in node.inputs]
            )
            moved.setdefault(src, []).append(c)
        tensors[out] = dataclasses.replace(g.tensors[out], consumers=[])
    for src, cs in moved.items():
        t = tensors[src]
        tensors[src] = dataclasses.replace(t, consumers=[*t.consumers, *cs])
    return dataclasses.replace(g, nodes=nodes, tensors=tensors)
