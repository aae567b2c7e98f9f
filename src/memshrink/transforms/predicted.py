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
    from memshrink.writer import decide_external

    try:
        est = estimate(
            model,
            backend=context.backend,
            embedded=not decide_external(model),
            **pipeline_bindings(model, context),
        )
    except MemshrinkError:
        return None
    if getattr(est, "partial", False):
        return None
    peaks = est.stage_peaks()
    return max(peaks.values()) if peaks else None
