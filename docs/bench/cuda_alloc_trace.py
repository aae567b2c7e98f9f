"""Every device allocation the ONNX Runtime CUDA EP makes, in order, per stage.

    python docs/bench/cuda_alloc_trace.py trace MODEL.onnx --out trace.json   # GPU machine
    python docs/bench/cuda_alloc_trace.py arena MODEL.onnx --out arena.json   # GPU machine

Why: the estimator replays the CUDA EP's requests through a BFC arena (``estimate/cuda.py``);
what the arena grows by depends on the exact requests (weights in ORT's per-process copy order,
inputs, activations, each Conv's cuDNN workspace, the algorithm search's transient workspace,
the memory-pattern block). NVML shows only the arena's regions. ``trace`` hands the EP an
external allocator (provider options ``gpu_external_alloc`` / ``gpu_external_free``, which
replace the arena: ``CUDAExecutionProvider::CreateCudaAllocator``) that logs every request
(bytes, stage, pointer) and frees, calling ``cudaMalloc`` / ``cudaFree`` through ctypes.
``arena`` runs the default arena (``kNextPowerOfTwo``) with ORT's verbose log and keeps every
``Extending`` line per stage, with NVML per-process memory after each stage.
Libraries' own device buffers (cuBLAS/cuDNN handles' workspaces, kernels) are not requests to
the EP's allocator and are not in the trace.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

STAGES = ("session", "run1", "run2", "run3")


def _cudart() -> Any:
    names = ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
    for pat in ("/usr/local/cuda*/lib64/libcudart.so*", "/usr/lib/x86_64-linux-gnu/libcudart.so*"):
        names += sorted(glob.glob(pat))
    for site in sys.path:
        names += sorted(glob.glob(os.path.join(site, "nvidia", "cu*", "lib", "libcudart.so*")))
        names += sorted(
            glob.glob(os.path.join(site, "nvidia", "cuda_runtime", "lib", "libcudart.so*"))
        )
    for n in names:
        try:
            return ctypes.CDLL(n)
        except OSError:
            continue
    raise OSError("no libcudart found")


def _feeds(path: str) -> dict[str, Any]:
    from memshrink.verify.api import _feeds as feeds_of
    from memshrink.verify.kinds import read_io, resolve_model

    ref = resolve_model(path, "model", Path(path).parent)
    # symbolic dims / integer ranges of a model without a sidecar (cuda_real14.py's cases):
    # MEMSHRINK_TRACE_BIND='{"dims": {...}, "int_ranges": {name: [lo, hi]}}'
    bind = json.loads(os.environ.get("MEMSHRINK_TRACE_BIND", "{}"))
    ranges = {k: tuple(v) for k, v in bind.get("int_ranges", {}).items()} or None
    arrays, _ = feeds_of(read_io(ref), ref.path, None, None, bind.get("dims"), ranges, 0)
    return arrays


def _nvml() -> Any:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:  # noqa: BLE001 - dry run on a machine without a GPU
        return lambda: 0

    def used() -> int:
        pid = os.getpid()
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
            if p.pid == pid:
                return int(p.usedGpuMemory or 0)
        return 0

    return used


def trace_child(path: str, out: str, popts: dict[str, str]) -> None:
    """Own process: the external allocator logs every request and free."""
    import onnxruntime as ort

    cudart = _cudart()
    cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    cudart.cudaFree.argtypes = [ctypes.c_void_p]
    stage = ["session"]
    events: list[list[Any]] = []
    sizes: dict[int, int] = {}

    @ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)
    def alloc(n: int) -> int:
        p = ctypes.c_void_p()
        rc = cudart.cudaMalloc(ctypes.byref(p), max(int(n), 1))
        events.append(["a", stage[0], int(n), int(p.value or 0), rc])
        sizes[int(p.value or 0)] = int(n)
        return int(p.value or 0)

    @ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    def free(p: int) -> None:
        events.append(["f", stage[0], sizes.pop(int(p or 0), -1), int(p or 0)])
        cudart.cudaFree(p)

    @ctypes.CFUNCTYPE(None)
    def empty() -> None:
        events.append(["e", stage[0]])

    addr = {
        "gpu_external_alloc": str(ctypes.cast(alloc, ctypes.c_void_p).value),
        "gpu_external_free": str(ctypes.cast(free, ctypes.c_void_p).value),
        "gpu_external_empty_cache": str(ctypes.cast(empty, ctypes.c_void_p).value),
    }
    used = _nvml()
    feeds = _feeds(path)
    res: dict[str, Any] = {"model": path, "options": popts}
    sess = ort.InferenceSession(
        path,
        providers=[("CUDAExecutionProvider", {"use_tf32": "0", **popts, **addr})],
        enable_fallback=0,
    )
    res["providers"] = sess.get_providers()
    res["nvml"] = {"session": used()}
    for r in range(1, 4):
        stage[0] = f"run{r}"
        sess.run(None, feeds)
        res["nvml"][f"run{r}"] = used()
    res["events"] = events
    Path(out).write_text(json.dumps(res))


EXT = re.compile(r"num_bytes:\s*(\d+).*rounded_bytes:\s*(\d+)")
EXTENDED = re.compile(r"Extended allocation by (\d+) bytes")


def arena_child(path: str, out: str, popts: dict[str, str]) -> None:
    """Own process: default arena, ORT verbose log on stderr with stage markers; NVML."""
    import onnxruntime as ort

    used = _nvml()
    feeds = _feeds(path)
    ort.set_default_logger_severity(0)
    so = ort.SessionOptions()
    so.log_severity_level = 0
    res: dict[str, Any] = {"model": path, "options": popts, "nvml": {"before": used()}}
    sess = ort.InferenceSession(
        path, so, providers=[("CUDAExecutionProvider", {"use_tf32": "0", **popts})],
        enable_fallback=0,
    )  # fmt: skip
    res["providers"] = sess.get_providers()
    res["nvml"]["session"] = used()
    for r in range(1, 4):
        print(f"=== STAGE run{r}", file=sys.stderr, flush=True)
        sess.run(None, feeds)
        res["nvml"][f"run{r}"] = used()
    Path(out).write_text(json.dumps(res))


def run_child(kind: str, path: str, out: str, popts: dict[str, str]) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        f"{kind}-child",
        path,
        "--out",
        out,
        "--opts",
        json.dumps(popts),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    res: dict[str, Any] = {"rc": p.returncode}
    if Path(out).exists():
        res.update(json.loads(Path(out).read_text()))
    if p.returncode:
        res["stderr_tail"] = p.stderr[-1500:]
    if kind == "arena":
        stage, ext, cuda = "session", [], False
        for line in p.stderr.splitlines():
            if "=== STAGE" in line:
                stage = line.split()[-1]
            elif m := EXT.search(line):
                cuda = "for Cuda" in line
                if cuda:
                    ext.append([stage, int(m.group(1)), int(m.group(2))])
            elif (m := EXTENDED.search(line)) and cuda and ext:
                ext[-1].append(int(m.group(1)))  # [stage, requested, rounded, region]
        res["extensions"] = ext
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("cmd", choices=["trace", "arena", "trace-child", "arena-child"])
    ap.add_argument("model")
    ap.add_argument("--out", required=True)
    ap.add_argument("--opts", default="{}", help="CUDA provider options (JSON)")
    a = ap.parse_args(argv)
    popts = json.loads(a.opts)
    if a.cmd == "trace-child":
        trace_child(a.model, a.out, popts)
    elif a.cmd == "arena-child":
        arena_child(a.model, a.out, popts)
    else:
        tmp = a.out + ".child.json"
        res = run_child(a.cmd, a.model, tmp, popts)
        Path(a.out).write_text(json.dumps(res))
        Path(tmp).unlink(missing_ok=True)
        print(a.cmd, a.model, "rc", res["rc"], res.get("nvml"), res.get("stderr_tail", "")[-300:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
