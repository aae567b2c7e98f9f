"""Split inverted bottlenecks (expand → per-channel ops → reduce) along their hidden channels.

Why: an inverted bottleneck (MobileNetV2/EfficientNet block, a NASNet branch, a transformer
FFN) widens a tensor ``expand``-fold, applies ops that treat each channel on its own, and
contracts it again. The wide tensor is the activation peak, yet nothing needs it whole: with
the expand's output channels cut into K slices, slice k's hidden tensors come from the weight
rows of slice k only, and the reduce's result is the sum over slices of the reduce applied to
its input-channel slice k. So the block is written as K chains ``expand_k → ops_k → reduce_k``
whose partial results are added (the reduce's bias once), and only one slice's hidden tensors
(1/K of the original) are alive at a time. The sum is taken in a different order than the
reduce's own accumulation: outputs agree within atol 1e-4, rtol 1e-4, not bit for bit.

A block is accepted only when that identity holds: its hidden tensors are read by nothing
outside the block (nor are graph outputs), every op between expand and reduce keeps channels
apart (element-wise with constants that broadcast along the channel axis, BatchNormalization,
depthwise Conv, pooling), and exactly one reduce contracts the channels. Weight slices are new
initializers computed lazily from the original tensor at save time (one tensor at a time, via
``onnx_ir.LazyTensor``); the original initializers are dropped once nothing reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from memshrink.transforms.chunking.rewrite import META_KEY, _Namer
from memshrink.transforms.weight_io import read_slice

Shape = tuple[int, ...]

#: Ops that compute each element from the same element of their (single) data input.
UNARY = frozenset(
    [
        "Relu",
        "Sigmoid",
        "Tanh",
        "Erf",
        "Exp",
        "Log",
        "Abs",
        "Neg",
        "Sqrt",
        "Reciprocal",
        "Softplus",
        "Softsign",
        "HardSigmoid",
        "HardSwish",
        "LeakyRelu",
        "Elu",
        "Selu",
        "Celu",
        "Gelu",
        "Mish",
        "ThresholdedRelu",
        "Identity",
        "Cast",
        "Floor",
        "Ceil",
        "Round",
        "Sin",
        "Cos",
        "Clip",
    ]
)
#: Element-wise ops with two inputs; a non-block input must be a constant.
BINARY = frozenset(["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu"])
#: Ops over NCHW that keep channels apart (channel axis 1).
POOLS = frozenset(["MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool"])


@dataclass
class Block:
    """One splittable block: ``expand`` → ``chain`` (graph order) → ``reduce``."""

    expand: ir.Node
    chain: list[ir.Node]
    reduce: ir.Node
    channels: int  # the hidden width C
    hidden: list[ir.Value]  # tensors with C channels (expand and chain outputs)
    axes: dict[ir.Value, int]  # channel axis per hidden tensor
    # per chain/reduce node input index -> axis of that constant to slice (None: use as is)
    const_axes: dict[tuple[ir.Node, int], int | None] = field(default_factory=dict)
    hidden_bytes: int = 0  # the largest hidden tensor, bytes

    @property
    def label(self) -> str:
        return self.expand.name or (self.expand.outputs[0].name or "block")


def const_tensor(v: ir.Value | None) -> ir.TensorProtocol | None:
    """The constant behind ``v``: an initializer, or a ``Constant`` node's value."""
    if v is None:
        return None
    if v.const_value is not None and v.is_initializer():
        return v.const_value
    prod = v.producer()
    if prod is not None and prod.op_type == "Constant" and prod.domain in ("", "ai.onnx"):
        a = prod.attributes.get("value")
        if a is not None and a.type == ir.AttributeType.TENSOR:
            return a.as_tensor()
    return None


def _type_of(v: ir.Value | None, known: dict[ir.Value, ir.TypeProtocol]) -> ir.TypeProtocol | None:
    """A value's type: declared, propagated within the block, or a constant's dtype."""
    if v is None:
        return None
    if v.type is not None:
        return v.type
    if v in known:
        return known[v]
    t = const_tensor(v)
    return ir.TensorType(t.dtype) if t is not None else None


def _out_type(node: ir.Node, known: dict[ir.Value, ir.TypeProtocol]) -> ir.TypeProtocol | None:
    """The type of ``node``'s output where the source graph declares none (exports without
    intermediate value_info). Why: a slice value with a shape but no type is dropped from the
    saved value_info with one onnx_ir warning each (~250 lines on torchvision's FCOS).
    Conv / MatMul / Gemm and the block's element-wise ops and pools keep their first input's
    dtype (ONNX's type constraints; Pow and PRelu follow X); Cast gives its ``to``."""
    if node.op_type == "Cast":
        return ir.TensorType(ir.DataType(_attr_int(node, "to", 0)))
    first = _type_of(node.inputs[0] if node.inputs else None, known)
    if first is None and node.op_type in ("Conv", "MatMul", "Gemm") and len(node.inputs) > 1:
        return _type_of(node.inputs[1], known)  # the weight: T is shared with X
    return first


def _dims(t: ir.TensorProtocol) -> Shape:
    return tuple(int(d) for d in t.shape.numpy())


def _attr_int(node: ir.Node, name: str, default: int) -> int:
    a = node.attributes.get(name)
    return int(a.as_int()) if a is not None else default


def _expand_of(node: ir.Node, shapes: dict[str, Shape | None]) -> tuple[int, int] | None:
    """(channel axis, C) when ``node`` is an expand: its output channels come from one row
    of a constant weight each (Conv with groups = 1, MatMul/Gemm by a constant 2-D weight)."""
    if node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
        return None
    out = shapes.get(node.outputs[0].name or "")
    if not out:
        return None
    ins = node.inputs
    if len(ins) < 2 or ins[0] is None or const_tensor(ins[0]) is not None:
        return None
    w = const_tensor(ins[1])
    if w is None:
        return None
    wd = _dims(w)
    if node.op_type == "Conv" and _attr_int(node, "group", 1) == 1 and len(wd) >= 3:
        if len(ins) > 2 and ins[2] is not None and const_tensor(ins[2]) is None:
            return None
        return (1, wd[0]) if len(out) > 1 and out[1] == wd[0] else None
    if node.op_type == "MatMul" and len(wd) == 2 and len(out) >= 2 and out[-1] == wd[1]:
        return len(out) - 1, wd[1]
    if node.op_type == "Gemm" and len(wd) == 2 and len(out) == 2:
        c = wd[0] if _attr_int(node, "transB", 0) else wd[1]
        if len(ins) > 2 and ins[2] is not None:
            bias = const_tensor(ins[2])
            if bias is None or _slice_axis(_dims(bias), (out[0], c), 1, c) is False:
                return None
        return (1, c) if out[1] == c else None
    return None


def _reduces(node: ir.Node, x: ir.Value, axis: int, c: int, rank: int) -> bool:
    """Whether ``node`` contracts ``x``'s C channels with a constant weight (the reduce)."""
    ins = node.inputs
    if node.domain not in ("", "ai.onnx") or len(ins) < 2 or ins[0] is not x or ins[1] is x:
        return False
    w = const_tensor(ins[1])
    if w is None:
        return False
    wd = _dims(w)
    if node.op_type == "Conv":
        if _attr_int(node, "group", 1) != 1 or len(wd) < 3 or wd[1] != c or axis != 1:
            return False
        return len(ins) < 3 or ins[2] is None or const_tensor(ins[2]) is not None
    if node.op_type == "MatMul":
        return len(wd) == 2 and wd[0] == c and axis == rank - 1
    if node.op_type == "Gemm":
        if _attr_int(node, "transA", 0) or len(wd) != 2 or axis != 1:
            return False
        k = wd[1] if _attr_int(node, "transB", 0) else wd[0]
        return k == c and (len(ins) < 3 or ins[2] is None or const_tensor(ins[2]) is not None)
    return False


def _slice_axis(cshape: Shape, tshape: Shape, axis: int, c: int) -> int | None | bool:
    """How a constant of ``cshape`` broadcast against a hidden tensor of ``tshape`` is cut:
    the constant's axis to slice, None (use it whole), or False (it would change the
    tensor's shape, or mixes nothing per channel we can prove)."""
    if len(cshape) > len(tshape):
        return False
    off = len(tshape) - len(cshape)
    for i, d in enumerate(cshape):
        if d != 1 and d != tshape[off + i]:
            return False
    if axis < off or cshape[axis - off] == 1 or c == 1:
        return None
    return axis - off


def _per_channel(
    node: ir.Node,
    hidden: dict[ir.Value, int],
    shapes: dict[str, Shape | None],
    c: int,
    const_axes: dict[tuple[ir.Node, int], int | None],
) -> int | None:
    """The channel axis of ``node``'s output when it keeps the C channels apart, else None.
    Records how each constant input is cut in ``const_axes``."""
    op = node.op_type
    if node.domain not in ("", "ai.onnx"):
        return None
    data = [(i, v) for i, v in enumerate(node.inputs) if v is not None and v in hidden]
    axes = {hidden[v] for _, v in data}
    if len(axes) != 1:
        return None
    axis = axes.pop()
    tshape = shapes.get(data[0][1].name or "")
    out = shapes.get(node.outputs[0].name or "")
    if not tshape or not out or len(out) != len(tshape) or out[axis] != c:
        return None
    used_outs = [y for y in node.outputs[1:] if y.uses() or y.is_graph_output()]
    if used_outs:
        return None
    rec: dict[tuple[ir.Node, int], int | None] = {}
    others = [(i, v) for i, v in enumerate(node.inputs) if v is not None and v not in hidden]
    if op in UNARY:
        if data[0][0] != 0 or len(data) != 1 or out != tshape:
            return None
        for i, v in others:  # Clip's min/max: constant scalars
            t = const_tensor(v)
            if t is None or int(np.prod(_dims(t))) != 1:
                return None
            rec[(node, i)] = None
    elif op in BINARY:
        if len(node.inputs) != 2 or out != tshape:
            return None
        for i, v in others:
            t = const_tensor(v)
            if t is None:
                return None
            how = _slice_axis(_dims(t), tshape, axis, c)
            if how is False:
                return None
            rec[(node, i)] = how  # type: ignore[assignment]
    elif op == "BatchNormalization":
        if axis != 1 or data[0][0] != 0 or len(data) != 1 or out != tshape:
            return None
        for i, v in others:
            t = const_tensor(v)
            if t is None or _dims(t) != (c,):
                return None
            rec[(node, i)] = 0
    elif op == "Conv":  # depthwise: one filter per channel
        if axis != 1 or data[0][0] != 0 or len(data) != 1 or _attr_int(node, "group", 1) != c:
            return None
        for i, v in others:
            t = const_tensor(v)
            if t is None:
                return None
            d = _dims(t)
            if (i == 1 and (len(d) < 3 or d[0] != c or d[1] != 1)) or (i == 2 and d != (c,)):
                return None
            rec[(node, i)] = 0
    elif op in POOLS:
        if axis != 1 or len(node.inputs) != 1:
            return None
    else:
        return None
    const_axes.update(rec)
    return axis


def find_blocks(graph: ir.Graph, shapes: dict[str, Shape | None]) -> list[Block]:
    """Every expand → per-channel chain → reduce block of ``graph`` whose hidden tensors
    nothing else reads. Blocks never overlap (a reduce is never another block's chain)."""
    nodes = list(graph)
    pos = {n: i for i, n in enumerate(nodes)}
    blocks: list[Block] = []
    taken: set[ir.Node] = set()
    for node in nodes:
        if node in taken:
            continue
        ex = _expand_of(node, shapes)
        if ex is None:
            continue
        block = _grow(node, ex[0], ex[1], nodes, pos, shapes)
        if block is None or taken & {block.expand, block.reduce, *block.chain}:
            continue
        taken.update({block.expand, block.reduce, *block.chain})
        blocks.append(block)
    return blocks


def _grow(
    expand: ir.Node,
    axis: int,
    c: int,
    nodes: Sequence[ir.Node],
    pos: dict[ir.Node, int],
    shapes: dict[str, Shape | None],
) -> Block | None:
    h = expand.outputs[0]
    hidden: dict[ir.Value, int] = {h: axis}
    const_axes: dict[tuple[ir.Node, int], int | None] = {}
    chain: list[ir.Node] = []
    reduce: ir.Node | None = None
    pending = {n for n, _ in h.uses()}
    i = pos[expand]
    while pending:
        i += 1
        if i >= len(nodes):
            return None
        node = nodes[i]
        if node not in pending:
            continue
        pending.discard(node)
        xs = [v for v in node.inputs if v is not None and v in hidden]
        shape = shapes.get(xs[0].name or "")
        if shape is None:
            return None
        if len(xs) == 1 and _reduces(node, xs[0], hidden[xs[0]], c, len(shape)):
            if reduce is not None:
                return None
            reduce = node
            for j, v in enumerate(node.inputs[1:], start=1):
                if v is not None:
                    const_axes[(node, j)] = None
            continue
        ax = _per_channel(node, hidden, shapes, c, const_axes)
        if ax is None:
            return None
        chain.append(node)
        y = node.outputs[0]
        hidden[y] = ax
        pending.update(n for n, _ in y.uses())
    if reduce is None or any(v.is_graph_output() for v in hidden):
        return None
    if c <= max(_width(expand, "in"), _width(reduce, "out")):
        return None  # not an inverted bottleneck: the partial sums would cost what a slice saves
    size = max(_nbytes(shapes.get(v.name or ""), v) for v in hidden)
    return Block(expand, chain, reduce, c, list(hidden), hidden, const_axes, size)


#: File orders of a split block's nodes (``split_block``).
SERIAL, REVERSED = "serial", "reversed"
ORDERS = (SERIAL, REVERSED)


def _nbytes(shape: Shape | None, v: ir.Value) -> int:
    if not shape:
        return 0
    n = int(np.prod(shape))
    dt = v.dtype
    return int(n * (dt.itemsize if dt is not None else 4))


def _width(node: ir.Node, side: str) -> int:
    """Channels on the narrow side of an expand ("in") or reduce ("out"): its weight's other
    dimension (Conv input channels are per group, and groups = 1 here)."""
    w = const_tensor(node.inputs[1])
    assert w is not None
    wd = _dims(w)
    if node.op_type == "Conv":
        return wd[1] if side == "in" else wd[0]
    if node.op_type == "Gemm" and _attr_int(node, "transB", 0):
        wd = wd[::-1]
    return wd[0] if side == "in" else wd[1]


def bounds(c: int, count: int) -> list[tuple[int, int]]:
    """``count`` near-equal channel ranges covering ``[0, c)``."""
    edges = [k * c // count for k in range(count + 1)]
    return [(edges[k], edges[k + 1]) for k in range(count)]


class _Consts:
    """New initializers: lazily computed slices of the original constants."""

    def __init__(self, graph: ir.Graph, name: _Namer) -> None:
        self.graph = graph
        self.name = name
        self.cache: dict[tuple[int, int, int, int], ir.Value] = {}
        self.copies: dict[int, ir.Value] = {}

    def sliced(self, v: ir.Value, axis: int, lo: int, hi: int) -> ir.Value:
        t = const_tensor(v)
        assert t is not None
        key = (id(t), axis, lo, hi)
        out = self.cache.get(key)
        if out is not None:
            return out
        dims = list(_dims(t))
        dims[axis] = hi - lo
        name = self.name(f"{v.name}__ch{lo}_{hi}")
        index = tuple(slice(lo, hi) if a == axis else slice(None) for a in range(len(dims)))

        def compute(t: ir.TensorProtocol = t, index: tuple = index) -> ir.TensorProtocol:
            part = read_slice(t, axis, lo, hi)
            if part is None:
                part = np.ascontiguousarray(np.asarray(t.numpy())[index])
            return ir.Tensor(part)

        lazy = ir.LazyTensor(compute, dtype=t.dtype, shape=ir.Shape(dims), name=name)
        out = ir.Value(name=name, shape=ir.Shape(dims), type=ir.TensorType(t.dtype),
                       const_value=lazy)  # fmt: skip
        self.graph.register_initializer(out)
        self.cache[key] = out
        return out

    def whole(self, v: ir.Value) -> ir.Value:
        """``v`` itself when it is an initializer (defined before any node), else a copy of a
        ``Constant`` node's value as an initializer (the node may sit after the block's start)."""
        if v.is_initializer():
            return v
        out = self.copies.get(id(v))
        if out is None:
            t = const_tensor(v)
            assert t is not None
            name = self.name(f"{v.name}__init")
            out = ir.Value(name=name, shape=ir.Shape(list(_dims(t))), type=ir.TensorType(t.dtype),
                           const_value=ir.Tensor(np.asarray(t.numpy()), name=name))  # fmt: skip
            self.graph.register_initializer(out)
            self.copies[id(v)] = out
        return out


def _declared(
    v: ir.Value, bound: Shape | None, axis: int | None = None, n: int = 0
) -> ir.Shape | None:
    """The shape a slice of ``v`` declares: the bound shape ``bound`` (given when the model's
    inputs are static, as before), else ``v``'s own declared shape (symbolic dims kept) with
    the channel extent ``n`` on ``axis``, or none where ``v`` declares none.

    Why not the bound shape: in a model whose inputs stay symbolic, pieces declared
    ``[8, 256, 512]`` beside ``[batch, seq, 256]`` tensors made the runtimes plan them apart.
    TorchScript 4-block MLPs split x4 (b8x256): ORT CPU run 3 89 -> 87 MiB, the ORT OpenVINO
    EP 129 -> 113 (its session 97 -> 85), OpenVINO 97 -> 102 with the shapes left symbolic
    (docs/estimate.md, "Session 13: split transformer MLPs")."""
    src = bound if bound is not None else v.shape
    if src is None:
        return None
    dims = list(src)
    if axis is not None:
        if not -len(dims) <= axis < len(dims):
            return None
        dims[axis] = n
    return ir.Shape(dims)


def split_block(
    graph: ir.Graph,
    block: Block,
    count: int,
    shapes: dict[str, Shape | None],
    name: _Namer,
    consts: _Consts,
    order: str = SERIAL,
    bound: bool = True,
) -> int:
    """Rewrite ``block`` as ``count`` channel slices whose reduce results are summed; returns
    the number of nodes written. ``bound``: the new values declare the bound ``shapes`` (a
    model with static inputs), else what the originals declare (``_declared``). ``order`` is the file order of the new nodes: ``SERIAL``
    writes the slices one after another, each followed by the Add that accumulates it;
    ``REVERSED`` writes the last slice first and the Adds after all slices. Why both: ORT's
    DEFAULT order is a reverse DFS that runs the highest-index producer of a join first, so
    under ``SERIAL`` it runs every slice before the first Add (BERT b4×512: four 6 MiB
    partial products alive together); under ``REVERSED`` the running sum is the higher-index
    input, so each slice is added before the next starts. Which one ORT runs best depends on
    its fusions' renumbering, so the channel choice predicts both."""
    label = f"channels_{block.label}"
    new: list[ir.Node] = []

    def add_node(op: str, inputs: list[ir.Value | None], outs: list[ir.Value], like: ir.Node | None,
                 k: int | str, attrs: list[ir.Attr] | None = None) -> None:  # fmt: skip
        base = f"{(like.name if like is not None else None) or op}__ch{k}"
        new.append(ir.Node(
            like.domain if like is not None else "", op, inputs,
            attrs if attrs is not None else [], outputs=outs, name=name(base),
            version=like.version if like is not None else None,
            metadata_props={META_KEY: f"{label}/{k}"},
        ))  # fmt: skip

    def attrs_of(node: ir.Node, **repl: int) -> list[ir.Attr]:
        out = [
            ir.Attr(a.name, a.type, a.value) for n_, a in node.attributes.items() if n_ not in repl
        ]
        return out + [ir.AttrInt64(k_, v_) for k_, v_ in repl.items()]

    red_out = block.reduce.outputs[0]
    red_shape = shapes.get(red_out.name or "")
    assert red_shape is not None
    known: dict[ir.Value, ir.TypeProtocol] = {}  # types of the block's undeclared values
    red_type = red_out.type or _type_of(block.reduce.inputs[1], known)
    acc: ir.Value | None = None
    ex = block.expand
    parts: list[list[ir.Node]] = []  # each slice's nodes, and the Adds, for ``order``
    sums: list[ir.Node] = []
    for k, (lo, hi) in enumerate(bounds(block.channels, count)):
        first = len(new)
        local: dict[ir.Value, ir.Value] = {}
        # expand: output-channel rows lo:hi of the weight (and bias)
        h = ex.outputs[0]
        hs = shapes[h.name or ""]
        assert hs is not None
        w_axis = 0 if ex.op_type == "Conv" else (0 if _attr_int(ex, "transB", 0) else 1)
        ins: list[ir.Value | None] = [ex.inputs[0], consts.sliced(ex.inputs[1], w_axis, lo, hi)]  # type: ignore[arg-type]
        if len(ex.inputs) > 2 and ex.inputs[2] is not None:
            b = ex.inputs[2]
            bd = _dims(const_tensor(b))  # type: ignore[arg-type]
            how = (
                0
                if ex.op_type == "Conv"
                else _slice_axis(bd, (hs[0], block.channels), 1, block.channels)
            )
            ins.append(consts.whole(b) if how is None else consts.sliced(b, how, lo, hi))  # type: ignore[arg-type]
        if h.type is None and h not in known:
            known[h] = _out_type(ex, known)  # type: ignore[assignment]
        hk = ir.Value(
            name=name(f"{h.name}__ch{k}"),
            shape=_declared(h, hs if bound else None, block.axes[h], hi - lo),
            type=_type_of(h, known),
        )
        add_node(ex.op_type, ins, [hk], ex, k, attrs_of(ex))
        local[h] = hk
        for node in block.chain:
            ins = []
            for i, v in enumerate(node.inputs):
                if v is None or v in local:
                    ins.append(local[v] if v is not None else None)
                    continue
                how = block.const_axes[(node, i)]
                ins.append(consts.whole(v) if how is None else consts.sliced(v, how, lo, hi))
            y = node.outputs[0]
            ys = shapes[y.name or ""]
            assert ys is not None
            if y.type is None and y not in known:
                known[y] = _out_type(node, known)  # type: ignore[assignment]
            yk = ir.Value(
                name=name(f"{y.name}__ch{k}"),
                shape=_declared(y, ys if bound else None, block.axes[y], hi - lo),
                type=_type_of(y, known),
            )
            repl = {"group": hi - lo} if node.op_type == "Conv" else {}
            add_node(node.op_type, ins, [yk], node, k, attrs_of(node, **repl))
            local[y] = yk
        # reduce: input-channel slice lo:hi of the weight, bias (Conv B / Gemm C) once
        rd = block.reduce
        w = rd.inputs[1]
        assert w is not None
        if rd.op_type == "Conv":
            wa = 1
        elif rd.op_type == "MatMul":
            wa = 0
        else:
            wa = 1 if _attr_int(rd, "transB", 0) else 0
        ins = [local[rd.inputs[0]], consts.sliced(w, wa, lo, hi)]  # type: ignore[index]
        if k == 0 and len(rd.inputs) > 2 and rd.inputs[2] is not None:
            ins.append(consts.whole(rd.inputs[2]))
        part = ir.Value(
            name=name(f"{red_out.name}__ch{k}"),
            shape=_declared(red_out, red_shape if bound else None),
            type=red_type,
        )
        add_node(rd.op_type, ins, [part], rd, k, attrs_of(rd))
        parts.append(new[first:])
        if acc is None:
            acc = part
        else:
            s = ir.Value(
                name=name(f"{red_out.name}__sum{k}"),
                shape=_declared(red_out, red_shape if bound else None),
                type=red_type,
            )
            add_node("Add", [acc, part], [s], None, k)
            sums.append(new[-1])
            acc = s
    assert acc is not None
    if order == REVERSED:
        new = [n for p in reversed(parts) for n in p] + sums
    graph.insert_before(ex, new)
    old = [ex, *block.chain, block.reduce]
    read = {v for n in old for v in n.inputs if v is not None}
    out_name = red_out.name
    red_out.replace_all_uses_with(acc, replace_graph_outputs=True)
    red_out.name = name(f"{out_name}__unsplit")
    acc.name = out_name
    graph.remove(old, safe=True)
    for v in read:
        if v.uses() or v.is_graph_output() or v.is_graph_input():
            continue
        if v.name is not None and v.name in graph.initializers:
            del graph.initializers[v.name]
        prod = v.producer()
        if (
            prod is not None
            and prod.op_type == "Constant"
            and not any(y.uses() for y in prod.outputs)
        ):
            graph.remove(prod, safe=True)
    return len(new)


@dataclass
class SplitStats:
    blocks: int = 0
    nodes_added: int = 0
    hidden_channels: list[int] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)


def split_channels(
    graph: ir.Graph,
    shapes: dict[str, Shape | None],
    count: int,
    min_bytes: int = 0,
    min_slice: int = 8,
    order: str = SERIAL,
) -> SplitStats:
    """Split every block whose largest hidden tensor has at least ``min_bytes`` into ``count``
    channel slices (blocks narrower than ``count * min_slice`` channels are left whole), the
    new nodes written in ``order`` (``split_block``)."""
    st = SplitStats()
    bound = not any(
        not isinstance(d, int)
        for v in graph.inputs
        if v.name not in graph.initializers and v.shape is not None
        for d in v.shape
    )
    name = _Namer(graph)
    consts = _Consts(graph, name)
    for block in find_blocks(graph, shapes):
        if block.hidden_bytes < min_bytes or block.channels < count * min_slice:
            continue
        st.nodes_added += split_block(graph, block, count, shapes, name, consts, order, bound)
        st.blocks += 1
        st.hidden_channels.append(block.channels)
        st.labels.append(block.label)
    return st
