"""ORT CPU memory of every suite model, one fresh process per model, via ``memshrink.profile``.

``memshrink.verify.profile`` already does what MEASURING.md asks (a child process per model,
VmHWM reset through ``/proc/self/clear_refs`` before each stage, deltas over the post-import
baseline, feeds from the sidecar), so this module only builds missing models, calls it and
turns the results into the table of ``docs/models.md``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from models.build import build_many, forget_exports

MIB = 1024 * 1024


def measure_one(path: Path, runs: int = 3, timeout: float = 600) -> dict[str, Any]:
    from memshrink.verify import profile

    sidecar = json.loads(Path(str(path) + ".json").read_text())
    report = profile(str(path), backends=("cpu",), runs=runs, timeout=timeout)
    run = report.to_dict()["runs"][0]
    stages = {s["name"]: s for s in run.get("stages", [])}
    row: dict[str, Any] = {
        "name": sidecar["name"],
        "weight_bytes": sidecar["weight_bytes"],
        "node_count": sidecar["node_count"],
        "external_data": sidecar["external_data"],
        "file_bytes": path.stat().st_size
        + (Path(str(path) + ".data").stat().st_size if sidecar["external_data"] else 0),
        "status": run["status"],
        "error": run.get("error"),
        "baseline_rss": (run.get("baseline") or {}).get("rss"),
    }
    for stage in ("session", "run1", f"run{runs}"):
        s = stages.get(stage)
        if s is None:
            continue
        key = "steady" if stage == f"run{runs}" and runs > 1 else stage
        row[f"{key}_peak_delta"] = s["peak_delta"]
        row[f"{key}_after_delta"] = s["after_delta"]
        row[f"{key}_anon_peak"] = s.get("anon_peak")
        row[f"{key}_file_peak"] = s.get("file_peak")
        row[f"{key}_seconds"] = s["seconds"]
    return row


def measure_many(
    names: Iterable[str],
    out_dir: str | os.PathLike[str] | None = None,
    runs: int = 3,
    timeout: float = 600,
) -> list[dict[str, Any]]:
    """Build (if needed) and measure each model; a failure becomes a row with its error."""
    names = list(names)
    built: dict[str, Path] = {}
    for name in names:  # build first, grouped by source, so each export runs once
        try:
            built.update((n, p) for n, p, _, _ in build_many([name], out_dir, keep_export=True))
        except Exception as exc:
            print(f"[models] build of {name} failed: {exc}", file=sys.stderr)
    forget_exports()
    rows = []
    for name in names:
        start = time.perf_counter()
        try:
            if name not in built:
                raise RuntimeError("build failed (see the log above)")
            row = measure_one(built[name], runs=runs, timeout=timeout)
        except Exception as exc:  # a broken model must not hide the others' numbers
            row = {"name": name, "status": "error", "error": f"{type(exc).__name__}: {exc}"}
        print(
            f"[models] measured {name} in {time.perf_counter() - start:.0f} s: {row['status']}",
            file=sys.stderr,
        )
        rows.append(row)
    return rows


def _mib(value: Any) -> str:
    return "" if value is None else f"{value / MIB:,.0f}"


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The docs table: sizes plus ORT CPU stage peaks (MiB, deltas over the process baseline)."""
    head = (
        "| model | weights MiB | nodes | storage | session peak | session after "
        "| run 1 peak | steady peak | steady anon/file peak (abs) | run s |\n"
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    )
    lines = [head]
    for r in rows:
        if r.get("status") != "ok":
            lines.append(f"| {r['name']} | | | | {r.get('status')}: {r.get('error')} | | | | | |")
            continue
        storage = "external" if r["external_data"] else "embedded"
        anon_file = f"{_mib(r.get('steady_anon_peak'))} / {_mib(r.get('steady_file_peak'))}"
        lines.append(
            f"| {r['name']} | {_mib(r['weight_bytes'])} | {r['node_count']} | {storage} "
            f"| {_mib(r.get('session_peak_delta'))} | {_mib(r.get('session_after_delta'))} "
            f"| {_mib(r.get('run1_peak_delta'))} | {_mib(r.get('steady_peak_delta'))} "
            f"| {anon_file} | {r.get('steady_seconds', 0):.3f} |"
        )
    return "\n".join(lines)
