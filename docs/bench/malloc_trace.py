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
first two markers (``session_events``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
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
    sys.path.insert(0, str(ROOT / "src"))
    import numpy as np

    from memshrink.verify.inputs import make_feeds
    from memshrink.verify.modelinfo import read_model_io

    io = read_model_io(a.model)
    feeds, _ = make_feeds(io, a.model)
    wd = Path(a.out or tempfile.mkdtemp(prefix="malloc-trace-"))
    wd.mkdir(parents=True, exist_ok=True)
    names = list(feeds)
    np.savez(wd / "feeds.npz", **{f"i{k}": feeds[n] for k, n in enumerate(names)})
    (wd / "hook.py").write_text(HOOK)
    for i in range(a.n):
        spec = {
            "model": {"kind": "onnx", "path": str(Path(a.model).resolve())},
            "backend": "cpu", "label": "trace", "feeds": str(wd / "feeds.npz"),
            "feed_names": names, "output_names": [o.name for o in io.outputs], "runs": 3,
            "session_options": {}, "provider_options": {},
            "result": str(wd / f"r{i}.json"), "outputs": str(wd / f"o{i}.npz"),
        }  # fmt: skip
        (wd / f"s{i}.json").write_text(json.dumps(spec))
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT / "src"),
            "MLOG": str(wd / f"log{i}"),
            "MLOG_MIN": str(a.min),
            "LD_PRELOAD": str(Path(a.so).resolve()),
        }
        cmd = [sys.executable, str(wd / "hook.py"), str(wd / f"s{i}.json")]
        subprocess.run(cmd, env=env, cwd=tempfile.gettempdir(), capture_output=True, check=False)
        r = json.loads((wd / f"r{i}.json").read_text())
        base = r["baseline"]["rss"]
        peaks = " / ".join(f"{(s['peak'] - base) / MiB:.1f}" for s in r["stages"])
        n = len(session_events(str(wd / f"log{i}")))
        print(f"process {i}: peaks {peaks} MiB; {n} session calls in {wd / f'log{i}'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
