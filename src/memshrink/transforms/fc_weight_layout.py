"""``fc-weight-layout``: FC weights stored ``[N, K]`` and read through ``Gemm(transB=1)``.

Why: at bf16 (OpenVINO's default on AVX512-BF16 / AMX hosts) the CPU plugin keeps a transposed
bf16 copy of every ``[K, N]`` FC weight beside the mapped f32 original and its packed copy; an
``[N, K]`` weight is only packed (``fc_nk``: GPT-2 ``all`` OpenVINO 958 -> 797 MiB, BERT-base
804 -> 649, measured, outputs bit-identical on ORT CPU, OpenVINO and the EP).

* A ``transB=0`` Gemm's weight is flipped whatever the pipeline's runtime: no node is added,
  so no runtime pays (GPT-2: ORT CPU and the EP within 1 MiB on every stage, measured).
* A MatMul's weight needs a Reshape around a Gemm for a rank > 2 input: two nodes, one shared,
  that every runtime pays for (BERT-base, 96 MatMuls without the sharing: ORT CPU +1 / +2,
  the EP +4 / +6 MiB measured) for OpenVINO's gain at bf16 only (at f32 the orders cost the
  same). So it is a trial, kept only when the estimator predicts OpenVINO's process peak
  (the saved layout) lower by ``min_saving`` and, unless the user deploys on OpenVINO alone
  (``optimize --backend openvino``), ORT CPU's and the EP's up by no more than ``spare_cap`` /
  ``spare_cap_bytes`` (``chunking.choice.over_cap``). Under ``--backend`` another runtime it
  is not tried: only OpenVINO gains.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir

from memshrink.manager import Pass, PassContext, PassResult
from memshrink.model import META_SAVE
from memshrink.transforms import register
from memshrink.transforms.chunking.choice import over_cap
from memshrink.transforms.fc_nk import flip_gemm_weights, matmul_to_gemm
from memshrink.transforms.predicted import backend_names, process_figures
from memshrink.transforms.saved_layout import clone_with_meta

MiB = 1 << 20


def _opset(model: ir.Model) -> int:
    return int(model.opset_imports.get("", model.opset_imports.get("ai.onnx", 1)))


def keep_folded(model: ir.Model) -> set[str]:
    """Weights ``external-data`` put in the OpenVINO-folded file: renaming them would move
    them back into the mapped one (``ov_folded``)."""
    policy = model.meta.get(META_SAVE) or {}
    return set(policy.get("folded", ()))


@register
class FcWeightLayoutPass(Pass):
    name = "fc-weight-layout"
    summary = (
        "Store FC weights [N, K] for Gemm(transB=1): OpenVINO at bf16 keeps no transposed copy."
    )
    targets = ("weights",)
    exact = (
        "bit-identical on ORT CPU, OpenVINO and the ORT OpenVINO EP as measured (the same GEMM "
        "reads the same packed weight); a runtime may pick another kernel for Gemm than for "
        "MatMul, which would move rounding by a few ulp"
    )

    @dataclass
    class Options:
        gemm: bool = True
        matmul: bool = True
        # weights under this are left alone: at most half of it is saved, and a MatMul's
        # rewrite adds nodes whatever the weight's size
        min_bytes: int = 1 * MiB
        # the MatMul rewrite is kept only when OpenVINO's predicted peak drops by this much
        min_saving: int = 2 * MiB
        # ... and ORT CPU's and the EP's predicted peaks rise by at most this fraction or
        # these bytes, whichever is larger (not checked under --backend openvino)
        spare_cap: float = 0.01
        spare_cap_bytes: int = 2 * MiB
        spare_backends: str = "ort,ort-openvino"

    def run(self, model: ir.Model, context: PassContext) -> PassResult:
        o = self.options
        stats: dict[str, Any] = {"gemm_weights": 0, "matmul_weights": 0, "bytes_transposed": 0}
        modified = False
        if o.gemm and not (context.deploy_only and context.backend == "cuda"):
            done = flip_gemm_weights(model.graph, o.min_bytes, skip=keep_folded(model))
            stats["gemm_weights"] = done.weights
            stats["bytes_transposed"] += done.bytes
            modified = done.weights > 0
        if not o.matmul:
            return PassResult(modified=modified, stats=stats)
        if context.deploy_only and context.backend != "openvino":
            stats["matmul"] = f"not tried: only OpenVINO gains, and --backend {context.backend}"
            return PassResult(modified=modified, stats=stats)
        trial = clone_with_meta(model)
        done = matmul_to_gemm(trial.graph, _opset(trial), o.min_bytes, skip=keep_folded(model))
        if not done.weights:
            return PassResult(modified=modified, stats=stats)
        why = self._refuse(model, trial, context, stats)
        if why is not None:
            stats["matmul"] = f"kept the MatMuls: {why}"
            return PassResult(modified=modified, stats=stats)
        stats.update(matmul_weights=done.weights, matmul_readers=done.readers,
                     nodes_added=done.nodes_added)  # fmt: skip
        stats["bytes_transposed"] += done.bytes
        return PassResult(modified=True, stats=stats, model=trial)

    def _refuse(self, model: ir.Model, trial: ir.Model, context: PassContext,
                stats: dict[str, Any]) -> str | None:  # fmt: skip
        """Why the trial's MatMul rewrite is not kept, or None."""
        o = self.options
        try:
            before = process_figures(model, context, "openvino")
            after = process_figures(trial, context, "openvino")
        except Exception as exc:  # noqa: BLE001 - no prediction: no evidence of a gain
            return f"no OpenVINO prediction ({type(exc).__name__}: {str(exc)[:120]})"
        old = before.get("saved_peak", before["peak"])
        new = after.get("saved_peak", after["peak"])
        stats["openvino_predicted"] = {"before": old, "after": new}
        if old - new < o.min_saving:
            return f"OpenVINO's predicted peak {old} -> {new} B: less than min_saving"
        if context.deploy_only:
            return None
        spared = backend_names(o.spare_backends)
        guard: dict[str, Any] = {}
        stats["guard"] = guard
        return over_cap(model, trial, context, spared, o.spare_cap, o.spare_cap_bytes, guard)
