"""Full sweep of ONNX's backend test suite through every registered memshrink pass and ``all``.

    python docs/bench/reliability_sweep.py                 # everything, 2 worker processes
    python docs/bench/reliability_sweep.py --limit 50      # a quick look
    python docs/bench/reliability_sweep.py --no-write      # print, don't touch docs/

Each worker process handles a shard of the cases and appends one JSON line per verdict to
its log, with a "start" line before each case: when a worker crashes (a runtime segfault)
or a case hangs past ``--case-timeout``, the case is recorded as a failure of every pass
and the worker is restarted after it. At the end the per-pass table (pass / fail / skipped,
with reasons) replaces the block between the sweep markers in ``docs/reliability.md`` and
the summary (counts and every non-pass verdict) goes to
``docs/bench/reliability_sweep.json``.
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "reliability"), str(ROOT / "tests")]

import reliability_harness as h  # noqa: E402

DOC = ROOT / "docs" / "reliability.md"
SUMMARY = ROOT / "docs" / "bench" / "reliability_sweep.json"
BEGIN, END = "<!-- sweep:begin -->", "<!-- sweep:end -->"


def all_cases(kinds: list[str], limit: int | None, seed: int) -> list[h.Case]:
    """Every case, in a seeded random order: a sweep stopped early is still a fair sample."""
    cases: list[h.Case] = []
    if "node" in kinds:
        cases += h.node_cases()
    cases += h.model_cases([k for k in kinds if k != "node"])
    if limit:
        cases = h.sample(cases, limit, seed)
    random.Random(seed).shuffle(cases)
    return cases


def worker(args: argparse.Namespace) -> int:
    cases = all_cases(args.kinds.split(","), args.limit, args.seed)
    index, count = (int(x) for x in args.shard.split("/"))
    mine = [c for i, c in enumerate(cases) if i % count == index]
    done = set(args.skip_case or [])
    passes = h.pass_names()
    with open(args.log, "a", buffering=1) as log:
        for case in mine:
            if case.name in done:
                continue
            log.write(json.dumps({"start": case.name, "kind": case.kind, "passes": passes}) + "\n")
            for outcome in h.run_case(case, passes):
                log.write(json.dumps(outcome.to_dict()) + "\n")
            log.write(json.dumps({"end": case.name}) + "\n")
    return 0


def _read_log(path: Path) -> tuple[list[dict], set[str], dict | None]:
    outcomes: list[dict] = []
    ended: set[str] = set()
    started: dict | None = None
    if not path.exists():
        return outcomes, ended, None
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if "start" in rec:
            started = rec
        elif "end" in rec:
            ended.add(rec["end"])
            started = None
        else:
            outcomes.append(rec)
    return outcomes, ended, started


def run_shard(args: argparse.Namespace, index: int, count: int, logdir: Path) -> None:
    """Drive one shard's worker, restarting it after a crash or a hang."""
    log = logdir / f"shard{index}.jsonl"
    lost: list[dict] = []
    while True:
        _, ended, _ = _read_log(log)
        skip = sorted(ended | {r["case"] for r in lost})
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            "--shard",
            f"{index}/{count}",
            "--log",
            str(log),
            "--kinds",
            args.kinds,
            "--seed",
            str(args.seed),
        ]
        if args.limit:
            cmd += ["--limit", str(args.limit)]
        for name in skip:
            cmd += ["--skip-case", name]
        with open(logdir / f"shard{index}.err", "a") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
            while proc.poll() is None:
                time.sleep(2)
                if log.exists() and time.time() - log.stat().st_mtime > args.case_timeout:
                    proc.kill()
                    proc.wait()
                    break
        _, _, started = _read_log(log)
        if proc.returncode == 0 and started is None:
            break
        if started is None:
            break  # died outside a case (e.g. while collecting): give up on this shard
        reason = (
            f"worker died with exit code {proc.returncode}"
            if proc.returncode not in (None, -9)
            else f"hung for more than {args.case_timeout} s"
        )
        with open(log, "a") as f:
            for p in started["passes"]:
                rec = {
                    "case": started["start"],
                    "kind": started["kind"],
                    "pass_name": p,
                    "status": "fail",
                    "reason": f"{reason} while running this case",
                    "modified": False,
                }
                f.write(json.dumps(rec) + "\n")
            f.write(json.dumps({"end": started["start"]}) + "\n")


def summarize(outcomes: list[dict], seconds: float, args: argparse.Namespace) -> dict:
    for o in outcomes:  # logs written before a KNOWN_BUGS entry existed: classify them now
        if o["status"] == "known-bug":
            o["status"], o["reason"] = "fail", o["reason"].split("): ", 1)[1]
        anchor = h.known_bug(o["pass_name"], o["reason"])
        if o["status"] == "fail" and anchor:
            o["status"] = "known-bug"
            o["reason"] = f"known bug (docs/reliability.md#{anchor}): {o['reason']}"
    passes = sorted({o["pass_name"] for o in outcomes}, key=lambda p: (p == h.ALL, p))
    cases = {o["case"]: o["kind"] for o in outcomes}
    per_pass = {}
    for p in passes:
        mine = [o for o in outcomes if o["pass_name"] == p]
        count = collections.Counter(o["status"] for o in mine)
        per_pass[p] = {
            "pass": count["pass"],
            "fail": count["fail"],
            "known_bug": count["known-bug"],
            "skip": count["skip"],
            "modified": sum(1 for o in mine if o["modified"]),
        }
    skip_reasons = collections.Counter(
        _reason_class(o["reason"]) for o in outcomes if o["status"] == "skip"
    )
    kinds = collections.Counter(cases.values())
    import onnx
    import onnxruntime

    return {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "seconds": round(seconds, 1),
        "versions": {
            "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__,
            "python": platform.python_version(),
        },
        "limit": args.limit,
        "cases": len(cases),
        "cases_by_kind": dict(kinds),
        "cases_runnable": len(
            {o["case"] for o in outcomes if not o["reason"].startswith("ORT CPU cannot run")}
        ),
        "per_pass": per_pass,
        "skip_reasons": dict(skip_reasons.most_common()),
        "failures": [o for o in outcomes if o["status"] == "fail"],
        "known_bugs": dict(
            collections.Counter(
                f"{o['pass_name']}: {o['reason'].split(')')[0]})"
                for o in outcomes
                if o["status"] == "known-bug"
            ).most_common()
        ),
        "deliberate_skips": [
            o for o in outcomes if o["status"] == "skip" and not o["reason"].startswith("ORT CPU")
        ],
    }


_ORT_REASONS = (
    ("NOT_IMPLEMENTED", "no ORT CPU kernel for this op/type (NOT_IMPLEMENTED)"),
    ("is not a registered", "op or domain not registered in ORT (e.g. training ops)"),
    (
        "can't be converted to MLDataType",
        "ORT's Python API cannot take this dtype as input (float8/int4/int2/bfloat16)",
    ),
    (
        "No corresponding Numpy type",
        "ORT's Python API cannot return this dtype (float8/int4/int2/bfloat16)",
    ),
    ("Unable to handle object", "ORT's Python API cannot take this input object"),
    ("INVALID_GRAPH", "ORT rejects the graph (INVALID_GRAPH)"),
    ("INVALID_ARGUMENT", "ORT rejects the inputs (INVALID_ARGUMENT)"),
    ("RUNTIME_EXCEPTION", "ORT fails while running (RUNTIME_EXCEPTION)"),
    ("FAIL", "ORT fails to load or run it (FAIL)"),
)


def _reason_class(reason: str) -> str:
    """Group skip reasons: ORT's error class without the model-specific tail."""
    if reason.startswith("ORT CPU cannot run the original"):
        tail = reason.split(":", 1)[1]
        for key, text in _ORT_REASONS:
            if key in tail:
                return f"ORT CPU cannot run the original as given: {text}"
        return "ORT CPU cannot run the original as given: other"
    return reason


def table(summary: dict) -> str:
    partial = (
        f" Stopped early: {summary['cases']} of the suite's cases, in the sweep's seeded random"
        " order (a fair sample)."
        if summary.get("partial")
        else ""
    )
    lines = [
        f"Sweep of {summary['when']} ({summary['seconds']:.0f} s; onnx {summary['versions']['onnx']}, "
        f"onnxruntime {summary['versions']['onnxruntime']}): **{summary['cases']} cases** "
        f"({', '.join(f'{k} {v}' for k, v in sorted(summary['cases_by_kind'].items()))}), "
        f"of which **{summary['cases_runnable']}** ORT CPU can run as given.{partial}",
        "",
        "| pass | pass | fail | known bug | skipped | modified the model |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for p, c in summary["per_pass"].items():
        lines.append(
            f"| `{p}` | {c['pass']} | {c['fail']} | {c['known_bug']} | {c['skip']} | {c['modified']} |"
        )
    lines += ["", "Skipped, by reason (per pass × case):", ""]
    for reason, n in summary["skip_reasons"].items():
        lines.append(f"- {n} — {reason}")
    if summary["known_bugs"]:
        lines += ["", "Known bugs of other components' passes (see below), per pass × case:", ""]
        for what, n in summary["known_bugs"].items():
            lines.append(f"- {n} — {what}")
    if summary["failures"]:
        lines += ["", "Failures:", ""]
        for f in summary["failures"][:40]:
            lines.append(f"- `{f['case']}` × `{f['pass_name']}`: {f['reason']}")
    else:
        lines += ["", "Failures: none."]
    return "\n".join(lines)


def write_doc(text: str) -> None:
    doc = DOC.read_text() if DOC.exists() else f"# Reliability\n\n{BEGIN}\n{END}\n"
    if BEGIN not in doc:
        doc += f"\n{BEGIN}\n{END}\n"
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--kinds", default="node," + ",".join(h.MODEL_KINDS))
    ap.add_argument("--limit", type=int, help="seeded sample of this many cases")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--case-timeout", type=float, default=300.0)
    ap.add_argument("--logdir", default="/tmp/memshrink-reliability-sweep")
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    ap.add_argument(
        "--summarize",
        action="store_true",
        help="only rebuild the table from the logs in --logdir (e.g. of a sweep stopped early)",
    )
    ap.add_argument(
        "--partial",
        action="store_true",
        help="with --summarize: the logs are of a sweep stopped early",
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--shard", help=argparse.SUPPRESS)
    ap.add_argument("--log", help=argparse.SUPPRESS)
    ap.add_argument("--skip-case", action="append", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    logdir = Path(args.logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if not args.summarize:
        for old in logdir.glob("shard*"):
            old.unlink()
        import threading

        threads = [
            threading.Thread(target=run_shard, args=(args, i, args.workers, logdir))
            for i in range(args.workers)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    outcomes = []
    for log in sorted(logdir.glob("shard*.jsonl")):
        outcomes += _read_log(log)[0]
    seconds = sum(o.get("seconds", 0.0) for o in outcomes) if args.summarize else time.time() - t0
    summary = summarize(outcomes, seconds, args)
    summary["partial"] = bool(args.summarize and args.partial)
    text = table(summary)
    print(text)
    if not args.no_write:
        SUMMARY.write_text(json.dumps(summary, indent=1) + "\n")
        write_doc(text)
        print(f"\nwrote {DOC.relative_to(ROOT)} and {SUMMARY.relative_to(ROOT)}", file=sys.stderr)
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
