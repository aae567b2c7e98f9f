"""FC weights read as MatMul's *first* input: ``y = (W_nk · xᵀ)ᵀ``, which no runtime packs.

Why: every CPU runtime here turns a MatMul / Gemm whose *second* input is a constant into a
fully-connected kernel and keeps a private re-laid-out copy of the weight beside ORT's
mapping of the file: ORT CPU prepacks it (1x, anon), OpenVINO packs it (bf16: 0.5x; at f32,
which is how the ORT OpenVINO EP always compiles: 1x), so the EP holds the weights twice. A
constant *first* input is read where it lies: ORT's kernels prepack only B, and OpenVINO
makes a FullyConnected only of a constant B, so the plugin's MatMul reads the mapped f32
weight directly. Measured (4 x MatMul 2048² on [1, 128, 2048], external data, MiB over
baseline, steady state): the EP 182.6 -> 122.3, OpenVINO bf16 170.0 -> 108.5 (f32 165.8 ->
107.4), ORT CPU 79.4 -> 78.6 (its session 89.7 -> 10.0: the weight is read at the run
instead of packed at load). The transposes are of activations (xᵀ, and the product back).

Rewrites (``W`` an f32 2-D initializer read only by FC readers, in one graph):

* ``MatMul(x, W[K, N])`` -> ``Transpose(MatMul(Wᵀ[N, K], Transpose(x)))`` (the last two axes
  swapped; ``x`` of rank >= 2 broadcast over W as before);
* ``Gemm(x, W, C, transB)`` (``transA=0``, ``alpha=1``, ``beta=1``) -> the same with ``W`` as
  ``[N, K]`` (stored transposed when ``transB=0``), plus ``Add(C)`` after it.

Not ``Gemm(W, x, transB=1)``: ORT's level-1 ``GemmTransposeFusion`` folds a Transpose after a
Gemm back into ``Gemm(x, Wᵀ)``, which packs again (measured on GPT-2: no change on ORT CPU or
the EP). The transposes of one input are shared by the FCs reading it (BERT's Q/K/V). Each
product's dot products are the same, summed in another blocking: a few ulp (GPT-2 logits max
abs 4.4e-6, BERT-base 4.7e-6, measured on ORT CPU and the EP).
"""

from __future__ import annotations

from collections.abc import Collection

import onnx_ir as ir

from memshrink.transforms.fc_nk import Rewritten, _const_2d_float, _drop_if_unused
from memshrink.transforms.fc_nk import _register_transposed as register_nk
from memshrink.transforms.tied_matmul import a_rank

_ONNX = ("", "ai.onnx")


def _attr(node: ir.Node, name: str, default: float) -> float:
    a = node.attributes.get(name)
    return float(a.value) if a is not None else default


def _plain_gemm(node: ir.Node) -> bool:
    """A Gemm whose only options are ``transB`` and a ``beta=1`` bias: Add can take C over."""
    return (
        _attr(node, "transA", 0) == 0
        and _attr(node, "alpha", 1.0) == 1.0
        and _attr(node, "beta", 1.0) == 1.0
    )


def fc_readers(w: ir.Value) -> tuple[list[ir.Node], bool] | None:
    """``w``'s readers and whether the rewrite needs it transposed (``[K, N]`` as stored), or
    None unless every reader reads it as B of a MatMul (A of known rank >= 2) or of a plain
    2-D Gemm, all alike in ``w``'s order and in ``w``'s graph."""
    readers: list[ir.Node] = []
    orders: set[bool] = set()
    for use in w.uses():
        node = use.node
        if node.domain not in _ONNX or use.idx != 1 or node.graph is not w.graph:
            return None
        if node.op_type == "MatMul":
            rank = a_rank(node)
            if node.inputs[0] is None or rank is None or rank < 2:
                return None
            orders.add(True)
        elif node.op_type == "Gemm" and _plain_gemm(node) and node.inputs[0] is not None:
            orders.add(_attr(node, "transB", 0) == 0)
        else:
            return None
        readers.append(node)
    if not readers or len(orders) != 1:
        return None
    return readers, orders.pop()


def _swap(rank: int) -> list[int]:
    return [*range(rank - 2), rank - 1, rank - 2]


class _Transposes:
    """``Transpose(x)`` (last two axes swapped) made once per FC input ``x``."""

    def __init__(self, graph: ir.Graph) -> None:
        self.graph = graph
        self.made: dict[int, ir.Value] = {}
        self.added = 0

    def of(self, x: ir.Value, rank: int, first: ir.Node) -> ir.Value:
        if id(x) not in self.made:
            perm = _swap(rank)
            name = f"{x.name}__xT"
            node = ir.node("Transpose", [x], attributes={"perm": perm}, name=name)
            out = node.outputs[0]
            out.name = name
            out.dtype = ir.DataType.FLOAT  # only f32 weights are rewritten: x is f32
            if x.shape is not None and len(x.shape) == rank:
                out.shape = ir.Shape([x.shape[i] for i in perm])
            self.graph.insert_before(first, node)
            self.made[id(x)] = out
            self.added += 1
        return self.made[id(x)]


def weights_first(graph: ir.Graph, min_bytes: int = 0, skip: Collection[str] = ()) -> Rewritten:
    """Rewrite the FC readers of every f32 2-D weight of at least ``min_bytes`` (not named in
    ``skip``) to read it as MatMul's first input, ``[N, K]``; see the module docstring."""
    done = Rewritten()
    plan: list[tuple[ir.Value, ir.TensorProtocol, list[ir.Node], bool]] = []
    for name, w in list(graph.initializers.items()):
        tensor = _const_2d_float(w)
        if tensor is None or tensor.nbytes < min_bytes or name in skip:
            continue
        found = fc_readers(w)
        if found is not None:
            plan.append((w, tensor, *found))
    if not plan:
        return done
    reads: dict[int, ir.Value] = {}
    for w, tensor, readers, transpose in plan:
        w_nk = register_nk(graph, w, tensor) if transpose else w
        reads.update((id(node), w_nk) for node in readers)
        done.readers += len(readers)
        done.weights += 1
        done.bytes += int(tensor.nbytes) if transpose else 0
        done.names.append(w.name or "")
    # in the graph's order: an input's shared transpose goes before its first reader, and a
    # reader's input may be an earlier rewrite's new output
    xts = _Transposes(graph)
    for node in list(graph):
        if id(node) in reads:
            done.nodes_added += _rewrite_one(graph, node, reads[id(node)], xts)
    for w, _, _, _ in plan:
        _drop_if_unused(graph, w)
    done.nodes_added += xts.added
    return done


def _rewrite_one(graph: ir.Graph, fc: ir.Node, w_nk: ir.Value, xts: _Transposes) -> int:
    """Replace one FC reader; returns the nodes it added beyond the shared transpose."""
    x, old = fc.inputs[0], fc.outputs[0]
    assert x is not None  # fc_readers checked it
    rank = a_rank(fc) if fc.op_type == "MatMul" else 2
    assert rank is not None
    base = old.name or fc.name or "fc"
    xt = xts.of(x, rank, fc)
    perm = _swap(rank)
    prod = ir.node("MatMul", [w_nk, xt], name=f"{base}__WxT")
    prod.outputs[0].name = f"{base}__WxT"
    prod.outputs[0].dtype = ir.DataType.FLOAT
    bias = fc.inputs[2] if fc.op_type == "Gemm" and len(fc.inputs) > 2 else None
    back_name = f"{base}__y" if bias is not None else base
    back = ir.node("Transpose", [prod.outputs[0]], attributes={"perm": perm}, name=back_name)
    back.outputs[0].dtype = ir.DataType.FLOAT
    new = [prod, back]
    if old.shape is not None and len(old.shape) == rank:
        prod.outputs[0].shape = ir.Shape([old.shape[i] for i in perm])
        back.outputs[0].shape = old.shape
    if bias is not None:
        back.outputs[0].name = back_name
        add = ir.node("Add", [back.outputs[0], bias], name=base)
        add.outputs[0].dtype = ir.DataType.FLOAT
        add.outputs[0].shape = old.shape
        new.append(add)
    ir.convenience.replace_nodes_and_values(graph, fc, [fc], new, [old], [new[-1].outputs[0]])
    return len(new) - 1
