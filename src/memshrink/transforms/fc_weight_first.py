"""``fc-weight-first``: FC weights read as MatMul's first input, so no runtime packs a copy.

Why: the ORT OpenVINO EP compiles at f32, where OpenVINO packs every FC weight into a private
f32 copy beside ORT's mapping of the file: 2x the weights for the session's life (GPT-2 ``all``:
474 MiB mapped + 340 MiB packed). Read as MatMul's first input (``fc_first``) the weight is
used where it lies. Measured, ``memshrink verify --backends cpu,openvino,ort-openvino`` on the
session-14 ``all`` outputs (MiB over baseline, process peak): GPT-2 EP 987 -> 660, OpenVINO
796 -> 638, ORT CPU 579 -> 581 (its session 347 -> 14); BERT-base EP 835 -> 508, OpenVINO
648 -> 490, ORT CPU 366 -> 366. Outputs move by a few ulp (another GEMM blocking).

The estimator already charges a constant first input no packed copy on every backend (the rule
``tied_matmul`` relies on), so the pass is a trial kept only when it predicts the EP's or
OpenVINO's process peak lower by ``min_saving`` and every guarded runtime up by no more than
``spare_cap`` / ``spare_cap_bytes``: the transposes are activations, which can raise ORT CPU's
plan where activations dominate (large batch x sequence). Under ``optimize --backend X`` only X
is judged (and CUDA, whose GEMMs pack nothing, is not tried). Runs last in ``all``, after
``fc-weight-layout``: from its flattened ``Gemm(transB=1)`` the transposes are 2-D and the
weights already ``[N, K]``; straight from 3-D MatMuls ORT CPU's predicted plan rose over the cap
(ViT-B/16 +3.5 %, BERT-base +1.5 %), from the Gemms it does not (measured 375 -> 376, 366 -> 366).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir

from memshrink.manager import Pass, PassContext, PassResult
from memshrink.transforms import register
from memshrink.transforms.chunking.choice import over_cap
from memshrink.transforms.fc_first import weights_first
from memshrink.transforms.fc_weight_layout import keep_folded
from memshrink.transforms.predicted import backend_names, process_figures
from memshrink.transforms.saved_layout import clone_with_meta

MiB = 1 << 20


@register
class FcWeightFirstPass(Pass):
    name = "fc-weight-first"
    summary = "Read FC weights as MatMul's first input: no runtime keeps a packed copy."
    targets = ("weights",)
    exact = "atol 1e-4, rtol 1e-4 (the same dot products, summed in another GEMM blocking)"
    tolerance = (1e-4, 1e-4)

    @dataclass
    class Options:
        # weights under this are left alone: each rewrite adds transposes of activations
        min_bytes: int = 1 * MiB
        # kept only when one of these runtimes' predicted process peak drops by min_saving
        gain_backends: str = "ort-openvino,openvino"
        min_saving: int = 2 * MiB
        # ... and none of these rises by more than spare_cap or spare_cap_bytes (the larger)
        spare_backends: str = "ort,openvino,ort-openvino"
        spare_cap: float = 0.01
        spare_cap_bytes: int = 2 * MiB

    def run(self, model: ir.Model, context: PassContext) -> PassResult:
        o = self.options
        stats: dict[str, Any] = {"weights": 0, "readers": 0, "nodes_added": 0}
        if context.deploy_only and context.backend == "cuda":
            stats["why"] = "not tried under --backend cuda: its GEMMs pack no weight copy"
            return PassResult(modified=False, stats=stats)
        trial = clone_with_meta(model)
        done = weights_first(trial.graph, o.min_bytes, skip=keep_folded(model))
        if not done.weights:
            stats["why"] = "no f32 2-D weight of min_bytes read only by MatMul / plain Gemm"
            return PassResult(modified=False, stats=stats)
        why = self._refuse(model, trial, context, stats)
        if why is not None:
            stats["why"] = f"kept the packed layout: {why}"
            return PassResult(modified=False, stats=stats)
        stats.update(weights=done.weights, readers=done.readers, nodes_added=done.nodes_added,
                     bytes_transposed=done.bytes)  # fmt: skip
        return PassResult(modified=True, stats=stats, model=trial)

    def _refuse(self, model: ir.Model, trial: ir.Model, context: PassContext,
                stats: dict[str, Any]) -> str | None:  # fmt: skip
        """Why the trial is not kept, or None."""
        o = self.options
        gain = [context.backend] if context.deploy_only else backend_names(o.gain_backends)
        gains: dict[str, Any] = {}
        stats["predicted"] = gains
        best = 0
        for b in gain:
            try:
                old, new = process_figures(model, context, b), process_figures(trial, context, b)
            except Exception as exc:  # noqa: BLE001 - no prediction: no evidence of a gain
                gains[b] = f"no prediction ({type(exc).__name__}: {str(exc)[:120]})"
                continue
            before, after = old.get("saved_peak", old["peak"]), new.get("saved_peak", new["peak"])
            gains[b] = {"before": before, "after": after}
            best = max(best, before - after)
        if best < o.min_saving:
            return f"no predicted process peak of {', '.join(gain)} drops by min_saving"
        if context.deploy_only:
            return None
        guard: dict[str, Any] = {}
        stats["guard"] = guard
        spared = backend_names(o.spare_backends)
        return over_cap(model, trial, context, spared, o.spare_cap, o.spare_cap_bytes, guard)
