"""``inline-functions``: replace every call of a model-local function by the function's body.

Why: native OpenVINO (2026.4) refuses any model whose graph calls a model-local function
("No conversion rule found for operations: DOMAIN.NAME"), at any depth and in any domain, and
onnxscript exports and torch's ``export_modules_as_functions`` carry them. ONNX Runtime inlines
them itself at load, so on ORT (CPU and its OpenVINO EP) the inlined file runs the same nodes;
the passes that index the graph's nodes (reorder, chunk, recompute) see the body instead of an
opaque call. Bit-identical outputs; weights never read (``memshrink.local_functions``).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from memshrink.local_functions import inline_functions
from memshrink.manager import Pass, PassContext, PassResult
from memshrink.transforms import register


@register
class InlineFunctionsPass(Pass):
    name = "inline-functions"
    summary = (
        "Replace calls of model-local functions by their bodies (OpenVINO refuses the calls; "
        "ORT inlines them at load): outputs bit-identical, weights never read."
    )
    targets = ("activations", "session-creation")
    exact = True

    @dataclass
    class Options:
        pass

    def run(self, model: ir.Model, context: PassContext) -> PassResult:
        if not model.functions:
            return PassResult(modified=False, stats={"reason": "no model-local functions"})
        report = inline_functions(model)
        stats: dict[str, object] = {
            "calls_inlined": report.calls_inlined,
            "functions_inlined": report.functions_inlined,
            "functions_removed": report.functions_removed,
            "nodes_added": report.nodes_added,
        }
        stats.update({f"left ({why})": n for why, n in report.skipped.items()})
        if not report.calls_inlined:
            stats["reason"] = "no call of a model-local function can be inlined"
        return PassResult(modified=report.calls_inlined > 0, stats=stats)
