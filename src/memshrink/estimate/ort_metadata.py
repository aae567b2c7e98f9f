"""ONNX Runtime CPU: the ModelProto's strings that stay resident after session creation.

Dynamo exports (``torch.onnx.export(dynamo=True)``) write five ``metadata_props`` entries per
node (stack trace, name scopes, class hierarchy, FX node, namespace): 0.6 MiB on a 313-node
Whisper, more than its weights. ORT keeps them for the session's lifetime: measured
(``memshrink profile``, docs/estimate.md "Session 15: metadata the session keeps"), anon after
creation grows by each entry's key + value bytes plus ~200 bytes (the entry message and its two
heap strings: 300 / 3,000 / 6,000 entries of 2,026 / 76 / 46 / 226 bytes measured 175-207 B
each), and by twice a node's ``doc_string`` (the proto's copy and the graph node's own). The
per-node constant (``ort_session_anon_per_node``) was measured on nodes without either.
"""

from __future__ import annotations

import onnx_ir as ir

METADATA_ENTRY_BYTES = 200  # one metadata_props entry beyond its key and value (measured)
DOC_STRING_COPIES = 2  # a node's doc_string: the ModelProto's and ORT's Node description


def _entries(props: dict[str, str]) -> int:
    return sum(len(k) + len(v) + METADATA_ENTRY_BYTES for k, v in props.items())


def kept_string_bytes(model: ir.Model) -> int:
    """Bytes of node / value metadata and node doc strings ORT keeps from session creation on."""
    total = _entries(model.metadata_props)
    graphs: list[ir.Graph | ir.Function] = list(model.graphs())
    graphs += list(model.functions.values())
    for g in graphs:
        if isinstance(g, ir.Graph):
            total += _entries(g.metadata_props)
            values = {id(v): v for v in (*g.inputs, *g.outputs, *g.initializers.values())}
            total += sum(_entries(v.metadata_props) for v in values.values())
        for node in g:
            total += _entries(node.metadata_props)
            total += DOC_STRING_COPIES * len(node.doc_string or "")
            total += sum(_entries(v.metadata_props) for v in node.outputs)
    return total
