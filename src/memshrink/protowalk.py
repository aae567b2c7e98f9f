"""Walk every GraphProto of a ModelProto (If/Loop/Scan bodies included).

Load-time fix-ups that work on the parsed proto (sparse initializers, map-typed values) must
reach subgraphs too; they share this one walk.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx


def subgraphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    """The graphs held by ``graph``'s node attributes (one level down)."""
    out = []
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                out.append(attr.g)
            out.extend(attr.graphs)
    return out


def all_graphs(proto: onnx.ModelProto) -> Iterator[onnx.GraphProto]:
    """The main graph, then every subgraph at any depth."""
    graphs = [proto.graph]
    while graphs:
        g = graphs.pop()
        yield g
        graphs.extend(subgraphs(g))
