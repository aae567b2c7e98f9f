"""Which entry won each attention core's query-split search, remembered per graph structure.

Why: ``chunk`` tries every query-split candidate (counts, staggers, uniform and scaled) on a
fresh clone of the same model, and each trial searched every core's entries again
(``weightless.queries``: ~11 ``region.discover`` walks a core, the one kept decided by its
compute): on CLIP B/16 @384, 1,764 walks took ~28 % of ``optimize --passes all``'s profiled
CPU. A clone has the same structure, shapes and constants, so the search ends at the same
entry: a later trial grows only that entry's region. The key covers everything a rule reads
(ops, attributes, value names, shapes, small constants), so a graph that differs anywhere is
searched afresh.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Mapping
from typing import Any

import onnx_ir as ir

from memshrink.compact_attrs import digest_value
from memshrink.transforms.chunking.rules import Shape

#: constants up to this size enter the key by value (a rule reads small integer constants:
#: Reshape targets, axes); larger ones by dtype and shape
_BY_VALUE = 4096
_KEEP = 4  # structures remembered (a search works on one; a few for passes that alternate)
_MEMO: OrderedDict[int, dict[Hashable, Any]] = OrderedDict()


def _const(t: Any) -> Hashable:
    if t is None:
        return None
    nbytes = getattr(t, "nbytes", _BY_VALUE + 1)
    if nbytes <= _BY_VALUE:
        return (str(t.dtype), tuple(t.shape), t.tobytes())
    return (str(t.dtype), tuple(t.shape))


class _Opaque(Exception):
    """An attribute the key cannot state (a body graph): the graph is not remembered."""


def _attr(a: ir.Attr) -> Hashable:
    if a.type == ir.AttributeType.TENSOR:
        return _const(a.value)
    if a.type == ir.AttributeType.TENSORS:
        return tuple(_const(t) for t in a.value)
    if a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
        raise _Opaque(a.name)
    return digest_value(a.value)


def structure_key(graph: ir.Graph, shapes: Mapping[str, Shape | None], opset: int) -> int | None:
    """A hash of what a query-split search reads of ``graph``, equal for a clone; None for a
    graph with a body (If, Loop, Scan): it is searched afresh every time."""
    try:
        return _key(graph, shapes, opset)
    except _Opaque:
        return None


def _key(graph: ir.Graph, shapes: Mapping[str, Shape | None], opset: int) -> int:
    parts: list[Hashable] = [opset]
    for node in graph:
        parts.append(
            (
                node.op_type,
                node.domain,
                tuple(v.name if v is not None else "" for v in node.inputs),
                tuple(v.name for v in node.outputs),
                tuple((k, _attr(a)) for k, a in node.attributes.items()),
            )
        )
    for name, v in graph.initializers.items():
        parts.append((name, _const(v.const_value)))
    parts.append(tuple(v.name for v in graph.inputs))
    parts.append(tuple(sorted((k, v) for k, v in shapes.items() if v is not None)))
    return hash(tuple(parts))


def memo_for(key: int) -> dict[Hashable, Any]:
    """The remembered results of the structure ``key`` (a new, empty one the first time)."""
    found = _MEMO.get(key)
    if found is None:
        found = _MEMO[key] = {}
        while len(_MEMO) > _KEEP:
            _MEMO.popitem(last=False)
    else:
        _MEMO.move_to_end(key)
    return found


def clear() -> None:
    """Forget every structure (tests; a run that wants its searches from scratch)."""
    _MEMO.clear()
