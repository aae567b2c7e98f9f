"""Trace the large allocations of `memshrink verify`'s child with an LD_PRELOAD logger.

    gcc -O2 -shared -fPIC -o /tmp/malloc_trace.so docs/bench/malloc_trace.c -ldl
    python docs/bench/malloc_trace.py MODEL.onnx --so /tmp/malloc_trace.so [-n 3] [--min 1024]

Why: which glibc heap an ORT CPU session leaves depends on the order, sizes and alignment
spares of session creation's blocks (docs/estimate.md, "Which glibc mode"); the logger records
each call with its chunk header, so a trace can be compared with ``ort_weights.creation_blocks``
and replayed through ``glibc_heap.GlibcHeap``. Each process runs the verifier's child (same
imports, feeds and stages) from a neutral directory; a hook marks every stage's start and end
with a malloc of 7770 + k bytes (logged, too small to move the threshold). Prints each
process's stage peaks; the logs are ``DIR/logN`` (``--out``), the session stage between the
first two markers (``session_events``); ``malloc_pins.py`` reads which aligned blocks' spares
pinned and the tcache counts at each aligned allocation from them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verifier_child import run_child, stage_peaks, write_child_inputs  # noqa: E402

MARK = 7770  # marker mallocs: MARK + k bytes

HOOK = r"""
import sys
import memshrink.verify.child as C
_en, _ex = C._SavingStage.__enter__, C._SavingStage.__exit__
N = [0]
def en(self):
    N[0] += 1; x = bytearray(7770 + N[0]); del x
    return _en(self)
def ex(self, *a):
    r = _ex(self, *a)
    N[0] += 1; x = bytearray(7770 + N[0]); del x
    return r
C._SavingStage.__enter__ = en
C._SavingStage.__exit__ = ex
sys.exit(C.main(sys.argv[1:]))
"""


def session_events(log: str) -> list[list[str]]:
    """The logged calls of the session stage (between the first two markers)."""
    lines = [ln.split() for ln in Path(log).read_text().splitlines()]
    marks = [i for i, ln in enumerate(lines) if ln[0] == "m" and MARK <= int(ln[2]) < MARK + 20]
    return lines[marks[0] + 1 : marks[1]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--so", required=True, help="the built malloc_trace.so")
    ap.add_argument("-n", type=int, default=1)
    ap.add_argument("--min", type=int, default=65536, help="smallest call logged (bytes)")
    ap.add_argument("--out", default=None, help="folder for the logs (default: a temp dir)")
    a = ap.parse_args(argv)
    wd = Path(a.out or tempfile.mkdtemp(prefix="malloc-trace-"))
    inputs = write_child_inputs(a.model, wd, HOOK)
    for i in range(a.n):
        env = {
            "MLOG": str(wd / f"log{i}"),
            "MLOG_MIN": str(a.min),
            "LD_PRELOAD": str(Path(a.so).resolve()),
        }
        r = run_child(inputs, i, "trace", env)
        peaks = " / ".join(f"{p:.1f}" for p in stage_peaks(r))
        n = len(session_events(str(wd / f"log{i}")))
        print(f"process {i}: peaks {peaks} MiB; {n} session calls in {wd / f'log{i}'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
