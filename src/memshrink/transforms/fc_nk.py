"""FC weights stored in ``[N, K]`` order, read through ``Gemm(transB=1)``.

Why: OpenVINO's CPU plugin runs a MatMul / Gemm with a constant 2-D weight as a
FullyConnected node, which wants its weight as ``[N, K]``. At bf16 (the default on AVX512-BF16
and AMX hosts) a weight in ONNX MatMul's ``[K, N]`` order is first transposed into a bf16
Constant that the compiled model keeps, beside the mapped f32 original and the packed bf16 copy
(0.5x the weight more); a weight already ``[N, K]`` is only packed. Measured (one process each,
bf16 host, ``memshrink verify``): 4 x 2048² FC, compile 132 -> 100 MiB, infer 179 -> 147; GPT-2
``all`` (48 Gemm ``transB=0``) process peak 958 -> 797; BERT-base ``all`` (96 MatMuls) 804 ->
649. At f32 (the EP, AVX2 hosts) both orders cost the same.

Two rewrites, both bit-identical on the runtimes measured (ORT CPU, OpenVINO, the EP: the
same GEMM reads the same packed weight):

* ``Gemm(A, W, transB=0)`` -> ``Gemm(A, Wᵀ, transB=1)``: no node added.
* ``MatMul(x, W)`` -> ``Gemm(Reshape(x, [-1, K]), Wᵀ, transB=1)`` reshaped back to
  ``x.shape[:-1] + [N]``. ``Transpose(W)`` would be simpler, but ONNX Runtime constant-folds it
  into a heap copy at session creation (docs/compare.md, session 12, finding 4); Gemm's
  ``transB`` is read by every runtime's kernel instead. Each reshape costs a node on every
  runtime, so the flattened input and its leading dims are shared by the MatMuls reading one
  ``x`` (BERT's Q/K/V), and whether to rewrite is the pass's decision (``fc_weight_layout``).

Weights are transposed block by block into the spill file (``fold_weight_transforms.
_transposed``), never all in memory; a weight read by anything else (a tied embedding's
Gather) is left alone: transposing it would store it twice.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from memshrink.transforms.tied_matmul import a_rank
from memshrink.transforms.weight_io import transpose_2d_to_spill

_ONNX = ("", "ai.onnx")


@dataclass
class Rewritten:
    """What one rewrite did: readers rewritten, weights transposed, their bytes, nodes added."""

    readers: int = 0
    weights: int = 0
    bytes: int = 0
    nodes_added: int = 0
    names: list[str] = field(default_factory=list)


def _const_2d_float(value: ir.Value | None) -> ir.TensorProtocol | None:
    """The f32 2-D constant tensor of an initializer that no caller can override."""
    if value is None or not value.is_initializer() or value.is_graph_input():
        return None
    t = value.const_value
    if t is None or t.dtype != ir.DataType.FLOAT or len(t.shape) != 2:
        return None
    if value.is_graph_output():
        return None
    return t


def _trans_b(node: ir.Node) -> int:
    attr = node.attributes.get("transB")
    return int(attr.value) if attr is not None else 0


def _gemm_readers(w: ir.Value) -> list[ir.Node] | None:
    """Every reader of ``w`` if all read it as a ``transB=0`` Gemm's B, else None."""
    readers = []
    for use in w.uses():
        node = use.node
        if node.op_type != "Gemm" or node.domain not in _ONNX or use.idx != 1:
            return None
        if _trans_b(node) != 0:
            return None
        readers.append(node)
    return readers or None


def _matmul_readers(w: ir.Value) -> list[ir.Node] | None:
    """Every reader of ``w`` if all are MatMuls reading it as B with an A of known rank >= 2
    in the same graph, else None."""
    readers = []
    for use in w.uses():
        node = use.node
        if node.op_type != "MatMul" or node.domain not in _ONNX or use.idx != 1:
            return None
        rank = a_rank(node)
        if node.inputs[0] is None or rank is None or rank < 2 or node.graph is not w.graph:
            return None
        readers.append(node)
    return readers or None


#: Bytes per transposed block: the pass runs late in ``all``, on top of the heap the earlier
#: passes grew, where 8 MiB blocks (``weight_io.BLOCK``) and their transposes raised
#: ``optimize``'s own peak (ViT-B/16 ``all`` +15 MiB).
TRANSPOSE_BLOCK = 1 << 20


def _register_transposed(graph: ir.Graph, w: ir.Value, tensor: ir.TensorProtocol) -> ir.Value:
    from memshrink.transforms.fold_weight_transforms import _transposed

    name = f"{w.name}__nk"
    k, n = (int(d) for d in tensor.shape.numpy())
    new = ir.Value(name=name, shape=ir.Shape([n, k]), type=ir.TensorType(ir.DataType.FLOAT))
    if isinstance(tensor, ir.ExternalTensor):
        new.const_value = transpose_2d_to_spill(tensor, name, TRANSPOSE_BLOCK)
    else:
        new.const_value = _transposed(tensor, [1, 0], name)
    graph.register_initializer(new)
    return new


def _drop_if_unused(graph: ir.Graph, w: ir.Value) -> None:
    if not w.uses() and w.name and w.name in graph.initializers:
        del graph.initializers[w.name]


def flip_gemm_weights(graph: ir.Graph, min_bytes: int = 0,
                      skip: Collection[str] = ()) -> Rewritten:  # fmt: skip
    """Store every ``transB=0`` Gemm weight (of at least ``min_bytes``, not named in ``skip``)
    transposed and read it with ``transB=1``; weights with any other reader are left alone."""
    done = Rewritten()
    for name, w in list(graph.initializers.items()):
        tensor = _const_2d_float(w)
        if tensor is None or tensor.nbytes < min_bytes or name in skip:
            continue
        readers = _gemm_readers(w)
        if readers is None:
            continue
        new = _register_transposed(graph, w, tensor)
        for node in readers:
            node.replace_input_with(1, new)
            node.attributes["transB"] = ir.AttrInt64("transB", 1)
        _drop_if_unused(graph, w)
        done.readers += len(readers)
        done.weights += 1
        done.bytes += int(tensor.nbytes)
        done.names.append(name)
    return done


class _Shared:
    """The reshape nodes shared per MatMul input: ``x`` flattened to ``[-1, K]``, its leading
    dims, and per ``N`` the output shape ``lead + [N]``."""

    def __init__(self, graph: ir.Graph, opset: int) -> None:
        self.graph = graph
        self.opset = opset
        self.flat: dict[int, ir.Value] = {}
        self.lead: dict[int, ir.Value] = {}
        self.shape: dict[tuple[int, int], ir.Value] = {}
        self.consts: dict[tuple[int, ...], ir.Value] = {}
        self.added = 0

    def _ints(self, values: tuple[int, ...]) -> ir.Value:
        if values not in self.consts:
            name = "fc_nk_" + "_".join(str(v).replace("-", "m") for v in values)
            while name in self.graph.initializers:
                name += "_"
            v = ir.Value(name=name, shape=ir.Shape([len(values)]),
                         type=ir.TensorType(ir.DataType.INT64))  # fmt: skip
            v.const_value = ir.Tensor(np.array(values, dtype=np.int64), name=name)
            self.graph.register_initializer(v)
            self.consts[values] = v
        return self.consts[values]

    def _insert(self, before: ir.Node, node: ir.Node, name: str) -> ir.Value:
        node.name = name
        node.outputs[0].name = name
        self.graph.insert_before(before, node)
        self.added += 1
        return node.outputs[0]

    def flat_input(self, x: ir.Value, k: int, first: ir.Node) -> ir.Value:
        if id(x) not in self.flat:
            node = ir.node("Reshape", [x, self._ints((-1, k))])
            out = self._insert(first, node, f"{x.name}__flat")
            out.dtype = ir.DataType.FLOAT  # only f32 weights are rewritten: x is f32
            self.flat[id(x)] = out
        return self.flat[id(x)]

    def out_shape(self, x: ir.Value, n: int, first: ir.Node) -> ir.Value:
        if id(x) not in self.lead:
            if self.opset >= 15:
                node = ir.node("Shape", [x], attributes={"end": -1})
                self.lead[id(x)] = self._insert(first, node, f"{x.name}__lead")
            else:
                shp = self._insert(first, ir.node("Shape", [x]), f"{x.name}__shape")
                node = ir.node("Slice", [shp, self._ints((0,)), self._ints((-1,))])
                self.lead[id(x)] = self._insert(first, node, f"{x.name}__lead")
        key = (id(x), n)
        if key not in self.shape:
            node = ir.node("Concat", [self.lead[id(x)], self._ints((n,))],
                           attributes={"axis": 0})  # fmt: skip
            self.shape[key] = self._insert(first, node, f"{x.name}__lead_{n}")
        return self.shape[key]


def _first_reader(graph: ir.Graph, readers: list[ir.Node]) -> dict[int, ir.Node]:
    """Per MatMul input ``x``, the first of ``readers`` in the graph's order (where the
    shared nodes go, so they precede every reader)."""
    first: dict[int, ir.Node] = {}
    wanted = {id(n) for n in readers}
    for node in graph:
        if id(node) in wanted:
            x = node.inputs[0]
            first.setdefault(id(x), node)
    return first


def matmul_to_gemm(graph: ir.Graph, opset: int, min_bytes: int = 0,
                   skip: Collection[str] = ()) -> Rewritten:  # fmt: skip
    """Rewrite ``MatMul(x, W)`` of every f32 2-D weight of at least ``min_bytes`` (not named
    in ``skip``) read only by MatMuls as ``Gemm(x, Wᵀ, transB=1)``, reshaping a rank > 2
    ``x`` around it."""
    done = Rewritten()
    plan: list[tuple[ir.Value, ir.TensorProtocol, list[ir.Node]]] = []
    for name, w in list(graph.initializers.items()):
        tensor = _const_2d_float(w)
        if tensor is None or tensor.nbytes < min_bytes or name in skip:
            continue
        readers = _matmul_readers(w)
        if readers is not None:
            plan.append((w, tensor, readers))
    if not plan:
        return done
    shared = _Shared(graph, opset)
    first = _first_reader(graph, [n for _, _, rs in plan for n in rs])
    # the shared reshapes first, before the first reader of each input (still in the graph)
    for _, tensor, readers in plan:
        k, n = (int(d) for d in tensor.shape.numpy())
        for mm in readers:
            x = mm.inputs[0]
            if x is not None and a_rank(mm) != 2:
                shared.flat_input(x, k, first[id(x)])
                shared.out_shape(x, n, first[id(x)])
    for w, tensor, readers in plan:
        k, n = (int(d) for d in tensor.shape.numpy())
        new = _register_transposed(graph, w, tensor)
        for mm in readers:
            _rewrite_one(graph, mm, new, k, n, shared, first[id(mm.inputs[0])])
        _drop_if_unused(graph, w)
        done.readers += len(readers)
        done.weights += 1
        done.bytes += int(tensor.nbytes)
        done.names.append(w.name or "")
    done.nodes_added = shared.added
    return done


def _rewrite_one(graph: ir.Graph, mm: ir.Node, w_nk: ir.Value, k: int, n: int,
                 shared: _Shared, first: ir.Node) -> None:  # fmt: skip
    x, old = mm.inputs[0], mm.outputs[0]
    assert x is not None  # _matmul_readers checked it
    rank = a_rank(mm)
    base = old.name or mm.name or "matmul"
    if rank == 2:
        gemm = ir.node("Gemm", [x, w_nk], attributes={"transB": 1}, name=base)
        gemm.outputs[0].dtype = ir.DataType.FLOAT
        gemm.outputs[0].shape = old.shape
        ir.convenience.replace_nodes_and_values(graph, mm, [mm], [gemm], [old], [gemm.outputs[0]])
        return
    flat = shared.flat_input(x, k, first)
    shape = shared.out_shape(x, n, first)
    gemm = ir.node("Gemm", [flat, w_nk], attributes={"transB": 1}, name=f"{base}__gemm")
    gemm.outputs[0].name = f"{base}__gemm"
    gemm.outputs[0].dtype = ir.DataType.FLOAT
    back = ir.node("Reshape", [gemm.outputs[0], shape], name=base)
    back.outputs[0].dtype = ir.DataType.FLOAT
    back.outputs[0].shape = old.shape
    ir.convenience.replace_nodes_and_values(graph, mm, [mm], [gemm, back], [old], [back.outputs[0]])
    shared.added += 1  # MatMul -> Gemm + Reshape
