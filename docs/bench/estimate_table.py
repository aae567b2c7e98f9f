"""Render ``estimate_bench.py --json`` rows as the markdown table of docs/estimate.md.

    python docs/bench/estimate_table.py ROWS.json [MORE.json ...]

Later files win for the same (model, backend), so an ORT-only rerun can be layered over a full
run. Prints the table and the "within ±10 %" counts per backend and stage.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

MiB = 1 << 20


def render(rows: list[dict]) -> str:
    head = (
        "| model | backend | create pred/meas | err | run 1 pred/meas | err | steady pred/meas "
        "| err | activations steady pred/meas | greedy | onnxsim arena | run 1 glibc modes pred "
        "(consolidated / partly pinned / pinned) / processes |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    m = lambda v: "-" if v is None else f"{v / MiB:.0f}"  # noqa: E731
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['backend']} | {m(r['pred_create'])}/{m(r['meas_create'])} | "
            f"{r['err_create_%']:+.1f}% | {m(r['pred_run1'])}/{m(r['meas_run1'])} | "
            f"{r['err_run1_%']:+.1f}% | {m(r['pred_steady'])}/{m(r['meas_steady'])} | "
            f"{r['err_steady_%']:+.1f}% | {m(r['pred_act_steady'])}/{m(r['meas_act_steady'])} | "
            f"{m(r['greedy'])} | {m(r['onnxsim_arena'])} | {_modes(r)} |"
        )
    counts = []
    for be in dict.fromkeys(r["backend"] for r in rows):
        sub = [r for r in rows if r["backend"] == be]
        ok = {k: sum(abs(r[f"err_{k}_%"]) <= 10 for r in sub) for k in ("create", "run1", "steady")}
        counts.append(
            f"{be}: {'compile' if be == 'openvino' else 'session creation'} {ok['create']}/{len(sub)}, run 1 {ok['run1']}/{len(sub)}, "
            f"steady state {ok['steady']}/{len(sub)}"
        )
    return "\n".join(lines) + "\n\nWithin ±10 %: " + "; ".join(counts) + ".\n"


def _modes(r: dict) -> str:
    """Embedded ORT CPU rows: the run-1 peak of each glibc mode the estimator reports, and
    every process's measured run-1 peak as value x count; '-' elsewhere."""
    modes = (r.get("pred_modes") or {}).get("run_1")
    if not modes:
        return "-"
    counts: dict[int, int] = {}
    for v in r.get("spread_run1") or []:
        counts[round(v / MiB)] = counts.get(round(v / MiB), 0) + 1
    meas = ", ".join(f"{v}x{n}" for v, n in sorted(counts.items()))
    pred = " / ".join(
        f"{modes[k] / MiB:.0f}" for k in ("consolidated", "partly_pinned", "pinned") if k in modes
    )
    return f"{pred} / {meas}"


def main(argv: list[str]) -> int:
    merged: dict[tuple[str, str], dict] = {}
    for p in argv:
        for r in json.loads(Path(p).read_text()):
            merged[(r["model"], r["backend"])] = r
    print(render(list(merged.values())), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
