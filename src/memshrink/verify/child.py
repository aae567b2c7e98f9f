"""The measuring child: one (model, backend) per process, ``python -m memshrink.verify.child SPEC``.

Why a process each: allocators keep freed memory (glibc, ORT's arena, OpenVINO's caches, the
CUDA context), so a second model in the same process would measure the first one's leftovers;
and a crash or hang of a runtime must not take memshrink down.

Protocol: SPEC is a JSON file written by the parent (``runner.py``)::

    {"model": {"kind": "onnx", "path": "m.onnx"}, "backend": "cpu", "label": "original",
     "feeds": "feeds.npz", "feed_names": [...], "output_names": [...], "runs": 3,
     "session_options": {...}, "provider_options": {...},
     "result": "result.json", "outputs": "outputs.npz"}

The child rewrites ``result`` (atomically) after every stage, so a crash still leaves the stages
that finished; outputs of the last run go to ``outputs`` as ``o0, o1, ...`` in output order.
Imports: stdlib, numpy and the runtime only — it may run under another interpreter (a venv with
``onnxruntime-openvino`` or ``onnxruntime-gpu``) and on machines without openvino or onnx.
"""

from __future__ import annotations

import errno
import gc
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from memshrink.runtime.backends import (
    BackendUnavailable,
    import_ort,
    ort_providers,
    ort_session_options,
    ov_split_config,
)
from memshrink.verify.measure import Meter, read_status

EXIT_FAILED = 1
EXIT_UNSUPPORTED = 3
#: The child could not write its results: its folder's disk is full (the parent says so, exit 7).
EXIT_NO_SPACE = 4
_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
_PR_SET_PDEATHSIG = 1
FAULT_ENV = "MEMSHRINK_TEST_CHILD_FAULT"


class Unsupported(Exception):
    """The runtime or execution provider is not available in this interpreter."""


class Child:
    """State of one measuring run; ``save()`` is called after each stage."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.result: dict[str, Any] = {
            "status": "running",
            "error": None,
            "backend": spec["backend"],
            "label": spec.get("label"),
            "pid": os.getpid(),
            "python": sys.executable,
            "runtime": {},
            "baseline": None,
            "stages": [],
            "gpu": None,
            "assumptions": {},
            # Settings that change the measured memory (e.g. glibc's dynamic mmap threshold
            # makes ORT CPU peaks bimodal; MALLOC_MMAP_THRESHOLD_ fixes it): say which were set.
            "environment": {
                k: v
                for k, v in os.environ.items()
                if k.startswith(("MALLOC_", "OMP_", "OV_", "ORT_", "CUDA_"))
            },
        }
        self.meter: Meter | None = None

    def save(self) -> None:
        if self.meter is not None:
            self.result["stages"] = [s.to_dict() for s in self.meter.stages]
        path = self.spec["result"]
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.result, f)
        os.replace(tmp, path)

    def start_meter(self, gpu_probe: Callable[[], int | None] | None = None) -> Meter:
        gc.collect()
        self.meter = Meter(gpu_probe=gpu_probe)
        b = read_status()
        self.result["baseline"] = {
            "rss": b["VmRSS"],
            "anon": b["RssAnon"],
            "file": b["RssFile"],
            "what": "process RSS after importing the runtime and loading the feeds",
        }
        self.save()
        return self.meter

    def stage(self, name: str):  # type: ignore[no-untyped-def]
        assert self.meter is not None
        return _SavingStage(self, name)

    def fault(self, point: str) -> None:
        """Test-only hook (``MEMSHRINK_TEST_CHILD_FAULT=segv|kill|hang|raise[:BACKEND[:LABEL]]``)."""
        spec = os.environ.get(FAULT_ENV)
        if not spec or point != "after-first-stage":
            return
        kind, _, rest = spec.partition(":")
        backend, _, label = rest.partition(":")
        if backend and backend != self.spec["backend"]:
            return
        if label and label != self.spec.get("label"):
            return
        if kind == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif kind == "kill":  # what the OOM killer does
            os.kill(os.getpid(), signal.SIGKILL)
        elif kind == "hang":
            time.sleep(3600)
        elif kind == "raise":
            raise RuntimeError("test fault injected by MEMSHRINK_TEST_CHILD_FAULT")


class _SavingStage:
    def __init__(self, child: Child, name: str) -> None:
        self.child = child
        assert child.meter is not None
        self.cm = child.meter.stage(name)

    def __enter__(self) -> None:
        self.cm.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.cm.__exit__(*exc)  # type: ignore[arg-type]
        self.child.save()


def _load_feeds(spec: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    with np.load(spec["feeds"], allow_pickle=False) as z:
        return {name: z[f"i{k}"] for k, name in enumerate(spec["feed_names"])}


def _as_array(value: Any) -> Any:
    """One comparable array per output, also for non-tensor outputs.

    ORT returns a sequence output as a list of arrays and a map as a dict (skl2onnx's ZipMap:
    a list of {label: probability}); ``np.asarray`` would make object arrays, which ``.npz``
    cannot hold without pickle. A map becomes its values ordered by key; a sequence of maps
    stacks those rows; a sequence of tensors stacks them when their shapes agree, else its
    elements are concatenated flat (contents still compared, element by element).
    """
    import numpy as np

    if isinstance(value, dict):
        return np.asarray([value[k] for k in sorted(value)])
    if isinstance(value, (list, tuple)):
        items = [_as_array(v) for v in value]
        if not items:
            return np.zeros((0,), np.float32)
        if all(i.shape == items[0].shape and i.dtype == items[0].dtype for i in items):
            return np.stack(items)
        return np.concatenate([i.ravel() for i in items])
    arr = np.asarray(value)
    if arr.dtype == object:  # strings come back as Python objects
        return arr.astype(str)
    return arr


def _ortvalue_array(value: Any) -> Any:
    """An ORT output as a numpy array; a bfloat16 tensor widened to float32 exactly.

    Why: ``InferenceSession.run`` converts every output to numpy, which has no bfloat16, so a
    model with bf16 outputs (a Llama cast to ``torch.bfloat16``, which the CUDA EP runs) failed
    in the verifier with "No corresponding Numpy type for Tensor Type. bfloat16". bf16 is the
    high half of an IEEE float32, so its bits shifted left by 16 are the same value in f32."""
    import ctypes

    import numpy as np

    if value.data_type() != "tensor(bfloat16)":
        return value.numpy()
    shape = tuple(value.shape())
    n = int(np.prod(shape, dtype=np.int64))
    raw: Any = np.zeros(0, np.uint16)
    if n:
        raw = np.ctypeslib.as_array((ctypes.c_uint16 * n).from_address(value.data_ptr()))
    bits = np.array(raw, dtype=np.uint16).astype(np.uint32) << 16
    return bits.view(np.float32).reshape(shape)


def _save_outputs(spec: dict[str, Any], outputs: list[Any]) -> None:
    import numpy as np

    arrays: dict[str, Any] = {f"o{k}": _as_array(a) for k, a in enumerate(outputs)}
    np.savez(spec["outputs"], **arrays)


# ---------------------------------------------------------------- ONNX Runtime backends


def _nvml_probe(device_id: int) -> tuple[Callable[[], int | None], Callable[[], int], str]:
    import pynvml  # nvidia-ml-py

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(device_id)
    pid = os.getpid()

    def process_used() -> int | None:
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        for p in procs:
            if p.pid == pid:
                return int(p.usedGpuMemory or 0)
        if len(procs) == 1 and gpu_was_idle:  # host pid namespace: the only process is us
            return int(procs[0].usedGpuMemory or 0)
        return 0

    # In a container NVML reports host pids; then, with nothing else on the GPU (checked
    # before our CUDA init), the single process NVML lists after it is this one.
    gpu_was_idle = len(pynvml.nvmlDeviceGetComputeRunningProcesses(handle)) == 0

    def device_used() -> int:
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)

    return process_used, device_used, pynvml.nvmlSystemGetDriverVersion()


def cuda_gpu_probe(
    child: Child, backend: str, popts: dict[str, Any]
) -> tuple[Callable[[], int | None] | None, Callable[[], int] | None]:
    """For CUDA: record how GPU memory is measured; return the NVML per-process probe and
    the device-wide reading (both None on other backends)."""
    if backend != "cuda":
        return None, None
    process_used, device_used, driver = _nvml_probe(int(popts.get("device_id", "0")))
    child.result["assumptions"]["CUDA_MODULE_LOADING"] = os.environ.get(
        "CUDA_MODULE_LOADING", "(unset: lazy by default)"
    )
    child.result["gpu"] = {
        "method": "NVML per-process used memory (nvmlDeviceGetComputeRunningProcesses), "
        "polled every 1 ms, counted from before CUDA init; device-wide NVML used memory "
        "after each run stage; the empty-session baseline is measured by the parent in a "
        "separate process (one Identity-node session)",
        "before_cuda_init": process_used(),
        "device_used_before": device_used(),
        "driver": driver,
        "arena": {k: popts[k] for k in popts if "arena" in k or "mem_limit" in k}
        or "ORT defaults (kNextPowerOfTwo, no gpu_mem_limit)",
    }
    return process_used, device_used


def run_ort(child: Child) -> list[Any]:
    spec = child.spec
    backend = spec["backend"]
    try:
        ort = import_ort()
        provider, popts, providers = ort_providers(ort, backend, spec.get("provider_options"))
    except BackendUnavailable as exc:
        raise Unsupported(str(exc)) from exc
    feeds = _load_feeds(spec)
    child.result["runtime"] = {"name": "onnxruntime", "version": ort.__version__}
    child.result["assumptions"] = {
        "session_options": spec.get("session_options") or {},
        "provider_options": popts,
        "loaded_by": "path",
    }

    gpu_probe, device_used = cuda_gpu_probe(child, backend, popts)
    so = ort_session_options(ort, spec.get("session_options") or {})
    child.start_meter(gpu_probe)
    with child.stage("session"):
        sess = ort.InferenceSession(
            spec["model"]["path"], sess_options=so, providers=providers, enable_fallback=0
        )
    got = sess.get_providers()
    child.result["runtime"]["providers"] = got
    if got[0] != provider:
        raise RuntimeError(f"session runs on {got[0]}, not {provider} (no silent fallback)")
    child.fault("after-first-stage")
    names = spec["output_names"] or [o.name for o in sess.get_outputs()]
    bf16 = {o.name for o in sess.get_outputs() if o.type == "tensor(bfloat16)"} & set(names)
    ort_feeds = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in feeds.items()} if bf16 else {}
    outs: list[Any] = []
    for r in range(1, int(spec["runs"]) + 1):
        with child.stage(f"run{r}"):
            if bf16:  # numpy has no bfloat16: sess.run raises on such an output
                outs = [_ortvalue_array(v) for v in sess.run_with_ort_values(names, ort_feeds)]
            else:
                outs = sess.run(names, feeds)
        if device_used is not None and child.meter is not None:
            child.meter.stages[-1].extra["device_used_after"] = device_used()
    return outs


# ---------------------------------------------------------------- OpenVINO native


def run_openvino(child: Child) -> list[Any]:
    spec = child.spec
    try:
        import openvino as ov
    except ImportError as exc:
        raise Unsupported(f"openvino is not importable by {sys.executable}: {exc}") from exc
    feeds = _load_feeds(spec)
    core = ov.Core()
    device = str((spec.get("provider_options") or {}).get("device", "CPU"))
    config = {k: v for k, v in (spec.get("provider_options") or {}).items() if k != "device"}
    config.update(spec.get("session_options") or {})
    read_config, config = ov_split_config(config)
    child.result["runtime"] = {"name": "openvino", "version": ov.get_version(), "device": device}
    child.start_meter()
    with child.stage("read"):
        model = core.read_model(spec["model"]["path"], config=read_config)
    child.fault("after-first-stage")
    with child.stage("compile"):
        compiled = core.compile_model(model, device, config)
        del model  # as in compile_model(read_model(path)): the ov.Model is not kept
        gc.collect()
    child.result["assumptions"] = {
        "compile_config": config,
        **({"read_config": read_config} if read_config else {}),
        "inference_precision": str(compiled.get_property("INFERENCE_PRECISION_HINT")),
        "model_released_after_compile": True,
        "loaded_by": "path",
    }
    ports = []
    for name in spec["output_names"]:
        port = next((o for o in compiled.outputs if name in o.get_names()), None)
        if port is None:
            raise RuntimeError(f"OpenVINO model has no output named {name!r}")
        ports.append(port)
    request = compiled.create_infer_request()
    outs: list[Any] = []
    for r in range(1, int(spec["runs"]) + 1):
        with child.stage(f"infer{r}"):
            request.infer(feeds)
            outs = [request.get_tensor(p).data.copy() for p in ports]
    return outs


BACKENDS: dict[str, Callable[[Child], list[Any]]] = {
    "cpu": run_ort,
    "cuda": run_ort,
    "ort-openvino": run_ort,
    "openvino": run_openvino,
}


def _partition_driver() -> Callable[[Child], list[Any]]:
    from memshrink.runtime.child_driver import run_partitioned

    return run_partitioned


#: Drivers of model kinds other than a single ``.onnx`` (see ``kinds.py``), imported lazily.
DRIVERS: dict[str, Callable[[], Callable[[Child], list[Any]]]] = {
    "partition": _partition_driver,
}


def _die_with_parent(parent_pid: int | None) -> None:
    """Ask Linux to SIGKILL this child when its parent dies.

    Why: the child runs in its own session (so a timeout can kill its group), so a Ctrl-C or a
    SIGKILL meant for ``memshrink verify`` never reached it: it ran on, orphaned, for minutes
    on a big model (QA session 15). The parent stops its children on SIGINT / SIGTERM itself;
    this covers a parent that is killed outright. Best effort: other systems keep the old way."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - no libc prctl
        return
    if parent_pid is None:
        return
    try:  # not getppid(): an interpreter wrapper (--python-for a script) may sit in between
        os.kill(parent_pid, 0)
    except ProcessLookupError:
        os._exit(EXIT_FAILED)  # verify died before the request: nobody reads our result
    except PermissionError:
        pass


def _is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _DISK_FULL_ERRNOS


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as f:
        spec = json.load(f)
    _die_with_parent(spec.get("parent_pid"))
    child = Child(spec)
    try:
        return _main(child, spec)
    except OSError as exc:  # writing the result itself: the folder's disk is full
        if not _is_disk_full(exc):
            raise
        print(f"memshrink child: cannot write its results: {exc}", file=sys.stderr)
        return EXIT_NO_SPACE


def _main(child: Child, spec: dict[str, Any]) -> int:
    try:
        kind = spec["model"]["kind"]
        if kind == "onnx":
            outs = BACKENDS[spec["backend"]](child)
        elif kind in DRIVERS:
            outs = DRIVERS[kind]()(child)
        else:
            raise Unsupported(f"model kind {kind!r} is not supported by this child")
        _save_outputs(spec, outs)
        child.result["status"] = "ok"
        child.save()
        return 0
    except Unsupported as exc:
        child.result.update(status="unsupported", error=str(exc))
        child.save()
        return EXIT_UNSUPPORTED
    except Exception as exc:  # report, never crash the parent
        if _is_disk_full(exc):  # not the runtime's failure: the parent says where (exit 7)
            child.result.update(status="failed", error=f"{type(exc).__name__}: {exc}")
            child.save()
            return EXIT_NO_SPACE
        child.result.update(
            status="failed",
            error=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(),
        )
        child.save()
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
