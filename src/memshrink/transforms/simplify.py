"""``simplify``: optional onnxsim constant folding and graph cleanup, under a size cap.

onnxsim works on a full in-memory ModelProto and holds several copies of it, so the pass
refuses models whose weights exceed ``max_model_bytes`` (the reason goes into the stats,
the model is left untouched). Folded constants are capped by ``max_folded_bytes`` so a
fold never trades a small subgraph for a huge constant. Outputs match within onnxsim's
own check tolerances, not bit-for-bit (folding can reassociate arithmetic).

onnxsim's rewrites are not all memory wins: it turns 3-D MatMul+Add into Reshape/Gemm/Reshape,
which ORT cannot run in place (the bundled demo model: +2 MiB measured at session creation).
So the simplified graph is kept only when the estimator does not predict a higher peak.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from memshrink.manager import Pass, PassContext, PassResult
from memshrink.model import META_SOURCE, iter_tensor_slots, serialize_with_data
from memshrink.transforms import register
from memshrink.transforms.predicted import predicted_peak


@register
class SimplifyPass(Pass):
    name = "simplify"
    summary = (
        "Fold constants and clean up with onnxsim (models under a size cap; skipped otherwise)."
    )
    targets = ("weights", "activations")
    exact = "within onnxsim's check (rtol 1e-4, atol 1e-5); folding may reorder float arithmetic"

    @dataclass
    class Options:
        max_model_bytes: int = 128 * 1024 * 1024
        max_folded_bytes: int = 1024 * 1024
        check_n: int = 0

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
            import onnxsim
        except ImportError as exc:
            return PassResult(
                modified=False, stats={"reason": f"skipped: onnxsim unavailable ({exc})"}
            )
        nodes_before = sum(1 for _ in model.graph)
        proto = serialize_with_data(model)
        try:
            simplified, ok = onnxsim.simplify(
                proto,
                check_n=o.check_n,
                tensor_size_threshold=f"{o.max_folded_bytes}B",
                mutable_initializer=False,
            )
        except Exception as exc:  # onnxsim raises many types; the model stays as it was
            return PassResult(
                modified=False,
                stats={
                    "reason": f"skipped: onnxsim failed: {type(exc).__name__}: {str(exc)[:200]}"
                },
            )
        if not ok:
            return PassResult(modified=False, stats={"reason": "skipped: onnxsim's check failed"})
        new_model = ir.serde.deserialize_model(simplified)
        new_model.meta[META_SOURCE] = dict(model.meta.get(META_SOURCE) or {}, path=None)
        nodes_after = sum(1 for _ in new_model.graph)
        stats: dict[str, object] = {"nodes_before": nodes_before, "nodes_after": nodes_after}
        before, after = predicted_peak(model, context), predicted_peak(new_model, context)
        if before is not None and after is not None:
            stats.update(predicted_peak_before=before, predicted_peak_after=after)
            if after > before:
                stats["reason"] = (
                    f"kept the original: onnxsim's graph is predicted to peak higher "
                    f"({after} B > {before} B)"
                )
                return PassResult(modified=False, stats=stats)
        return PassResult(modified=True, stats=stats, model=new_model)
