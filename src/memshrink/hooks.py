"""Pipeline hooks: predicted peak after every pass, and verification after every pass.

They live outside the passes so a pass never depends on the estimator or the verifier.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import onnx_ir as ir

from memshrink.errors import MemshrinkError
from memshrink.manager import PassContext, PassRecord, PipelineReport


def _estimate_summary(model: ir.Model, context: PassContext) -> dict[str, Any]:
    try:
        from memshrink.estimate import estimate
    except ImportError as exc:  # estimator not available in this build
        return {"error": f"estimator unavailable: {exc}"}
    from memshrink.writer import decide_external

    try:
        est = estimate(
            model,
            backend=context.backend,
            shapes=context.shapes,
            dims=context.dims,
            embedded=not decide_external(model),  # predict for the file the save will write
            allow_partial=True,
        )
    except MemshrinkError as exc:
        return {"error": str(exc)}
    summary: dict[str, Any] = {"backend": context.backend, "stage_peaks": est.stage_peaks()}
    if getattr(est, "partial", False):
        summary["partial"] = True
        summary["unknowns"] = list(getattr(est, "unknowns", []))[:20]
    return summary


class EstimateHook:
    """Predict each stage's peak before the pipeline and after every pass.

    A pass that reports no change gets the previous prediction again: the manager's
    analysis cache already trusts ``modified``, and re-estimating an unchanged model was
    half of ``optimize``'s time on GPT-2 (21 estimates)."""

    def __init__(self) -> None:
        self._last: dict[str, Any] | None = None

    def before_pipeline(
        self, model: ir.Model, context: PassContext, report: PipelineReport
    ) -> None:
        report.estimate_before = self._last = _estimate_summary(model, context)

    def after_pass(self, record: PassRecord, model: ir.Model, context: PassContext) -> None:
        if not record.modified and self._last is not None:
            record.estimate = dict(self._last)
            return
        record.estimate = self._last = _estimate_summary(model, context)


class VerifyEachHook:
    """Save the model after every modifying pass and verify it against the original."""

    def __init__(self, original: str, backends: list[str], **verify_options: Any) -> None:
        self.original = original
        self.backends = backends
        self.verify_options = verify_options

    def after_pass(self, record: PassRecord, model: ir.Model, context: PassContext) -> None:
        if not record.modified:
            return
        from memshrink.model import save
        from memshrink.verify import verify

        with tempfile.TemporaryDirectory(prefix="memshrink-verify-") as tmp:
            path = Path(tmp) / "after.onnx"
            save(model, path)
            report = verify(self.original, str(path), backends=self.backends, **self.verify_options)
        record.stats["verify_ok"] = report.ok
        record.stats["verify_exit_code"] = report.exit_code
        if not report.ok:
            context.progress(
                f"verification failed after pass {record.name!r}:\n{report.format_table()}"
            )
