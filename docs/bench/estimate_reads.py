"""Does `estimate` map or read the weights of a model with external data? (python docs/bench/estimate_reads.py M.onnx [ort openvino])
Logs every mmap.mmap of a file and every os.pread/os.read byte count during estimate."""

# ruff: noqa: E402  (the wrappers must be installed before memshrink is imported)

import mmap
import os
import sys
import time

path = sys.argv[1]
data = path + ".data" if os.path.exists(path + ".data") else None
maps, reads = [], []
_mm = mmap.mmap


class LoggedMap(_mm):
    def __new__(cls, fileno, length, *a, **k):
        try:
            name = os.readlink(f"/proc/self/fd/{fileno}")
        except OSError:
            name = "?"
        maps.append((name, length))
        return _mm.__new__(cls, fileno, length, *a, **k)


mmap.mmap = LoggedMap
_pread = os.pread


def pread(fd, n, off):
    b = _pread(fd, n, off)
    reads.append((os.readlink(f"/proc/self/fd/{fd}"), len(b)))
    return b


os.pread = pread
_pv = os.preadv


def preadv(fd, bufs, off):
    n = _pv(fd, bufs, off)
    reads.append((os.readlink(f"/proc/self/fd/{fd}"), n))
    return n


os.preadv = preadv


def status():
    d = {}
    with open("/proc/self/status") as f:
        lines = f.read().splitlines()
    for ln in lines:
        if ln.startswith(("VmHWM", "VmRSS", "RssAnon", "RssFile")):
            k, v = ln.split(":")
            d[k] = int(v.split()[0]) // 1024
    return d


def data_rss():
    tot, cur = 0, False
    with open("/proc/self/smaps") as f:
        lines = f.read().splitlines()
    for ln in lines:
        if ln[0] in "0123456789abcdef" and "-" in ln.split()[0]:
            cur = data is not None and ln.rstrip().endswith(os.path.realpath(data))
        elif cur and ln.startswith("Rss:"):
            tot += int(ln.split()[1])
    return tot // 1024


from memshrink.estimate import estimate

print("after import", status())
for be in sys.argv[2:] or ["ort", "openvino"]:
    maps.clear()
    reads.clear()
    t = time.process_time()
    e = estimate(path, backend=be)
    print(
        f"{be}: {time.process_time() - t:.1f} CPU-s, peaks MiB",
        {k: round(v / 2**20, 1) for k, v in e.stage_peaks().items()},
    )
    print("   status", status(), "data-file RSS MiB", data_rss())
    print("   maps:", list(maps))
    by = {}
    for n, b in reads:
        by[n] = by.get(n, 0) + b
    print("   pread bytes by file:", by)
