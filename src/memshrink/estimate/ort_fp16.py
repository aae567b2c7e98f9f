"""fp16 models on ONNX Runtime CPU (x86-64): the f32 graph ORT really runs.

ORT 1.32's CPU provider has no float16 kernel for most compute ops on x86-64 (MLAS's fp16
GEMM/activation kernels are ARM-only). ``InsertCastTransformer`` then runs every such node in
f32 and pushes the inserted Casts through the type-agnostic ops between them ("precision
free" Casts), so a connected fp16 region runs entirely in f32: one ``Cast`` to f32 after each
fp16 graph input, one back to fp16 before each graph output, every activation in between
f32. Each fp16 initializer it reads is converted once at session creation into an anon f32
initializer (``FuseInitializersTransformer``'s ``FusedBack_<name>``), which the f32 rules then
treat like any f32 weight: Conv+BN fusion, the NCHWc reorder, MatMul/Gemm prepacking.

Measured on ORT 1.32 (this host, AVX-512, ``optimized_model_filepath`` dumps of single-node
fp16 graphs; ``docs/estimate.md``, "fp16 models on ORT CPU"): inserted Casts around Relu,
Sigmoid, Tanh, HardSwish, HardSigmoid, Erf, Sqrt, Exp, Neg, Abs, Reciprocal, LeakyRelu,
Softmax, Gelu, Floor, Add, Mul, Sub, Div, Pow, MatMul, Gemm, Conv (dense and depthwise),
BatchNormalization, ReduceMean, ReduceSum, MaxPool, AveragePool, GlobalAveragePool, Tile,
Size, Pad, Resize; native fp16 kernels for the ops in ``FP16_NATIVE``. 4 x MatMul 1024x1024 fp16 (external data): ORT
keeps ``FusedBack_w*`` f32 [1024, 1024] initializers and runs MatMul/Relu in f32.
"""

from __future__ import annotations

import dataclasses

from memshrink.estimate.graph import GraphInfo, NodeInfo, TensorInfo
from memshrink.estimate.weights import FLOAT, FP16

# Ops ORT 1.32's CPU provider runs in float16 itself: no Cast inserted around a single fp16
# node (measured, this host). Tile, Size, Pad and Resize get Casts (not listed).
FP16_NATIVE = frozenset(
    {
        "Identity",
        "Transpose",
        "Flatten",
        "Reshape",
        "Squeeze",
        "Unsqueeze",
        "Concat",
        "Split",
        "Slice",
        "Gather",
        "GatherElements",
        "GatherND",
        "Expand",
        "Shape",
        "Cast",
        "Max",
        "Min",
        "Clip",
        "Round",
        "LayerNormalization",
    }
)


def _is_fp16(g: GraphInfo, name: str) -> bool:
    t = g.tensors.get(name) if name else None
    return t is not None and t.elem_type == FP16


def _needs_f32(g: GraphInfo, node: NodeInfo) -> bool:
    """A standard-domain node with an fp16 tensor and no fp16 CPU kernel."""
    if node.domain not in ("", "ai.onnx") or node.subgraphs or node.op_type in FP16_NATIVE:
        return False
    return any(_is_fp16(g, n) for n in node.inputs + node.outputs)


def f32_region(g: GraphInfo) -> set[str]:
    """The fp16 tensors ORT CPU holds in f32: every fp16 tensor connected (through nodes
    reading or writing fp16 tensors) to a node without an fp16 kernel. Graph inputs and
    outputs are included; ``lower`` keeps their own dtype and adds the Casts."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    seeds: list[str] = []
    for node in g.nodes:
        if node.domain not in ("", "ai.onnx") or node.subgraphs:
            continue
        names = [n for n in node.inputs + node.outputs if _is_fp16(g, n)]
        if node.op_type == "Cast":  # a Cast's input and output are not one region
            continue
        for a in names[1:]:
            parent[find(a)] = find(names[0])
        if names and _needs_f32(g, node):
            seeds.append(names[0])
    roots = {find(s) for s in seeds}
    return {n for n in parent if find(n) in roots}


def lower(g: GraphInfo, *, fuse_weights: bool = True) -> GraphInfo | None:
    """The graph ORT CPU runs for a model with fp16 compute ops, or None when it has none.

    A new graph (``g`` is not changed): region activations and initializers become f32 (the
    initializers anon: not external, created at load; ``GraphInfo.fp16_cast`` names them),
    each fp16 graph input feeds a new ``Cast`` to an f32 tensor, and each fp16 graph output is
    written by a ``Cast`` from the f32 tensor its producer now writes. The Casts are appended
    (new node indices), as ORT's transformer adds them."""
    region = f32_region(g)
    if not region:
        return None
    tensors = dict(g.tensors)
    nodes = [
        dataclasses.replace(n, inputs=list(n.inputs), outputs=list(n.outputs)) for n in g.nodes
    ]
    cast_from: set[str] = set()
    # FuseInitializersTransformer folds a weight's Cast into an f32 initializer only when the
    # Cast has one output edge (``IsCastNodeWithConstraints``); a weight read by several nodes
    # keeps its fp16 tensor and a Cast node that runs at every inference (ORT's profile of
    # LeViT-128S fp16: ``InsertedPrecisionFreeCast_head.linear.bias``, 40 bytes, is run 1's
    # first arena allocation); below level ALL no weight is fused
    runtime_cast = [
        n
        for n in g.initializers
        if n in region
        and not g.tensors[n].folded
        and (not fuse_weights or len(g.tensors[n].consumers) > 1)
    ]
    # weights only constant folding reads (folded nodes are no consumers) are dropped after
    # the folding pass, before any Cast is inserted: they stay fp16 and are never converted;
    # a folded result that is read is an fp16 initializer converted like a weight (traced:
    # LeViT's folded attention biases, 150 KiB fp16 read, 300 KiB f32 kept)
    dropped = {n for n in g.initializers if n in region and not g.tensors[n].consumers}

    def f32(t: TensorInfo, **kw: object) -> TensorInfo:
        nb = None if t.init_bytes is None else t.init_bytes * 2
        return dataclasses.replace(t, elem_type=FLOAT, init_bytes=nb, **kw)  # type: ignore[arg-type]

    for name in region:
        t = g.tensors[name]
        if t.kind == "input" or t.is_output:
            continue
        if t.kind == "initializer":
            if name in runtime_cast or name in dropped:
                continue  # stays fp16 (mapped or embedded); a Cast node reads it each run
            tensors[name] = f32(t, external=False, consumers=list(t.consumers))
            if fuse_weights or not t.folded:
                cast_from.add(name)
        else:
            tensors[name] = f32(t, consumers=list(t.consumers))

    def add_cast(src: str, dst: str, to: int) -> int:
        idx = len(nodes)
        nodes.append(
            NodeInfo(idx, f"InsertedCast_{dst}", "Cast", "", [src], [dst], attrs={"to": to})
        )
        return idx

    if runtime_cast:
        # below ORT_ENABLE_ALL (measured at DISABLE / BASIC / EXTENDED: the dumps keep the fp16
        # weights and a Cast node each), and at ALL for weights with several readers, every
        # run casts the weight into an f32 activation
        for name in runtime_cast:
            t = g.tensors[name]
            new = f"InsertedPrecisionFreeCast_{name}"
            users = list(t.consumers)
            idx = add_cast(name, new, FLOAT)
            for c in users:
                nodes[c].inputs = [new if x == name else x for x in nodes[c].inputs]
            tensors[name] = dataclasses.replace(t, consumers=[idx])
            tensors[new] = dataclasses.replace(
                t,
                name=new,
                kind="activation",
                elem_type=FLOAT,
                external=None,
                init_bytes=None,
                producer=idx,
                consumers=users,
            )
    for name in [n for n in g.inputs if n in region]:
        t = g.tensors[name]
        new = f"InsertedPrecisionFreeCast_{name}"
        users = [c for c in t.consumers if g.nodes[c].op_type != "Cast"]
        if not users:
            continue
        idx = add_cast(name, new, FLOAT)
        for c in users:
            nodes[c].inputs = [new if x == name else x for x in nodes[c].inputs]
        tensors[name] = dataclasses.replace(
            t, consumers=[c for c in t.consumers if c not in users] + [idx]
        )
        tensors[new] = f32(
            dataclasses.replace(t, kind="activation", is_output=False, name=new),
            producer=idx,
            consumers=users,
        )
    for name in [n for n in g.outputs if n in region]:
        t = g.tensors[name]
        if t.producer is None or g.nodes[t.producer].op_type == "Cast":
            continue
        new = f"InsertedPrecisionFreeCast_{name}"
        p = nodes[t.producer]
        p.outputs = [new if x == name else x for x in p.outputs]
        idx = add_cast(new, name, FP16)
        users = list(t.consumers)
        for c in users:
            nodes[c].inputs = [new if x == name else x for x in nodes[c].inputs]
        tensors[new] = f32(
            dataclasses.replace(t, is_output=False, name=new),
            producer=t.producer,
            consumers=[*users, idx],
        )
        tensors[name] = dataclasses.replace(t, producer=idx, consumers=[])
    return dataclasses.replace(
        g,
        nodes=nodes,
        tensors=tensors,
        initializers=list(g.initializers),
        folded=set(g.folded),
        fp16_cast=cast_from,
    )
