"""Weights OpenVINO's CPU plugin folds into a new Constant at ``compile_model``.

Why: a Conv followed by BatchNormalization or a Mul by a constant, and an FC whose output is
scaled by a per-channel constant, get their weights rewritten by the plugin's fusions; the
compiled model keeps the new Constant, not the original. Embedded, the original goes with the
``ov.Model``; in a mapped data file its pages stay resident as long as any other Constant
keeps the file mapped (EfficientFormer-L1 after ``safe``: 136 -> 156 MiB measured). Alone in
a file of their own, that file's mapping goes after compile (``writer``'s ``folded`` file;
docs/optimize.md, "External data on OpenVINO"). The rules are the estimator's
(``estimate.openvino.weight_rules``: ``conv_fused``, ``_fc_scaled``), on an ``onnx_ir`` graph.
"""

from __future__ import annotations

import onnx_ir as ir

FC = ("MatMul", "Gemm")


def _const(graph: ir.Graph, v: ir.Value | None) -> ir.Value | None:
    """The constant behind ``v`` (an initializer, a Constant node's output, or an Identity
    of either), or None."""
    for _ in range(4):
        if v is None:
            return None
        if v.is_initializer() or v.const_value is not None:
            return v
        node = v.producer()
        if node is None or node.domain not in ("", "ai.onnx"):
            return None
        if node.op_type == "Constant":
            return v
        if node.op_type != "Identity":
            return None
        v = node.inputs[0]
    return None


def only_reader(graph: ir.Graph, v: ir.Value) -> ir.Node | None:
    """The one node reading ``v`` (several reads by it count once); None for several readers,
    none, or a graph output."""
    readers = {id(u.node): u.node for u in v.uses()}
    if len(readers) != 1 or v in graph.outputs:
        return None
    return next(iter(readers.values()))


def _const_shape(v: ir.Value) -> tuple[int, ...] | None:
    t = v.const_value
    if t is None:
        node = v.producer()
        t = (
            node.attributes["value"].value
            if node is not None and "value" in node.attributes
            else None
        )
    if t is None or t.shape is None:
        return None
    return tuple(d if isinstance(d, int) else -1 for d in t.shape)


def _conv_folds(graph: ir.Graph, out: ir.Value) -> bool:
    nxt = only_reader(graph, out)
    if nxt is None or nxt.domain not in ("", "ai.onnx"):
        return False
    if nxt.op_type == "BatchNormalization":
        return True
    return nxt.op_type == "Mul" and any(_const(graph, x) is not None for x in nxt.inputs)


def _fc_scaled(graph: ir.Graph, out: ir.Value) -> bool:
    """Scaled per output channel (or by a scalar), through at most its bias Add."""
    nxt = only_reader(graph, out)
    if nxt is not None and nxt.op_type == "Add" and any(_const(graph, x) for x in nxt.inputs):
        nxt = only_reader(graph, nxt.outputs[0])
    if nxt is None or nxt.op_type != "Mul":
        return False
    for x in nxt.inputs:
        c = _const(graph, x)
        if c is not None:
            shape = _const_shape(c)
            return shape is not None and all(d == 1 for d in shape[:-1])
    return False


def folded_weights(graph: ir.Graph) -> set[str]:
    """Names of the initializers every reader of which is a Conv/FC (as its weight) whose
    fusion makes a new Constant: OpenVINO keeps none of them after ``compile_model``."""
    names = set()
    for name, w in graph.initializers.items():
        uses = list(w.uses())
        if not uses or w in graph.outputs:
            continue
        ok = True
        for u in uses:
            node = u.node
            if u.idx != 1 or node.domain not in ("", "ai.onnx") or not node.outputs:
                ok = False
            elif node.op_type == "Conv":
                ok = _conv_folds(graph, node.outputs[0])
            elif node.op_type in FC:
                ok = _fc_scaled(graph, node.outputs[0])
            else:
                ok = False
            if not ok:
                break
        if ok:
            names.add(name)
    return names
