"""Per-operator rules for chunking: where the chunk axis goes, which input rows a chunk needs.

Why per-op rules instead of "trust the op": splitting a tensor into chunks is only exact when
every op in the region computes each output slice from the matching input slice. These rules
state that for each supported op from its type and attributes, and refuse everything else.

Three questions per op:
- ``forward``: given which inputs are chunked (and along which axis), along which axis is each
  output chunked? Raises ``Refuse`` when the op mixes rows along that axis (a reduction, a
  softmax or a contraction over it, a Shape read, ...).
- ``need``: to produce rows ``[o0, o1)`` of the output, which rows of each chunked input are
  needed? Identity for row-wise ops, proportional for reshapes that merge/split the axis, and
  the receptive field (the *halo*) for convolutions and pools along a spatial axis. The result
  is unclipped: rows outside ``[0, extent)`` stand for the op's own border padding.
- ``emit``: the attributes and constant inputs of the chunk's copy of the node: border pads
  only where the chunk touches the real border (an interior border must see real rows, never
  zeros), Reshape/Expand targets with the chunk's extent, and a crop for ConvTranspose.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from memshrink.transforms.chunking import resize

Range = tuple[int, int]
Shape = tuple[int, ...]


class Refuse(Exception):
    """The op cannot be chunked along this axis; the message says why."""


@dataclass
class NodeFacts:
    """What a rule may read about one node: concrete shapes and constant integer inputs."""

    node: ir.Node
    in_shapes: list[Shape | None]
    out_shapes: list[Shape | None]
    opset: int

    def attr(self, name: str, default: Any = None) -> Any:
        a = self.node.attributes.get(name)
        return default if a is None else a.value

    def const_ints(self, index: int) -> list[int] | None:
        """Small integer constant input (initializer or Constant node), else None."""
        if index >= len(self.node.inputs):
            return None
        v = self.node.inputs[index]
        if v is None:
            return None
        return const_ints(v)


def const_ints(v: ir.Value) -> list[int] | None:
    t = v.const_value
    if t is None:
        prod = v.producer()
        if prod is not None and prod.op_type == "Constant" and prod.domain in ("", "ai.onnx"):
            a = prod.attributes.get("value")
            t = a.value if a is not None else None
            if t is None:
                ints = prod.attributes.get("value_ints")
                if ints is not None:
                    return [int(x) for x in ints.value]
                one = prod.attributes.get("value_int")
                return [int(one.value)] if one is not None else None
    if t is None or t.dtype not in (ir.DataType.INT64, ir.DataType.INT32):
        return None
    if t.size > 4096:
        return None
    return [int(x) for x in np.asarray(t.numpy()).reshape(-1)]


@dataclass
class Emit:
    """How the chunk's copy of a node differs from the original."""

    attrs: dict[str, ir.Attr] = field(default_factory=dict)
    const_inputs: dict[int, np.ndarray] = field(default_factory=dict)
    crop: Range | None = None  # slice the (single) output to these local rows afterwards
    raw_extent: int | None = None  # the output's rows before that crop


# --------------------------------------------------------------------------- op sets

UNARY = {
    "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Erf",
    "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Not", "Cast", "Identity", "Clip", "Elu",
    "Selu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Gelu", "Mish", "Sin", "Cos",
    "IsNaN", "IsInf", "ThresholdedRelu", "Celu", "Dropout",
}  # fmt: skip
BROADCAST = {
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where", "Equal", "Less",
    "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "PRelu", "Mod",
} | UNARY  # fmt: skip
WINDOWED = {"Conv", "MaxPool", "AveragePool", "LpPool"}
PER_SAMPLE = {
    "GlobalAveragePool", "GlobalMaxPool", "InstanceNormalization", "DepthToSpace",
    "SpaceToDepth",
}  # fmt: skip
RESHAPES = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}
RECURRENT = {"LSTM", "GRU", "RNN"}
#: Set by the chunk pass: recurrent ops join a region only when the user deploys on ORT CPU
#: (``optimize --backend ort``). OpenVINO and its EP compile each chunk's recurrence, a cost
#: their estimates do not model (docs/chunk.md, "Recurrent ops along the batch": an LSTM
#: stack split x16 raised OpenVINO's compile 46.5 -> 66.5 MiB over main's ``all``).
RECURRENT_OK: ContextVar[bool] = ContextVar("chunk_recurrent_ok", default=False)
REDUCE = {
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
}  # fmt: skip
REDUCE_AXES_AS_INPUT = {"ReduceSum": 13}  # the rest moved axes to an input at opset 18

SUPPORTED = (
    BROADCAST
    | WINDOWED
    | PER_SAMPLE
    | RESHAPES
    | REDUCE
    | RECURRENT
    | {
        "ConvTranspose", "BatchNormalization", "LRN", "Softmax", "LogSoftmax", "Hardmax",
        "LayerNormalization", "MatMul", "Gemm", "Transpose", "Concat", "Split", "Slice",
        "Gather", "Expand", "Pad", "Tile", "Resize", "Einsum",
    }
)  # fmt: skip


def _norm(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _used_outputs(node: ir.Node) -> list[int]:
    return [i for i, v in enumerate(node.outputs) if v.uses() or v.is_graph_output()]


# --------------------------------------------------------------------------- forward


def forward(f: NodeFacts, in_axes: Sequence[int | None]) -> tuple[list[int], dict[int, int]]:
    """Output axes of a node whose inputs are chunked along ``in_axes`` (None: not chunked).

    Returns ``(out_axes, sliced)``: ``sliced`` maps indices of *unchunked* inputs that carry
    the full axis (so each chunk must read a slice of them) to the axis to slice.
    """
    op = f.node.op_type
    if f.node.domain not in ("", "ai.onnx"):
        raise Refuse(f"{op} is in domain {f.node.domain!r}")
    if op not in SUPPORTED:
        raise Refuse(f"{op} is not known to be row-independent")
    # an unnamed output is one the node was asked not to write (LSTM's Y_c left out)
    if any(f.out_shapes[i] is None for i, v in enumerate(f.node.outputs) if v.name) or any(
        v is not None and s is None for v, s in zip(f.node.inputs, f.in_shapes, strict=False)
    ):
        raise Refuse(f"{op} has a tensor of unknown shape")
    if any(a.type == ir.AttributeType.GRAPH for a in f.node.attributes.values()):
        raise Refuse(f"{op} has a subgraph")
    extra = [i for i in range(1, len(f.node.outputs)) if i in _used_outputs(f.node)]
    if extra and op not in ("Split", *RECURRENT):
        raise Refuse(f"{op}'s secondary output is used")
    handler = _FORWARD.get(op)
    if handler is None:
        handler = _fwd_broadcast if op in BROADCAST else _fwd_per_sample
    out, sliced = handler(f, list(in_axes))
    return out, sliced


def _out_rank(f: NodeFacts, i: int = 0) -> int:
    s = f.out_shapes[i]
    assert s is not None
    return len(s)


def _fwd_broadcast(f: NodeFacts, axes: list[int | None]) -> tuple[list[int], dict[int, int]]:
    out_shape = f.out_shapes[0]
    assert out_shape is not None
    r = len(out_shape)
    oa: int | None = None
    for i, a in enumerate(axes):
        if a is None:
            continue
        s = f.in_shapes[i]
        assert s is not None
        cand = a + r - len(s)
        if s[a] != out_shape[cand]:
            raise Refuse(f"{f.node.op_type} broadcasts the chunked axis")
        if oa is not None and cand != oa:
            raise Refuse(f"{f.node.op_type} inputs are chunked along different axes")
        oa = cand
    assert oa is not None
    sliced: dict[int, int] = {}
    for i, a in enumerate(axes):
        v = f.node.inputs[i]
        if a is not None or v is None:
            continue
        s = f.in_shapes[i]
        assert s is not None
        ia = oa - (r - len(s))
        if ia < 0 or s[ia] == 1:
            continue
        sliced[i] = ia
    return [oa] * len(f.node.outputs), sliced


def _only_first(f: NodeFacts, axes: list[int | None]) -> int:
    if any(a is not None for a in axes[1:]):
        raise Refuse(f"{f.node.op_type}: only its data input may be chunked")
    a = axes[0]
    if a is None:
        raise Refuse(f"{f.node.op_type}: data input not chunked")
    return a


def _fwd_per_sample(f: NodeFacts, axes: list[int | None]) -> tuple[list[int], dict[int, int]]:
    a = _only_first(f, axes)
    if a != 0:
        raise Refuse(f"{f.node.op_type} mixes rows along axis {a}")
    return [0] * len(f.node.outputs), {}


def _fwd_windowed(f: NodeFacts, axes: list[int | None]) -> tuple[list[int], dict[int, int]]:
    a = _only_first(f, axes)
    if a == 1:
        raise Refuse(f"{f.node.op_type} mixes channels")
    if a >= 2:
        _window(f, a)  # validates attributes
    return [a], {}


def _fwd_rowwise(f: NodeFacts, axes: list[int | None]) -> tuple[list[int], dict[int, int]]:
    """BatchNormalization (inference), LRN: per-position along every axis but channels."""
    a = _only_first(f, axes)
    if a == 1:
        raise Refuse(f"{f.node.op_type} is per channel")
    if f.node.op_type == "BatchNormalization" and f.attr("training_mode", 0):
        raise Refuse("BatchNormalization in training mode")
    return [a], {}


def _fwd_softmax(f: NodeFacts, axes: list[int | None]) -> tuple[list[int], dict[int, int]]:
    a = _only_first(f, axes)
    r = _out_rank(f)
    default = -1 if f.opset >= 13 else 1
    ax = _norm(int(f.attr("axis", default)), r)
    if f.opset >= 13 and a == ax or f.opset < 13 and a >= ax:
        raise Refuse(f"{f.node.op_type} normalizes over the chunked axis")
    return [a], {}


def _fwd_layernorm(f: NodeFacts, axes: list[int | None]) -> tuple[list[int], dict[int, int]]:
    a = _only_first(f, axes)
    ax = _norm(int(f.attr("axis", -1)), _out_rank(f))
    if a >= ax:
        raise Refuse("LayerNormalization normalizes over the chunked axis")
    return [a] * len(f.node.outputs), {}


def _reduce_axes(f: NodeFacts) -> list[int] | None:
    op = f.node.op_type
    as_input = f.opset >= REDUCE_AXES_AS_INPUT.get(op, 18)
    s = f.in_shapes[0]
    assert s is not None
    if as_input:
        if len(f.node.inputs) < 2 or f.node.inputs[1] is None:
            axes: list[int] | None = []
        else:
            axes = f.const_ints(1)
            if axes is None:
                raise Refuse(f"{op} axes are not constant")
    else:
        a = f.attr("axes")
        axes = list(a) if a is not None else []
    if not axes:
        if f.attr("noop_with_empty_axes", 0):
            return None
        return list(range(len(s)))
    return sorted(_norm(int(x), len(s)) for x in axes)


def _fwd_reduce(f: NodeFacts, axes: list[int | None]) -> tuple[list[int], dict[int, int]]:
    a = _only_first(f, axes)
    red = _reduce_axes(f)
    if red is None:
        return [a], {}
    if a in red:
        raise Refuse(f"{f.node.op_type} reduces over the chunked axis")
    keep = int(f.attr("keepdims", 1))
    return [a if keep else a - sum(1 for x in red if x < a)], {}


def _fwd_matmul(f: NodeFacts, axes: list[int | None]) -> tuple[list[int], dict[int, int]]:
    sa, sb = f.in_shapes[0], f.in_shapes[1]
    assert sa is not None and sb is not None
    if len(sa) < 2 or len(sb) < 2:
        raise Refuse("MatMul with a 1-D operand")
    r = _out_rank(f)
    outs: set[int] = set()
    aa, ab = axes[0], axes[1]
    if aa is not None:
        if aa == len(sa) - 1:
            raise Refuse("MatMul contracts the chunked axis")
        outs.add(r - 2 if aa == len(sa) - 2 else aa + r - len(sa))
    if ab is not None:
        if ab == len(sb) - 2:
            raise Refuse("MatMul contracts the chunked axis")
        outs.add(r - 1 if ab == len(sb) - 1 else ab + r - len(sb))
    if len(outs) != 1:
        raise Refuse("MatMul operands chunked along different axes")
    oa = outs.pop()
    sliced: dict[int, int] = {}
    if oa < r - 2:  # a batch axis: the unchunked operand broadcasts or must be sliced too
        for i, s in ((0, sa), (1, sb)):
            if axes[i] is None:
                ia = oa - (r - len(s))
                if ia >= 0 and s[ia] != 1:
                    sliced[i] = ia
    elif aa is not None and ab is not None:
        raise Refuse("MatMul operands chunked along rows and columns")
    return [oa], sliced


def _fwd_gemm(f: NodeFacts, axes: list[int | None]) -> tuple[list[int], dict[int, int]]:
    if axes[1] is not None or (len(axes) > 2 and axes[2] is not None):
        raise Refuse("Gemm: only A may be chunked")
    a = axes[0]
    if a != (1 if f.attr("transA", 0) else 0):
        raise Refuse("Gemm contracts the chunked axis")
    sliced: dict[int, int] = {}
    if len(f.node.inputs) > 2 and f.node.inputs[2] is not None:
        sc = f.in_shapes[2]
        assert sc is not None
        if len(sc) == 2 and sc[0] != 1:
            sliced[2] = 0
    return [0], sliced


def _fwd_recurrent(f: NodeFacts, axes: list[int | None]) -> tuple[list[int], dict[int, int]]:
    """LSTM / GRU / RNN along the batch: a sequence's recurrence reads only its own rows of X,
    ``sequence_lens`` (input 4), ``initial_h`` (5) and ``initial_c`` (6), whatever the
    direction; Y carries the batch on another axis than Y_h / Y_c."""
    op = f.node.op_type
    if not RECURRENT_OK.get():
        raise Refuse(f"{op} is split only when deploying on ORT CPU (optimize --backend ort)")
    batch_major = bool(f.attr("layout", 0))
    bx = 0 if batch_major else 1  # X: [seq, batch, in] (layout 0) or [batch, seq, in]
    bs = 0 if batch_major else 1  # initial_h / Y_h: [dirs, batch, hidden] or [batch, dirs, ...]
    by = 0 if batch_major else 2  # Y: [seq, dirs, batch, hidden] or [batch, seq, dirs, hidden]
    if axes[0] != bx:
        raise Refuse(f"{op} runs its recurrence along axis {axes[0]} of X")
    state = {4: 0, 5: bs, 6: bs}
    for i, a in enumerate(axes[1:], 1):
        if a is not None and state.get(i) != a:
            raise Refuse(f"{op}: input {i} chunked along axis {a}")
    sliced = {
        i: ax
        for i, ax in state.items()
        if i < len(f.node.inputs) and f.node.inputs[i] is not None and axes[i] is None
    }
    return [by if i == 0 else bs for i in range(len(f.node.outputs))], sliced


def _fwd_transpose(f: NodeFacts, axes: list[int | None]) -> tuple[list[int], dict[int, int]]:
    a = _only_first(f, axes)
    r = _out_rank(f)
    perm = f.attr("perm")
    perm = list(perm) if perm is not None else list(reversed(range(r)))
    return [perm.index(a)], {}


def reshape_axis(si: Shape, so: Shape, a: int) -> int:
    """Where axis ``a`` of ``si`` lands in ``so`` for a row-major reshape, keeping chunks whole.

    The chunk axis survives a reshape when the product of the dims before it is unchanged;
    it may be merged with (or split from) the dims after it (then chunk rows scale).
    """
    pre = int(np.prod(si[:a], dtype=np.int64))
    acc = 1
    for b, d in enumerate(so):
        if acc == pre and d > 1:
            big, small = max(d, si[a]), min(d, si[a])
            if big % small == 0:
                return b
            break
        acc *= d
        if acc > pre:
            break
    raise Refuse("reshape moves the chunked axis across others")


def _fwd_reshape(f: NodeFacts, axes: list[int | None]) -> tuple[list[int], dict[int, int]]:
    a = _only_first(f, axes)
    si, so = f.in_shapes[0], f.out_shapes[0]
    assert si is not None and so is not None
    if 0 in si:
        raise Refuse("reshape of an empty tensor")
    return [reshape_axis(si, so, a)], {}


def _fwd_concat(f: NodeFacts, axes: list[int | None]) -> tuple[list[int], dict[int, int]]:
    r = _out_rank(f)
    c = _norm(int(f.attr("axis", 0)), r)
    chunked = {a for a in axes if a is not None}
    if len(chunked) != 1:
        raise Refuse("Concat inputs chunked along different axes")
    a = chunked.pop()
    if a == c:
        raise Refuse("Concat along the chunked axis")
    out = f.out_shapes[0]
    assert out is not None
    sliced = {}
    for i, ax in enumerate(axes):
        if ax is None:
            s = f.in_shapes[i]
            assert s is not None
            if s[a] != out[a]:
                raise Refuse("Concat of a broadcast input")
            sliced[i] = a
    return [a], sliced


def _fwd_split(f: NodeFacts, axes: list[int | None]) -> tuple[list[int], dict[int, int]]:
    a = _only_first(f, axes)
    s = f.in_shapes[0]
    assert s is not None
    if _norm(int(f.attr("axis", 0)), len(s)) == a:
        raise Refuse("Split along the chunked axis")
    return [a] * len(f.node.outputs), {}


def _fwd_slice(f: NodeFacts, axes: list[int | None]) -> tuple[list[int], dict[int, int]]:
    a = _only_first(f, axes)
    si, so = f.in_shapes[0], f.out_shapes[0]
    assert si is not None and so is not None
    if f.opset < 10:
        raise Refuse("Slice with attributes (opset < 10)")
    for i in range(1, len(f.node.inputs)):
        if f.node.inputs[i] is not None and f.const_ints(i) is None:
            raise Refuse("Slice parameters are not constant")
    if si[a] != so[a]:
        raise Refuse("Slice along the chunked axis")
    sl_axes = f.const_ints(3) if len(f.node.inputs) > 3 and f.node.inputs[3] is not None else None
    sl_axes = [_norm(x, len(si)) for x in (sl_axes or range(len(f.const_ints(1) or [])))]
    if a in sl_axes:
        k = sl_axes.index(a)
        starts, steps = f.const_ints(1) or [], f.const_ints(4) if len(f.node.inputs) > 4 else None
        if starts[k] != 0 or (steps and steps[k] != 1):
            raise Refuse("Slice along the chunked axis")
    return [a], {}


def _fwd_gather(f: NodeFacts, axes: list[int | None]) -> tuple[list[int], dict[int, int]]:
    sd, si = f.in_shapes[0], f.in_shapes[1]
    assert sd is not None and si is not None
    g = _norm(int(f.attr("axis", 0)), len(sd))
    ad, ai = axes[0], axes[1]
    if ad is not None and ai is not None:
        raise Refuse("Gather with both data and indices chunked")
    if ai is not None:
        return [g + ai], {}
    assert ad is not None
    if ad == g:
        raise Refuse("Gather along the chunked axis")
    return [ad if ad < g else ad + len(si) - 1], {}


def _fwd_expand(f: NodeFacts, axes: list[int | None]) -> tuple[list[int], dict[int, int]]:
    a = _only_first(f, axes)
    si, so = f.in_shapes[0], f.out_shapes[0]
    assert si is not None and so is not None
    oa = a + len(so) - len(si)
    if so[oa] != si[a]:
        raise Refuse("Expand broadcasts the chunked axis")
    return [oa], {}


def _fwd_pad(f: NodeFacts, axes: list[int | None]) -> tuple[list[int], dict[int, int]]:
    a = _only_first(f, axes)
    si, so = f.in_shapes[0], f.out_shapes[0]
    assert si is not None and so is not None
    if si[a] != so[a]:
        raise Refuse(f"{f.node.op_type} changes the chunked axis")
    if f.node.op_type == "Pad":
        mode = f.attr("mode", "constant")
        if mode != "constant":
            raise Refuse(f"Pad mode {mode}")
        pads = f.const_ints(1) if len(f.node.inputs) > 1 else None
        if pads is None:
            raise Refuse("Pad amounts are not constant")
        if len(f.node.inputs) > 3 and f.node.inputs[3] is not None:
            raise Refuse("Pad with axes")
        if pads[a] or pads[a + len(si)]:
            raise Refuse("Pad along the chunked axis")
    return [a], {}


def _fwd_convtranspose(f: NodeFacts, axes: list[int | None]) -> tuple[list[int], dict[int, int]]:
    a = _only_first(f, axes)
    if a == 1:
        raise Refuse("ConvTranspose mixes channels")
    if a >= 2:
        _tr_window(f, a)
    return [a], {}


def einsum_terms(f: NodeFacts) -> tuple[list[str], str]:
    """(input terms, output term) of an explicit Einsum equation without ellipsis."""
    eq = f.attr("equation", "")
    eq = (eq.decode() if isinstance(eq, bytes) else str(eq)).replace(" ", "")
    if "->" not in eq or "..." in eq:
        raise Refuse("Einsum without an explicit output or with an ellipsis")
    lhs, out = eq.split("->")
    terms = lhs.split(",")
    if len(terms) != len(f.node.inputs) or any(len(set(t)) != len(t) for t in terms):
        raise Refuse("Einsum with a repeated index (a diagonal)")
    return terms, out


def _fwd_einsum(f: NodeFacts, axes: list[int | None]) -> tuple[list[int], dict[int, int]]:
    """Einsum: a chunked index that reaches the output is a free index, row-independent;
    every other operand carrying that index is sliced along it (SAM's decomposed relative
    positions, ``bhwc,hkc->bhwk``); a contracted chunked index is refused."""
    terms, out = einsum_terms(f)
    letters = {terms[i][a] for i, a in enumerate(axes) if a is not None}
    if len(letters) != 1:
        raise Refuse("Einsum inputs chunked along different indices")
    letter = letters.pop()
    if letter not in out:
        raise Refuse("Einsum contracts the chunked index")
    oa = out.index(letter)
    so = f.out_shapes[0]
    assert so is not None
    sliced: dict[int, int] = {}
    for i, a in enumerate(axes):
        if a is None and letter in terms[i]:
            s = f.in_shapes[i]
            assert s is not None
            j = terms[i].index(letter)
            if s[j] != 1:
                sliced[i] = j
        elif a is not None:
            s = f.in_shapes[i]
            assert s is not None
            if s[a] != so[oa]:
                raise Refuse("Einsum broadcasts the chunked index")
    return [oa], sliced


_FORWARD: dict[str, Any] = {
    **{op: _fwd_windowed for op in WINDOWED},
    **{op: _fwd_reshape for op in RESHAPES},
    **{op: _fwd_reduce for op in REDUCE},
    "ConvTranspose": _fwd_convtranspose,
    "BatchNormalization": _fwd_rowwise,
    "LRN": _fwd_rowwise,
    "Softmax": _fwd_softmax,
    "LogSoftmax": _fwd_softmax,
    "Hardmax": _fwd_softmax,
    "LayerNormalization": _fwd_layernorm,
    "MatMul": _fwd_matmul,
    "Gemm": _fwd_gemm,
    "Transpose": _fwd_transpose,
    "Concat": _fwd_concat,
    "Split": _fwd_split,
    "Slice": _fwd_slice,
    "Gather": _fwd_gather,
    "Expand": _fwd_expand,
    "Pad": _fwd_pad,
    "Tile": _fwd_pad,
    "Resize": resize.forward,
    "Einsum": _fwd_einsum,
    **{op: _fwd_recurrent for op in RECURRENT},
}


# --------------------------------------------------------------------------- windows


@dataclass
class Window:
    """One spatial axis of a convolution or pool: kernel, stride, dilation, border pads."""

    j: int  # spatial index (axis - 2)
    k: int
    s: int
    d: int
    pb: int
    pe: int
    pads: list[int]  # explicit pads for every spatial axis (auto_pad resolved)

    @property
    def ek(self) -> int:
        return (self.k - 1) * self.d + 1


def _kernel(f: NodeFacts) -> list[int]:
    ks = f.attr("kernel_shape")
    if ks is not None:
        return [int(x) for x in ks]
    w = f.in_shapes[1] if len(f.in_shapes) > 1 else None
    if w is None:
        raise Refuse(f"{f.node.op_type} kernel shape unknown")
    return list(w[2:])


def _window(f: NodeFacts, axis: int) -> Window:
    si, so = f.in_shapes[0], f.out_shapes[0]
    assert si is not None and so is not None
    n = len(si) - 2
    ks = _kernel(f)
    st = [int(x) for x in (f.attr("strides") or [1] * n)]
    dl = [int(x) for x in (f.attr("dilations") or [1] * n)]
    auto = f.attr("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    if auto in ("NOTSET", ""):
        pads = [int(x) for x in (f.attr("pads") or [0] * (2 * n))]
    elif auto == "VALID":
        pads = [0] * (2 * n)
    else:
        pads = [0] * (2 * n)
        for j in range(n):
            total = max(0, (so[j + 2] - 1) * st[j] + (ks[j] - 1) * dl[j] + 1 - si[j + 2])
            small, big = total // 2, total - total // 2
            pads[j], pads[j + n] = (small, big) if auto == "SAME_UPPER" else (big, small)
    j = axis - 2
    win = Window(j, ks[j], st[j], dl[j], pads[j], pads[j + n], pads)
    floor_len = (si[axis] + win.pb + win.pe - win.ek) // win.s + 1
    if floor_len != so[axis]:
        raise Refuse(f"{f.node.op_type} output size not the floor formula (ceil_mode?)")
    return win


def _tr_window(f: NodeFacts, axis: int) -> Window:
    si, so = f.in_shapes[0], f.out_shapes[0]
    assert si is not None and so is not None
    n = len(si) - 2
    j = axis - 2
    if f.attr("output_shape") is not None:
        raise Refuse("ConvTranspose with output_shape")
    auto = f.attr("auto_pad", "NOTSET")
    if auto not in ("NOTSET", "", b"NOTSET"):
        raise Refuse("ConvTranspose with auto_pad")
    opad = [int(x) for x in (f.attr("output_padding") or [0] * n)]
    if opad[j]:
        raise Refuse("ConvTranspose with output_padding on the chunked axis")
    ks = _kernel(f)
    st = [int(x) for x in (f.attr("strides") or [1] * n)]
    dl = [int(x) for x in (f.attr("dilations") or [1] * n)]
    pads = [int(x) for x in (f.attr("pads") or [0] * (2 * n))]
    win = Window(j, ks[j], st[j], dl[j], pads[j], pads[j + n], pads)
    if win.ek < win.s:
        raise Refuse("ConvTranspose kernel smaller than its stride")
    if (si[axis] - 1) * win.s + win.ek - win.pb - win.pe != so[axis]:
        raise Refuse("ConvTranspose output size not understood")
    return win


# --------------------------------------------------------------------------- need / emit


def need(
    f: NodeFacts, in_axes: Sequence[int | None], out_axis: int, out_range: Range
) -> list[Range | None]:
    """Unclipped input rows each chunked input needs for output rows ``out_range``."""
    op = f.node.op_type
    o0, o1 = out_range
    so = f.out_shapes[0]
    assert so is not None
    res: list[Range | None] = []
    for i, a in enumerate(in_axes):
        if a is None:
            res.append(None)
            continue
        si = f.in_shapes[i]
        assert si is not None
        if op in WINDOWED and a >= 2:
            w = _window(f, a)
            res.append((o0 * w.s - w.pb, (o1 - 1) * w.s - w.pb + w.ek))
        elif op == "ConvTranspose" and a >= 2:
            w = _tr_window(f, a)
            i0 = -((-(o0 + w.pb - w.ek + 1)) // w.s)
            i1 = (o1 - 1 + w.pb) // w.s + 1
            res.append((i0, i1))
        elif op == "Resize":
            res.append(resize.need(f, a, out_range))
        else:  # row-wise: proportional (identity unless a reshape merges or splits the axis)
            ei, eo = si[a], so[out_axis]
            if (o0 * ei) % eo or (o1 * ei) % eo:
                raise Refuse(f"{op}: chunk boundary falls inside a merged row")
            res.append((o0 * ei // eo, o1 * ei // eo))
    return res


def _ints_attr(name: str, values: Sequence[int]) -> ir.Attr:
    return ir.Attr(name, ir.AttributeType.INTS, [int(v) for v in values])


def emit(
    f: NodeFacts,
    in_axes: Sequence[int | None],
    out_axis: int,
    out_range: Range,
    needs: Sequence[Range | None],
    clipped: Sequence[Range | None],
) -> Emit:
    """Attribute / constant changes for the chunk's copy producing ``out_range``."""
    op = f.node.op_type
    e = Emit()
    a = in_axes[0]
    so = f.out_shapes[0]
    assert so is not None
    if op in WINDOWED and a is not None and a >= 2:
        w = _window(f, a)
        n0, n1 = needs[0]  # type: ignore[misc]
        c0, c1 = clipped[0]  # type: ignore[misc]
        pads = list(w.pads)
        n = len(pads) // 2
        pads[w.j], pads[w.j + n] = c0 - n0, n1 - c1
        e.attrs["pads"] = _ints_attr("pads", pads)
        e.attrs["auto_pad"] = ir.Attr("auto_pad", ir.AttributeType.STRING, "NOTSET")
        if op in ("MaxPool", "AveragePool"):
            e.attrs["ceil_mode"] = ir.Attr("ceil_mode", ir.AttributeType.INT, 0)
    elif op == "ConvTranspose" and a is not None and a >= 2:
        w = _tr_window(f, a)
        c0, c1 = clipped[0]  # type: ignore[misc]
        pads = list(w.pads)
        n = len(pads) // 2
        pads[w.j], pads[w.j + n] = 0, 0
        e.attrs["pads"] = _ints_attr("pads", pads)
        start = c0 * w.s - w.pb  # global row of the band's first local output row
        length = (c1 - c0 - 1) * w.s + w.ek
        lo, hi = out_range[0] - start, out_range[1] - start
        if lo < 0 or hi > length:
            raise Refuse("ConvTranspose band does not cover its output rows")
        if (lo, hi) != (0, length):
            e.crop = (lo, hi)
            e.raw_extent = length
    elif op == "Resize" and a is not None:
        resize.emit(f, a, out_range, clipped[0], e)  # type: ignore[arg-type]
    elif op == "Reshape" or op == "Expand":
        shape = list(so)
        shape[out_axis] = out_range[1] - out_range[0]
        e.const_inputs[1] = np.asarray(shape, dtype=np.int64)
    return e


def flops(op: str, in_shapes: Sequence[Shape | None], out_shape: Shape | None, attrs: Any) -> int:
    """Rough multiply-add count (x2) of one node; element count for everything else."""
    if out_shape is None:
        return 0
    out = int(np.prod(out_shape, dtype=np.int64))
    w = in_shapes[1] if len(in_shapes) > 1 else None
    if op == "Conv" and w is not None:
        return 2 * out * int(np.prod(w[1:], dtype=np.int64))
    if op == "ConvTranspose" and w is not None and in_shapes[0] is not None:
        return 2 * int(np.prod(in_shapes[0], dtype=np.int64)) * int(np.prod(w[1:], dtype=np.int64))
    if op in ("MatMul", "Gemm") and in_shapes[0] is not None:
        a = in_shapes[0]
        kdim = a[0] if op == "Gemm" and attrs.get("transA", 0) else a[-1]
        return 2 * out * int(kdim)
    if op in ("MaxPool", "AveragePool", "LpPool"):
        ks = attrs.get("kernel_shape") or [1]
        return out * int(np.prod(ks, dtype=np.int64))
    return out
