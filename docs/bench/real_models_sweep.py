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
  outputs, and ``--backends cpu,ort-openvino`` (ONNX Runtime's OpenVINO EP, in its own
  interpreter: ``--ovep-python``; cpu as the reference for verify's precision rule) for the
  bound ``all`` output;
* ``estimate --json --backend B`` of the original and of the bound ``all`` output, for each
  measured backend B: per stage, (predicted - measured) / measured against the verify
  reports' ``peak_delta`` (``est_vs_meas`` in the rows; the ``est-err`` cell is the worst
  stage, ``MISS`` when it is over 10 %).

Verdicts: ``ok``; ``err`` (a clear one-line ``memshrink: error:``, exit 2/6); ``CRASH`` (a
traceback, an internal error, a signal, exit 1); ``WRONG`` (verify exit 3); ``BACKEND`` (verify
exit 5: a runtime failed on the original too, says which; ``WORSE`` instead when a runtime
that ran both models measured the rise below); ``BROKE`` (verify exit 5: the rewritten model
fails on a runtime that ran the original); ``WORSE`` (the rewritten model's
measured process peak on a backend, the max over its stages, above the original's by more than
10 % and 2 MiB; stage-level rises are listed in the notes). Exits 1 when any cell is CRASH,
WRONG or BROKE.
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
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(HERE))

import real_models_build as rb  # noqa: E402

from memshrink.estimate.backends import VERIFY_STAGES  # noqa: E402

COLUMNS = [
    "opt-all",
    "opt-all-bound",
    "opt-safe",
    "est-unbound",
    "est-bound",
    "verify-all",
    "verify-safe",
    "verify-all-ovep",
    "est-err",
]
EST_MISS = 0.10  # an estimated stage peak further than this from the measured one is a miss
EST_STAGES = VERIFY_STAGES  # estimate's stage names -> verify's, per backend
OVEP_PYTHON = ROOT / ".cache" / "venv-ovep" / "bin" / "python"
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


def _only(rep: dict[str, Any], backend: str) -> tuple[int, dict[str, Any]]:
    """The report cut to one backend's runs and comparison, and the exit code verify would give
    for that cut (5: a run failed, 3: a mismatch, 0): a reference run on another backend (cpu
    for the EP column) then never decides the cell."""
    runs = [r for r in rep.get("runs", []) if r["backend"] == backend]
    comps = [c for c in rep.get("comparisons", []) if c["backend"] == backend]
    rc = 5 if any(r.get("status") != "ok" for r in runs) else 0
    if not rc and any(c.get("status") == "mismatch" for c in comps):
        rc = 3
    return rc, {**rep, "runs": runs, "comparisons": comps}


def _verify(
    case: rb.Case,
    out: Path,
    work: Path,
    tag: str,
    backends: str = "cpu,openvino",
    *extra: str,
    judge: str | None = None,
) -> tuple[str, str]:
    """One verify cell; ``judge``: the one backend whose runs decide it (the others only
    serve as references)."""
    js = work / f"{case.name}.{tag}.verify.json"
    args = [
        "verify",
        str(case.path),
        str(out),
        "--backends",
        backends,
        "--quiet",
        "--json",
        str(js),
        *_bind_args(case),
        *extra,
    ]
    for k, (lo, hi) in case.int_ranges.items():
        args += ["--int-range", f"{k}={lo},{hi}"]
    rc, text = _cli(args)
    if rc in (0, 3, 4, 5) and js.exists():
        rep = json.loads(js.read_text())
        if judge:
            rc, rep = _only(rep, judge)
        return judge_report(rc, rep)
    return _verdict(rc, text), _last_line(text)


def judge_report(rc: int, rep: dict[str, Any]) -> tuple[str, str]:
    """A verify cell's verdict and note from verify's exit code and JSON report."""
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
            f"{r['model']}@{r['backend']}: {_short(str(r.get('error')))}"
            for r in rep.get("runs", [])
            if r.get("status") != "ok"
        ]
        ok = {(r["model"], r["backend"]) for r in rep.get("runs", []) if r.get("status") == "ok"}
        broke = [
            r["backend"]
            for r in rep.get("runs", [])
            if r["model"] == "rewritten"
            and r.get("status") != "ok"
            and ("original", r["backend"]) in ok
        ]
        # the rewrite made a model that a runtime ran fail there: memshrink's fault
        if broke:
            return "BROKE", "; ".join(failed)[:500]
        # nor a mismatch on a runtime that ran both (not one against another's reference)
        bad = [
            f"{c['backend']}:{o['name']}"
            for c in rep.get("comparisons", [])
            if c.get("status") == "mismatch"
            and str(c.get("reference", "")).split("@")[-1]
            == str(c.get("candidate", "")).split("@")[-1]
            for o in c.get("outputs", [])
            if not o.get("ok", True)
        ]
        if bad:
            return "WRONG", " ".join(bad)[:200] + "; " + "; ".join(failed)[:300]
        # a runtime that refused both models must not hide a rise on one that ran both
        # (session 15: ORT CPU's steady state 28 -> 35 MiB behind OpenVINO's refusal)
        ran = [r for r in rep.get("runs", []) if r.get("status") == "ok"]
        worse, notes = _peaks({**rep, "runs": ran})
        if worse:
            return "WORSE", ", ".join(worse + notes + failed)[:500]
        return "BACKEND", "; ".join(failed)[:500]
    worse, notes = _peaks(rep)
    if worse:
        return "WORSE", ", ".join(worse + notes)
    return "ok", ", ".join(notes)


def _short(err: str) -> str:
    """A runtime's error in one line: its start and its end (the EP's cause is at the end)."""
    err = " ".join(err.split())
    return err if len(err) <= 200 else f"{err[:50]} … {err[-140:]}"


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    errs = [ln for ln in lines if "error" in ln.lower()]
    return (errs[-1] if errs else lines[-1] if lines else "")[:300]


def run_case(case: rb.Case, work: Path, verify: bool, ovep: Path = OVEP_PYTHON) -> dict[str, Any]:
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
    if verify:
        add_ovep_and_estimates(row, case, work, outs["all"], ovep)
    return row


def add_ovep_and_estimates(
    row: dict[str, Any], case: rb.Case, work: Path, out: Path | None, ovep: Path
) -> None:
    """The ``verify-all-ovep`` and ``est-err`` cells (and ``est_vs_meas``) of one row: the
    EP's verify of the bound ``all`` output, then estimates of both models on every backend
    some verify report measured, against those measurements."""
    if out is None:
        for col in ("verify-all-ovep", "est-err"):
            row["cells"][col], row["notes"][col] = "-", "no output"
        return
    col = "verify-all-ovep"
    if ovep.exists():
        extra = ("--python-for", f"ort-openvino={ovep}")
        # with cpu: original@cpu is the reference that calibrates the EP's own rounding where
        # the model computes in float16 (verify's precision rule)
        row["cells"][col], row["notes"][col] = _verify(
            case, out, work, "ovep", "cpu,ort-openvino", *extra, judge="ort-openvino"
        )
    else:
        row["cells"][col], row["notes"][col] = "-", f"no {ovep}"
    measured: dict[tuple[str, str], dict[str, int]] = {}
    for tag in ("all", "ovep"):
        js = work / f"{case.name}.{tag}.verify.json"
        if js.exists():
            got = _measured(json.loads(js.read_text()))
            # each backend from its own column: cpu from verify-all, the EP from its own
            measured.update({k: v for k, v in got.items() if k not in measured})
    paths = {"original": case.path, "rewritten": out}
    errs, failed = estimate_errors(case, work, paths, measured)
    row["est_vs_meas"] = errs
    if not errs:
        row["cells"]["est-err"] = "-" if not failed else "CRASH" if "CRASH" in failed else "err"
        row["notes"]["est-err"] = failed or "nothing measured"
        return
    worst = max(errs, key=lambda e: abs(e["err"]))
    row["cells"]["est-err"] = (
        f"{'MISS' if abs(worst['err']) > EST_MISS else 'ok'} {worst['err']:+.0%}"
    )
    misses = sorted((e for e in errs if abs(e["err"]) > EST_MISS), key=lambda e: -abs(e["err"]))
    row["notes"]["est-err"] = ", ".join(
        f"{e['model'][:4]} {e['backend']}:{e['stage']} {e['pred'] / 2**20:.0f}/{e['meas'] / 2**20:.0f} MiB"
        f" ({e['err']:+.0%})"
        for e in misses
    ) + (f"; {failed}" if failed else "")


def _measured(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, int]]:
    """(model label, backend) -> {verify stage: peak_delta} of the runs that went through."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    for r in report.get("runs", []):
        if r.get("status") == "ok":
            out[(r["model"], r["backend"])] = {
                s["name"]: int(s["peak_delta"])
                for s in r.get("stages", [])
                if s.get("peak_delta") is not None
            }
    return out


_EST_CHILD = """
import json, sys, traceback
from memshrink.cli import main
rcs = []
for argv in json.loads(sys.argv[1]):
    try:
        rcs.append(main(argv))
    except SystemExit as exc:
        rcs.append(exc.code if isinstance(exc.code, int) else 2)
    except BaseException:
        traceback.print_exc()
        rcs.append(1)
print(json.dumps(rcs))
"""


def estimate_errors(
    case: rb.Case,
    work: Path,
    paths: dict[str, Path],
    measured: dict[tuple[str, str], dict[str, int]],
) -> tuple[list[dict[str, Any]], str]:
    """Per (model, backend, stage): the estimator's predicted peak against verify's measured
    one. All estimates of a row run through the real CLI in one child process (one import of
    memshrink instead of six). Returns the rows and a note on the estimates that failed."""
    jobs, argvs = [], []
    opts: list[str] = []
    if "input_ids" in case.int_ranges:
        lo, hi = case.int_ranges["input_ids"]
        opts = ["--session-option", f"memshrink.int_range={lo},{hi}"]
    if "max_length" in case.int_ranges:  # BeamSearch / GreedySearch: the values verify fed
        gen = f"max_length={case.int_ranges['max_length'][0]}"
        if "num_beams" in case.int_ranges:
            gen += f",num_beams={case.int_ranges['num_beams'][0]}"
        opts += ["--session-option", f"memshrink.generation={gen}"]
    for (label, backend), stages in sorted(measured.items()):
        if backend not in EST_STAGES or label not in paths or not stages:
            continue
        js = work / f"{case.name}.{label}.{backend}.estimate.json"
        jobs.append((label, backend, js))
        argvs.append(
            ["estimate", str(paths[label]), "--backend", backend, "--json", str(js), *opts]
            + _bind_args(case)
        )
    if not argvs:
        return [], ""
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}:{ROOT}")
    cmd = [sys.executable, "-c", _EST_CHILD, json.dumps(argvs)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
        text = p.stderr + p.stdout
        rcs = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else []
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        text, rcs = "estimate child timed out or died", []
    rows, failed = [], []
    for i, (label, backend, js) in enumerate(jobs):
        rc = rcs[i] if i < len(rcs) else 1
        if rc != 0 or not js.exists():
            failed.append(f"{label} {backend}: {_verdict(rc, text)} {_last_line(text)}")
            continue
        pred = json.loads(js.read_text())["stages"]
        meas = measured[(label, backend)]
        for est_stage, vstage in EST_STAGES[backend].items():
            if est_stage in pred and meas.get(vstage, 0) > 0:
                p_, m_ = int(pred[est_stage]["peak"]), meas[vstage]
                rows.append(
                    {
                        "model": label,
                        "backend": backend,
                        "stage": est_stage,
                        "pred": p_,
                        "meas": m_,
                        "err": (p_ - m_) / m_,
                    }
                )
    return rows, "; ".join(failed)[:400]


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


def estimate_summary(rows: list[dict[str, Any]]) -> str:
    """Per backend and stage, over every row's two models: how many predicted stage peaks fall
    within 10 % of the measured ones, within 10 % or 2 MiB (the noise of a measurement on
    this box, MEASURING.md), the median and the worst error (and its model)."""
    by: dict[tuple[str, str], list[tuple[float, int, str]]] = {}
    for r in rows:
        for e in r.get("est_vs_meas", []):
            key = (e["backend"], e["stage"])
            by.setdefault(key, []).append(
                (e["err"], e["pred"] - e["meas"], f"{r['model']} ({e['model']})")
            )
    lines = [
        "| backend | stage | n | within 10 % | within 10 % or 2 MiB | median abs err | worst |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]

    def order(k: tuple[str, str]) -> tuple[str, int]:
        return k[0], list(EST_STAGES[k[0]]).index(k[1])

    for (backend, stage), es in sorted(by.items(), key=lambda kv: order(kv[0])):
        n = len(es)
        in10 = sum(abs(e) <= EST_MISS for e, _, _ in es)
        in2 = sum(abs(e) <= EST_MISS or abs(d) <= 2 << 20 for e, d, _ in es)
        med = sorted(abs(e) for e, _, _ in es)[n // 2]
        w = max(es, key=lambda t: abs(t[0]))
        lines.append(
            f"| {backend} | {stage} | {n} | {in10} | {in2} | {med:.0%} | {w[0]:+.0%} "
            f"({w[1] / 2**20:+.0f} MiB) {w[2]} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", help="build/reuse models here (default: a temp dir)")
    ap.add_argument("--only", action="append", help="builder name (repeatable)")
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument(
        "--ovep-python",
        type=Path,
        default=OVEP_PYTHON,
        help="interpreter with onnxruntime-openvino for the verify-all-ovep column",
    )
    ap.add_argument(
        "--add-to",
        help="rows JSON of an earlier run with the same --dir: keep its cells and add only the "
        "verify-all-ovep and est-err columns, reusing its outputs and verify reports",
    )
    args = ap.parse_args()
    folder = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="msreal-"))
    if args.add_to:
        # the earlier run's outputs and reports were made from the models in DIR/models: build
        # again elsewhere only for the cases (bindings), and point them at the earlier files
        scratch = Path(tempfile.mkdtemp(prefix="msreal-cases-"))
        cases, failed = rb.build_all(scratch, args.only)
        for c in cases:
            c.path = folder / "models" / c.path.relative_to(scratch)
    else:
        cases, failed = rb.build_all(folder / "models", args.only)
    work = folder / "out"
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    earlier = (
        {r["model"]: r for r in json.loads(Path(args.add_to).read_text())["rows"]}
        if args.add_to
        else {}
    )
    for case in cases:
        t0 = time.perf_counter()
        if case.name in earlier:
            row = earlier[case.name]
            out = work / f"{case.name}.opt-all-bound.onnx"
            ok = row["cells"].get("opt-all-bound") == "ok" and out.exists()
            add_ovep_and_estimates(row, case, work, out if ok else None, args.ovep_python)
            rows.append(row)
        elif args.add_to:
            continue
        else:
            rows.append(run_case(case, work, not args.no_verify, args.ovep_python))
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
    if any(r.get("est_vs_meas") for r in rows):
        print("\nEstimated vs measured stage peaks (original and bound `all` output):\n")
        print(estimate_summary(rows))
    bad = [r for r in rows if any(v in ("CRASH", "WRONG", "BROKE") for v in r["cells"].values())]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
