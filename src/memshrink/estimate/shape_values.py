"""Values of the small shape computations a model makes from its input shapes.

Exports compute pads, Resize scales, Reshape targets and Range limits from ``Shape`` of an
activation with integer and float arithmetic (Swin's window padding ``(w - H % w) % w``,
torchvision's in-model resize and anchor grids). With the input shapes bound every such value
is fixed, and the runtime computes it (ORT folds it at session creation when the shapes are
static, or at each run), but ONNX's data propagation stops at the first Cast, Div or Mod and
ORT's symbolic tool at many of the rest: every tensor after the first Pad / Resize / Range
stayed unknown, and unknown tensors get no memory (timm Swin-V2 legacy: 462 unknown tensors,
torchvision RetinaNet / FCOS / SSDlite / Keypoint R-CNN 543-742, their whole backbone).

``evaluate`` runs those nodes on their values with ONNX's reference implementation, one node
at a time, only where every input is such a value and the result is small; what depends on
data (NonZero, NonMaxSuppression, TopK of scores) stays unknown. It reads no weight: a node
qualifies only when its inputs are shapes, small constants inside the file, or results of
other qualifying nodes.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import numpy_helper

MAX_ELEMENTS = 4096  # a shape computation's tensors are tiny; anything bigger is data
# cheap element-wise / indexing ops seen in shape computations (ONNX reference kernels)
OPS = frozenset(
    {
        "Abs",
        "Add",
        "And",
        "Cast",
        "Ceil",
        "Clip",
        "Concat",
        "ConstantOfShape",
        "Div",
        "Equal",
        "Exp",
        "Expand",
        "Flatten",
        "Floor",
        "Gather",
        "Greater",
        "GreaterOrEqual",
        "Identity",
        "Less",
        "Log",
        "LessOrEqual",
        "Max",
        "Min",
        "Mod",
        "Mul",
        "Neg",
        "Not",
        "Or",
        "Pow",
        "Range",
        "Reciprocal",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceSum",
        "Reshape",
        "Round",
        "Sign",
        "Slice",
        "Sqrt",
        "Squeeze",
        "Sub",
        "Tile",
        "Transpose",
        "Unsqueeze",
        "Where",
    }
)


def _run(node: onnx.NodeProto, args: list[np.ndarray | None], opset: int) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    names = [f"i{k}" if a is not None else "" for k, a in enumerate(args)]
    n = onnx.helper.make_node(
        node.op_type, names, [f"o{k}" for k in range(len(node.output))], domain=node.domain
    )
    n.attribute.extend(node.attribute)
    feeds = {nm: a for nm, a in zip(names, args, strict=True) if nm}
    ev = ReferenceEvaluator(n, opsets={"": opset})
    return [np.asarray(o) for o in ev.run(None, feeds)]


def evaluate(
    graph: onnx.GraphProto,
    shapes: Mapping[str, tuple[int | str | None, ...] | None],
    opset: int,
    known: Mapping[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """The values of the shape computations in ``graph`` (top level, in node order) given the
    tensors' ``shapes`` (concrete where known): ``Shape`` / ``Size`` of a tensor whose shape is
    all integers, ``Constant`` nodes and small initializers, and what the ops in ``OPS`` make
    of them (each result at most ``MAX_ELEMENTS``); ``known``: values of an earlier call."""
    vals: dict[str, np.ndarray] = dict(known or {})
    for t in graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL and _small(t.dims):
            vals[t.name] = numpy_helper.to_array(t)
    for node in graph.node:
        if node.domain not in ("", "ai.onnx") or len(node.output) != 1 or not node.output[0]:
            continue
        out = node.output[0]
        if out in vals:
            continue
        try:
            res = _value(node, vals, shapes, opset)
        except Exception:  # noqa: BLE001 - a node the reference cannot run stays unknown
            res = None
        if res is not None and res.size <= MAX_ELEMENTS:
            vals[out] = res
    return vals


def _small(dims: object) -> bool:
    n = 1
    for d in dims:  # type: ignore[attr-defined]
        n *= int(d)
    return n <= MAX_ELEMENTS


def _value(
    node: onnx.NodeProto,
    vals: Mapping[str, np.ndarray],
    shapes: Mapping[str, tuple[int | str | None, ...] | None],
    opset: int,
) -> np.ndarray | None:
    op = node.op_type
    if op == "Constant":
        attr = next((a for a in node.attribute if a.name == "value"), None)
        if attr is None or not _small(attr.t.dims):
            return None
        return numpy_helper.to_array(attr.t)
    if op in ("Shape", "Size"):
        shp = shapes.get(node.input[0]) if node.input else None
        if shp is None or not all(isinstance(d, int) and d >= 0 for d in shp):
            return None
        dims = np.array(shp, dtype=np.int64)
        if op == "Size":
            return np.array(int(np.prod(dims)), dtype=np.int64)
        start = next((a.i for a in node.attribute if a.name == "start"), 0)
        end = next((a.i for a in node.attribute if a.name == "end"), None)
        return dims[start:end]
    if op not in OPS:
        return None
    args: list[np.ndarray | None] = []
    for name in node.input:
        if not name:
            args.append(None)
        elif name in vals:
            args.append(vals[name])
        else:
            return None
    return _run(node, args, opset)[0]


def as_initializers(graph: onnx.GraphProto, vals: Mapping[str, np.ndarray]) -> onnx.GraphProto:
    """A copy of ``graph`` where each evaluated tensor is an initializer and the node that
    made it is gone (graph inputs and initializers already there are left alone), for a second
    run of shape inference that sees the values."""
    g = onnx.GraphProto()
    g.CopyFrom(graph)
    have = {t.name for t in g.initializer} | {i.name for i in g.input}
    outputs = {o.name for o in g.output}
    made = {n for n in vals if n not in have and n not in outputs}
    keep = [n for n in g.node if not (len(n.output) == 1 and n.output[0] in made)]
    del g.node[:]
    g.node.extend(keep)
    for name in sorted(made):
        g.initializer.append(numpy_helper.from_array(np.asarray(vals[name]), name))
    return g
