"""``ep-compat``: rewrite ops an execution provider leaves to ORT's CPU EP into equal ops it runs.

Why: ONNX Runtime's OpenVINO EP does not claim ``IsNaN``, and every torch-exported transformer
has one per attention layer (``Softmax -> IsNaN -> Where(isnan, 0, softmax) -> MatMul``). Each
node left to ORT CPU cuts the graph: BERT-base becomes 13 OpenVINO subgraphs, each compiled on
its own with its own workspace, and each weight read by several subgraphs is mapped and re-laid
out once per subgraph (a 4x batch split of BERT b4x512 gave 52 subgraphs and raised the EP's
process peak 3617 -> 5541 MiB; docs/activation-passes.md, "ep-compat"). ``IsNaN(x)`` is exactly
``Not(Equal(x, x))`` (IEEE 754: NaN is the only value unequal to itself; +-inf, +-0 and
subnormals equal themselves, also under flush-to-zero), and every backend here claims Equal,
Not and Where. Where the ``IsNaN`` only feeds Where conditions, ``Where(IsNaN(x), a, b)``
becomes ``Where(Equal(x, x), b, a)``: the same selection, one bool tensor fewer, no Not; but
only where neither branch can hold -0.0, which ORT CPU's Where does not pass through its first
branch bit-exactly (``_swap_is_exact``). Elsewhere ``Xor(Equal(x, x), true)`` replaces the
IsNaN (not ``Not``: ORT fuses Not into the Where it feeds by swapping the branches).
Where ``x`` cannot be NaN (a ``DequantizeLinear`` of an integer with finite constant scales, a
``Cast`` of an integer: static-QDQ exports guard ``DQ(Q(Softmax))``) and the IsNaN only feeds
Where conditions with ``x`` as a branch, a scalar ``false`` replaces it (``_guard_of_never_nan``):
the Xor form's ``Equal(x, x)`` read the DQ output twice, ORT gave each edge its own DQ, and a
QDQ BERT's ORT CPU steady state rose 27.6 -> 34.8 MiB; with ``false`` it stays at 28.

Not where the graph holds com.microsoft ``MatMulNBits`` (4-bit weights): with the graph cut,
the EP leaves them to ORT CPU (the original's EP outputs are 2e-7 from ORT CPU's); as one
subgraph OpenVINO runs them, and its CPU plugin quantizes their activations to int8 per group
of 32 (``DYNAMIC_QUANTIZATION_GROUP_SIZE``, on by default, also at f32): a 4-bit Llama's
logits moved by 4.8e-3 on the EP, the same 4.8e-3 native OpenVINO shows at f32 (1.8e-7 with
the group size set to 0), for no measured memory change (EP peak 68 -> 68 MiB). The rewrite
would then not be exact on the backend it is for (``compressed_weights=true`` does it anyway).

Outputs stay bit-identical (same elements selected; no arithmetic). Weights are never read,
except a Where branch of at most 4096 elements, checked for -0.0.
Not for bfloat16 inputs: ONNX allows Equal on bfloat16 from opset 13, but no ORT provider here
has that kernel. A bf16 Llama rewritten so made a model the CUDA EP (1.31) cannot create
("Provider type for Equal node ... is not set": no CUDA and no CPU kernel; the original runs
there), and ORT CPU (1.32) has no bf16 Equal either; the EP the rewrite serves cannot run a bf16
model anyway (its fallback nodes are ORT CPU's, ``estimate/ort_bf16.py``).

The name says what the pass is for (portability to EPs), not which op it rewrites, so further
exact rewrites of unclaimed ops join it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir

from memshrink.irgraphs import graphs
from memshrink.manager import Pass, PassContext, PassResult
from memshrink.transforms import register
from memshrink.transforms.chunking.choice import RISE, RISE_BYTES
from memshrink.transforms.chunking.rewrite import _Namer
from memshrink.transforms.predicted import process_figures
from memshrink.transforms.quantized import int4_into_matmul
from memshrink.transforms.saved_layout import clone_with_meta, saved_embedded

_DEFAULT_DOMAINS = ("", "ai.onnx")
# Equal's float types by the opset that added them (Equal-7 took only bool and ints).
_EQUAL_SINCE = {
    ir.DataType.FLOAT16: 11,
    ir.DataType.FLOAT: 11,
    ir.DataType.DOUBLE: 11,
    ir.DataType.BFLOAT16: 13,
}


def _graphs(model: ir.Model) -> list[Any]:
    """Every graph of the model: the main graph, its subgraphs and the functions' bodies."""
    return [*graphs(model), *(f.graph for f in model.functions.values())]


def _opset(model: ir.Model) -> int:
    return int(model.opset_imports.get("", model.opset_imports.get("ai.onnx", 1)))


class _Names(_Namer):
    """Fresh value / node names that collide with none in the model (subgraphs and functions
    included: ONNX names are unique across nested scopes)."""

    def __init__(self, model: ir.Model) -> None:  # no super(): a model-wide set
        self.used: set[str] = set()
        for g in _graphs(model):
            self.used.update(v.name for v in g.inputs if v.name)
            self.used.update(g.initializers)
            for node in g:
                self.used.update(v.name for v in node.outputs if v.name)
                if node.name:
                    self.used.add(node.name)


_FLOATS = frozenset(_EQUAL_SINCE)
# Ops whose float output is never -0.0 (Softmax: exp(x - max) >= +0 times 1/sum > 0).
_NO_NEGATIVE_ZERO = frozenset({"Softmax"})
_SMALL_CONSTANT = 4096  # elements: a Where branch read to rule out -0.0 (a scalar, in exports)


def _constant(value: ir.Value) -> np.ndarray | None:
    """A small constant's values (initializer or Constant node), else None."""
    tensor = value.const_value
    node = value.producer()
    if tensor is None and node is not None:
        attr = node.attributes.get("value") if node.op_type == "Constant" else None
        tensor = attr.value if attr is not None else None
    if tensor is None or tensor.size > _SMALL_CONSTANT:
        return None
    return np.asarray(tensor.numpy())


def _no_negative_zero(value: ir.Value | None) -> bool:
    """True when ``value`` provably holds no -0.0: not a float, a Softmax output, or a small
    constant without one."""
    if value is None:
        return False
    if value.dtype is not None and value.dtype not in _FLOATS:
        return True
    producer = value.producer()
    if (
        producer is not None
        and producer.op_type in _NO_NEGATIVE_ZERO
        and producer.domain in (_DEFAULT_DOMAINS)
    ):
        return True
    arr = _constant(value)
    return arr is not None and not bool(np.any((arr == 0) & np.signbit(arr)))


def _swap_is_exact(value: ir.Value) -> bool:
    """Can ``Where(IsNaN(x), a, b)`` become ``Where(Equal(x, x), b, a)`` bit for bit?

    Only where ``value`` (the IsNaN) feeds nothing but Where conditions, and neither branch
    can hold -0.0: ORT's CPU Where returns +0.0 for a -0.0 taken from its *first* branch
    (measured, onnxruntime 1.32: Where(True, -0.0, y) = +0.0; the second branch is exact), so
    moving a branch between the two positions changes the sign of such zeros. OpenVINO and the
    EP select exactly. The torch attention guard passes: b = Softmax(..), a = a 0.0 scalar.
    """
    uses = value.uses()
    if not uses or value.is_graph_output():
        return False
    for u in uses:
        w = u.node
        if w.op_type != "Where" or w.domain not in _DEFAULT_DOMAINS or u.idx != 0:
            return False
        if len(w.inputs) != 3 or not all(_no_negative_zero(v) for v in w.inputs[1:]):
            return False
    return True


# Integer types a DequantizeLinear / Cast input may have: none holds a NaN (float8 ones can).
_INTEGERS = frozenset(
    {
        ir.DataType.BOOL,
        ir.DataType.INT4,
        ir.DataType.UINT4,
        ir.DataType.INT8,
        ir.DataType.UINT8,
        ir.DataType.INT16,
        ir.DataType.UINT16,
        ir.DataType.INT32,
        ir.DataType.UINT32,
        ir.DataType.INT64,
        ir.DataType.UINT64,
    }
)


def _never_nan(x: ir.Value) -> bool:
    """True when ``x`` provably holds no NaN: a ``Cast`` of an integer, or a
    ``DequantizeLinear`` of an integer with small constant, finite scales ((q - zp) * s is
    finite or +-inf; NaN needs a NaN or infinite scale)."""
    node = x.producer()
    if node is None or node.domain not in _DEFAULT_DOMAINS or not node.inputs:
        return False
    src = node.inputs[0]
    if src is None:
        return False
    if node.op_type == "Cast":
        return src.dtype in _INTEGERS
    if node.op_type != "DequantizeLinear" or len(node.inputs) < 2 or node.inputs[1] is None:
        return False
    zp = node.inputs[2] if len(node.inputs) > 2 else None
    # x's type, or the zero point's, which the spec makes the same (x often has no value_info)
    dtype = src.dtype if src.dtype is not None else (zp.dtype if zp is not None else None)
    if dtype not in _INTEGERS:
        return False
    scale = _constant(node.inputs[1])
    return scale is not None and bool(np.all(np.isfinite(scale.astype(np.float64))))


def _guard_of_never_nan(value: ir.Value, x: ir.Value) -> bool:
    """Can ``IsNaN(x)`` (``value``) become a scalar ``false``? Where ``x`` holds no NaN and
    ``value`` feeds only Where conditions whose branches include ``x`` (so a scalar condition
    leaves the Where's broadcast shape as it was)."""
    uses = value.uses()
    if not uses or value.is_graph_output() or not _never_nan(x):
        return False
    return all(
        u.node.op_type == "Where"
        and u.node.domain in _DEFAULT_DOMAINS
        and u.idx == 0
        and len(u.node.inputs) == 3
        and any(v is x for v in u.node.inputs[1:])
        for u in uses
    )


def _never_nan_guard(node: ir.Node) -> bool:
    x = node.inputs[0] if node.inputs else None
    return x is not None and _guard_of_never_nan(node.outputs[0], x)


def _skip_reason(node: ir.Node, opset: int) -> str | None:
    x = node.inputs[0] if node.inputs else None
    if x is None or len(node.outputs) != 1:
        return "malformed IsNaN"
    dtype = x.dtype
    if dtype is None:
        # IsNaN's types up to opset 19 (f16, f32, f64; bf16 from 13) are Equal's at the same
        # opset from 11 on; opset 20 added float8 types, which Equal does not take.
        return None if 11 <= opset < 20 else f"input dtype unknown at opset {opset}"
    since = _EQUAL_SINCE.get(dtype)
    if since is None:
        return f"Equal does not take {dtype.name}"
    if opset < since:
        return f"Equal takes {dtype.name} from opset {since} (model: {opset})"
    if dtype == ir.DataType.BFLOAT16:
        return "no ORT provider has a bfloat16 Equal kernel (CUDA EP 1.31, CPU 1.32)"
    return None


def _rewrite_isnan(node: ir.Node, names: _Names) -> tuple[str, int]:
    """Replace one IsNaN; returns (form, Where nodes swapped)."""
    graph = node.graph
    assert graph is not None
    x = node.inputs[0]
    assert x is not None
    out = node.outputs[0]
    base = node.name or out.name or "isnan"
    if _guard_of_never_nan(out, x):
        # x cannot be NaN: the condition is false everywhere and a scalar false says so.
        # Not Equal(x, x) here: when x is a DequantizeLinear output ORT gives each consumer
        # edge its own DQ (EnsureUniqueDQForNodeUnit), so Equal's two edges added a float copy
        # of x; a QDQ BERT's ORT CPU steady state rose 27.6 -> 34.8 MiB with the Xor form
        false = ir.Node(
            "",
            "Constant",
            [],
            attributes=[ir.AttrTensor("value", ir.tensor(np.array(False)))],
            num_outputs=1,
            name=names(f"{base}/never_nan"),
        )
        new_cond = false.outputs[0]
        new_cond.name = names(f"{out.name or base}_never_nan")
        new_cond.dtype = ir.DataType.BOOL
        new_cond.shape = ir.Shape([])
        graph.insert_before(node, false)
        out.replace_all_uses_with(new_cond)
        graph.remove(node, safe=True)
        return "never_nan", 0
    eq = ir.Node(
        "",
        "Equal",
        [x, x],
        num_outputs=1,
        name=names(f"{base}/equal"),
    )
    eq.outputs[0].name = names(f"{out.name or base}_isnum")
    eq.outputs[0].dtype = ir.DataType.BOOL
    eq.outputs[0].shape = out.shape
    if _swap_is_exact(out):
        graph.insert_before(node, eq)
        wheres = [u.node for u in out.uses()]
        for w in wheres:
            a, b = w.inputs[1], w.inputs[2]
            w.replace_input_with(0, eq.outputs[0])
            w.replace_input_with(1, b)
            w.replace_input_with(2, a)
        graph.remove(node, safe=True)
        return "where_swap", len(wheres)
    # Not would do, but ORT's NotWhereFusion turns Where(Not(c), a, b) into Where(c, b, a),
    # which is the swap again; Xor(c, true) is the same negation and ORT leaves it alone.
    true = ir.Node(
        "",
        "Constant",
        [],
        attributes=[ir.AttrTensor("value", ir.tensor(np.array(True)))],
        num_outputs=1,
        name=names(f"{base}/true"),
    )
    true.outputs[0].name = names(f"{base}_true")
    neg = ir.Node(
        "", "Xor", [eq.outputs[0], true.outputs[0]], num_outputs=1, name=names(f"{base}/xor")
    )
    new = neg.outputs[0]
    new.dtype = ir.DataType.BOOL
    new.shape = out.shape
    new.name = names(f"{out.name or base}_xor")
    graph.insert_before(node, [eq, true, neg])
    keep = out.name
    out.replace_all_uses_with(new, replace_graph_outputs=True)
    graph.remove(node, safe=True)
    if keep:
        out.name = None
        names.used.discard(new.name or "")
        new.name = keep  # the value keeps its name (a graph output: the model's signature)
    return "xor_equal", 0


def predicted_ep_subgraphs(model: ir.Model, context: PassContext) -> int | None:
    """OpenVINO subgraphs the EP estimator predicts (``estimate/ort_openvino.subgraph_count``);
    None when no view of the graph can be built."""
    import memshrink.estimate.backends  # noqa: F401  (imports the OpenVINO rules in order)
    from memshrink.errors import MemshrinkError
    from memshrink.estimate.graph import build_view
    from memshrink.estimate.ort_openvino import subgraph_count
    from memshrink.transforms.predicted import pipeline_bindings

    try:
        view = build_view(model, allow_partial=True, **pipeline_bindings(model, context))
    except (MemshrinkError, ValueError):
        return None
    return subgraph_count(view.graph)


@register
class EpCompatPass(Pass):
    name = "ep-compat"
    summary = (
        "Rewrite IsNaN as Equal (swapping the Where it guards), Xor(Equal, true), or false "
        "where its input cannot be NaN (a quantized value), bit-exact, "
        "so the ORT OpenVINO EP runs "
        "the graph as one subgraph instead of cutting it at every IsNaN."
    )
    targets = ("session-creation", "activations")
    exact = True

    @dataclass
    class Options:
        # Predict the EP's subgraph count before and after (a graph view each: ~1 s on BERT).
        predict_subgraphs: bool = True
        # Also rewrite IsNaN nodes the Where swap cannot replace, as Xor(Equal(x, x), true):
        # one more bool tensor of x's shape alive between Equal and Xor. ``safe`` turns it off
        # so that the pass never adds a tensor (the swap's Equal output replaces IsNaN's).
        xor_form: bool = True
        # Weights saved embedded: keep the rewrite only if the EP's predicted process peak does
        # not rise (> 5 % and 8 MiB). One subgraph inlines every weight in one ModelProto at
        # session creation: measured BERT-base 1181 -> 2147 MiB, GPT-2 2063 -> 3161, while
        # BERT b4x512 drops 4056 -> 2147 (its 13 cut workspaces cost more).
        guard_embedded: bool = True
        # Rewrite also where the graph holds MatMulNBits: one EP subgraph hands them to
        # OpenVINO, which quantizes their activations (module docstring): not exact there.
        compressed_weights: bool = False

    def run(self, model: ir.Model, context: PassContext) -> PassResult:
        todo, skipped = _collect(model, self.options.xor_form)
        stats: dict[str, Any] = {"isnan_found": len(todo) + sum(skipped.values())}
        if todo and context.deploy_only and context.backend != "ort-openvino":
            # only the EP gains; the others run IsNaN themselves and may pay for the Xor form
            # (a QDQ BERT's ORT CPU steady state 27.6 -> 34.8 MiB measured, docs/reliability.md
            # "Session 15"), as fc-weight-layout is not tried for a runtime it does not serve
            stats["reason"] = (
                f"deploying on {context.backend} only: the rewrite serves the ORT OpenVINO EP"
            )
            return PassResult(False, stats)
        if skipped:
            stats["skipped"] = dict(skipped)
        if not todo:
            stats["reason"] = (
                "no IsNaN in the model" if not skipped else "no IsNaN this pass can rewrite"
            )
            return PassResult(False, stats)
        nbits = _count_ops(model, _COMPRESSED) + _count_int4_matmuls(model)
        if nbits and not self.options.compressed_weights:
            stats["reason"] = (
                f"{nbits} MatMulNBits / int4 DequantizeLinear -> MatMul: as one EP subgraph "
                "OpenVINO would run them with "
                "activations quantized per group (DYNAMIC_QUANTIZATION_GROUP_SIZE), not "
                "bit-exact; set ep-compat.compressed_weights=true to rewrite anyway"
            )
            return PassResult(False, stats)
        before = predicted_ep_subgraphs(model, context) if self.options.predict_subgraphs else None
        out = model
        if self.options.guard_embedded and saved_embedded(model):
            out = clone_with_meta(model)  # a trial: kept only if the EP's peak does not rise
            todo, _ = _collect(out, self.options.xor_form)
        stats.update(_apply(out, todo))
        if self.options.predict_subgraphs:
            stats["ep_subgraphs_before"] = before  # predicted, estimate/ort_openvino.py
            stats["ep_subgraphs_after"] = predicted_ep_subgraphs(out, context)
        if out is model:
            return PassResult(True, stats)
        old, new = _ep_peak(model, context), _ep_peak(out, context)
        stats["ep_peak_predicted_before"], stats["ep_peak_predicted_after"] = old, new
        if (
            old is not None
            and new is not None
            and new > old * (1 + RISE)
            and new - old > RISE_BYTES
        ):
            stats.update(
                isnan_rewritten=0, where_swap=0, xor_equal=0, never_nan=0, where_nodes_swapped=0
            )
            stats["reason"] = (
                "weights stay embedded: one EP subgraph would inline all of them in one "
                "ModelProto at session creation, predicted to raise the EP's peak; run "
                "external-data first"
            )
            return PassResult(False, stats)
        return PassResult(True, stats, model=out)


# (domain, op) of weight-compressed MatMuls that OpenVINO's CPU plugin runs with dynamically
# quantized activations once they are in its subgraph
_COMPRESSED = frozenset({("com.microsoft", "MatMulNBits")})


def _count_int4_matmuls(model: ir.Model) -> int:
    """int4 / uint4 ``DequantizeLinear`` weights read by a MatMul (the QDQ form of
    ``MatMulNBits``): OpenVINO compresses them the same way. Measured on
    ``MatMulNBitsQuantizer``'s QDQ output of BERT (b8 x 128): the EP's output moved by 1.1e-3
    once ep-compat made the graph one subgraph (peak 99.5 -> 77.6 MiB)."""
    return sum(
        n.op_type == "DequantizeLinear" and n.domain in _DEFAULT_DOMAINS and int4_into_matmul(n)
        for g in _graphs(model)
        for n in g
    )


def _count_ops(model: ir.Model, ops: frozenset[tuple[str, str]]) -> int:
    return sum((n.domain, n.op_type) in ops for g in _graphs(model) for n in g)


def _collect(model: ir.Model, xor_form: bool) -> tuple[list[ir.Node], Counter[str]]:
    """The IsNaN nodes to rewrite, and the reasons the others are skipped."""
    opset = _opset(model)
    todo: list[ir.Node] = []
    skipped: Counter[str] = Counter()
    for g in _graphs(model):
        for node in g:
            if node.op_type != "IsNaN" or node.domain not in _DEFAULT_DOMAINS:
                continue
            reason = _skip_reason(node, opset)
            if (
                reason is None
                and not xor_form
                and not _swap_is_exact(node.outputs[0])
                and not _never_nan_guard(node)
            ):
                reason = "needs the Xor form (xor_form=false)"
            if reason:
                skipped[reason] += 1
            else:
                todo.append(node)
    return todo, skipped


def _apply(model: ir.Model, todo: list[ir.Node]) -> dict[str, int]:
    names = _Names(model)
    forms: Counter[str] = Counter()
    swapped = 0
    for node in todo:
        form, n = _rewrite_isnan(node, names)
        forms[form] += 1
        swapped += n
    return {
        "isnan_rewritten": len(todo),
        "where_swap": forms["where_swap"],
        "xor_equal": forms["xor_equal"],
        "never_nan": forms["never_nan"],
        "where_nodes_swapped": swapped,
    }


def _ep_peak(model: ir.Model, context: PassContext) -> int | None:
    """The EP's predicted process peak in the saved layout; None without a prediction."""
    from memshrink.errors import MemshrinkError

    try:
        return process_figures(model, context, "ort-openvino")["peak"]
    except MemshrinkError:
        return None
