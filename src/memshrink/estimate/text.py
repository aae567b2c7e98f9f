"""The console text of an estimate: readable without our docs by default, everything with ``verbose``.

Why a separate printer: the JSON (``Estimate.to_dict``) is for tools and keeps every figure; a
person first needs the stage table, what it assumed, and how far the real number may move. The
estimator's internals (planner comparisons, per-glibc-mode figures, every assumption) are one
flag away instead of in the way.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from memshrink.units import format_bytes

if TYPE_CHECKING:
    from memshrink.estimate.result import Estimate

#: What each backend name means, for the heading.
RUNTIMES = {
    "ort": "ONNX Runtime CPU",
    "openvino": "OpenVINO CPU",
    "ort-openvino": "ONNX Runtime's OpenVINO EP",
    "cuda": "ONNX Runtime CUDA EP",
}


def _partial_line(est: Estimate) -> str:
    """Why some sizes are unknown: unbound input dims (the user can fix that), or ops whose
    output shapes ONNX shape inference does not derive even from bound inputs (skl2onnx's
    TreeEnsembleClassifier, ZipMap's sequence of maps): asking for bindings there misleads."""
    n = len(est.unknowns)
    if any(d < 0 for dims in est.view.bindings.values() for d in dims):
        return (
            f"PARTIAL: {n} tensor(s) of unknown size are counted as 0; bind the inputs' "
            "symbolic dims with --shape NAME=D1,D2 or --dim SYMBOL=N for a full estimate"
        )
    g = est.view.graph
    ops = sorted(
        {
            f"{node.domain + '.' if node.domain not in ('', 'ai.onnx') else ''}{node.op_type}"
            for name in est.unknowns
            if (t := g.tensors.get(name)) is not None and t.producer is not None
            for node in [g.nodes[t.producer]]
        }
    )
    return (
        f"PARTIAL: {n} tensor(s) of unknown size are counted as 0: every input is bound, but "
        "shape inference gives no size for outputs of "
        + (", ".join(ops) if ops else "some ops")
        + " (non-tensor values such as sequences and maps have none)"
    )


def _bounded_line(bounded: dict[str, str]) -> str:
    """Sizes that depend on data are at their upper bound (``dd_bounds``): say so up front,
    since a budget reads differently from a typical size."""
    rules = [how for how in bounded.values() if not how.startswith("follows")]
    ops = sorted({how.split(":")[0] for how in rules if how != "--dim-bound"})
    given = sum(how == "--dim-bound" for how in rules)
    return (
        f"BOUNDED: {len(bounded)} tensor(s) whose size depends on data ({', '.join(ops)} "
        "outputs and what follows) are sized at their upper bound, a budget not a typical "
        "size"
        + (f" ({given} source(s) set by --dim-bound)" if given else "")
        + "; --verbose lists the rules, --dim-bound TENSOR=N sets one"
    )


def format_estimate(est: Estimate, verbose: bool = False) -> str:
    """Heading, stage table, notes (spread over processes, partial shapes), top tensors, assumptions."""
    p = est.prediction
    name = os.path.basename(est.view.model_path) if est.view.model_path else "model"
    rows = [
        f"memshrink estimate: {name} on {RUNTIMES.get(p.backend, p.backend)} "
        f"(--backend {p.backend}); predicted from the graph, nothing was run",
    ]
    if est.partial:
        rows.append(_partial_line(est))
    if est.view.graph.bounded:
        rows.append(_bounded_line(est.view.graph.bounded))
    refused = p.details.get("ort_cpu_refuses")
    if refused:
        rows.append(
            "REFUSED: ONNX Runtime's CPU provider has no bfloat16 kernel for "
            + ", ".join(f"{op} ({n})" for op, n in sorted(refused.items()))
            + ": creating the session fails (on the ORT OpenVINO EP too, whose fallback nodes "
            "run there); the figures below are for a session that cannot be made. OpenVINO "
            "runs bf16: --backend openvino"
        )
    host = p.details.get("host") if p.backend == "cuda" else None
    rows.append(
        "peak memory per stage over an empty process (runtime imported, no model); weights anon = "
        "copies on the heap, weights file = pages mapped from the model's files"
        if host is None
        else "GPU memory per stage over an empty CUDA session at the same stage (as verify "
        "prints it: at its creation, then after its run); host peak over the process baseline"
    )
    rows += _stage_table(est, host)
    rows += _device_range(est)
    rows += _mode_lines(est, verbose)
    top = est.top_tensors(5)
    if top:
        rows.append("largest tensors alive at the activation peak:")
        for t in top:
            rows.append(
                f"  {format_bytes(t['bytes']):>10}  {t['tensors'][0]}  ← {t['op_type']} {t['producer']}"
            )
    if est.partial:
        rows.append(
            "unknown sizes (counted as 0): "
            + ", ".join(est.unknowns[:10])
            + (" …" if len(est.unknowns) > 10 else "")
        )
    rows += _assumption_lines(est, verbose)
    return "\n".join(rows)


def _stage_table(est: Estimate, host: dict | None) -> list[str]:
    if host is None:
        head = (
            f"{'stage':<18}{'peak':>12}{'weights anon':>14}{'weights file':>14}"
            f"{'activations':>13}{'overhead':>11}"
        )
    else:
        head = (
            f"{'stage':<18}{'GPU peak':>12}{'GPU weights':>14}{'':>14}{'GPU activ.':>13}"
            f"{'GPU fixed':>11}{'host peak':>12}"
        )
    rows = [head]
    for s in est.prediction.stages:
        line = (
            f"{s.name:<18}{format_bytes(s.peak):>12}{format_bytes(s.weights_anon):>14}"
            f"{format_bytes(s.weights_file) if host is None else '':>14}"
            f"{format_bytes(s.activations):>13}{format_bytes(s.overhead):>11}"
        )
        if host is not None:
            line += f"{format_bytes(host.get(s.name, 0)):>12}"
        rows.append(line)
    return rows


def _device_range(est: Estimate) -> list[str]:
    spread = est.prediction.details.get("device_range")
    if not spread or all(lo == hi for lo, hi in spread.values()):
        return []
    return [
        "GPU peak varies per process (ORT copies the weights in a different order each time): "
        + ", ".join(f"{k} {_span(lo, hi)}" for k, (lo, hi) in spread.items())
    ]


def _mode_lines(est: Estimate, verbose: bool) -> list[str]:
    """Embedded weights: the peak differs per process (glibc keeps freed copies merged or
    pinned); say so in one line with the range, per mode under ``verbose``."""
    stages = est.prediction.stages
    modes = sorted({m for s in stages for m in s.modes})
    if not modes:
        return []
    chosen = est.prediction.details.get("glibc_modes", {})
    shown = next((m for m in modes if chosen.get(m, {}).get("predicted")), None)
    spans = [(s.name, min(s.modes.values()), max(s.modes.values())) for s in stages if s.modes]
    rows = []
    if any(hi - lo > max(1 << 20, 0.02 * hi) for _, lo, hi in spans):  # worth a user's attention
        rows.append(
            "note: this model embeds its weights in the .onnx file; the C allocator (glibc) "
            "frees the runtime's copies of them differently in each process, so the real peak "
            "varies: "
            + ", ".join(f"{n} {_span(lo, hi)}" for n, lo, hi in spans)
            + (f" (the table shows the case the estimator expects, '{shown}')" if shown else "")
            + ". Weights in an external file, as `memshrink optimize` writes them, give one "
            "figure."
        )
    if verbose:
        for m in modes:
            rows.append(
                f"  glibc {m} mode"
                + (" (the table above)" if m == shown else "")
                + ": "
                + ", ".join(f"{s.name} {format_bytes(s.modes[m])}" for s in stages if m in s.modes)
            )
    return rows


def _span(lo: int, hi: int) -> str:
    return format_bytes(hi) if lo == hi else f"{format_bytes(lo)}..{format_bytes(hi)}"


def _assumption_lines(est: Estimate, verbose: bool) -> list[str]:
    p = est.prediction
    bindings = ", ".join(
        f"{k}[{', '.join('?' if d < 0 else str(d) for d in v)}]"
        for k, v in est.view.bindings.items()
    )
    rows = [f"assumed: execution order {p.schedule}" + (f"; inputs {bindings}" if bindings else "")]
    assumptions = est.assumptions + p.assumptions
    if verbose:
        rows.append(
            "planners (activations; textbook plans beside the runtime's): "
            + ", ".join(f"{k} {format_bytes(v)}" for k, v in p.planners.items())
        )
        rows += [f"  - {a}" for a in assumptions]
    elif assumptions:
        rows[-1] += f" (and {len(assumptions)} more assumptions: --verbose, or --json -)"
    return rows
