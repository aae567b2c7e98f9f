"""How reproducible is a stage peak? Profile one model N times (each in a fresh process).

    python docs/bench/verify_repeat.py .cache/models/bert-base.onnx --backends cpu -n 6
    python docs/bench/verify_repeat.py M.onnx -n 6 --session-option intra_op_num_threads=1

Prints each stage's peak RSS (absolute MiB) and each run's activations (RSS after the run over
the state after session creation / compile) per repetition, then min / median / max.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from memshrink.verify import profile
from memshrink.verify.cli import _kv

MiB = 1024 * 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("model")
    ap.add_argument("--backends", default="cpu")
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--session-option", action="append", metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    opts = _kv(args.session_option, "--session-option") or None
    table: dict[tuple[str, str], list[float]] = {}
    for i in range(args.n):
        rep = profile(args.model, backends=args.backends, runs=args.runs, session_options=opts)
        for r in rep.runs:
            ref = None
            for s in r.stages:
                table.setdefault((r.backend, s["name"]), []).append(s["peak"] / MiB)
                if s["name"] in ("session", "compile"):
                    ref = s["after"]
                elif ref is not None:  # activations: RSS after the run over post-session state
                    table.setdefault((r.backend, s["name"] + " act"), []).append(
                        (s["after"] - ref) / MiB
                    )
        print(
            f"rep {i}: " + ", ".join(f"{b}/{n} {v[-1]:.0f}" for (b, n), v in table.items()),
            flush=True,
        )
    print(f"{'backend/stage':<22} {'min':>7} {'median':>7} {'max':>7}  (peak RSS, MiB, n={args.n})")
    for (b, n), v in table.items():
        print(f"{b + '/' + n:<22} {min(v):7.0f} {statistics.median(v):7.0f} {max(v):7.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
