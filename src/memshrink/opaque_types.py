"""Value types onnx_ir cannot hold: map types, e.g. skl2onnx's ZipMap output seq(map(int64, float)).

onnx_ir (1.1) has no map type, so deserializing a model whose graph inputs, outputs or value_info
declare one raises, although the model is valid and ONNX Runtime runs it. Every skl2onnx
classifier exported with its default ZipMap is such a model. On load, :func:`strip` takes those
types off the proto (the values become untyped, which the passes and the estimator treat as
"unknown") and keeps the graph inputs' and outputs' types in ``model.meta``; :func:`serialize`
puts them back on the values of the same name whenever the model is serialized to be written.
"""

from __future__ import annotations

from typing import Any

import onnx
import onnx_ir as ir

from memshrink import compact_attrs, sparse_init
from memshrink.protowalk import all_graphs, subgraphs

#: ``ir.Model.meta`` key: {value name: serialized TypeProto} of the top graph's inputs/outputs.
META_OPAQUE_TYPES = "memshrink.opaque_types"


def _has_map(t: onnx.TypeProto) -> bool:
    which = t.WhichOneof("value")
    if which == "map_type":
        return True
    if which == "sequence_type":
        return _has_map(t.sequence_type.elem_type)
    if which == "optional_type":
        return _has_map(t.optional_type.elem_type)
    return False


def needs_strip(proto: onnx.ModelProto) -> bool:
    """Whether any value of the model (subgraphs included) declares a map type."""
    return any(
        vi.HasField("type") and _has_map(vi.type)
        for g in all_graphs(proto)
        for vi in (*g.input, *g.output, *g.value_info)
    )


def strip(proto: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Remove map-typed declarations in place; return the top graph inputs'/outputs' types."""
    kept: dict[str, onnx.TypeProto] = {}
    graphs = [(proto.graph, True)]
    while graphs:
        g, top = graphs.pop()
        for vi in (*g.input, *g.output):
            if vi.HasField("type") and _has_map(vi.type):
                if top:
                    kept[vi.name] = onnx.TypeProto()
                    kept[vi.name].CopyFrom(vi.type)
                vi.ClearField("type")
        keep = [vi for vi in g.value_info if not (vi.HasField("type") and _has_map(vi.type))]
        if len(keep) != len(g.value_info):
            del g.value_info[:]
            g.value_info.extend(keep)
        graphs.extend((sub, False) for sub in subgraphs(g))
    return kept


def restore(proto: onnx.ModelProto, kept: dict[str, onnx.TypeProto] | None) -> onnx.ModelProto:
    """Put the kept types back on the top graph's untyped inputs/outputs of the same name."""
    for vi in (*proto.graph.input, *proto.graph.output):
        if kept and vi.name in kept and not vi.HasField("type"):
            vi.type.CopyFrom(kept[vi.name])
    return proto


def deserialize(
    proto: onnx.ModelProto,
    copy: bool = False,
    base_dir: str = "",
    lists: dict[str, tuple[Any, str]] | None = None,
) -> ir.Model:
    """``ir.serde.deserialize_model`` that also takes models with map-typed values and sparse
    initializers (made dense: ``memshrink.sparse_init``), and keeps large scalar-list
    attributes compact (``memshrink.compact_attrs``); ``copy`` leaves ``proto`` alone.
    ``lists``: the large lists the loader's scan already took off ``proto``
    (``compact_attrs.lift``), put back the same way."""
    kept: dict[str, onnx.TypeProto] = {}
    sparse = sparse_init.has_sparse(proto)
    large = compact_attrs.has_large_lists(proto)
    if sparse or large or needs_strip(proto):
        if copy:
            clone = onnx.ModelProto()
            clone.CopyFrom(proto)
            proto = clone
        if sparse:
            sparse_init.densify(proto, base_dir)
        kept = strip(proto)
    taken = dict(lists or {})
    if large:
        taken.update(compact_attrs.take_large_lists(proto))
    model = ir.serde.deserialize_model(proto)
    compact_attrs.put_back(model, taken)
    if kept:
        model.meta[META_OPAQUE_TYPES] = kept
    return model


def serialize(model: ir.Model) -> onnx.ModelProto:
    """``ir.serde.serialize_model`` with the map types taken off at load put back."""
    return restore(ir.serde.serialize_model(model), model.meta.get(META_OPAQUE_TYPES))


def carry(src: ir.Model, dst: ir.Model) -> None:
    """Keep the stripped types when a pass replaces the model with a new one."""
    if META_OPAQUE_TYPES in src.meta:
        dst.meta[META_OPAQUE_TYPES] = src.meta[META_OPAQUE_TYPES]
