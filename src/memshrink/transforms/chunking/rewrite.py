"""Write a region as K chunk copies that share the weights, then concatenate its outputs.

Chunk ``k``'s nodes are written together, chunk after chunk, so both ONNX Runtime orders run
them one chunk at a time (PRIORITY_BASED follows the file; DEFAULT's reverse DFS finishes one
chunk's subtree before the next, since the copies share nothing but weights and inputs). Every
new tensor gets a complete static shape: ORT's planner reuses a freed buffer only for an
identical shape, and equal bands give the chunks identical shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from memshrink.transforms.chunking import reblock, rules
from memshrink.transforms.chunking.region import ChunkRows, Region, chunk_rows
from memshrink.transforms.chunking.rules import Range, Shape

META_KEY = "memshrink.chunk"


@dataclass
class RewriteStats:
    chunks: int
    nodes_before: int
    nodes_after: int
    flops_before: int
    flops_after: int
    shape_classes: int  # distinct chunk shape signatures (1 = every chunk reuses the same sizes)
    halo_rows: dict[str, int] = field(default_factory=dict)  # entry -> max extra rows per chunk
    outputs: list[str] = field(default_factory=list)  # names of the concatenated region outputs
    specialized: dict[str, int] = field(default_factory=dict)  # what specialize() changed
    edges: list[int] | None = None  # explicit band edges (``chunking.layout``), if used
    reblocked: list[str] = field(default_factory=list)  # outputs re-blocked (``reblock``)
    entries: list[list[ir.Value]] = field(default_factory=list)  # per chunk: its sliced inputs
    copies: list[dict[str, ir.Value]] = field(default_factory=list)  # per chunk: name -> copy
    pieces: list[int] = field(default_factory=list)  # per query/heads core cut: its count

    def add(self, other: RewriteStats) -> None:
        """Sum another region's rewrite into this total (several cores rewritten as one layout)."""
        self.nodes_before += other.nodes_before
        self.nodes_after += other.nodes_after
        self.flops_before += other.flops_before
        self.flops_after += other.flops_after
        self.shape_classes = max(self.shape_classes, other.shape_classes)
        self.halo_rows.update(other.halo_rows)
        self.outputs += other.outputs

    @property
    def extra_flops(self) -> float:
        return (
            (self.flops_after - self.flops_before) / self.flops_before if self.flops_before else 0.0
        )


class _Namer:
    def __init__(self, graph: ir.Graph) -> None:
        self.used: set[str] = {v.name or "" for v in graph.inputs} | set(graph.initializers)
        for n in graph:
            self.used.update(v.name or "" for v in n.outputs)
            if n.name:
                self.used.add(n.name)

    def __call__(self, base: str) -> str:
        name, i = base, 1
        while name in self.used:
            i += 1
            name = f"{base}_{i}"
        self.used.add(name)
        return name


class _Builder:
    def __init__(self, graph: ir.Graph, label: str) -> None:
        self.graph = graph
        self.name = _Namer(graph)
        self.label = label
        self.consts: dict[tuple[int, ...], ir.Value] = {}
        self.nodes: list[ir.Node] = []

    def const(self, values: np.ndarray) -> ir.Value:
        arr = np.asarray(values, dtype=np.int64).reshape(-1)
        key = tuple(int(x) for x in arr)
        v = self.consts.get(key)
        if v is None:
            name = self.name(f"{self.label}_const")
            v = ir.Value(
                name=name,
                shape=ir.Shape([arr.size]),
                type=ir.TensorType(ir.DataType.INT64),
                const_value=ir.tensor(arr, name=name),
            )
            self.graph.register_initializer(v)
            self.consts[key] = v
        return v

    def value(self, base: str, like: ir.Value, shape: Shape) -> ir.Value:
        """A new value shaped ``shape`` of ``like``'s type. A type without an element type
        (``Tensor(None)``) is not copied: onnx_ir cannot save it (``SerdeError``: a Whisper
        encoder whose attention Reshapes the exporter left untyped, session 15); an untyped
        value keeps its shape for the passes and is saved without one."""
        typ = like.type if like.type is not None and like.dtype is not None else None
        return ir.Value(name=self.name(base), shape=ir.Shape(list(shape)), type=typ)

    def node(self, op: str, inputs: list[ir.Value | None], outputs: list[ir.Value], *,
             attrs: list[ir.Attr] | None = None, base: str, k: int | str,
             version: int | None = None, domain: str = "") -> ir.Node:  # fmt: skip
        n = ir.Node(
            domain,
            op,
            inputs,
            attrs or [],
            outputs=outputs,
            name=self.name(base),
            version=version,
            metadata_props={META_KEY: f"{self.label}/{k}"},
        )
        self.nodes.append(n)
        return n

    def slice(self, x: ir.Value, axis: int, rows: Range, shape: Shape, k: int) -> ir.Value:
        out_shape = list(shape)
        out_shape[axis] = rows[1] - rows[0]
        out = self.value(f"{x.name}__c{k}_rows", x, tuple(out_shape))
        self.node(
            "Slice",
            [x, self.const(np.array([rows[0]])), self.const(np.array([rows[1]])),
             self.const(np.array([axis]))],
            [out], base=f"{x.name}__c{k}_slice", k=k,
        )  # fmt: skip
        return out


def _with_extent(shape: Shape, axis: int, n: int) -> Shape:
    s = list(shape)
    s[axis] = n
    return tuple(s)


def rewrite(
    graph: ir.Graph,
    region: Region,
    count: int,
    stagger: int = 0,
    edges: Sequence[int] | None = None,
    plans: Sequence[ChunkRows] | None = None,
) -> RewriteStats:
    """Replace ``region`` in ``graph`` by ``count`` chunk copies and Concat nodes.

    ``plans`` (one per chunk) replace the exact rows of ``chunk_rows`` (``chunking.overlap``).
    Raises ``Refuse`` (leaving the graph untouched) when some chunk's rows cannot be derived.
    """
    if plans is None:  # may Refuse: nothing written
        plans = [chunk_rows(region, k, count, stagger, edges) for k in range(count)]
    b = _Builder(graph, f"chunk_{region.label}")
    flops_before = sum(
        rules.flops(n.op_type, region.facts[n].in_shapes, region.facts[n].out_shapes[0],
                    {k: a.value for k, a in n.attributes.items()})
        for n in region.nodes
    )  # fmt: skip
    flops_after = 0
    parts: dict[ir.Value, list[ir.Value]] = {v: [] for v in region.outputs}
    signatures: set[tuple] = set()
    halo: dict[str, int] = {}
    entries: list[list[ir.Value]] = []
    copies: list[dict[str, ir.Value]] = []
    for k, rows in enumerate(plans):
        sig: list[tuple] = []
        local: dict[ir.Value, tuple[ir.Value, Range]] = {}
        for v in region.externals:
            r = rows.value_range[v]
            a = region.axes[v]
            s = _ext_shape(region, v)
            band = (k * s[a] // count, (k + 1) * s[a] // count)
            halo[v.name or ""] = max(halo.get(v.name or "", 0), (r[1] - r[0]) - (band[1] - band[0]))
            if r == (0, s[a]):
                local[v] = (v, r)
            else:
                local[v] = (b.slice(v, a, r, s, k), r)
            sig.append((r[1] - r[0],))
        entries.append([local[v][0] for v in region.externals])
        for node in region.nodes:
            if node not in rows.node_range:
                continue
            f = region.facts[node]
            axes_in = region.in_axes[node]
            out_axis = region.out_axis[node]
            rng = rows.node_range[node]
            inputs: list[ir.Value | None] = []
            in_shapes: list[Shape | None] = []
            for i, x in enumerate(node.inputs):
                ax = axes_in[i]
                if x is None or ax is None:
                    inputs.append(x)
                    in_shapes.append(f.in_shapes[i])
                    continue
                lv, lr = local[x]
                c = rows.clipped[node][i]
                xs = f.in_shapes[i]
                assert c is not None and xs is not None
                if c != lr:
                    lv = b.slice(lv, ax, (c[0] - lr[0], c[1] - lr[0]),
                                 _with_extent(xs, ax, lr[1] - lr[0]), k)  # fmt: skip
                inputs.append(lv)
                in_shapes.append(_with_extent(xs, ax, c[1] - c[0]))
            e = rules.emit(f, axes_in, out_axis, rng, rows.needs[node], rows.clipped[node])
            for i, arr in e.const_inputs.items():
                inputs[i] = b.const(arr)
            attrs = [ir.Attr(a.name, a.type, a.value) for n_, a in node.attributes.items()
                     if n_ not in e.attrs] + list(e.attrs.values())  # fmt: skip
            n_rows = rng[1] - rng[0] if e.raw_extent is None else e.raw_extent
            outs = []
            for y, ys in zip(node.outputs, f.out_shapes, strict=False):
                if not y.name:  # an optional output the node does not write (LSTM's Y_c)
                    outs.append(ir.Value(name=""))
                    continue
                assert ys is not None
                ya = region.axes.get(y, out_axis)  # LSTM: Y and Y_h carry the batch apart
                outs.append(b.value(f"{y.name}__c{k}", y, _with_extent(ys, ya, n_rows)))
            b.node(node.op_type, inputs, outs, attrs=attrs, base=f"{node.name or node.op_type}__c{k}",
                   k=k, version=node.version, domain=node.domain)  # fmt: skip
            o0 = f.out_shapes[0]
            assert o0 is not None
            flops_after += rules.flops(
                node.op_type, in_shapes, _with_extent(o0, out_axis, n_rows),
                {n_: a.value for n_, a in node.attributes.items()},
            )  # fmt: skip
            sig.append((node.op_type, n_rows, tuple(tuple(t or ()) for t in in_shapes)))
            for y, ov in zip(node.outputs, outs, strict=False):
                if e.crop is not None:
                    ov = b.slice(ov, out_axis, e.crop, _with_extent(o0, out_axis, n_rows), k)
                local[y] = (ov, rng)
        for v in region.outputs:
            lv, lr = local[v]
            p = rows.part[v]
            if p != lr:
                vs = _out_shape(region, v)
                lv = b.slice(lv, region.axes[v], (p[0] - lr[0], p[1] - lr[0]),
                             _with_extent(vs, region.axes[v], lr[1] - lr[0]), k)  # fmt: skip
            parts[v].append(lv)
        signatures.add(tuple(sig))
        copies.append({y.name or "": c for y, (c, _) in local.items() if y not in region.externals})
    cats: list[tuple[ir.Value, ir.Value]] = []
    reblocked: list[str] = []
    for v in region.outputs:
        vs = _out_shape(region, v)
        cat = b.value(f"{v.name}__chunked", v, vs)
        b.node("Concat", list(parts[v]), [cat], base=f"{v.name}__concat", k="concat",
               attrs=[ir.Attr("axis", ir.AttributeType.INT, region.axes[v])])  # fmt: skip
        if reblock.wanted(v, vs, region.axes[v], set(region.nodes)):
            w = reblock.weight(b.name(f"{v.name}__reblock_w"), vs[1])
            graph.register_initializer(w)
            cat_in, cat = cat, b.value(f"{v.name}__reblocked", v, vs)
            b.node("Conv", [cat_in, w], [cat], attrs=reblock.attrs(vs[1]),
                   base=f"{v.name}__reblock", k="concat")  # fmt: skip
            reblocked.append(v.name or "")
        cats.append((v, cat))
    first = region.nodes[0]
    graph.insert_before(first, b.nodes)
    for v, cat in cats:
        name = v.name
        v.replace_all_uses_with(cat, replace_graph_outputs=True)
        v.name = b.name(f"{name}__unchunked")
        cat.name = name
    read = {v for n in region.nodes for v in n.inputs if v is not None}
    graph.remove(region.nodes, safe=True)
    for v in read:  # constants only the replaced nodes read (old Reshape targets)
        unused = not v.uses() and not v.is_graph_output() and not v.is_graph_input()
        if v.name is not None and v.name in graph.initializers and unused:
            del graph.initializers[v.name]
    graph.sort()
    return RewriteStats(
        chunks=count,
        nodes_before=len(region.nodes),
        nodes_after=len(b.nodes),
        flops_before=int(flops_before),
        flops_after=int(flops_after),
        shape_classes=len(signatures),
        halo_rows=halo,
        outputs=[cat.name or "" for _, cat in cats],
        reblocked=reblocked,
        entries=entries,
        copies=copies,
    )


def _out_shape(region: Region, v: ir.Value) -> Shape:
    prod = v.producer()
    idx = v.index()
    assert prod is not None and idx is not None
    s = region.facts[prod].out_shapes[idx]
    assert s is not None
    return s


def _ext_shape(region: Region, v: ir.Value) -> Shape:
    for n in region.nodes:
        for i, x in enumerate(n.inputs):
            if x is v:
                s = region.facts[n].in_shapes[i]
                assert s is not None
                return s
    raise KeyError(v.name)
