"""What memshrink itself costs: wall time and peak RSS of ``optimize``, ``estimate`` and
``verify`` on the suite's big models, against the target peak of 0.3 x weights + 150 MiB.

Each command runs in a fresh child (``python -m memshrink.cli``). Two peaks are reported:
``own`` is the command's own process (``VmHWM`` polled from /proc every 50 ms; it only grows,
so the last reading before exit is the peak), ``tree`` is ``wait4``'s ``ru_maxrss`` (the
largest of the process and the children it waited for: for ``verify`` that is a runtime child
holding the model). The target applies to ``own``. ``cpu`` is user + system CPU seconds of
the command and its waited-for children (less noisy than wall time on a shared machine).

Usage: python docs/bench/tool_cost_bench.py [--models gpt2,gpt2-ext,bert-base,gpt2-large-ext]
       [--commands all,safe,estimate-in,estimate-out] [--verify] [--json OUT.json]
       [--file MODEL.onnx --arg=--shape --arg=X=5,10]
``--file`` measures a model outside the suite (weights = its file size: a forest's node
attributes count as weights); each ``--arg`` is appended to every command (bindings).
Run it alone, niced: gpt2-large-ext is 3.1 GB and its output is another 3.3 GB on disk.
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

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
DEFAULT_MODELS = "gpt2,gpt2-ext,bert-base,gpt2-large-ext"
DEFAULT_COMMANDS = "all,safe,estimate-in,estimate-out"


def _hwm_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def run_measured(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    """Run ``cmd``; wall seconds, own peak (polled VmHWM), tree peak (wait4), exit code."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    own = 0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        own = max(own, _hwm_kib(proc.pid) or 0)
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):  # verify exits 1 on a mismatch or an over-budget stage
        print(err[-3000:], file=sys.stderr)
    return {
        "wall_s": round(wall, 1),
        "own_mib": round(own / 1024),
        "tree_mib": round(usage.ru_maxrss / 1024),
        # user + system CPU of the command and the children it waited for (verify's runtimes)
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "exit": code,
        "progress_lines": sum(1 for line in err.splitlines() if line.strip()),
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--models", default=DEFAULT_MODELS)
    ap.add_argument("--commands", default=DEFAULT_COMMANDS)
    ap.add_argument("--verify", action="store_true", help="also verify IN vs OUT (--passes all)")
    ap.add_argument("--json", help="write the rows here too")
    ap.add_argument("--file", action="append", default=[], help="a model file, not built")
    ap.add_argument("--arg", action="append", default=[], help="appended to every command")
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    import models

    cli = [sys.executable, "-m", "memshrink.cli"]
    commands = args.commands.split(",")
    rows = []
    print(
        "| model | weights (MiB) | command | wall (s) | CPU (s) | peak RSS (MiB) | target (MiB) |"
    )
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    names = [] if args.file and args.models == DEFAULT_MODELS else args.models.split(",")
    for name in names + args.file:
        if name in args.file:
            src = Path(name)
            weights = src.stat().st_size
            name = src.stem
        else:
            src = Path(models.build(name))
            meta = json.loads(Path(f"{src}.json").read_text())
            weights = int(meta.get("weight_bytes") or src.stat().st_size)
        target = 0.3 * weights / MIB + 150
        with tempfile.TemporaryDirectory(prefix="memshrink-cost-", dir=ROOT / ".cache") as tmp:
            out_all = Path(tmp) / "all.onnx"
            plan: list[tuple[str, list[str]]] = []
            if "all" in commands or "estimate-out" in commands or args.verify:
                plan.append(("optimize --passes all", ["optimize", str(src), str(out_all)]))
                plan[-1][1].extend(["--passes", "all"])
            if "safe" in commands:
                out_safe = Path(tmp) / "safe.onnx"
                plan.append(
                    ("optimize --passes safe", ["optimize", str(src), str(out_safe), "--passes"])
                )
                plan[-1][1].append("safe")
            if "estimate-in" in commands:
                plan.append(("estimate IN", ["estimate", str(src)]))
            if "estimate-out" in commands:
                plan.append(("estimate OUT (all)", ["estimate", str(out_all)]))
            if args.verify:
                verify = ["verify", str(src), str(out_all), "--backends", "cpu"]
                plan.append(("verify IN OUT --backends cpu", verify))
            for label, argv in plan:
                row = {"model": name, "weights_mib": round(weights / MIB), "command": label}
                row.update(run_measured(cli + argv + args.arg))
                row["target_mib"] = round(target)
                rows.append(row)
                peak = f"{row['own_mib']}"
                if row["tree_mib"] > row["own_mib"] + 8:
                    peak += f" (children {row['tree_mib']})"
                miss = "" if row["own_mib"] <= target else " **miss**"
                print(
                    f"| {name} | {row['weights_mib']} | {label} | {row['wall_s']} | {row['cpu_s']} | {peak}"
                    f" | {row['target_mib']}{miss} |",
                    flush=True,
                )
                if "safe" in label:
                    os.unlink(out_safe)
                    Path(f"{out_safe}.data").unlink(missing_ok=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
