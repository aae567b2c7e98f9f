"""ONNX Runtime CPU: weights read inside control-flow and generation bodies.

ORT builds a session state for every body (If branches, Loop / Scan bodies, the decoder of
``com.microsoft`` BeamSearch / GreedySearch) and prepacks its kernels' constant inputs after
the main graph's (``SessionState::PrepackConstantInitializedTensors`` walks the subgraph
session states after its own nodes, with one use count per initializer over all of them).
The weight rules (``ort_weights``) read one graph, so the bodies are appended to it here:
each body node becomes a node after the main graph's, its body-local names prefixed, so an
outer weight read by a branch's MatMul is prepacked like a main-graph one, and a body's own
initializers are weights.

Measured (fresh processes, ``VmHWM`` / ``RssAnon`` / ``RssFile``; docs/estimate.md,
"Session 13: weights inside bodies"), a 4 MiB ``[1024, 1024]`` float W:

* an outer W read by a MatMul in one If branch costs what a main-graph MatMul does
  (external: session after +4.0 MiB anon, one packed copy), so appending the body nodes is the
  whole rule; each node keeps its body (``NodeInfo.scope``) because every session state keeps
  its own packed copy (``ort_weights.pack_events``; session 14: W packed in the main graph and
  a branch, or in both branches, keeps two);
* a body's *own* W (declared in the branch) costs more than a main-graph one: embedded
  +8.0 MiB anon more (MatMul and Add readers alike: the subgraph's GraphProto copy and its
  initializer's TensorProto copy stay), external: the mapped pages stay resident after
  packing (+4.0 MiB file from session creation on), where a main-graph W packed by all its
  readers is released.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from memshrink.estimate.graph import GraphInfo, NodeInfo
from memshrink.estimate.weights import ORT_PREPACK

#: a body's own embedded initializer: extra anon copies beyond a main-graph weight's (measured
#: 8.0 MiB more for a 4 MiB W read by a MatMul or an Add in an If branch)
BODY_EMBEDDED_EXTRA_COPIES = 2


@dataclass
class BodyWeights:
    """The bodies' own initializers, beyond what ``ort_weights`` sees in the flat graph."""

    embedded: int = 0  # bytes of body-declared initializers stored in the .onnx
    external_packed: int = 0  # body-declared external weights a kernel prepacks (stay mapped)
    names: list[str] = field(default_factory=list)

    @property
    def extra_anon(self) -> int:
        return BODY_EMBEDDED_EXTRA_COPIES * self.embedded


def flatten_bodies(g: GraphInfo, *, embedded: bool) -> tuple[GraphInfo, BodyWeights]:
    """``g`` with every body's nodes appended (depth first, in node order) and the bodies' own
    initializers listed as the graph's; returns ``g`` itself when no node has a body.
    ``embedded``: the file stores its weights inside (the view's flag: a lazily loaded
    embedded tensor also reads as external)."""
    bw = BodyWeights()
    if not any(n.subgraphs for n in g.nodes):
        return g, bw
    tensors = {k: dataclasses.replace(t, consumers=list(t.consumers)) for k, t in g.tensors.items()}
    nodes = list(g.nodes)
    inits = list(g.initializers)

    def walk(sub: GraphInfo, scope: dict[str, str], prefix: str) -> None:
        local = dict(scope)
        for name, t in sub.tensors.items():
            local[name] = f"{prefix}{name}"
            tensors[local[name]] = dataclasses.replace(
                t, name=local[name], consumers=[], producer=None
            )
        for name in sub.initializers:
            inits.append(local[name])
            bw.names.append(local[name])
        for k, node in enumerate(sub.nodes):
            idx = len(nodes)
            flat = NodeInfo(
                index=idx,
                name=f"{prefix}{node.name}",
                op_type=node.op_type,
                domain=node.domain,
                inputs=[local.get(n, n) if n else n for n in node.inputs],
                outputs=[local.get(n, n) if n else n for n in node.outputs],
                attrs=node.attrs,
                meta=node.meta,
                scope=prefix,
            )
            nodes.append(flat)
            for n in flat.inputs:
                if n in tensors:
                    tensors[n].consumers.append(idx)
            for n in flat.outputs:
                if n in tensors:
                    tensors[n].producer = idx
            for j, body in enumerate(node.subgraphs):
                walk(body, local, f"{prefix}{k}.{j}/")

    for i, node in enumerate(g.nodes):
        for j, body in enumerate(node.subgraphs):
            walk(body, {n: n for n in g.tensors}, f"{i}.{j}/")
        # the body nodes appended read the outer names themselves: the node's implicit use
        # is not a consumer (an If would otherwise keep a branch-packed weight mapped)
        for n in set(node.implicit_inputs) - set(node.inputs):
            if n in tensors:
                tensors[n].consumers = [c for c in tensors[n].consumers if c != i]
    for name in bw.names:
        t = tensors[name]
        nb = t.nbytes or 0
        if not t.consumers:
            continue
        if not embedded:
            if any(_packs(nodes[c], name) for c in t.consumers):
                bw.external_packed += nb
        else:
            bw.embedded += nb
    flat_g = dataclasses.replace(g, nodes=nodes, tensors=tensors, initializers=inits)
    return flat_g, bw


def _packs(node: NodeInfo, name: str) -> bool:
    pos = ORT_PREPACK.get(node.op_type, ())
    return any(i < len(node.inputs) and node.inputs[i] == name for i in pos)
