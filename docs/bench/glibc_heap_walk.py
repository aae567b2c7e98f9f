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
import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20

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
    sys.path.insert(0, str(ROOT / "src"))
    import numpy as np

    from memshrink.verify.inputs import make_feeds
    from memshrink.verify.modelinfo import read_model_io

    io = read_model_io(a.model)
    feeds, _ = make_feeds(io, a.model)
    wd = Path(tempfile.mkdtemp(prefix="heapwalk-"))
    names = list(feeds)
    np.savez(wd / "feeds.npz", **{f"i{k}": feeds[n] for k, n in enumerate(names)})
    (wd / "hook.py").write_text(HOOK)
    for i in range(a.n):
        spec = {
            "model": {"kind": "onnx", "path": str(Path(a.model).resolve())},
            "backend": "cpu", "label": "walk", "feeds": str(wd / "feeds.npz"),
            "feed_names": names, "output_names": [o.name for o in io.outputs], "runs": 3,
            "session_options": {}, "provider_options": {},
            "result": str(wd / f"r{i}.json"), "outputs": str(wd / f"o{i}.npz"),
        }  # fmt: skip
        (wd / f"s{i}.json").write_text(json.dumps(spec))
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HEAPWALK_OUT": str(wd / f"h{i}")}
        cmd = [*a.prefix.split(), sys.executable, str(wd / "hook.py"), str(wd / f"s{i}.json")]
        subprocess.run(cmd, env=env, cwd=tempfile.gettempdir(), capture_output=True, check=False)
        r = json.loads((wd / f"r{i}.json").read_text())
        if r["status"] != "ok":
            print(f"process {i}: {r['status']} {r.get('error')}")
            continue
        base = r["baseline"]["rss"]
        peaks = " / ".join(f"{(s['peak'] - base) / MiB:.1f}" for s in r["stages"])
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
