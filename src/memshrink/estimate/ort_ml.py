"""ONNX Runtime CPU: the state an ``ai.onnx.ml`` tree-ensemble kernel builds at session creation.

A forest's parameters are node *attributes*, not initializers, so the weight rules see none of
them; yet ORT parses them into its own per-node structures (``ml/tree_ensemble_common.h``),
beside the attribute copies its graph keeps. skl2onnx / onnxmltools forests of a few hundred
trees are 10-100 MB files and cost ORT ~15x that: a 24 MiB RandomForest (489k nodes) measured
+295 MiB at session creation where the other rules predicted 10. Measured on micro-graphs
(``docs/bench/ml_tree_memory.py``: TreeEnsembleClassifier / Regressor, 41k-655k nodes,
20k-983k leaf entries; docs/estimate.md, "Tree ensembles on ORT CPU"): the session peak is
405 B per tree node + 138 B per leaf entry over the model-less constant, within 0.2 % on all six.
"""

from __future__ import annotations

from memshrink.estimate.graph import GraphInfo

ML_DOMAIN = "ai.onnx.ml"
# Measured bytes (ORT 1.32 CPU, x86-64, glibc; least squares over 6 micro-graphs).
TREE_BYTES_PER_NODE = 405
TREE_BYTES_PER_LEAF_ENTRY = 138
# op -> (attribute listing one entry per tree node, attribute listing one per leaf entry)
_TREE_OPS = {
    "TreeEnsembleClassifier": ("nodes_nodeids", "class_ids"),
    "TreeEnsembleRegressor": ("nodes_nodeids", "target_ids"),
}


def tree_counts(g: GraphInfo) -> tuple[int, int]:
    """(tree nodes, leaf entries) of every tree-ensemble node, subgraphs included."""
    nodes = entries = 0
    for n in g.nodes:
        attrs = _TREE_OPS.get(n.op_type) if n.domain == ML_DOMAIN else None
        if attrs is not None:
            nodes += len(n.attrs.get(attrs[0]) or ())
            entries += len(n.attrs.get(attrs[1]) or ())
        for sg in n.subgraphs:
            more = tree_counts(sg)
            nodes, entries = nodes + more[0], entries + more[1]
    return nodes, entries


def tree_ensemble_bytes(g: GraphInfo) -> int:
    """Heap bytes ORT CPU spends on the graph's tree ensembles (session peak; the run stages
    hold the same or, for the largest forests, up to 20 % less: see the docs)."""
    nodes, entries = tree_counts(g)
    return nodes * TREE_BYTES_PER_NODE + entries * TREE_BYTES_PER_LEAF_ENTRY
