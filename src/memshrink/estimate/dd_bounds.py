"""Upper bounds for the sizes that depend on data (NonZero, NonMaxSuppression, TopK, If).

Why: detectors (torchvision RetinaNet, FCOS, SSDlite, Keypoint R-CNN) size their boxes, RoI
heads and keypoints by what NonZero / NMS / TopK return at run time. Shape inference cannot
know that, so those tensors had no size: the estimate counted them as 0 and said it was
partial, while ONNX Runtime allocates them in run 1 and puts them in the memory-pattern
block from run 2 on (Keypoint R-CNN: +19.5 MiB). Each such op has an upper bound that
follows from its inputs' shapes and constant inputs; set on its outputs, shape inference and
``shape_values`` carry it to everything downstream, so the estimate becomes a budget the model
cannot exceed at these input shapes (docs/estimate.md, "Data-dependent sizes").

Rules (``N`` = the bounded dim; every other dim as inference has it):

* ``NonZero(X)``: ``[rank(X), numel(X)]`` (every element non-zero).
* ``NonMaxSuppression(boxes[B, N, 4], scores[B, C, N], m)``: ``[B * C * min(m, N), 3]``
  (each class keeps at most ``min(m, N)`` boxes); ``m`` not a known value: ``B * C * N``.
* ``TopK(X, K)``: ``K`` when its value is known, else ``X``'s length on ``axis``.
* ``If``: each output the element-wise max of its branches' shapes (same rank).
* ``Loop``: a scan output ``[M, *body]`` when the trip count ``M`` is a known value.

``overrides`` (``--dim-bound TENSOR=N``) replace a rule's bounded dims for one tensor: a
deployment that knows its detections never exceed 100 says so.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
import onnx.numpy_helper

Shape = tuple[int, ...]
SymShape = tuple[int | str | None, ...]


def _conc(s: SymShape | None) -> Shape | None:
    if s is None or not all(type(d) is int and d >= 0 for d in s):
        return None
    return s  # type: ignore[return-value]


def _int_value(vals: Mapping[str, np.ndarray], name: str) -> int | None:
    v = vals.get(name) if name else None
    if v is None or v.size != 1:
        return None
    return int(np.asarray(v).reshape(-1)[0])


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((a.i for a in node.attribute if a.name == name), default)


def rule(
    node: onnx.NodeProto,
    shapes: Mapping[str, SymShape | None],
    vals: Mapping[str, np.ndarray],
) -> dict[str, tuple[Shape, str]]:
    """Bounded shapes of ``node``'s outputs (only those inference left unknown), each with the
    rule that gave it, in words; {} when no rule applies or an input's shape is unknown."""
    op = node.op_type
    out: dict[str, tuple[Shape, str]] = {}

    def need(i: int) -> Shape | None:
        return _conc(shapes.get(node.input[i])) if len(node.input) > i and node.input[i] else None

    if node.domain not in ("", "ai.onnx"):
        return out
    if op == "NonZero":
        x = need(0)
        if x is not None:
            n = int(np.prod(x, dtype=np.int64))
            out[node.output[0]] = ((len(x), n), f"NonZero: numel of its input = {n}")
    elif op == "NonMaxSuppression":
        boxes, scores = need(0), need(1)
        if boxes is not None and scores is not None and len(scores) == 3:
            b, c, n = scores
            m = _int_value(vals, node.input[2]) if len(node.input) > 2 else 0
            per = n if m is None else max(0, min(m, n))
            how = "boxes" if m is None else f"min(max_output_boxes_per_class={m}, boxes)"
            out[node.output[0]] = (
                (b * c * per, 3),
                f"NonMaxSuppression: batch {b} x classes {c} x {how} = {b * c * per}",
            )
    elif op == "TopK":
        x = need(0)
        if x is not None:
            axis = _attr(node, "axis", -1) % len(x)
            k = _int_value(vals, node.input[1]) if len(node.input) > 1 else None
            n = x[axis] if k is None else min(k, x[axis])
            how = f"K = {k}" if k is not None else f"K unknown: axis length {x[axis]}"
            shp = tuple(n if a == axis else d for a, d in enumerate(x))  # X's shape, K on axis
            for o in node.output:
                if o:
                    out[o] = (shp, f"TopK: {how}")
    elif op == "If":
        branches = [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]
        for i, o in enumerate(node.output):
            got = [_conc(shapes.get(g.output[i].name)) for g in branches if len(g.output) > i]
            bs = [b for b in got if b is not None]
            if o and bs and len(bs) == len(got) and len({len(b) for b in bs}) == 1:
                out[o] = (
                    tuple(max(d) for d in zip(*bs, strict=True)),
                    "If: larger of its branches",
                )
    elif op == "Loop":
        m = _int_value(vals, node.input[0]) if node.input and node.input[0] else None
        body = next((a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH), None)
        if m is not None and body is not None:
            n_carried = len(node.input) - 2
            for i, o in enumerate(node.output):
                j = 1 + i  # body outputs: cond, carried..., scans...; node's: carried..., scans...
                if o and i >= n_carried and j < len(body.output):
                    s = _conc(shapes.get(body.output[j].name))
                    if s is not None:
                        out[o] = ((m, *s), f"Loop: trip count {m} x one iteration")
    return out


def bound_sources(
    graph: onnx.GraphProto,
    shapes: Mapping[str, SymShape | None],
    vals: Mapping[str, np.ndarray],
    overrides: Mapping[str, int],
) -> list[tuple[onnx.GraphProto, str, Shape, str]]:
    """Bounds for the nodes whose outputs are still unknown while their inputs are known (the
    first data-dependent ops on each path), in ``graph`` and its If / Loop bodies (torchvision
    puts its NMS inside an If): ``(graph that holds the node, tensor, shape, rule)``.
    ``overrides`` win over the rules."""
    found: list[tuple[onnx.GraphProto, str, Shape, str]] = []
    local = dict(vals)
    for node in graph.node:
        if node.op_type == "Constant" and node.output[0] not in local:
            attr = next((a for a in node.attribute if a.name == "value"), None)
            if attr is not None and len(attr.t.dims) <= 1 and np.prod(attr.t.dims) <= 16:
                local[node.output[0]] = onnx.numpy_helper.to_array(attr.t)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                found += bound_sources(attr.g, shapes, local, overrides)
        if not any(o and _conc(shapes.get(o)) is None for o in node.output):
            continue
        for name, (shp, how) in rule(node, shapes, local).items():
            if _conc(shapes.get(name)) is not None:
                continue
            if name in overrides:
                shp, how = _override(shp, shapes.get(name), overrides[name]), "--dim-bound"
            found.append((graph, name, shp, how))
    return found


def _override(shp: Shape, sym: SymShape | None, n: int) -> Shape:
    """``shp`` with each dim that inference left unknown (the data-dependent ones) set to
    ``n``; all of them when inference had no shape."""
    if sym is None or len(sym) != len(shp):
        return tuple(n for _ in shp)
    return tuple(d if type(s) is int else n for d, s in zip(shp, sym, strict=True))


def value_info(name: str, elem_type: int, shape: Shape) -> onnx.ValueInfoProto:
    """A declared shape for a bounded tensor (inference keeps declared dims it cannot name)."""
    return onnx.helper.make_tensor_value_info(name, elem_type, list(shape))
