"""fp16 models on ONNX Runtime CPU (x86-64): the f32 graph ORT really runs.

ORT 1.32's CPU provider has no float16 kernel for most compute ops on x86-64 (MLAS's fp16
GEMM/activation kernels are ARM-only). ``InsertCastTransformer`` then runs every such node in
f32 with Casts around it, and also forces to f32 an fp16-capable node (Reshape, Transpose,
Split, ...) that would sit alone between such nodes (``IsIsolatedFp16NodeOnCpu``); Cast pairs
cancel. So a compute chain with single data-movement ops between its nodes runs in f32 (one
``Cast`` to f32 after each fp16 graph input, one back to fp16 before each graph output), but
two or more fp16-capable nodes in a row stay fp16 with a Cast at each end (ORT 1.32 dumps:
MatMul -> Reshape -> Relu has no Cast inside, MatMul -> Reshape -> Transpose -> Relu has two;
LeViT's Reshape -> Split -> Transpose runs fp16 between f32 MatMuls). Every activation an f32
node writes is f32. Each fp16 initializer it reads is converted once at session creation into an anon f32
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


# Variadic inputs of the FP16_NATIVE ops: ORT's isolation test binds a formal parameter to its
# first actual input only, so only input 0's producer is checked.
_VARIADIC = frozenset({"Concat", "Max", "Min"})


def f32_nodes(g: GraphInfo) -> set[int]:
    """The nodes ORT CPU runs in f32: every node with an fp16 tensor and no fp16 kernel, and
    each fp16-capable node that ``InsertCastTransformer``'s ``IsIsolatedFp16NodeOnCpu``
    forces to f32 because it would otherwise sit between Casts: it reads at least one
    tensor a node writes, writes no graph output, and every node writing its fp16 input
    and reading its fp16 output runs in f32. Checked in node-index order, each decision
    seen by the later ones (``ForceSingleNodeCPUFloat16ToFloat32``). A chain of two or more
    fp16-capable nodes (Reshape -> Transpose between two MatMuls) therefore stays fp16, with
    Casts at both ends (ORT 1.32 dumps: ``tests/estimate/test_estimate_ort_fp16.py``)."""
    runs32 = {n.index for n in g.nodes if n.index not in g.folded and _needs_f32(g, n)}
    outputs = set(g.outputs)
    for node in g.nodes:
        if (
            node.index in runs32
            or node.index in g.folded
            or node.op_type not in FP16_NATIVE
            or node.op_type == "Cast"
        ):
            continue
        if node.domain not in ("", "ai.onnx") or node.subgraphs:
            continue
        if any(o in outputs for o in node.outputs):
            continue
        edges = [g.tensors[i].producer for i in node.inputs if i and i in g.tensors]
        if not any(p is not None for p in edges):
            continue
        ins = node.inputs[:1] if node.op_type in _VARIADIC else node.inputs
        fp16_in = [i for i in ins if _is_fp16(g, i)]
        fp16_out = [o for o in node.outputs if _is_fp16(g, o)]
        if not fp16_in or not fp16_out:
            continue
        producers = [g.tensors[i].producer for i in fp16_in]
        readers = [c for o in fp16_out for c in g.tensors[o].consumers]
        if all(p is None or p in runs32 for p in producers) and all(c in runs32 for c in readers):
            runs32.add(node.index)
    return runs32


def f32_region(g: GraphInfo) -> set[str]:
    """The fp16 tensors ORT CPU holds in f32: those an f32 node (``f32_nodes``) writes, and
    the fp16 weights only f32 nodes read (converted once, or cast at each run). Graph inputs
    and outputs are never in it; ``lower`` adds the Casts at every f32 / fp16 boundary."""
    runs32 = f32_nodes(g)
    region = {
        o for i in runs32 for o in g.nodes[i].outputs if _is_fp16(g, o) and o not in g.outputs
    }
    for name in g.initializers:
        t = g.tensors[name]
        if t.elem_type == FP16 and t.consumers and all(c in runs32 for c in t.consumers):
            region.add(name)
    return region


def lower(g: GraphInfo, *, fuse_weights: bool = True) -> GraphInfo | None:
    """The graph ORT CPU runs for a model with fp16 compute ops, or None when it has none.

    A new graph (``g`` is not changed): the f32 nodes' (``f32_nodes``) fp16 outputs become
    f32, the weights only they read become f32 copies (anon: not external, created at load;
    ``GraphInfo.fp16_cast`` names them), and a ``Cast`` sits at each f32 / fp16 boundary:
    one to f32 for a tensor held in fp16 (a graph input, an fp16 node's output, a weight with
    fp16 readers too) that f32 nodes read, one back to fp16 for an f32 node's output that a
    graph output or an fp16 node needs. The Casts are appended (new node indices), as ORT's
    transformer adds them."""
    runs32 = f32_nodes(g)
    region = f32_region(g)
    if not region and not runs32:
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
    runtime_cast = {
        n
        for n in g.initializers
        if n in region
        and not g.tensors[n].folded
        and (not fuse_weights or len(g.tensors[n].consumers) > 1)
    }
    # weights only constant folding reads (folded nodes are no consumers) are dropped after
    # the folding pass, before any Cast is inserted: they stay fp16 and are never converted
    # (not in the region); a folded result that is read is an fp16 initializer converted like
    # a weight (traced: LeViT's folded attention biases, 150 KiB fp16 read, 300 KiB f32 kept)

    def f32(t: TensorInfo, **kw: object) -> TensorInfo:
        nb = None if t.init_bytes is None else t.init_bytes * 2
        return dataclasses.replace(t, elem_type=FLOAT, init_bytes=nb, **kw)  # type: ignore[arg-type]

    def add_cast(src: str, dst: str, to: int) -> int:
        idx = len(nodes)
        nodes.append(
            NodeInfo(idx, f"InsertedCast_{dst}", "Cast", "", [src], [dst], attrs={"to": to})
        )
        return idx

    def reads_f32(c: int) -> bool:  # a model Cast reads either form (ORT drops the pair)
        return c in runs32 or g.nodes[c].op_type == "Cast"

    for name in region:
        t = g.tensors[name]
        if t.kind != "initializer" or name in runtime_cast:
            continue
        tensors[name] = f32(t, external=False, consumers=list(t.consumers))
        if fuse_weights or not t.folded:
            cast_from.add(name)

    def cast_up(name: str) -> None:
        """An fp16 tensor (graph input, fp16 node's output, weight cast at each run) that f32
        nodes read: one Cast to an f32 copy, shared by those readers."""
        t = g.tensors[name]
        users = [c for c in t.consumers if c in runs32]
        new = f"InsertedPrecisionFreeCast_{name}"
        idx = add_cast(name, new, FLOAT)
        for c in users:
            nodes[c].inputs = [new if x == name else x for x in nodes[c].inputs]
        base = tensors[name]
        tensors[name] = dataclasses.replace(
            base, consumers=[c for c in base.consumers if c not in users] + [idx]
        )
        tensors[new] = dataclasses.replace(
            t, name=new, kind="activation", elem_type=FLOAT, external=None, init_bytes=None,
            is_output=False, folded=False, producer=idx, consumers=users,
        )  # fmt: skip

    def cast_back(i: int, name: str) -> None:
        """An f32 node's fp16 output: f32, with a Cast back where an fp16 reader or the graph
        needs it."""
        t = g.tensors[name]
        fp16_users = [c for c in t.consumers if not reads_f32(c)]
        if not fp16_users and not t.is_output:
            tensors[name] = f32(t, consumers=list(t.consumers))
            return
        new = f"InsertedPrecisionFreeCast_{name}"
        nodes[i].outputs = [new if x == name else x for x in nodes[i].outputs]
        idx = add_cast(new, name, FP16)
        users = [c for c in t.consumers if reads_f32(c)]
        for c in users:
            nodes[c].inputs = [new if x == name else x for x in nodes[c].inputs]
        tensors[new] = f32(
            dataclasses.replace(t, is_output=False, name=new), producer=i, consumers=[*users, idx]
        )
        tensors[name] = dataclasses.replace(t, producer=idx, consumers=fp16_users)

    # per f32 node in index order, its inputs' Casts then its outputs' (ORT's numbering)
    done: set[str] = set()
    for i in sorted(runs32):
        for name in g.nodes[i].inputs:
            src = g.tensors.get(name) if name else None
            if src is None or src.elem_type != FP16 or name in done:
                continue
            if (name in region and name not in runtime_cast) or src.producer in runs32:
                continue
            done.add(name)
            cast_up(name)
        for name in g.nodes[i].outputs:
            if _is_fp16(g, name):
                cast_back(i, name)
    return dataclasses.replace(
        g,
        nodes=nodes,
        tensors=tensors,
        initializers=list(g.initializers),
        folded=set(g.folded),
        fp16_cast=cast_from,
    )
