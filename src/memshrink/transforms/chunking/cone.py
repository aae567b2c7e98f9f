"""Regions entered at interior tensors: the exclusive cone of one large value.

Why: in a detector's FPN the peak is the top-down merge at stride 4 (``fpn-800``: C2's lateral
1×1 conv, the ×2-upsampled P3, their sum, 39 MiB each, then the 3×3 output conv into P2). Its
inputs C2 and P3 are interior tensors that other nodes read too (stage 2, P3's own output conv),
so a region grown from the graph input (``region.discover``) reaches the merge only through
the whole backbone, and an overlapping-band region cannot end past a stage output (each is
read twice). Here the region is built backward instead: the *cone* of a value ``E`` is every
node whose outputs are read only inside the cone (or are ``E``), walked back from ``E``'s
producer; the values it reads from outside (C2, P3) are its entries, read whole and sliced per
chunk. Nothing but ``E`` leaves the cone, so it is convex, and chunk ``k`` needs only its band
of ``E`` (the exact plan, ``region.chunk_rows``: a 3×3 conv's halo, a nearest upsample's
``⌊o/s⌋`` rows, ``chunking.resize``).

Which values: 4-D outputs that end a cone (read by several nodes, or a graph output), whose
cone reads at least one interior tensor (a cone fed by graph inputs only is the ``spatial``
mode's region already), has no fork (``_forks``) and holds a tensor of at least ``min_fraction`` of the graph's largest
activation (a small cone cannot lower the peak). A cone inside a larger one with the same
entries (ResNet stage 2's first block, inside the whole stage read from C2) is left out: the
search tries the larger one, as overlapping bands try a stride's first and last boundary.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from math import prod

import onnx_ir as ir

from memshrink.transforms.chunking import rules
from memshrink.transforms.chunking.region import Region, _close, node_facts, shape_of
from memshrink.transforms.chunking.rules import Refuse, Shape


def node_positions(graph: ir.Graph) -> dict[ir.Node, int]:
    """Each top-level node's index in file order (a topological order); callers that ask for
    many cones of one unchanged graph compute it once and pass it to ``cone_nodes``."""
    return {n: i for i, n in enumerate(graph)}


def cone_nodes(
    end: ir.Value,
    positions: Mapping[ir.Node, int] | None = None,
    stop: Callable[[ir.Node], bool] | None = None,
) -> list[ir.Node]:
    """Nodes whose every output is read only by the cone (or is ``end``), back from ``end``.

    Nodes are decided in reverse file order, so a node's readers are decided before it. Only
    producers of the cone's inputs are visited (a max-heap on file position), not every node
    before ``end``: walking the whole graph made ``chunk``'s search quadratic (~125 CPU-s on a
    5,000-node graph, docs/optimize.md). ``positions``: ``node_positions(graph)`` of the
    unchanged graph, when the caller has it. ``stop``: nodes that never join (nor does anything
    only they read), e.g. a weightless core's weighted nodes."""
    first = end.producer()
    graph = None if first is None else first.graph
    if first is None or graph is None:
        return []
    pos = node_positions(graph) if positions is None else positions
    inside: set[ir.Node] = {first}
    queued: dict[int, ir.Node] = {}
    heap: list[int] = []

    def queue_producers(n: ir.Node) -> None:
        for x in n.inputs:
            p = None if x is None else x.producer()
            if p is None or p.graph is not graph or p in inside:
                continue
            i = pos[p]
            if i not in queued:
                queued[i] = p
                heapq.heappush(heap, -i)

    queue_producers(first)
    while heap:
        n = queued[-heapq.heappop(heap)]
        if n.op_type == "Constant" or (stop is not None and stop(n)):
            continue
        uses = [u for v in n.outputs for u in v.uses()]
        if (
            uses
            and all(u.node in inside for u in uses)
            and not any(v.is_graph_output() for v in n.outputs)
        ):
            inside.add(n)
            queue_producers(n)
    return sorted(inside, key=pos.__getitem__)


def _entries(nodes: list[ir.Node], graph: ir.Graph) -> list[ir.Value]:
    made = {v for n in nodes for v in n.outputs}
    out: list[ir.Value] = []
    for n in nodes:
        for x in n.inputs:
            if x is None or x in made or x in out or x.const_value is not None:
                continue
            if x.name in graph.initializers:
                continue
            p = x.producer()
            if p is not None and p.op_type == "Constant":
                continue
            out.append(x)
    return out


def _forks(nodes: list[ir.Node]) -> bool:
    """Some value (made in the cone or read from outside) is read by two cone nodes.

    Why such cones are not tried: the exact plan gives each reader exactly its rows, so a
    forked value (a residual block's input, read by its conv and its ``Add``) is sliced per
    reader in every chunk, and on ORT CPU each Slice of a blocked tensor costs a plain copy
    (ReorderOutput + ReorderInput) and the Conv+Add ``Sum`` fusion (``docs/chunk.md``,
    "Overlapping bands"). Measured on ``fpn-800``: stage 3 entered at C3 (``relu_39`` × 2,
    predicted 224 MiB) ran 296-334 MiB against 221-254 for the overlapping-band pick."""
    inside = set(nodes)
    readers: dict[ir.Value, int] = {}
    for n in nodes:
        for x in set(n.inputs):
            if x is not None and x.const_value is None:
                readers[x] = readers.get(x, 0) + 1
    return any(c > 1 for c in readers.values()) or any(
        sum(u.node in inside for u in v.uses()) > 1 for n in nodes for v in n.outputs
    )


def region(
    graph: ir.Graph,
    shapes: Mapping[str, Shape | None],
    opset: int,
    end: ir.Value,
    axis: int,
    label: str,
    min_extent: int = 2,
) -> Region:
    """The cone of ``end`` as a region chunked along ``axis``; ``Refuse`` when one of its ops
    cannot be chunked (the message names it) or it reads no interior tensor."""
    nodes = cone_nodes(end)
    entries = _entries(nodes, graph)
    if not any(not v.is_graph_input() for v in entries):
        raise Refuse(f"the cone of {end.name} reads graph inputs only (the spatial region)")
    axes: dict[ir.Value, int] = {}
    for v in entries:
        s = shape_of(shapes, v)
        if s is not None and len(s) == 4 and s[axis] >= min_extent:
            axes[v] = axis
    in_axes: dict[ir.Node, list[int | None]] = {}
    out_axis: dict[ir.Node, int] = {}
    facts: dict[ir.Node, rules.NodeFacts] = {}
    for node in nodes:
        ia = [None if v is None else axes.get(v) for v in node.inputs]
        f = node_facts(node, shapes, opset)
        if all(a is None for a in ia):
            raise Refuse(f"{node.op_type} {node.name} in the cone of {end.name} reads no "
                         "chunked input")  # fmt: skip
        oa, sliced = rules.forward(f, ia)
        for i, ax in sliced.items():
            x = node.inputs[i]
            assert x is not None
            if x in axes and axes[x] != ax:
                raise Refuse(f"{node.op_type} reads {x.name} along two axes")
            axes[x] = ax
            ia[i] = ax
        if len(set(oa)) != 1:
            raise Refuse(f"{node.op_type} outputs chunked along different axes")
        ext = {f.out_shapes[i][oa[i]] for i in range(len(oa))}  # type: ignore[index]
        if len(ext) != 1 or min(ext) < min_extent:
            raise Refuse(f"{node.op_type} output below the region's smallest extent")
        in_axes[node], out_axis[node], facts[node] = ia, oa[0], f
        for v in node.outputs:
            axes[v] = oa[0]
    r = _close(label, nodes, axes, in_axes, out_axis, facts, {})
    if list(r.outputs) != [end]:
        raise Refuse(f"the cone of {end.name} has other outputs")
    return r


def ends(
    graph: ir.Graph,
    shapes: Mapping[str, Shape | None],
    axis: int,
    min_fraction: float = 0.25,
    min_extent: int = 2,
) -> list[ir.Value]:
    """Values whose cone is worth a region (module docstring), in file order."""
    size: dict[ir.Value, int] = {}
    for n in graph:
        for v in n.outputs:
            s = shape_of(shapes, v)
            if s is not None:
                size[v] = prod(s)
    largest = max(size.values(), default=0)
    out: list[ir.Value] = []
    positions = node_positions(graph)
    for n in graph:
        for v in n.outputs:
            s = shape_of(shapes, v)
            if s is None or len(s) != 4 or s[axis] < min_extent:
                continue
            if not v.is_graph_output() and len(list(v.uses())) < 2:
                continue  # its reader's cone contains this one
            nodes = cone_nodes(v, positions)
            if len(nodes) < 2 or not any(not x.is_graph_input() for x in _entries(nodes, graph)):
                continue
            if max(size.get(y, 0) for m in nodes for y in m.outputs) < largest * min_fraction:
                continue
            if _forks(nodes):
                continue
            out.append(v)
    # a cone inside another with the same entries (a block of a stage whose last block ends
    # a larger cone) is that cone's prefix: the larger one is tried, not every block
    cones = {v: cone_nodes(v, positions) for v in out}
    entries = {v: set(_entries(cones[v], graph)) for v in out}
    cones_set = {v: set(c) for v, c in cones.items()}
    return [v for v in out
            if not any(w is not v and cones_set[v] < cones_set[w] and entries[v] == entries[w]
                       for w in out)]  # fmt: skip
