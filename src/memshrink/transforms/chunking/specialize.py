"""Specialize a model to bound input shapes so a region can be chunked.

Why: exporters compute Reshape targets, Slice bounds and masks from ``Shape`` of activations
(BERT's attention, for instance). A chunk has a different shape than the whole tensor, so a
``Shape`` read of a chunked tensor would be wrong — and chunking needs static extents anyway
(K equal pieces). With the inputs bound, every ``Shape``/``Size`` result is a constant: we
write it as one, then fold the small integer arithmetic that depended on it, so the chunk
rules see constant Reshape/Slice/Expand parameters. Weights are never read: only integer
tensors of at most ``MAX_FOLD`` elements are evaluated.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx_ir as ir

MAX_FOLD = 4096
_INT = (ir.DataType.INT64, ir.DataType.INT32, ir.DataType.BOOL)
_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"}


def _small_const(v: ir.Value | None) -> np.ndarray | None:
    if v is None:
        return None
    t = v.const_value
    if t is None or t.dtype not in _INT and t.size > 16:
        return None
    if t.size > MAX_FOLD:
        return None
    return np.asarray(t.numpy())


def _as_initializer(graph: ir.Graph, old: ir.Value, arr: np.ndarray, name: str) -> None:
    new = ir.Value(
        name=name,
        shape=ir.Shape(list(arr.shape)),
        type=ir.TensorType(ir.DataType.from_numpy(arr.dtype)),
        const_value=ir.tensor(arr, name=name),
    )
    graph.register_initializer(new)
    old.replace_all_uses_with(new, replace_graph_outputs=False)


def specialize(model: ir.Model, shapes: Mapping[str, tuple[int, ...] | None]) -> dict[str, int]:
    """Bind symbolic input dims, turn Shape/Size of known shapes into constants, fold small
    integer arithmetic. Returns counts of what changed."""
    g = model.graph
    stats = {"inputs_bound": 0, "shape_ops_folded": 0, "int_ops_folded": 0}
    for v in g.inputs:
        s = shapes.get(v.name or "")
        if v.name in g.initializers or s is None or v.shape is None:
            continue
        if any(not isinstance(d, int) for d in v.shape):
            v.shape = ir.Shape(list(s))
            stats["inputs_bound"] += 1
    from onnx.reference import ReferenceEvaluator

    dead: list[ir.Node] = []
    for node in list(g):
        if node.domain not in ("", "ai.onnx") or node.op_type in _NO_FOLD:
            continue
        if any(a.type == ir.AttributeType.GRAPH for a in node.attributes.values()):
            continue
        outs = node.outputs
        if any(o.is_graph_output() for o in outs):
            continue
        arr: list[np.ndarray] | None = None
        if node.op_type == "Constant":
            attr = node.attributes.get("value")
            if attr is None or attr.type != ir.AttributeType.TENSOR:
                continue
            t = attr.value
            if t.size > MAX_FOLD or t.dtype not in _INT and t.size > 16:
                continue
            arr = [np.asarray(t.numpy())]
        elif node.op_type in ("Shape", "Size") and node.inputs and node.inputs[0] is not None:
            s = shapes.get(node.inputs[0].name or "")
            if s is None:
                continue
            if node.op_type == "Size":
                arr = [np.asarray(int(np.prod(s, dtype=np.int64)), dtype=np.int64)]
            else:
                r = len(s)
                start = node.attributes.get("start")
                end = node.attributes.get("end")
                a0 = int(start.value) if start is not None else 0
                a1 = int(end.value) if end is not None else r
                arr = [np.asarray(s[slice(a0, a1)], dtype=np.int64)]
            stats["shape_ops_folded"] += 1
        elif node.inputs and node.op_type != "Constant":
            ins = [_small_const(v) for v in node.inputs]
            if any(x is None and v is not None for x, v in zip(ins, node.inputs, strict=False)):
                continue
            if all(v is None for v in node.inputs):
                continue
            try:
                proto = ir.serde.serialize_node(node)
                names = [(v.name or "") if v is not None else "" for v in node.inputs]
                ev = ReferenceEvaluator(_one_node_model(proto, names, ins, model))
                res = ev.run(None, {n: x for n, x in zip(names, ins, strict=False) if n})
            except Exception:  # noqa: BLE001 - an op the reference cannot run stays as it is
                continue
            if any(np.asarray(x).size > MAX_FOLD for x in res):
                continue
            arr = [np.asarray(x) for x in res]
            stats["int_ops_folded"] += 1
        if arr is None:
            continue
        for o, a in zip(outs, arr, strict=False):
            _as_initializer(g, o, a, f"{o.name}__const")
        dead.append(node)
    for node in dead:
        if all(not o.uses() for o in node.outputs):
            g.remove(node, safe=True)
    return stats


def _one_node_model(
    node_proto: object, names: list[str], arrays: list[np.ndarray | None], model: ir.Model
) -> object:
    import onnx
    from onnx import helper

    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
        for n, a in zip(names, arrays, strict=False)
        if n and a is not None
    ]
    outputs = [helper.make_empty_tensor_value_info(o) for o in node_proto.output]  # type: ignore[attr-defined]
    g = helper.make_graph([node_proto], "fold", inputs, outputs)  # type: ignore[list-item]
    opsets = [helper.make_opsetid(d, v) for d, v in model.opset_imports.items()]
    return helper.make_model(g, opset_imports=opsets, ir_version=onnx.IR_VERSION)
