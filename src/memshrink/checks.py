"""Invariant checks run after passes (``--check`` and in tests).

They read structure only: topological order of every graph, and ``onnx.checker`` on a
weight-free serialization (file-backed tensors serialize as references, so no weight is
read).
"""

from __future__ import annotations

import onnx
import onnx_ir as ir

from memshrink import opaque_types
from memshrink.errors import PassError


def check_topological(graph: ir.Graph) -> None:
    """Every node input must be a graph input, an initializer, an earlier node's output,
    or a value from an enclosing scope."""
    local = set(graph.inputs) | set(graph.initializers.values())
    produced_here = {out for node in graph for out in node.outputs}
    seen: set[ir.Value] = set()
    for node in graph:
        for value in node.inputs:
            if value is None or value in local or value in seen:
                continue
            if value in produced_here:
                raise PassError(
                    f"graph {graph.name!r} is not topologically sorted: node "
                    f"{node.name or node.op_type!r} reads {value.name!r} before it is produced"
                )
        seen.update(node.outputs)
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                check_topological(attr.as_graph())
            elif attr.type == ir.AttributeType.GRAPHS:
                for sub in attr.as_graphs():
                    check_topological(sub)


def _is_external(tensor: onnx.TensorProto) -> bool:
    return tensor.data_location == onnx.TensorProto.EXTERNAL


def _strip_external(graph: onnx.GraphProto) -> None:
    """Make a weight-free proto checkable without its data files.

    External initializers become typed graph inputs (valid since IR 4); external tensors
    in attributes become one-element tensors of the same dtype. The checker resolves
    external paths against a folder it doesn't know, so references can't stay.
    """
    keep = []
    declared = {vi.name for vi in graph.input}  # IR < 4 lists initializers as inputs too
    for init in graph.initializer:
        if _is_external(init):
            if init.name in declared:
                continue
            graph.input.append(
                onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
            )
        else:
            keep.append(init)
    if len(keep) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(keep)
    for node in graph.node:
        for attr in node.attribute:
            tensors = [attr.t] if attr.HasField("t") else list(attr.tensors)
            for t in tensors:
                if _is_external(t):
                    del t.external_data[:]
                    t.data_location = onnx.TensorProto.DEFAULT
                    del t.dims[:]
                    t.raw_data = bytes(onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize)
            if attr.HasField("g"):
                _strip_external(attr.g)
            for sub in attr.graphs:
                _strip_external(sub)


def check_model(model: ir.Model) -> None:
    """Raise PassError when the model violates an invariant."""
    check_topological(model.graph)
    proto = opaque_types.serialize(model)
    _strip_external(proto.graph)
    try:
        onnx.checker.check_model(proto, full_check=False)
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PassError(f"model fails onnx.checker: {first}") from None


class CheckHook:
    """Run :func:`check_model` after every pass that modified the model."""

    def after_pass(self, record, model: ir.Model, context) -> None:  # noqa: ANN001
        if record.modified:
            try:
                check_model(model)
            except PassError as exc:
                raise PassError(f"after pass {record.name!r}: {exc}") from None
            record.stats["checked"] = True
