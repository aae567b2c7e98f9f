"""onnxsim on the model's skeleton: large attribute lists (a forest's ``nodes_*``) left out.

onnxsim needs a full ModelProto and holds several parsed copies of it: a 24 MiB skl2onnx
RandomForest (6.9 M list elements, no initializers, so under ``simplify``'s weight cap) made
``optimize --passes all`` peak at 554 MiB, 552 of them inside onnxsim. The lists are never
what onnxsim rewrites, so it gets the model with each large list empty and marked
(``compact_attrs.marked``), and the lists are put back on its result by marker. That gives
the same model as onnxsim on the full lists only where the lists cannot change what onnxsim
does, so this path is taken only when, for every node with a large list:

- it is not in the default ONNX domain (a ``Constant``'s ``value_ints`` is a value onnxsim
  folds; the ML ops' lists are never data) and is in the main graph (not a subgraph or
  function), and it depends on a fed graph input (so constant folding can never evaluate it);
- ONNX's shape inference gives every value the same type with the lists and without them
  (declared types left out), on onnxsim's input and on its output (a
  ``TreeEnsembleClassifier``'s 4096+ ``classlabels_strings``, emptied, leave its label
  untyped): types are all that onnxsim's other steps read of a node of another domain;
- every list is found again, once, as an empty list of the same name on a node with the same
  outputs, op type and domain (onnxsim drops attribute doc_strings, so not by its marker).

Otherwise onnxsim runs on the full model, as before.
"""

from __future__ import annotations

from typing import Any

import onnx
import onnx_ir as ir

from memshrink.compact_attrs import holds_large_list, inference_ignores, marked, splice
from memshrink.model import serialize_with_data
from memshrink.protowire import LEN, iter_fields

_DEFAULT_DOMAINS = ("", "ai.onnx")


def _list_nodes(model: ir.Model) -> list[ir.Node] | None:
    """The main graph's nodes holding a large list; None when one breaks the rules above
    (or sits where they are not checked: a subgraph, a function)."""
    held = [n for n in ir.traversal.RecursiveGraphIterator(model.graph) if holds_large_list(n)]
    for f in model.functions.values():
        if any(holds_large_list(n) for n in ir.traversal.RecursiveGraphIterator(f)):
            return None
    live = {id(v) for v in model.graph.inputs if v.name not in model.graph.initializers}
    for n in model.graph:  # topological: a node is live when it reads a live value
        if any(v is not None and id(v) in live for v in n.inputs):
            live.update(id(v) for v in n.outputs)
    for n in held:
        if n.graph is not model.graph or n.domain in _DEFAULT_DOMAINS:
            return None
        if not any(v is not None and id(v) in live for v in n.inputs):
            return None
    return held


def _types(data: bytes) -> dict[str, bytes]:
    """Every named value's type as ONNX's shape inference gives it (the estimator's call).
    Only the graph's ``input`` / ``output`` / ``value_info`` fields of the result are parsed,
    from the wire: parsing the model without its lists (``parse_without_large_lists``) walks
    every list element in Python, ~2 CPU-s for the 24 MiB forest."""
    from onnx.onnx_cpp2py_export import shape_inference as c_inference

    buf = memoryview(c_inference.infer_shapes(data, False, False, True))
    out: dict[str, bytes] = {}
    for fnum, wtype, _, start, end in iter_fields(buf, 0, len(buf)):
        if fnum != _MODEL_GRAPH or wtype != LEN:
            continue
        for gnum, gtype, _, gstart, gend in iter_fields(buf, start, end):
            if gnum in _GRAPH_VALUES and gtype == LEN:
                vi = onnx.ValueInfoProto.FromString(bytes(buf[gstart:gend]))
                out[vi.name] = vi.type.SerializeToString()
    return out


_MODEL_GRAPH = 7  # ModelProto.graph
_GRAPH_VALUES = frozenset({11, 12, 13})  # GraphProto.input, output, value_info


def _same_types(proto: onnx.ModelProto, table: dict[bytes, tuple[Any, str]]) -> bool:
    """Whether ONNX's inference types every value alike with the marked lists and without;
    declared types (graph outputs, ``value_info``) are left out, or they would mask a node
    whose inference fails without its lists (non-strict inference skips it silently)."""
    bare = onnx.ModelProto()
    bare.CopyFrom(proto)  # the skeleton: small
    del bare.graph.value_info[:]
    for out in bare.graph.output:
        out.ClearField("type")
    if inference_ignores(bare, table):  # the lists can't change a type: no need to infer
        return True  # them (a forest's: +200 MiB RSS, twice per simplify)
    data = bare.SerializeToString()
    del bare
    try:
        return _types(data) == _types(splice(data, table, strict=True))
    except Exception:  # noqa: BLE001 - inference failing on either: not shown equal
        return False


def _marked_attrs(
    proto: onnx.ModelProto, table: dict[bytes, tuple[Any, str]]
) -> dict[tuple[tuple[str, ...], str], tuple[str, str]]:
    """(node outputs, attribute name) -> (marker, "domain::op_type") of each marked list in
    ``proto``'s main graph: where to find the lists again in onnxsim's result, which keeps
    node outputs and attribute names but drops attribute doc_strings (the markers)."""
    out = {}
    for node in proto.graph.node:
        for a in node.attribute:
            if a.doc_string.encode() in table:
                out[(tuple(node.output), a.name)] = (a.doc_string, f"{node.domain}::{node.op_type}")
    return out


def _remark(
    proto: onnx.ModelProto,
    where: dict[tuple[tuple[str, ...], str], tuple[str, str]],
    table: dict[bytes, tuple[Any, str]],
) -> dict[str, tuple[Any, str]] | None:
    """Mark again, in onnxsim's ``proto``, each list ``where`` names (an empty list of the
    same node and name); the lists to put back, with the doc_string onnxsim left on each
    attribute, as the full run would have; None unless each is found once, on a node of
    the same op type and domain."""
    lists: dict[str, tuple[Any, str]] = {}
    for node in proto.graph.node:
        for a in node.attribute:
            hit = where.get((tuple(node.output), a.name))
            if hit is None:
                continue
            mark, kind = hit
            if mark in lists or kind != f"{node.domain}::{node.op_type}":
                return None
            if len(a.ints) or len(a.floats) or len(a.strings):
                return None
            lists[mark] = (table[mark.encode()][0], a.doc_string)
            a.doc_string = mark
    return lists if len(lists) == len(where) else None


def skeleton_simplify(
    model: ir.Model, onnxsim: Any, options: Any
) -> tuple[onnx.ModelProto, bool, dict[str, tuple[Any, str]] | None]:
    """``onnxsim.simplify`` of ``model`` with ``options`` (``SimplifyPass.Options``): the
    simplified proto, onnxsim's check flag, and the lists to put back on it by marker
    (``opaque_types.deserialize(..., lists=)``; None: the proto is complete)."""

    def run(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, bool]:
        negative = _clear_negative_dims(proto)
        result: tuple[onnx.ModelProto, bool] = onnxsim.simplify(
            proto,
            check_n=options.check_n,
            tensor_size_threshold=f"{options.max_folded_bytes}B",
            mutable_initializer=False,
        )
        _restore_negative_dims(result[0], negative)
        return result

    held = _list_nodes(model)
    if held:
        table: dict[bytes, tuple[Any, str]] = {}
        with marked(model, table):
            proto = serialize_with_data(model)
        where = _marked_attrs(proto, table)
        if len(where) == len(table) and _same_types(proto, table):
            simplified, ok = run(proto)
            del proto
            lists = _remark(simplified, where, table)
            if lists is not None and _same_types(simplified, table):
                return simplified, ok, lists
            del simplified
        else:
            del proto
    simplified, ok = run(serialize_with_data(model))
    return simplified, ok, None


def _clear_negative_dims(proto: onnx.ModelProto) -> dict[tuple[str, int], int]:
    """Clear the graph inputs' and outputs' negative ``dim_value`` (``-1``: older converters'
    "unknown") before onnxsim: its shape inference computes from the -1 and declares Conv
    outputs of height 0 in ``value_info`` (a stride-2 Conv on a [?, 3, -1, -1] input), which
    ORT's OpenVINO EP then trusts for buffer reuse ("Shape mismatch attempting to re-use
    buffer", session 12). Returns what to put back: {(name, axis): value}."""
    out: dict[tuple[str, int], int] = {}
    for vi in (*proto.graph.input, *proto.graph.output):
        for k, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_value") and d.dim_value < 0:
                out[(vi.name, k)] = int(d.dim_value)
                d.ClearField("dim_value")
    return out


def _restore_negative_dims(proto: onnx.ModelProto, saved: dict[tuple[str, int], int]) -> None:
    """Put the interface's ``-1`` dims back (the interface stays as the user wrote it)."""
    if not saved:
        return
    for vi in (*proto.graph.input, *proto.graph.output):
        for k, d in enumerate(vi.type.tensor_type.shape.dim):
            if (vi.name, k) in saved:
                d.dim_value = saved[(vi.name, k)]  # clears a dim_param onnxsim named it
