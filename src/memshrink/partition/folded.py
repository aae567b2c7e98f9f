"""Which weights of a partition go to the part's second data file, ``part_NNN.folded.data``.

Why: the same reason as ``external-data``'s ``OUT.folded.data`` (``transforms/ov_folded.py``,
docs/optimize.md "External data on OpenVINO"): OpenVINO's CPU plugin folds a Conv followed by
BatchNormalization / a Mul by a constant, and a scaled FC, into new Constants; the original's
mapped pages stay resident as long as any other Constant keeps its file mapped. In a part the
fusion happens only when the Conv / FC and the op that scales it run in the *same* part: a cut
between them leaves the Conv unfused, and its weight must stay in the main file.
"""

from __future__ import annotations

import onnx_ir as ir

from memshrink.transforms.ov_folded import FC, folded_weights, only_reader

_SCALES = ("BatchNormalization", "Mul")


def _chain(graph: ir.Graph, node: ir.Node) -> list[ir.Node] | None:
    """The Conv / FC and the nodes up to its scale (through at most an FC's bias Add)."""
    chain, cur = [node], node
    for _ in range(2):
        nxt = only_reader(graph, cur.outputs[0]) if cur.outputs else None
        if nxt is None:
            return None
        chain.append(nxt)
        if nxt.op_type in _SCALES:
            return chain
        if not (node.op_type in FC and nxt.op_type == "Add"):
            return None
        cur = nxt
    return None


def folded_in_parts(graph: ir.Graph, part_of: dict[int, int]) -> set[str]:
    """Names of the weights OpenVINO folds in every part that reads them: ``folded_weights``
    where each reader's chain up to its scale lies in one part (``part_of``: id(node) -> part,
    top-level nodes; a reader inside a subgraph is never counted as folded)."""
    names = set()
    for name in folded_weights(graph):
        ok = True
        for use in graph.initializers[name].uses():
            chain = _chain(graph, use.node)
            parts = {part_of.get(id(n)) for n in chain} if chain else {None}
            if len(parts) != 1 or None in parts:
                ok = False
                break
        if ok:
            names.add(name)
    return names
