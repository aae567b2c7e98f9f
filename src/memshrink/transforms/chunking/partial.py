"""A region cut to its first, activation-heavy stages (batch mode's ``cut``).

Why: every chunk copies the region's Conv/FC nodes, and OpenVINO compiles one primitive per
node (~0.25 MiB each, ``estimate.openvino``): ResNet-50 b16 in 16 batch chunks raised its
process peak 347 -> 452 MiB measured, in 2 chunks still 349 -> 371. A CNN's large tensors sit
in its first stages, so chunking only those lowers the activation peak nearly as much with a
fraction of the copied nodes. The prefix of a convex region (in graph order) is convex: a node
after the cut cannot feed one before it.
"""

from __future__ import annotations

from math import prod

from memshrink.transforms.chunking.region import Region
from memshrink.transforms.chunking.rules import Refuse

#: A cut must drop at least this fraction of the region's nodes to be worth a trial.
MIN_DROP = 0.1


def prefix(region: Region, cut: int) -> Region:
    """``region`` up to its last node with an output of at least 1/``cut`` of the largest
    output's elements; values read after the cut become region outputs (concatenated)."""
    sizes = [max(prod(s) if s else 0 for s in region.facts[n].out_shapes) for n in region.nodes]
    if not sizes:
        raise Refuse("empty region")
    floor = max(sizes) / cut
    last = max(i for i, s in enumerate(sizes) if s >= floor)
    nodes = region.nodes[: last + 1]
    if len(nodes) > (1 - MIN_DROP) * len(region.nodes):
        raise Refuse(f"cut 1/{cut} keeps {len(nodes)} of {len(region.nodes)} nodes")
    keep = set(nodes)
    made = {v for n in nodes for v in n.outputs}
    externals = [v for v in region.externals if any(u.node in keep for u in v.uses())]
    outputs = [
        v
        for n in nodes
        for v in n.outputs
        if v.is_graph_output() or any(u.node not in keep for u in v.uses())
    ]
    return Region(
        region.label,
        nodes,
        {v: a for v, a in region.axes.items() if v in made or v in externals},
        {n: region.in_axes[n] for n in nodes},
        {n: region.out_axis[n] for n in nodes},
        externals,
        outputs,
        {n: region.facts[n] for n in nodes},
        {**region.stops, f"cut after 1/{cut} of the largest output": 1},
    )
