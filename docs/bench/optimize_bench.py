"""Benchmark `memshrink optimize --passes all` on BERT-base with embedded weights.

Prints (and with --write, records in docs/optimize.md):
- the optimize run's own wall time and peak RSS (a fresh child process, ``wait4`` rusage),
  against the target of <= 3 s and <= 0.3 x weight bytes + 150 MiB;
- ONNX Runtime CPU session-creation peak RSS of the input and the output, each measured
  in a fresh process by ``memshrink.profile`` (VmHWM reset per stage);
- the same for onnxsim and onnxslim where installed, as the tools users would use instead.

Usage: python docs/bench/optimize_bench.py [--model bert-base] [--write]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024


def run_measured(cmd: list[str]) -> tuple[float, int, int]:
    """Run ``cmd`` in a child; return (wall seconds, peak RSS bytes, exit code)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if proc.stderr is not None:
        err = proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        print(err[-2000:], file=sys.stderr)
    return wall, usage.ru_maxrss * 1024, code


def session_peak(path: Path, source: Path) -> tuple[float, float]:
    """ORT CPU session-creation peak and steady-state run peak (MiB over baseline).

    Shapes come from the source model's sidecar: the other tools' outputs have none.
    """
    from memshrink.bindings import load_sidecar
    from memshrink.verify import profile

    side = load_sidecar(source)
    shapes = {i.name: i.shape for i in side.inputs} if side else None
    report = profile(str(path), backends=("cpu",), runs=3, shapes=shapes).to_dict()
    run = report["runs"][0]
    stages = {s["name"]: s for s in run["stages"]}
    create = next(s for n, s in stages.items() if "session" in n or "create" in n)
    last = run["stages"][-1]
    return create["peak_delta"] / MIB, last["peak_delta"] / MIB


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default="bert-base", help="suite model name (default bert-base)")
    ap.add_argument("--write", action="store_true", help="append the table to docs/optimize.md")
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    import models

    src = Path(models.build(args.model))
    weights = src.stat().st_size
    rows = []
    with tempfile.TemporaryDirectory(prefix="memshrink-bench-", dir=ROOT / ".cache") as tmp:
        out = Path(tmp) / "out.onnx"
        wall, peak, code = run_measured(
            [
                sys.executable,
                "-m",
                "memshrink.cli",
                "optimize",
                str(src),
                str(out),
                "--passes",
                "all",
                "-q",
            ]
        )
        if code != 0:
            print(f"optimize failed with exit code {code}")
            return 1
        target = 0.3 * weights + 150 * MIB
        print(f"model: {args.model} ({weights / MIB:.0f} MiB file, weights embedded)")
        print(
            f"memshrink optimize --passes all: {wall:.2f} s wall (target <= 3 s), "
            f"peak RSS {peak / MIB:.0f} MiB (target <= {target / MIB:.0f} MiB)"
        )
        before_create, before_run = session_peak(src, src)
        after_create, after_run = session_peak(out, src)
        rows.append(("original (embedded)", before_create, before_run, "-", "-"))
        rows.append(
            ("memshrink --passes all", after_create, after_run, f"{wall:.2f}", f"{peak / MIB:.0f}")
        )
        for tool, cmd in (
            ("onnxsim", [sys.executable, "-m", "onnxsim", str(src), str(Path(tmp) / "sim.onnx")]),
            (
                "onnxslim",
                [sys.executable, "-m", "onnxslim", str(src), str(Path(tmp) / "slim.onnx")],
            ),
        ):
            try:
                __import__(tool)
            except ImportError:
                continue
            t_wall, t_peak, t_code = run_measured(cmd)
            produced = Path(cmd[-1])
            if t_code == 0 and produced.exists():
                c, r = session_peak(produced, src)
                rows.append((tool, c, r, f"{t_wall:.2f}", f"{t_peak / MIB:.0f}"))
            else:
                rows.append(
                    (
                        tool,
                        float("nan"),
                        float("nan"),
                        f"{t_wall:.2f}",
                        f"{t_peak / MIB:.0f} (failed)",
                    )
                )

    header = "| output | ORT CPU session creation peak (MiB) | ORT CPU steady-state run peak (MiB) | tool wall (s) | tool peak RSS (MiB) |"
    lines = [header, "|---|---:|---:|---:|---:|"]
    lines += [f"| {n} | {c:.0f} | {r:.0f} | {w} | {p} |" for n, c, r, w, p in rows]
    table = "\n".join(lines)
    print(table)
    if args.write:
        doc = ROOT / "docs" / "optimize.md"
        stamp = time.strftime("%Y-%m-%d")
        with doc.open("a") as f:
            f.write(
                f"\n### {args.model}, measured {stamp} by docs/bench/optimize_bench.py\n\n{table}\n"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
