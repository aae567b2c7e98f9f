"""``simplify``: optional onnxsim constant folding and graph cleanup, under a size cap.

onnxsim works on a full in-memory ModelProto and holds several copies of it, so the pass
refuses models whose weights exceed ``max_model_bytes`` (the reason goes into the stats,
the model is left untouched). Folded constants are capped by ``max_folded_bytes`` so a
fold never trades a small subgraph for a huge constant. Outputs match within onnxsim's
own check tolerances, not bit-for-bit (folding can reassociate arithmetic).

onnxsim's rewrites are not all memory wins: it turns 3-D MatMul+Add into Reshape/Gemm/Reshape,
which ORT cannot run in place (the bundled demo model: +2 MiB measured at session creation).
So the simplified graph is kept only when the estimator does not predict a higher peak on
the pipeline's backend, and, unless the user deploys on one runtime only (``optimize
--backend``), when it raises no *preferred* backend's (OpenVINO, its EP) predicted process peak
by more than ``chunk``'s default cap (5 % or 2 MiB, ``chunking.choice.over_cap``): after
``inline-functions``, its MatMul+Add -> Gemm rewrite of a TorchScript export's inlined blocks
lowered ORT CPU but measured the ORT OpenVINO EP's run peak 115-119 -> 126 MiB
(docs/optimize.md, "simplify and the other runtimes").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir

from memshrink import opaque_types
from memshrink.manager import Pass, PassContext, PassResult
from memshrink.model import META_SOURCE, iter_tensor_slots
from memshrink.onnxsim_child import ChildOnnxsim, available
from memshrink.transforms import register
from memshrink.transforms.chunking.choice import CAP_BYTES, PREFER_CAP, over_cap
from memshrink.transforms.predicted import backend_names, predicted_peak
from memshrink.transforms.quantized import quantizes_activations
from memshrink.transforms.simplify_lists import skeleton_simplify


def simplifier() -> Any:
    """What runs ``onnxsim.simplify``: onnxsim in a child process (``onnxsim_child``), so
    its imports and copies leave with the child; ImportError when onnxsim is missing."""
    if not available():
        raise ImportError("No module named 'onnxsim'")
    return ChildOnnxsim()


@register
class SimplifyPass(Pass):
    name = "simplify"
    summary = (
        "Fold constants and clean up with onnxsim (models under a size cap; skipped otherwise)."
    )
    targets = ("weights", "activations")
    exact = "within onnxsim's check (rtol 1e-4, atol 1e-5); folding may reorder float arithmetic"
    tolerance = (1e-5, 1e-4)

    @dataclass
    class Options:
        # onnxsim peaks at ~9x the weights (U-Net, 118 MiB: 1.1 GB RSS): 32 MiB keeps the
        # tool's own peak near 300 MiB, while larger models skip it with a reason.
        max_model_bytes: int = 32 * 1024 * 1024
        max_folded_bytes: int = 1024 * 1024
        check_n: int = 0
        # backends whose predicted process peak onnxsim's graph may raise by at most
        # prefer_cap (OpenVINO: with its CAP_MARGIN) or prefer_cap_bytes, as chunk's default
        # cap; ignored with optimize --backend (only that runtime counts). "" = ORT CPU only
        prefer_backends: str = "openvino,ort-openvino"
        prefer_cap: float = PREFER_CAP
        prefer_cap_bytes: int = CAP_BYTES
        # let onnxsim fold / fuse float16 and bfloat16 arithmetic: a folded half-precision
        # value is rounded where the runtime kept f32 (ORT CPU runs fp16 chains through Casts
        # to f32), which moves outputs by a half-precision ulp, far past the stated rtol 1e-4
        half_arithmetic: bool = False
        # let onnxsim change float arithmetic in a model that quantizes values computed at run
        # time (DynamicQuantizeLinear, QuantizeLinear of an activation, MatMulNBits at
        # accuracy_level 4, int4 DequantizeLinear -> MatMul, which ORT fuses into it): a
        # float ulp there can flip a rounding to the next quantization step
        runtime_quantized: bool = False

    def run(self, model: ir.Model, context: PassContext) -> PassResult:
        o = self.options
        weights = sum(t.nbytes for t, _ in iter_tensor_slots(model))
        if weights > o.max_model_bytes:
            return PassResult(
                modified=False,
                stats={
                    "reason": f"skipped: weights {weights} B exceed max_model_bytes {o.max_model_bytes} B "
                    "(onnxsim holds several in-memory copies of the model)"
                },
            )
        try:
            onnxsim = simplifier()
        except ImportError as exc:
            return PassResult(
                modified=False, stats={"reason": f"skipped: onnxsim unavailable ({exc})"}
            )
        nodes_before = sum(1 for _ in model.graph)
        try:
            simplified, ok, lists = skeleton_simplify(model, onnxsim, o)
        except Exception as exc:  # onnxsim raises many types; the model stays as it was
            kind = getattr(exc, "kind", type(exc).__name__)  # the child's exception type
            return PassResult(
                modified=False,
                stats={"reason": f"skipped: onnxsim failed: {kind}: {str(exc)[:200]}"},
            )
        if not ok:
            return PassResult(modified=False, stats={"reason": "skipped: onnxsim's check failed"})
        new_model = opaque_types.deserialize(simplified, lists=lists)
        del simplified
        changed = interface_change(model, new_model)
        if changed:
            return PassResult(modified=False, stats={"reason": f"skipped: onnxsim {changed}"})
        if not o.half_arithmetic:
            half_before, half_after = _half_arithmetic(model), _half_arithmetic(new_model)
            if half_before != half_after:
                folded = sorted((half_before - half_after).items())
                what = ", ".join(f"{k.split('::')[-1]} x{n}" for k, n in folded[:4])
                return PassResult(
                    modified=False,
                    stats={
                        "reason": "kept the original: onnxsim changes float16 / bfloat16 "
                        f"arithmetic ({what or 'its nodes'}), which moves outputs by a "
                        "half-precision ulp, past the rtol 1e-4 it states "
                        "(-O simplify.half_arithmetic=true allows it)"
                    },
                )
        opaque_types.carry(model, new_model)
        dropped = drop_onnxsim_report(model, new_model)
        new_model.meta[META_SOURCE] = dict(model.meta.get(META_SOURCE) or {}, path=None)
        nodes_after = sum(1 for _ in new_model.graph)
        stats: dict[str, object] = {"nodes_before": nodes_before, "nodes_after": nodes_after}
        if dropped:
            stats["onnxsim_metadata_dropped"] = dropped
        before, after = predicted_peak(model, context), predicted_peak(new_model, context)
        if before is not None and after is not None:
            stats.update(predicted_peak_before=before, predicted_peak_after=after)
            if after > before:
                stats["reason"] = (
                    f"kept the original: onnxsim's graph is predicted to peak higher "
                    f"({after} B > {before} B)"
                )
                return PassResult(modified=False, stats=stats)
        spared = _spared(o, context)
        if spared:
            guard: dict[str, Any] = {}
            stats["guard"] = guard
            why = over_cap(model, new_model, context, spared, o.prefer_cap,
                           o.prefer_cap_bytes, guard)  # fmt: skip
            if why is not None:
                stats["reason"] = f"kept the original: onnxsim's graph is predicted to raise {why}"
                return PassResult(modified=False, stats=stats)
        exact = _float_arithmetic(model) == _float_arithmetic(new_model)
        stats["float_arithmetic_changed"] = not exact
        quantizer = None if exact or o.runtime_quantized else quantizes_activations(model)
        if quantizer is not None:
            stats["reason"] = (
                f"kept the original: onnxsim changes float arithmetic ahead of {quantizer}, "
                "which quantizes a run-time value: a float ulp can move an output by a whole "
                "quantization step, past the rtol 1e-4 it states "
                "(-O simplify.runtime_quantized=true allows it)"
            )
            return PassResult(modified=False, stats=stats)
        return PassResult(modified=True, stats=stats, model=new_model, exact=exact)


def drop_onnxsim_report(before: ir.Model, after: ir.Model) -> int:
    """Remove the ``onnxsim.*`` model metadata onnxsim adds (its options and the names of every
    node and value it removed: kilobytes on a real model). ONNX Runtime keeps model metadata for
    the session's life (docs/estimate.md, session 15), so this report would cost the user memory
    at inference for nothing; metadata the input already had is kept. Returns how many keys."""
    added = [k for k in after.metadata_props
             if k.startswith("onnxsim.") and k not in before.metadata_props]  # fmt: skip
    for key in added:
        del after.metadata_props[key]
    return len(added)


def _spared(o: SimplifyPass.Options, context: PassContext) -> list[str]:
    """The preferred backends the cap protects: none when the user deploys on one runtime
    (its own peak is checked by ``predicted_peak``), never the pipeline's own backend."""
    if context.deploy_only or o.prefer_cap <= 0:
        return []
    names = backend_names(o.prefer_backends)
    return [b for b in dict.fromkeys(names) if b != context.backend]


#: Ops that move, select or reinterpret values without arithmetic on them: folding or
#: removing only these (shape computations, Identity chains) leaves float outputs bit-identical.
_NO_ARITHMETIC = frozenset(
    [
        "Cast",
        "CastLike",
        "Concat",
        "Constant",
        "ConstantOfShape",
        "Expand",
        "Flatten",
        "Gather",
        "GatherElements",
        "GatherND",
        "Identity",
        "Pad",
        "Range",
        "Reshape",
        "Shape",
        "Size",
        "Slice",
        "Split",
        "Squeeze",
        "Tile",
        "Transpose",
        "Unsqueeze",
    ]
)
_FLOATS = frozenset(
    {ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE}
)


def _float_arithmetic(model: ir.Model) -> Counter[str]:
    """How many nodes of each op type compute float values (outside ``_NO_ARITHMETIC``).

    Why: onnxsim changes almost every model (it folds shape subgraphs), but only folding or
    fusing float arithmetic can change an output's bits. Equal counts before and after mean it
    touched no float arithmetic, so the run states no tolerance and ``verify`` stays strict.
    A float output of unknown type counts as float (the safe side)."""
    out: Counter[str] = Counter()
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.op_type in _NO_ARITHMETIC and node.domain in ("", "ai.onnx"):
            continue
        if any(v.dtype is None or v.dtype in _FLOATS for v in node.outputs):
            out[f"{node.domain}::{node.op_type}"] += 1
    return out


_HALF = frozenset({ir.DataType.FLOAT16, ir.DataType.BFLOAT16})


def _half_arithmetic(model: ir.Model) -> Counter[str]:
    """How many nodes of each op type compute float16 / bfloat16 values (outside
    ``_NO_ARITHMETIC``; an output of unknown type counts when an input is half).

    Why: folding or fusing them rounds to half precision where the runtime need not (ORT CPU
    computes an fp16 chain without CPU kernels in f32 between inserted Casts): measured on
    onnxconverter-common's fp16 U-Net, onnxsim's folds moved ORT CPU's output by 7.2e-4
    (|y| ~ 0.3), against the rtol 1e-4 the pass states (docs/reliability.md, session 15)."""
    out: Counter[str] = Counter()
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.op_type in _NO_ARITHMETIC and node.domain in ("", "ai.onnx"):
            continue
        half = any(v.dtype in _HALF for v in node.outputs) or (
            any(v.dtype is None for v in node.outputs)
            and any(v is not None and v.dtype in _HALF for v in node.inputs)
        )
        if half:
            out[f"{node.domain}::{node.op_type}"] += 1
    return out


def _signature(values: list[ir.Value]) -> list[tuple[str, str, tuple[str, ...] | None]]:
    out = []
    for v in values:
        shape = None if v.shape is None else tuple(str(d) for d in v.shape)
        out.append((v.name or "", str(v.dtype), shape))
    return out


def _fed(model: ir.Model) -> list[ir.Value]:
    """Graph inputs the user feeds (old exporters also list initializers as inputs)."""
    return [v for v in model.graph.inputs if v.name not in model.graph.initializers]


def interface_change(before: ir.Model, after: ir.Model) -> str | None:
    """How onnxsim changed the model's interface, or None.

    onnxsim's shape inference can pin a symbolic input dim (a ``Concat`` with an empty
    ``[1, 0]`` weight makes it infer ``batch = 1`` and write ``x: [1, 32]`` for ``x: [batch,
    32]``); the rewritten model then refuses the inputs the original took. Fed inputs must
    keep name, dtype and shape (initializers listed as inputs may go); outputs name and dtype.
    """
    old_in, new_in = _signature(_fed(before)), _signature(_fed(after))
    if old_in != new_in:
        for o, n in zip(old_in, new_in, strict=False):
            if o != n:
                return f"changed input {o[0]!r} ({o[1]} {o[2]} -> {n[1]} {n[2]})"
        return f"changed the graph inputs ({len(old_in)} -> {len(new_in)})"
    old_out = [(n, t) for n, t, _ in _signature(list(before.graph.outputs))]
    new_out = [(n, t) for n, t, _ in _signature(list(after.graph.outputs))]
    if old_out != new_out:
        return f"changed the graph outputs ({old_out} -> {new_out})"
    return None
