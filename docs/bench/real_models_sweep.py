"""Robustness sweep on real-world exported models: optimize / estimate / verify, one matrix.

    python docs/bench/real_models_sweep.py                    # build into a temp dir, run all
    python docs/bench/real_models_sweep.py --dir /tmp/h4models --only hf-bart-legacy
    python docs/bench/real_models_sweep.py --json matrix.json --no-verify

The models (``real_models_build.py``: torch legacy and dynamo exports, control flow, Hugging Face
architectures, ORT optimizer / quantizer / fp16 outputs, odd files) are built with random weights
into a temp folder. Per model, through the real CLI in a subprocess:

* ``optimize IN OUT --passes all`` (unbound, and with ``--dim`` bindings, which the shape-driven
  passes chunk / reorder / recompute need) and ``--passes safe``;
* ``estimate OUT`` without binding its symbolic dims (must be ok or a one-line error naming the
  dim, exit 2) and with ``--dim`` bindings;
* ``verify IN OUT --backends cpu,openvino --dim ...`` for the bound ``all`` and the ``safe``
  outputs.

Verdicts: ``ok``; ``err`` (a clear one-line ``memshrink: error:``, exit 2/6); ``CRASH`` (a
traceback, an internal error, a signal, exit 1); ``WRONG`` (verify exit 3); ``BACKEND`` (verify
exit 5: a runtime failed on the original too, says which); ``WORSE`` (the rewritten model's
measured process peak on a backend, the max over its stages, above the original's by more than
10 % and 2 MiB; stage-level rises are listed in the notes). Exits 1 when any cell is CRASH or
WRONG.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import real_models_build as rb  # noqa: E402

COLUMNS = [
    "opt-all",
    "opt-all-bound",
    "opt-safe",
    "est-unbound",
    "est-bound",
    "verify-all",
    "verify-safe",
]
WORSE_REL, WORSE_ABS = 0.10, 2 << 20


def _cli(args: list[str], timeout: int = 900) -> tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}:{ROOT}")
    cmd = [sys.executable, "-m", "memshrink.cli", *args]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return -9, "timed out"
    return p.returncode, p.stderr + p.stdout


def _verdict(rc: int, text: str) -> str:
    if "Traceback" in text or "internal error" in text or rc < 0 or rc == 1:
        return "CRASH"
    if rc == 0:
        return "ok"
    if rc in (2, 6, 7):
        return "err"
    return f"rc{rc}"


def _bind_args(case: rb.Case) -> list[str]:
    out: list[str] = []
    for k, v in case.dims.items():
        out += ["--dim", f"{k}={v}"]
    for k, s in case.shapes.items():
        out += ["--shape", f"{k}={','.join(map(str, s))}"]
    return out


def _peaks(report: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(backends whose process peak, the max over stages, is clearly above the original's;
    single stages that are, for information: chunking can raise OpenVINO's compile stage
    while lowering the infer stage that sets the process peak)."""
    by: dict[tuple[str, str], dict[str, int]] = {}
    for r in report.get("runs", []):
        stages = {
            s["name"]: int(s["peak_delta"])
            for s in r.get("stages", [])
            if s.get("peak_delta") is not None
        }
        by[(r["model"], r["backend"])] = stages
    worse, stage_notes = [], []
    for (label, backend), stages in by.items():
        ref = by.get(("original", backend), {})
        if label != "rewritten" or not stages or not ref:
            continue
        o, v = max(ref.values()), max(stages.values())
        if v > o * (1 + WORSE_REL) and v - o > WORSE_ABS:
            worse.append(f"{backend} peak {o >> 20}->{v >> 20} MiB")
        for st, v in stages.items():
            o = ref.get(st)
            if o is not None and v > o * (1 + WORSE_REL) and v - o > WORSE_ABS:
                stage_notes.append(f"{backend}:{st} {o >> 20}->{v >> 20} MiB")
        stage_notes.append(
            f"{backend} peak {max(ref.values()) >> 20}->{max(stages.values()) >> 20} MiB"
        )
    return worse, stage_notes


def _verify(case: rb.Case, out: Path, work: Path, tag: str) -> tuple[str, str]:
    js = work / f"{case.name}.{tag}.verify.json"
    args = [
        "verify",
        str(case.path),
        str(out),
        "--backends",
        "cpu,openvino",
        "--quiet",
        "--json",
        str(js),
        *_bind_args(case),
    ]
    for k, (lo, hi) in case.int_ranges.items():
        args += ["--int-range", f"{k}={lo},{hi}"]
    rc, text = _cli(args)
    if rc in (0, 3, 4, 5) and js.exists():
        rep = json.loads(js.read_text())
        if rc == 3:
            bad = [
                f"{c['backend']}:{o['name']}"
                for c in rep.get("comparisons", [])
                for o in c.get("outputs", [])
                if not o.get("ok", True)
            ]
            return "WRONG", " ".join(bad)[:200]
        if rc == 5:
            failed = [
                f"{r['model']}@{r['backend']}: {str(r.get('error'))[:120]}"
                for r in rep.get("runs", [])
                if r.get("status") != "ok"
            ]
            return "BACKEND", "; ".join(failed)[:300]
        worse, notes = _peaks(rep)
        if worse:
            return "WORSE", ", ".join(worse + notes)
        return "ok", ", ".join(notes)
    return _verdict(rc, text), _last_line(text)


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    errs = [ln for ln in lines if "error" in ln.lower()]
    return (errs[-1] if errs else lines[-1] if lines else "")[:300]


def run_case(case: rb.Case, work: Path, verify: bool) -> dict[str, Any]:
    row: dict[str, Any] = {"model": case.name, "cells": {}, "notes": {}}
    outs = {}
    for col, preset, bind in (
        ("opt-all", "all", []),
        ("opt-all-bound", "all", _bind_args(case)),
        ("opt-safe", "safe", []),
    ):
        out = work / f"{case.name}.{col}.onnx"
        t0 = time.perf_counter()
        rc, text = _cli(["optimize", str(case.path), str(out), "--passes", preset, "-q", *bind])
        row["cells"][col] = _verdict(rc, text)
        row["notes"][col] = _last_line(text) if rc else f"{time.perf_counter() - t0:.1f} s"
        outs[col] = out if rc == 0 else None
    # passes that need shapes (chunk, reorder, recompute) act on the bound run: verify that one
    outs["all"], outs["safe"] = outs["opt-all-bound"], outs["opt-safe"]
    target = outs["opt-all"] or outs["opt-safe"] or case.path
    rc, text = _cli(["estimate", str(target)])
    v = _verdict(rc, text)
    if v == "err" and case.dims and not any(d in text for d in case.dims):
        v = "err?"  # an error that does not name the unbound dim
    row["cells"]["est-unbound"], row["notes"]["est-unbound"] = v, _last_line(text) if rc else ""
    rc, text = _cli(["estimate", str(target), *_bind_args(case)])
    row["cells"]["est-bound"], row["notes"]["est-bound"] = (
        _verdict(rc, text),
        _last_line(text) if rc else "",
    )
    for preset in ("all", "safe"):
        col = f"verify-{preset}"
        if not verify:
            continue
        if outs[preset] is None:
            row["cells"][col], row["notes"][col] = "-", "no output"
            continue
        row["cells"][col], row["notes"][col] = _verify(case, outs[preset], work, preset)
    return row


def format_matrix(rows: list[dict[str, Any]], failed_builds: dict[str, str]) -> str:
    head = "| model | " + " | ".join(COLUMNS) + " |"
    lines = [head, "| --- |" + " --- |" * len(COLUMNS)]
    for r in rows:
        lines.append(
            f"| {r['model']} | " + " | ".join(r["cells"].get(c, "-") for c in COLUMNS) + " |"
        )
    notes = [
        f"- {r['model']} / {c}: {r['notes'][c]}"
        for r in rows
        for c in COLUMNS
        if r["cells"].get(c) not in (None, "ok", "-") and r["notes"].get(c)
    ]
    if failed_builds:
        notes += [f"- build failed (not memshrink): {k}: {v}" for k, v in failed_builds.items()]
    return "\n".join(lines + ([""] + notes if notes else []))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", help="build/reuse models here (default: a temp dir)")
    ap.add_argument("--only", action="append", help="builder name (repeatable)")
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    folder = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="msreal-"))
    cases, failed = rb.build_all(folder / "models", args.only)
    work = folder / "out"
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in cases:
        t0 = time.perf_counter()
        rows.append(run_case(case, work, not args.no_verify))
        print(
            f"{case.name}: {rows[-1]['cells']} ({time.perf_counter() - t0:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
        if args.json:
            Path(args.json).write_text(
                json.dumps({"rows": rows, "failed_builds": failed}, indent=1)
            )
    print(format_matrix(rows, failed))
    bad = [r for r in rows if any(v in ("CRASH", "WRONG") for v in r["cells"].values())]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
