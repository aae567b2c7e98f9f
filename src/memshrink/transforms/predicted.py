"""What a pass asks the estimator: the bindings the pipeline feeds, and the predicted peak.

Passes that trade one graph for another (``simplify``) keep the new one only when the
estimator does not predict a higher peak; they share how input dims get bound (the
pipeline's ``--shape``/``--dim``, else the source model's sidecar) so every pass predicts
for the same inputs.
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir

from memshrink.bindings import load_sidecar
from memshrink.errors import MemshrinkError
from memshrink.manager import PassContext
from memshrink.model import META_SOURCE


def backend_names(option: str) -> list[str]:
    """The backends a comma-separated pass option names (``"ort, openvino"``), in order."""
    return [b.strip() for b in option.split(",") if b.strip()]


def guarded(option: str, context: PassContext) -> list[str]:
    """The backends a pass must not make worse: its ``guard_backends``-style option, plus the
    backend the pipeline targets (``optimize --backend``) when that is not ORT CPU.

    Why: the activation passes decide on ORT CPU's prediction, and some of their rewrites cost
    another runtime (measured: chunking ResNet-50 b16 raised OpenVINO's process peak 347 ->
    452 MiB with its compiled per-chunk kernels). A user who names the runtime they deploy on
    gets rewrites that are predicted not to raise it there.
    """
    names = backend_names(option)
    if context.backend not in ("ort", "cpu") and context.backend not in names:
        names.append(context.backend)
    return list(dict.fromkeys(names))


def sidecar_bindings(model: ir.Model) -> dict[str, Any]:
    """``{name: shape}`` from the source model's sidecar (how the suite feeds it), or {}."""
    src = model.meta.get(META_SOURCE) or {}
    path = src.get("path") if isinstance(src, dict) else None
    side = load_sidecar(path) if path else None
    if side is None:
        return {}
    return {i.name: list(i.shape) for i in side.inputs if i.shape is not None}


def pipeline_bindings(model: ir.Model, context: PassContext) -> dict[str, Any]:
    """Keyword bindings for ``estimate``: the pipeline's, else the sidecar's."""
    if context.shapes or context.dims:
        return {"shapes": context.shapes or None, "dims": context.dims or None}
    return {"shapes": sidecar_bindings(model) or None, "dims": None}


def predicted_peak(model: ir.Model, context: PassContext) -> int | None:
    """The highest predicted stage peak on the pipeline's backend; None when it can't be had.

    None (unbound dims, a partial result, an op the estimator can't size) means "no
    prediction", never zero: a caller then falls back to its own rule.
    """
    from memshrink.estimate import estimate
    from memshrink.estimate.cuda import guard_options
    from memshrink.writer import decide_external

    try:
        est = estimate(
            model,
            backend=context.backend,
            session_options=guard_options() if context.backend == "cuda" else None,
            embedded=not decide_external(model),
            **pipeline_bindings(model, context),
        )
    except MemshrinkError:
        return None
    if getattr(est, "partial", False):
        return None
    peaks = est.stage_peaks()
    return max(peaks.values()) if peaks else None


def _estimate_layout(model: ir.Model, context: PassContext, backend: str, embedded: bool) -> Any:
    """``estimate`` of ``model`` saved ``embedded`` (else external) with the pipeline's
    bindings; CUDA as its guards see it (``cuda.guard_options``: the file's own weight order,
    a cuDNN workspace per Conv)."""
    from memshrink.estimate import estimate
    from memshrink.estimate.cuda import guard_options

    opts = guard_options() if backend == "cuda" else {}
    return estimate(
        model, backend=backend, session_options=opts, embedded=embedded,
        **pipeline_bindings(model, context),
    )  # fmt: skip


def guard_figures(model: ir.Model, context: PassContext, backend: str) -> dict[str, int]:
    """Predicted steady-state peak on ``backend`` (CUDA: GPU, plus the host RSS beside it), in
    the weight layout the pipeline saves; the file's own weight order (no order sampling)."""
    from memshrink.transforms.saved_layout import saved_embedded

    est = _estimate_layout(model, context, backend, saved_embedded(model))
    stage = next(s for s in est.prediction.stages if s.name == "steady_state")
    out = {"steady_state": int(stage.peak)}
    if backend == "cuda":
        out["host"] = int(est.prediction.details["host"]["steady_state"])
    return out


def cuda_layout_figures(model: ir.Model, context: PassContext, embedded: bool) -> dict[str, Any]:
    """Predicted CUDA stages if the weights are saved ``embedded`` (else external): host RSS
    and GPU memory per stage, the file's own weight order (no order sampling)."""
    est = _estimate_layout(model, context, "cuda", embedded)
    host = {k: int(v) for k, v in est.prediction.details["host"].items()}
    return {"host": host, "gpu": {k: int(v) for k, v in est.stage_peaks().items()}}


def process_figures(model: ir.Model, context: PassContext, backend: str) -> dict[str, int]:
    """Predicted process peak (the highest stage) on ``backend`` and its steady-state
    activations, in the weight layout the pipeline saves: what a preferred backend is judged by
    (OpenVINO's peak can sit in compile_model, where per-node primitives are made)."""
    from memshrink.estimate import estimate
    from memshrink.transforms.saved_layout import saved_embedded

    est = estimate(
        model, backend=backend, embedded=saved_embedded(model), **pipeline_bindings(model, context)
    )
    stage = next(s for s in est.prediction.stages if s.name == "steady_state")
    peaks = est.stage_peaks()
    out = {"peak": int(max(peaks.values())), "activations": int(stage.activations)}
    released = folded_file_bytes(model) if backend == "openvino" else 0
    if released:
        # the peak as the saved file will be predicted: the folded file's pages gone after
        # compile (read and compile keep them)
        out["saved_peak"] = int(
            max(v - (released if k in ("run_1", "steady_state") else 0) for k, v in peaks.items())
        )
    return out


def folded_file_bytes(model: ir.Model) -> int:
    """Bytes the save will put in the OpenVINO-folded weights' own file (``OUT.folded.data``,
    ``writer``: the policy's ``folded`` names that still fold and go external), whose mapping
    OpenVINO drops after compile. The estimate of a saved file credits that; of a model in
    memory (inside a pass) it does not (``estimate.openvino._released_file_bytes``), so an
    in-memory prediction of a model with such a file is that much above the saved one:
    EfficientFormer-L1 at ``chunk``'s input 155.2 MiB in memory, 137.7 saved (measured 132).
    ``chunk``'s cap judges a rise on the peaks with it subtracted (``saved_peak``), on both
    sides: a rise over the inflated base looked small (+7.5 % inside the pass, +23 % between
    the saved files)."""
    from memshrink.model import META_SAVE
    from memshrink.transforms.ov_folded import folded_weights
    from memshrink.writer import DEFAULT_THRESHOLD, decide_external

    policy = model.meta.get(META_SAVE) or {}
    names = set(policy.get("folded", ()))
    if not names or not decide_external(model):
        return 0
    names &= folded_weights(model.graph)
    threshold = int(policy.get("threshold", DEFAULT_THRESHOLD))
    inline = set(policy.get("inline", ()))
    total = 0
    for name in names - inline:
        v = model.graph.initializers.get(name)
        t = v.const_value if v is not None else None
        if t is not None and t.nbytes >= threshold:
            total += int(t.nbytes)
    return total
