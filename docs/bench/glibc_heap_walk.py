"""Walk glibc's main-arena heap after ORT CPU session creation in `memshrink verify`'s child.

    python docs/bench/glibc_heap_walk.py MODEL.onnx [-n 7] [--prefix "setarch -R"]

Why: embedded models land in different glibc heap states per process (docs/estimate.md,
"Which glibc mode…"); the stage peaks say *that* they differ, the heap says *where*. Each
process runs the verifier's child (same imports, feeds and stages) from a neutral directory
with one hook: after the session stage it reads its own ``[heap]`` through
``/proc/self/mem`` (no ctypes: importing it moved the mode) and writes the chunk headers
(offset, size|flags). The parent prints, per process, the stage peaks and the free chunks
over 200 KiB (holes) and the in-use chunks over 1 MiB, offsets in MiB from the heap start.
A chunk is free when the next chunk's ``PREV_INUSE`` bit is clear (tcache and fastbin chunks
look in use: exactly what pins a hole).
"""

from __future__ import annotations

import argparse
import struct
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verifier_child import MiB, run_child, stage_peaks, write_child_inputs  # noqa: E402

HOOK = r"""
import os, struct, sys
import memshrink.verify.child as C
_exit = C._SavingStage.__exit__
def _dump(self, *a):
    r = _exit(self, *a)
    if self.child.meter.stages[-1].name == "session":
        s = e = 0
        with open("/proc/self/maps") as f:
            for line in f:
                if line.rstrip().endswith("[heap]"):
                    s, e = (int(x, 16) for x in line.split()[0].split("-"))
        fd = os.open("/proc/self/mem", os.O_RDONLY)
        data = os.pread(fd, e - s, s)
        os.close(fd)
        out, p = bytearray(), 0
        while p + 16 <= len(data):
            head = struct.unpack_from("<Q", data, p + 8)[0]
            size = head & ~7
            if size < 16 or p + size > len(data):
                break
            out += struct.pack("<QQ", p, head)
            p += size
        with open(os.environ["HEAPWALK_OUT"], "wb") as f:
            f.write(out)
        del data
    return r
C._SavingStage.__exit__ = _dump
sys.exit(C.main(sys.argv[1:]))
"""


def chunks(path: str) -> list[tuple[int, int, bool]]:
    """(offset, size, in use) per chunk, the top chunk last."""
    b = Path(path).read_bytes()
    raw = [struct.unpack_from("<QQ", b, o) for o in range(0, len(b), 16)]
    return [
        (p, h & ~7, bool(raw[i + 1][1] & 1) if i + 1 < len(raw) else False)
        for i, (p, h) in enumerate(raw)
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("-n", type=int, default=7)
    ap.add_argument("--prefix", default="", help='e.g. "setarch -R" (ASLR off)')
    a = ap.parse_args(argv)
    wd = Path(tempfile.mkdtemp(prefix="heapwalk-"))
    inputs = write_child_inputs(a.model, wd, HOOK)
    for i in range(a.n):
        env = {"HEAPWALK_OUT": str(wd / f"h{i}")}
        r = run_child(inputs, i, "walk", env, a.prefix.split())
        if r["status"] != "ok":
            print(f"process {i}: {r['status']} {r.get('error')}")
            continue
        peaks = " / ".join(f"{p:.1f}" for p in stage_peaks(r))
        ch = chunks(str(wd / f"h{i}"))
        holes = [(p, n) for p, n, used in ch[:-1] if not used and n >= 200 * 1024]
        big = [(p, n) for p, n, used in ch if used and n >= MiB]
        fmt = lambda xs: " ".join(f"{p / MiB:.1f}:{n / MiB:.2f}" for p, n in xs)  # noqa: E731
        print(f"process {i}: peaks {peaks} MiB; heap top at {ch[-1][0] / MiB:.2f} MiB")
        print(f"  holes (at:MiB) {fmt(holes)}")
        print(f"  in use > 1 MiB {fmt(big)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
