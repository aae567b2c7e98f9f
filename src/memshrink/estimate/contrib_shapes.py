"""Output shapes and dtypes of ONNX Runtime's contrib ops, which ONNX's shape inference cannot type.

ONNX's inference knows no ``com.microsoft`` op (and no ``LayerNormalization`` below opset 17,
which ORT registers in the default domain from opset 1), so every tensor after the first
``FusedMatMul`` / ``SkipLayerNormalization`` / ``MatMulNBits`` stayed unknown, and ORT's symbolic
tool, the fallback, gives up on the whole graph at the first op it has no handler for
(``FusedMatMul``): the estimate of an ORT-optimized or 4-bit BERT then held only the part
before it (ORT CPU run/steady −40…−52 %, session 15). Each rule here is the op's documented
semantics (ORT ``docs/ContribOperators.md``; the same as ORT's own inference functions in
``contrib_defs.cc``): an output's shape from its inputs' shapes and attributes, symbolic dims
passed through. A rule that cannot tell (an unknown input rank, ``transBatchA``) gives
nothing and the tensor stays unknown, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import onnx

Dim = int | str | None
Shape = tuple[Dim, ...]
Typed = tuple[int, Shape]  # (elem_type, shape)
_FLOAT = onnx.TensorProto.FLOAT
_DOUBLE = onnx.TensorProto.DOUBLE
_MS = "com.microsoft"
_DEFAULT = ("", "ai.onnx")


def _attr(node: onnx.NodeProto, name: str, default: object) -> object:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _bcast(a: Dim, b: Dim) -> Dim:
    """One broadcast dim; None when the two can't be told apart without values."""
    if a == b:
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    return None


def _matmul(a: Shape, b: Shape) -> Shape | None:
    """numpy ``matmul``'s result shape (the 1-D cases drop their dim)."""
    if not a or not b:
        return None
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    ba, bb = a2[:-2], b2[:-2]
    n = max(len(ba), len(bb))
    ba = (1,) * (n - len(ba)) + ba
    bb = (1,) * (n - len(bb)) + bb
    out = [_bcast(x, y) for x, y in zip(ba, bb, strict=True)]
    if len(a) > 1:
        out.append(a2[-2])
    if len(b) > 1:
        out.append(b2[-1])
    return tuple(out)


def _swap_last(s: Shape) -> Shape:
    return (*s[:-2], s[-1], s[-2]) if len(s) >= 2 else s


def _stats(x: Shape, axis: int, et: int) -> Typed:
    """LayerNorm's saved mean / inverse std: ``x``'s dims before ``axis``, 1 after; float
    (double for double input), as ``stash_type`` / ORT's ``U``."""
    ax = axis + len(x) if axis < 0 else axis
    return (_DOUBLE if et == _DOUBLE else _FLOAT, (*x[:ax], *(1,) * (len(x) - ax)))


Rule = Callable[[onnx.NodeProto, Sequence[Typed | None]], list[Typed | None]]


def _same(node: onnx.NodeProto, ins: Sequence[Typed | None]) -> list[Typed | None]:
    """BiasGelu, FastGelu, Gelu, QuickGelu, BiasAdd: element-wise on input 0."""
    return [ins[0]]


def _layer_norm(node: onnx.NodeProto, ins: Sequence[Typed | None]) -> list[Typed | None]:
    """LayerNormalization (ORT's below opset 17) / SimplifiedLayerNormalization: Y like X,
    then the statistics over the axes from ``axis`` on."""
    x = ins[0]
    if x is None:
        return []
    st = _stats(x[1], int(_attr(node, "axis", -1)), x[0])  # type: ignore[call-overload]
    return [x, st, st]


def _skip_layer_norm(node: onnx.NodeProto, ins: Sequence[Typed | None]) -> list[Typed | None]:
    """Skip(Simplified)LayerNormalization: output, mean, inv_std_var (last axis),
    input_skip_bias_sum (like input)."""
    x = ins[0]
    if x is None:
        return []
    st = _stats(x[1], -1, x[0])
    return [x, st, st, x]


def _fused_matmul(node: onnx.NodeProto, ins: Sequence[Typed | None]) -> list[Typed | None]:
    """FusedMatMul: ``alpha * op(A) @ op(B)``; transBatch* (a batch-dims permutation) is left
    unknown."""
    a, b = ins[0], ins[1] if len(ins) > 1 else None
    if a is None or b is None or _attr(node, "transBatchA", 0) or _attr(node, "transBatchB", 0):
        return []
    sa = _swap_last(a[1]) if _attr(node, "transA", 0) else a[1]
    sb = _swap_last(b[1]) if _attr(node, "transB", 0) else b[1]
    out = _matmul(sa, sb)
    return [(a[0], out)] if out is not None else []


def _fused_gemm(node: onnx.NodeProto, ins: Sequence[Typed | None]) -> list[Typed | None]:
    """FusedGemm: Gemm (2-D, transA / transB) with an activation."""
    a, b = ins[0], ins[1] if len(ins) > 1 else None
    if a is None or b is None or len(a[1]) != 2 or len(b[1]) != 2:
        return []
    m = a[1][1] if _attr(node, "transA", 0) else a[1][0]
    n = b[1][0] if _attr(node, "transB", 0) else b[1][1]
    return [(a[0], (m, n))]


def _to_float_matmul(node: onnx.NodeProto, ins: Sequence[Typed | None]) -> list[Typed | None]:
    """DynamicQuantizeMatMul / MatMulIntegerToFloat: integer MatMul, float result (the
    scales' type)."""
    a, b = ins[0], ins[1] if len(ins) > 1 else None
    if a is None or b is None:
        return []
    out = _matmul(a[1], b[1])
    scale = ins[2] if len(ins) > 2 else None
    return [(scale[0] if scale else _FLOAT, out)] if out is not None else []


def _matmul_nbits(node: onnx.NodeProto, ins: Sequence[Typed | None]) -> list[Typed | None]:
    """MatMulNBits: A [..., K] times the packed [K, N] weight -> A's dims but the last, N."""
    a = ins[0]
    n = _attr(node, "N", None)
    if a is None or not a[1] or n is None:
        return []
    return [(a[0], (*a[1][:-1], int(n)))]  # type: ignore[call-overload]


def _attention(node: onnx.NodeProto, ins: Sequence[Typed | None]) -> list[Typed | None]:
    """Attention: input [B, S, H_in], weights [H_in, Hq + Hk + Hv] -> output [B, S, Hv]
    (``qkv_hidden_sizes`` or thirds); present [2, B, heads, P + S, Hk / heads] when the past
    length is known (or no past)."""
    x, w = ins[0], ins[1] if len(ins) > 1 else None
    if x is None or w is None or len(x[1]) != 3 or len(w[1]) != 2:
        return []
    sizes = list(_attr(node, "qkv_hidden_sizes", []) or [])  # type: ignore[call-overload]
    if sizes:
        hk, hv = int(sizes[1]), int(sizes[2])
    elif isinstance(w[1][1], int):
        hk = hv = w[1][1] // 3
    else:
        return []
    b, s = x[1][0], x[1][1]
    out: list[Typed | None] = [(x[0], (b, s, hv))]
    heads = int(_attr(node, "num_heads", 0))  # type: ignore[call-overload]
    past = ins[4] if len(ins) > 4 else None
    if heads <= 0 or len(node.input) > 4 and node.input[4] and past is None:
        return out
    p = past[1][3] if past is not None and len(past[1]) == 5 else 0
    total = p + s if isinstance(p, int) and isinstance(s, int) else None
    out.append((x[0], (2, b, heads, total, hk // heads)))
    return out


def _gqa(node: onnx.NodeProto, ins: Sequence[Typed | None]) -> list[Typed | None]:
    """GroupQueryAttention's output [B, S, heads * head_size]: the query's shape, or with
    packed QKV (no key input) its last dim split as heads + 2 * kv_heads. The present
    caches follow the run's total length (data) and stay unknown."""
    q = ins[0]
    if q is None or len(q[1]) != 3:
        return []
    if len(node.input) > 1 and node.input[1]:
        return [q]
    heads = int(_attr(node, "num_heads", 0))  # type: ignore[call-overload]
    kv = int(_attr(node, "kv_num_heads", 0))  # type: ignore[call-overload]
    d = q[1][2]
    if heads <= 0 or not isinstance(d, int):
        return []
    return [(q[0], (q[1][0], q[1][1], d // (heads + 2 * kv) * heads))]


def _embed_layer_norm(node: onnx.NodeProto, ins: Sequence[Typed | None]) -> list[Typed | None]:
    """EmbedLayerNormalization: input_ids [B, S], word embedding [V, H] -> output [B, S, H]
    (the embedding's type), mask_index [B] int32, embedding_sum like output."""
    ids, we = ins[0], ins[2] if len(ins) > 2 else None
    if ids is None or we is None or len(ids[1]) != 2 or len(we[1]) != 2:
        return []
    out = (we[0], (ids[1][0], ids[1][1], we[1][1]))
    return [out, (onnx.TensorProto.INT32, (ids[1][0],)), out]


RULES: Mapping[tuple[str, str], Rule] = {
    **{(_MS, op): _same for op in ("BiasGelu", "FastGelu", "Gelu", "QuickGelu", "BiasAdd")},
    **{(d, "LayerNormalization"): _layer_norm for d in (*_DEFAULT, _MS)},
    **{(d, "SimplifiedLayerNormalization"): _layer_norm for d in (*_DEFAULT, _MS)},
    (_MS, "SkipLayerNormalization"): _skip_layer_norm,
    (_MS, "SkipSimplifiedLayerNormalization"): _skip_layer_norm,
    (_MS, "FusedMatMul"): _fused_matmul,
    (_MS, "FusedGemm"): _fused_gemm,
    (_MS, "DynamicQuantizeMatMul"): _to_float_matmul,
    (_MS, "MatMulIntegerToFloat"): _to_float_matmul,
    (_MS, "MatMulNBits"): _matmul_nbits,
    (_MS, "Attention"): _attention,
    (_MS, "GroupQueryAttention"): _gqa,
    (_MS, "EmbedLayerNormalization"): _embed_layer_norm,
}


def has_rules(graph: onnx.GraphProto) -> bool:
    """Any node of the main graph one of the rules types."""
    return any((n.domain, n.op_type) in RULES for n in graph.node)


def infer(
    graph: onnx.GraphProto, types: Mapping[str, tuple[int, Shape | None]]
) -> dict[str, Typed]:
    """Each contrib node's outputs from its inputs' entries in ``types`` (name -> (elem_type,
    shape)), or an earlier contrib node's here; main graph only, one pass in node order (the
    caller declares them and re-runs ONNX's inference, which carries them through the
    standard ops between)."""
    found: dict[str, Typed] = {}
    for node in graph.node:
        rule = RULES.get((node.domain, node.op_type))
        if rule is None:
            continue
        ins: list[Typed | None] = []
        for name in node.input:
            t = found.get(name) or types.get(name) if name else None
            ins.append((t[0], t[1]) if t is not None and t[1] is not None and t[0] else None)
        if not ins or ins[0] is None:
            continue
        for name, got in zip(node.output, rule(node, ins), strict=False):
            if name and got is not None:
                found[name] = got
    return found


def value_info(name: str, typed: Typed) -> onnx.ValueInfoProto:
    """A declaration ONNX's inference reads as the tensor's type (None dims left empty)."""
    et, shape = typed
    vi = onnx.helper.make_tensor_value_info(name, et, None)
    dims = vi.type.tensor_type.shape
    dims.SetInParent()
    for d in shape:
        dim = dims.dim.add()
        if isinstance(d, int):
            dim.dim_value = d
        elif isinstance(d, str):
            dim.dim_param = d
    return vi
