"""Function ops ONNX Runtime CPU inlines at load: the graph it runs has their bodies.

When no kernel of the CPU provider takes a node whose op has an ONNX function body, the
session replaces the node by the body at load, at every optimization level, before the
fp16 Casts are inserted; the body's nodes are appended (new node indices). Their
intermediates are tensors of their own, and a body does not run in place the way the
fused kernel may (a Softmax writes over its input; the body's Sub / Exp / Div cannot).
Measured on ORT 1.32 (``optimized_model_filepath`` dumps at ``ORT_DISABLE_ALL`` of
``Relu -> op`` graphs, this host): ``HardSwish`` (no CPU kernel at all, f32 and fp16) ->
``HardSigmoid(alpha=1/6, beta=0.5)``, ``Mul``; fp16 ``Softmax`` / ``LogSoftmax`` from opset
13 (no fp16 kernel on x86-64) -> ``ReduceMax``, ``Sub``, ``Exp``, ``ReduceSum``, ``Div`` (or
``Log``, ``Sub``), run in f32 by the Casts around them; at opset 11 and at f32 the kernel
runs. Not modelled: fp16 ``Gelu`` (opset 20) and ``Mish``, also inlined.
"""

from __future__ import annotations

import dataclasses

from memshrink.estimate.graph import GraphInfo, NodeInfo, TensorInfo
from memshrink.estimate.weights import FP16

HARD_SWISH = {"alpha": 1 / 6, "beta": 0.5}
INLINED = ("HardSwish", "Softmax", "LogSoftmax")


def _inlined(g: GraphInfo, node: NodeInfo) -> bool:
    if node.domain not in ("", "ai.onnx") or node.subgraphs or not node.inputs:
        return False
    if node.op_type == "HardSwish":
        return True
    if node.op_type in ("Softmax", "LogSoftmax") and g.opset >= 13:
        t = g.tensors.get(node.inputs[0])
        return t is not None and t.elem_type == FP16
    return False


def _body(g: GraphInfo, node: NodeInfo) -> list[tuple[str, list[str], str, dict, str]]:
    """(op, inputs, output, attrs, kind) per body node; kind "full" (x's shape) or "reduced"
    (x's shape with the softmax axis 1)."""
    x, y = node.inputs[0], node.outputs[0]
    p = f"{node.name or y}/_inlfunc_{node.op_type}"
    if node.op_type == "HardSwish":
        return [
            ("HardSigmoid", [x], f"{p}_HardSigmoid", dict(HARD_SWISH), "full"),
            ("Mul", [x, f"{p}_HardSigmoid"], y, {}, "full"),
        ]
    axis = int(node.attrs.get("axis", -1))
    red = {"axes": [axis], "keepdims": 1}
    head = [
        ("ReduceMax", [x], f"{p}_ReduceMax", dict(red), "reduced"),
        ("Sub", [x, f"{p}_ReduceMax"], f"{p}_Sub", {}, "full"),
        ("Exp", [f"{p}_Sub"], f"{p}_Exp", {}, "full"),
        ("ReduceSum", [f"{p}_Exp"], f"{p}_ReduceSum", dict(red), "reduced"),
    ]
    if node.op_type == "Softmax":
        return [*head, ("Div", [f"{p}_Exp", f"{p}_ReduceSum"], y, {}, "full")]
    return [
        *head,
        ("Log", [f"{p}_ReduceSum"], f"{p}_Log", {}, "reduced"),
        ("Sub", [f"{p}_Sub", f"{p}_Log"], y, {}, "full"),
    ]


def _reduced(t: TensorInfo, axis: int, name: str) -> TensorInfo:
    def cut(shape: tuple | None) -> tuple | None:
        if shape is None or not shape:
            return shape
        s = list(shape)
        s[axis % len(s)] = 1
        return tuple(s)

    return TensorInfo(name=name, kind="activation", elem_type=t.elem_type,
                      sym_shape=cut(t.sym_shape), shape=cut(t.shape))  # fmt: skip


def inline(g: GraphInfo, order: list[int]) -> tuple[GraphInfo, list[int]] | None:
    """The graph with every inlined node replaced by its body (appended, renumbered), and
    ``order`` mapped onto it (a body where its node was); None when nothing is inlined."""
    gone = [n.index for n in g.nodes if _inlined(g, n)]
    if not gone:
        return None
    drop = set(gone)
    keep = [n for n in g.nodes if n.index not in drop]
    remap = {n.index: k for k, n in enumerate(keep)}
    nodes = [dataclasses.replace(n, index=remap[n.index]) for n in keep]
    tensors = {
        name: dataclasses.replace(
            t,
            producer=None if t.producer is None else remap.get(t.producer),
            consumers=[remap[c] for c in t.consumers if c in remap],
        )
        for name, t in g.tensors.items()
    }
    bodies: dict[int, list[int]] = {}
    for i in gone:
        node = g.nodes[i]
        x = g.tensors[node.inputs[0]]
        y = node.outputs[0]
        axis = int(node.attrs.get("axis", -1))
        made: list[int] = []
        for op, ins, out, attrs, kind in _body(g, node):
            k = len(nodes)
            nodes.append(NodeInfo(k, f"{node.name}/{op}_{len(made)}", op, "", ins, [out],
                                  attrs=attrs))  # fmt: skip
            made.append(k)
            for name in ins:
                tensors[name].consumers.append(k)
            if out == y:
                tensors[y].producer = k
            else:
                tensors[out] = (
                    _reduced(x, axis, out)
                    if kind == "reduced"
                    else TensorInfo(
                        name=out,
                        kind="activation",
                        elem_type=x.elem_type,
                        sym_shape=x.sym_shape,
                        shape=x.shape,
                    )  # fmt: skip
                )
                tensors[out].producer = k
        bodies[i] = made
    new_order = [k for i in order for k in (bodies[i] if i in drop else [remap[i]])]
    folded = {remap[i] for i in g.folded if i in remap}
    return dataclasses.replace(g, nodes=nodes, tensors=tensors, folded=folded), new_order
