"""``prune``: drop what no output depends on.

Dead nodes still cost memory: their weights are loaded and mapped, and runtimes may
still plan their outputs. Removes nodes whose outputs reach no graph output (in every
subgraph too), initializers nothing reads, functions and opset imports nothing uses.
Graph inputs and outputs are never removed, so the model's signature is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir
from onnx_ir.passes.common import (
    RemoveUnusedFunctionsPass,
    RemoveUnusedNodesPass,
    RemoveUnusedOpsetsPass,
)

from memshrink.irgraphs import graphs
from memshrink.manager import Pass, PassContext, PassResult
from memshrink.transforms import register


def _counts(model: ir.Model) -> tuple[int, int, int, int, int, int]:
    nodes = list(ir.traversal.RecursiveGraphIterator(model.graph))
    # RemoveUnusedNodesPass also drops unused trailing outputs (Dropout's mask): the
    # runtime no longer allocates them, so they count as a change.
    outputs = sum(len(node.outputs) for node in nodes)
    inits = [v for g in graphs(model) for v in g.initializers.values()]
    init_bytes = sum(v.const_value.nbytes for v in inits if v.const_value is not None)
    return (
        len(nodes),
        len(inits),
        init_bytes,
        len(model.functions),
        len(model.opset_imports),
        outputs,
    )


def _remove_unused_subgraph_initializers(model: ir.Model) -> None:
    for graph in graphs(model):
        if graph is model.graph:
            continue  # the main graph is handled by RemoveUnusedNodesPass
        keep = frozenset(graph.inputs) | frozenset(graph.outputs)
        for value in list(graph.initializers.values()):
            if not value.uses() and value not in keep and value.name is not None:
                del graph.initializers[value.name]


@register
class PrunePass(Pass):
    name = "prune"
    summary = "Remove nodes, initializers, functions and opsets that no graph output depends on."
    targets = ("weights", "activations", "session-creation")
    exact = True

    @dataclass
    class Options:
        pass

    def run(self, model: ir.Model, context: PassContext) -> PassResult:
        before = _counts(model)
        RemoveUnusedNodesPass()(model)
        _remove_unused_subgraph_initializers(model)
        RemoveUnusedFunctionsPass()(model)
        RemoveUnusedOpsetsPass()(model)
        after = _counts(model)
        stats = {
            "nodes_removed": before[0] - after[0],
            "initializers_removed": before[1] - after[1],
            "bytes_removed": before[2] - after[2],
            "functions_removed": before[3] - after[3],
            "opsets_removed": before[4] - after[4],
            "node_outputs_removed": before[5] - after[5],
        }
        return PassResult(modified=before != after, stats=stats)
