"""Verify/profile results: exit-code policy, JSON, console tables and a before/after plot.

Exit codes (also in ``docs/verify.md`` and ``--help``): 0 every output matches and every budget
holds; 3 an output mismatches; 5 a requested backend crashed, timed out, failed or is
unsupported; 4 a ``max_peak`` budget is exceeded. When several apply, the first in that order
wins: a wrong output is the strongest finding, and a budget cannot be judged on a failed run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from memshrink.units import format_bytes, mib
from memshrink.verify.compare import OutputComparison
from memshrink.verify.inputs import FeedInfo
from memshrink.verify.runner import FAILED_STATUSES, RunResult

EXIT_OK = 0
EXIT_MISMATCH = 3
EXIT_OVER_BUDGET = 4
EXIT_BACKEND_FAILED = 5

SCHEMA_VERSION = 1


@dataclass
class Comparison:
    """Candidate run vs reference run, output by output."""

    backend: str
    reference: str
    candidate: str
    status: str  # match | mismatch | not-compared
    outputs: list[OutputComparison] = field(default_factory=list)
    note: str | None = None
    # set when the verdict comes from a re-run at full precision (``api._recheck_at_full_precision``)
    recheck: dict[str, Any] | None = None
    reduced_precision_outputs: list[OutputComparison] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "backend": self.backend,
            "reference": self.reference,
            "candidate": self.candidate,
            "status": self.status,
            "note": self.note,
            "outputs": [o.to_dict() for o in self.outputs],
        }
        if self.recheck is not None:
            out["recheck"] = self.recheck
            out["reduced_precision_outputs"] = [
                o.to_dict() for o in self.reduced_precision_outputs or []
            ]
        return out


@dataclass
class Budget:
    backend: str
    model: str
    limit: int
    measured: int | None
    stage: str | None
    ok: bool

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__, what="absolute process peak RSS (VmHWM) over all stages")


def _mib(n: float | int | None, signed: bool = False) -> str:
    if n is None:
        return "-"
    return f"{mib(n):+.0f}" if signed else f"{mib(n):.0f}"


def _stage_peak_delta(run: RunResult, stage: str) -> int | None:
    base = run.baseline_rss or 0
    for s in run.stages:
        if s["name"] == stage:
            return int(s["peak"]) - base
    return None


def _run_line(r: RunResult) -> str:
    err = f": {r.error}" if r.error else ""
    return f"  {r.label:<9} {r.backend:<12} {r.status:<11} {r.seconds:6.1f} s{err}"


def _gpu_lines(runs: list[RunResult]) -> list[str]:
    """GPU memory per stage over the empty CUDA session at the same stage (``gpu_delta``); a
    figure below it is printed as ``~0`` with a note, never as a negative size."""
    from memshrink.verify.gpu_delta import SESSION_STAGE, gpu_deltas

    lines: list[str] = []
    below: list[str] = []
    for r in runs:
        gpu = r.child.get("gpu")
        if not gpu:
            continue
        base = gpu.get("empty_session_baseline") or 0
        empty = gpu.get("empty_session_stages") or None
        if not lines:
            lines.append(
                "GPU memory, MiB over an empty CUDA session at the same stage, measured in its "
                "own process (NVML per-process, 1 ms polling; absolute in brackets):"
            )
        parts = []
        for d in gpu_deltas(r.stages, base, empty):
            shown = "~0" if d.clamped else _mib(d.delta, True)
            parts.append(f"{d.stage} {shown} [{_mib(d.peak)}]")
            if d.clamped:
                below.append(f"{r.label} {d.stage} {_mib(-d.raw)} MiB")
        where = (
            f"{_mib(empty[SESSION_STAGE])} / {_mib(base)} MiB (session / after its run)"
            if empty and SESSION_STAGE in empty
            else f"{_mib(base)} MiB"
        )
        lines.append(f"  {r.label:<9} {r.backend:<5} empty session {where}; " + ", ".join(parts))
    if below:
        lines.append(
            "  ~0: below the empty session at that stage ("
            + ", ".join(below)
            + "): NVML granularity or a kernel the empty session loaded; not a saving"
        )
    return lines


def _plot(series: dict[str, dict[str, list[tuple[str, int | None]]]], title: str, path: str) -> str:
    """``series[backend][label] = [(stage, peak_delta_bytes)]`` -> grouped bar chart at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    backends = list(series)
    fig, axes = plt.subplots(1, max(len(backends), 1), figsize=(4.5 * max(len(backends), 1), 3.8))
    axes_list = axes if hasattr(axes, "__len__") else [axes]
    for ax, backend in zip(axes_list, backends, strict=False):
        labels = list(series[backend])
        stages = [s for s, _ in series[backend][labels[0]]] if labels else []
        width = 0.8 / max(len(labels), 1)
        for k, label in enumerate(labels):
            vals = dict(series[backend][label])
            xs = [i + k * width for i in range(len(stages))]
            ax.bar(xs, [mib(vals.get(s) or 0) for s in stages], width, label=label)
        ax.set_xticks([i + width * (len(labels) - 1) / 2 for i in range(len(stages))])
        ax.set_xticklabels(stages, rotation=30)
        ax.set_title(backend)
        ax.set_ylabel("peak RSS over baseline, MiB")
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    from memshrink.atomic import write_atomic

    try:
        write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=100))
    finally:
        plt.close(fig)
    return path


@dataclass
class VerifyReport:
    original: str
    rewritten: str
    backends: tuple[str, ...]
    settings: dict[str, Any]
    inputs: list[FeedInfo]
    runs: list[RunResult]
    comparisons: list[Comparison]
    cross_backend: list[Comparison]
    budgets: list[Budget]
    required: tuple[str, ...] = ()

    @property
    def failed_runs(self) -> list[RunResult]:
        """Failed runs on required backends, except an original whose backend refused it while
        the rewritten model ran there and was compared with original@cpu instead
        (``api._against_cpu_original``): that rewrite fixed the failure, it did not cause one."""
        stood_in = {
            c.backend
            for c in self.comparisons
            if c.backend != "cpu" and c.reference == "original@cpu"
        }
        return [
            r
            for r in self.runs
            if r.status in FAILED_STATUSES
            and r.backend in self.required
            and not (r.label == "original" and r.backend in stood_in)
        ]

    @property
    def status(self) -> str:
        if any(c.status == "mismatch" for c in self.comparisons):
            return "mismatch"
        if self.failed_runs:
            return "backend-failed"
        if any(not b.ok for b in self.budgets):
            return "over-budget"
        return "ok"

    @property
    def exit_code(self) -> int:
        return {
            "ok": EXIT_OK,
            "mismatch": EXIT_MISMATCH,
            "backend-failed": EXIT_BACKEND_FAILED,
            "over-budget": EXIT_OVER_BUDGET,
        }[self.status]

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK

    def run(self, label: str, backend: str) -> RunResult | None:
        return next((r for r in self.runs if r.label == label and r.backend == backend), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "memshrink.verify",
            "schema_version": SCHEMA_VERSION,
            "ok": self.ok,
            "status": self.status,
            "exit_code": self.exit_code,
            "models": {"original": self.original, "rewritten": self.rewritten},
            "backends": list(self.backends),
            "settings": self.settings,
            "inputs": [i.to_dict() for i in self.inputs],
            "runs": [r.to_dict() for r in self.runs],
            "comparisons": [c.to_dict() for c in self.comparisons],
            "cross_backend": [c.to_dict() for c in self.cross_backend],
            "budgets": [b.to_dict() for b in self.budgets],
        }

    def write_json(self, path: str | os.PathLike) -> None:
        from memshrink.cli import write_json

        write_json(self.to_dict(), os.fspath(path))

    def format_table(self) -> str:
        s = self.settings
        lines = [
            f"memshrink verify: {self.original} -> {self.rewritten}",
            f"  tolerances: atol {s['atol']:g}, rtol {s['rtol']:g}"
            + (f", per output {s['tolerances']}" if s.get("tolerances") else "")
            + f"; {s['runs']} runs; seed {s['seed']}; inputs: "
            + ", ".join(f"{i.name}{list(i.shape)} {i.dtype}" for i in self.inputs),
            *_tolerance_lines(s),
            "",
            "Peak RSS per stage, MiB over each process's baseline (absolute MiB in brackets):",
            f"  {'backend':<12} {'stage':<9} {'original':>14} {'rewritten':>14} {'change':>8}",
        ]
        for backend in self.backends:
            o, r = self.run("original", backend), self.run("rewritten", backend)
            names: list[str] = []
            for run in (o, r):
                for stg in run.stages if run else []:
                    if stg["name"] not in names:
                        names.append(stg["name"])
            for name in names:
                cells: list[str] = []
                vals: list[int | None] = []
                for run in (o, r):
                    d = _stage_peak_delta(run, name) if run else None
                    st = next((x for x in run.stages if x["name"] == name), None) if run else None
                    vals.append(d)
                    cells.append(f"{_mib(d, True)} [{_mib(st['peak'])}]" if st else "-")
                v0, v1 = vals
                change = _mib(v1 - v0, True) if v0 is not None and v1 is not None else "-"
                lines.append(f"  {backend:<12} {name:<9} {cells[0]:>14} {cells[1]:>14} {change:>8}")
        lines += _gpu_lines(self.runs)
        lines += ["", "Outputs, rewritten vs original on the same backend:"]
        lines.append(
            f"  {'backend':<12} {'output':<20} {'max_abs':>9} {'max_rel':>9} {'mismatch':>12}  verdict"
        )
        for c in self.comparisons:
            if not c.outputs:
                lines.append(
                    f"  {c.backend:<12} {'(all)':<20} {'':>9} {'':>9} {'':>12}  {c.status}: {c.note}"
                )
            for oc in c.reduced_precision_outputs or []:
                lines.append(_output_line(f"{c.backend}*", oc, info=True))
            for oc in c.outputs:
                lines.append(_output_line(c.backend + ("@f32" if c.recheck else ""), oc))
            if c.reduced_precision_outputs:
                lines.append(
                    f"  {c.backend + '*':<12} = at the backend's default precision, superseded by "
                    "the @f32 lines (not a verdict)"
                )
            if c.outputs and c.note:
                lines.append(f"  {c.backend:<12} note: {c.note}")
        if self.cross_backend:
            lines += [
                "",
                "Cross-backend, original vs original on the reference backend (informational):",
            ]
            for c in self.cross_backend:
                for oc in c.outputs:
                    lines.append(_output_line(f"{c.backend}", oc, info=True))
        lines += ["", "Runs:"] + [_run_line(r) for r in self.runs]
        for b in self.budgets:
            lines.append(
                f"Budget {b.backend}: peak {format_bytes(b.measured)} ({b.stage}) "
                f"{'<=' if b.ok else '>'} {format_bytes(b.limit)}: {'ok' if b.ok else 'OVER BUDGET'}"
            )
        lines.append(self.result_line())
        return "\n".join(lines)

    def failure_reasons(self) -> list[str]:
        """Why the gate failed, one short phrase per failed output, run or budget.

        Why: a CI log shows the last line first; it should name the output and the tolerance it
        broke, or the backend and the budget, without scrolling through the tables.
        """
        reasons: list[str] = []
        for c in self.comparisons:
            if c.status != "mismatch":
                continue
            reasons += [_mismatch_reason(c.backend, oc) for oc in c.outputs if not oc.ok]
        failed: dict[tuple[str, str, str], list[str]] = {}  # same failure of both models: once
        for r in self.failed_runs:
            lines = (r.error or "").strip().splitlines()
            failed.setdefault((r.backend, r.status, lines[0] if lines else ""), []).append(r.label)
        for (backend, status, err), labels in failed.items():
            who = " and ".join(labels) + (" models" if len(labels) > 1 else " model")
            reasons.append(f"{backend} {status} ({who})" + (f": {err}" if err else ""))
        for b in self.budgets:
            if not b.ok:
                reasons.append(
                    f"{b.backend} process peak {format_bytes(b.measured)} ({b.stage}) > --max-peak "
                    f"{format_bytes(b.limit)}"
                )
        return reasons

    def result_line(self, limit: int = 3) -> str:
        """``Result: STATUS (exit N)``, followed on failure by the first reasons, on one line."""
        line = f"Result: {self.status.upper()} (exit {self.exit_code})"
        reasons = self.failure_reasons() if not self.ok else []
        if reasons:
            more = f"; and {len(reasons) - limit} more" if len(reasons) > limit else ""
            line += ": " + "; ".join(reasons[:limit]) + more
        return line

    def save_plot(self, path: str | os.PathLike) -> str:
        series: dict[str, dict[str, list[tuple[str, int | None]]]] = {}
        for backend in self.backends:
            for label in ("original", "rewritten"):
                run = self.run(label, backend)
                if run and run.stages:
                    series.setdefault(backend, {})[label] = [
                        (s["name"], _stage_peak_delta(run, s["name"])) for s in run.stages
                    ]
        return _plot(series, "Peak RSS per stage: original vs rewritten", os.fspath(path))


def _tolerance_lines(settings: dict[str, Any]) -> list[str]:
    """A loud line when the tolerance is not verify's default but the one the rewrite states."""
    source = str(settings.get("tolerance_source") or "")
    if not source.startswith("stated"):
        return []
    return [
        f"  TOLERANCE atol {settings['atol']:g}, rtol {settings['rtol']:g}: {source} "
        "(recorded in the rewritten model; verify's defaults are atol 1e-5, rtol 1e-5; "
        "give --atol/--rtol to compare stricter)"
    ]


def _mismatch_reason(backend: str, oc: OutputComparison) -> str:
    """``cpu output logits: 12 of 256000 elements differ by more than atol 1e-05 + rtol 1e-05*|ref|
    (max abs 2.1e-03)``, or the shape/dtype/NaN difference that made it fail."""
    head = f"{backend} output {oc.name}"
    if oc.note in ("shape differs", "dtype differs"):
        got, ref = (
            (oc.shape, oc.ref_shape) if oc.note == "shape differs" else (oc.dtype, oc.ref_dtype)
        )
        return f"{head}: {oc.note.split()[0]} {got} != original {ref}"
    if oc.note and oc.note.startswith("missing"):
        return f"{head}: {oc.note}"
    nan = oc.nan_ref != oc.nan_out or oc.inf_ref != oc.inf_out
    text = (
        f"{head}: {oc.mismatches} of {oc.total} elements differ by more than "
        f"atol {oc.atol:g} + rtol {oc.rtol:g}*|ref|"
    )
    if oc.max_abs is not None:
        text += f" (max abs {oc.max_abs:.2e}"
        if oc.worst_index is not None and oc.worst_out is not None and oc.worst_ref is not None:
            text += f", at {list(oc.worst_index)}: {oc.worst_out:.6g} vs {oc.worst_ref:.6g}"
        text += ")"
    if nan:
        text += f"; NaN {oc.nan_ref} -> {oc.nan_out}, Inf {oc.inf_ref} -> {oc.inf_out}"
    return text


def _output_line(backend: str, oc: OutputComparison, info: bool = False) -> str:
    mm = f"{oc.mismatches}/{oc.total}"
    verdict = ("within tol" if info else "match") if oc.ok else ("differs" if info else "MISMATCH")
    if oc.note:
        verdict += f" ({oc.note})"
    if oc.nan_out or oc.nan_ref or oc.inf_out or oc.inf_ref:
        verdict += f" [NaN {oc.nan_ref}->{oc.nan_out}, Inf {oc.inf_ref}->{oc.inf_out}]"
    f = lambda v: "-" if v is None else f"{v:.2e}"  # noqa: E731
    return (
        f"  {backend:<12} {oc.name[:20]:<20} {f(oc.max_abs):>9} {f(oc.max_rel):>9} {mm:>12}  {verdict}"
        f" (atol {oc.atol:g}, rtol {oc.rtol:g})"
    )


@dataclass
class ProfileReport:
    model: str
    backends: tuple[str, ...]
    settings: dict[str, Any]
    inputs: list[FeedInfo]
    runs: list[RunResult]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.runs)

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_BACKEND_FAILED

    @property
    def status(self) -> str:
        """``ok`` or ``backend-failed``: the names ``VerifyReport.status`` uses."""
        return "ok" if self.ok else "backend-failed"

    def run(self, backend: str) -> RunResult | None:
        return next((r for r in self.runs if r.backend == backend), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "memshrink.profile",
            "schema_version": SCHEMA_VERSION,
            "ok": self.ok,
            "status": self.status,
            "exit_code": self.exit_code,
            "model": self.model,
            "backends": list(self.backends),
            "settings": self.settings,
            "inputs": [i.to_dict() for i in self.inputs],
            "runs": [r.to_dict() for r in self.runs],
        }

    def write_json(self, path: str | os.PathLike) -> None:
        from memshrink.cli import write_json

        write_json(self.to_dict(), os.fspath(path))

    def format_table(self) -> str:
        lines = [
            f"memshrink profile: {self.model} ({self.settings['runs']} runs; inputs: "
            + ", ".join(f"{i.name}{list(i.shape)} {i.dtype}" for i in self.inputs)
            + ")",
            "MiB; deltas over the process baseline, absolute in brackets; anon/file peaks sampled at 1 ms",
            f"  {'backend':<12} {'stage':<9} {'before':>7} {'peak':>13} {'after':>7} "
            f"{'anon pk':>8} {'file pk':>8} {'seconds':>8}",
        ]
        for r in self.runs:
            base = r.baseline_rss or 0
            if not r.ok:
                lines.append(f"  {r.backend:<12} {r.status}: {r.error}")
            for s in r.stages:
                lines.append(
                    f"  {r.backend:<12} {s['name']:<9} {_mib(s['before'] - base, True):>7} "
                    f"{_mib(s['peak'] - base, True) + ' [' + _mib(s['peak']) + ']':>13} "
                    f"{_mib(s['after'] - base, True):>7} {_mib(s['anon_peak']):>8} "
                    f"{_mib(s['file_peak']):>8} {s['seconds']:8.3f}"
                )
            if r.baseline_rss:
                lines.append(
                    f"  {r.backend:<12} baseline {_mib(base)} MiB (runtime imported, feeds loaded)"
                )
        lines += _gpu_lines(self.runs)
        # the verdict last, as verify's: the failure line used to sit above the stage rows
        failed = [f"{r.backend} {r.status}" for r in self.runs if not r.ok]
        verdict = f"Result: {self.status.upper()} (exit {self.exit_code})"
        lines.append(verdict + (": " + "; ".join(failed) if failed else ""))
        return "\n".join(lines)

    def save_plot(self, path: str | os.PathLike) -> str:
        series = {
            r.backend: {"model": [(s["name"], _stage_peak_delta(r, s["name"])) for s in r.stages]}
            for r in self.runs
            if r.stages
        }
        return _plot(series, f"Peak RSS per stage: {os.path.basename(self.model)}", os.fspath(path))
