"""Measure one model on one runtime in a fresh process: exact per-stage RSS peaks.

Ground truth of ``estimate_bench.py``. ORT CPU runs in ``memshrink verify``'s own child
(``measure_as_verifier``): the same feeds, imports, sampler thread and stages, so the bench
measures what the verifier measures (the old in-process harness, ``--in-process``, put
ResNet-50 b16's first arena region outside a freed-weight hole more often). OpenVINO too runs
in the verifier's child, unless ``--ov-reshape`` (static compile) or ``--in-process``: the
in-process harness kept embedded zoo models' freed ModelProto on the heap (zoo ResNet-50 infer
349 MiB there, 257 in the verifier's child). Method (``MEASURING.md``): reset ``VmHWM`` by writing ``5`` to
``/proc/self/clear_refs`` before each stage and read it after; report deltas over the baseline
taken after importing the runtime and building the inputs.

    python docs/bench/estimate_measure.py MODEL.onnx --backend ort|openvino \
        [--shape x=1,3,224,224] [--session-option enable_mem_pattern=0] [--runs 3]

Prints one JSON object: per stage ``peak``/``after``/``anon``/``file`` in bytes (deltas).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))


def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem"):
                out[k] = int(v.split()[0]) * 1024
    return out


def _reset() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _feeds(path: str, shapes: dict, rng):  # type: ignore[no-untyped-def]
    """Random inputs built the way the verifier's child receives them: the input specs are
    scanned from the file (no ModelProto is loaded and freed) and each array is created at its
    final dtype (no float64 temporary). Both matter: freeing big blocks moves glibc's dynamic
    mmap threshold, which changes what the runtime's own allocations later cost."""
    import numpy as np

    from memshrink.verify.modelinfo import read_model_io

    feeds = {}
    for t in read_model_io(path).inputs:
        dims = shapes.get(t.name) or tuple(t.dims)
        if not all(isinstance(d, int) and d >= 0 for d in dims):
            raise SystemExit(f"input {t.name} has unbound dims {list(t.dims)}: pass --shape")
        dt = np.dtype(t.dtype)
        if dt.kind == "f":
            arr = rng.random(dims, dtype=np.float32)
            feeds[t.name] = arr if dt == np.float32 else arr.astype(dt)
        elif dt.kind == "b":
            feeds[t.name] = rng.integers(0, 2, dims, dtype=np.uint8).view(np.bool_)
        else:
            feeds[t.name] = rng.integers(0, 2, dims, dtype=dt)
    return feeds


STAGE_NAMES = {"session": "session_creation", "read": "read_model", "compile": "compile_model"}


def measure_as_verifier(
    model: str, shapes: dict, opts: dict, runs: int, backend: str = "cpu", timeout: float = 900.0
) -> dict:
    """ORT CPU or OpenVINO measured by ``memshrink verify``'s own child (``memshrink.verify.child``, run by
    ``runner.run_child`` in a fresh process, feeds from ``verify.inputs.make_feeds`` written
    to ``.npz`` exactly as ``verify`` writes them): the bench then measures what the verifier
    measures, sampler thread, imports and feed loading included. Stage peaks and RSS are
    deltas over the child's baseline (runtime imported, feeds loaded)."""
    import tempfile

    import numpy as np

    from memshrink.verify.inputs import make_feeds
    from memshrink.verify.kinds import ModelRef
    from memshrink.verify.modelinfo import read_model_io
    from memshrink.verify.runner import run_child

    io = read_model_io(model)
    feeds, _ = make_feeds(io, model, shapes=shapes)
    with tempfile.TemporaryDirectory(prefix="estimate-measure-") as wd:
        feeds_path = Path(wd) / "feeds.npz"
        names = list(feeds)
        np.savez(feeds_path, **{f"i{k}": feeds[n] for k, n in enumerate(names)})
        res = run_child(
            ModelRef("onnx", Path(model)), "bench", backend, workdir=Path(wd),
            feeds_path=feeds_path, feed_names=names, output_names=[o.name for o in io.outputs],
            runs=runs, timeout=timeout, session_options=opts, keep_outputs=False,
        )  # fmt: skip
    if not res.ok:
        raise SystemExit(f"verifier child {res.status}: {res.error}")
    base = res.child["baseline"]
    stages = {}
    for st in res.stages:
        name = STAGE_NAMES.get(st["name"]) or re.sub(r"^(?:run|infer)(\d+)$", r"run_\1", st["name"])
        stages[name] = {
            "peak": st["peak"] - base["rss"],
            "after": st["after"] - base["rss"],
            "anon": st["anon_after"] - base["anon"],
            "file": st["file_after"] - base["file"],
        }
    return {"baseline": base, "stages": stages}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--backend", default="ort", choices=["ort", "openvino"])
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--session-option", action="append", default=[])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--in-process",
        action="store_true",
        help="measure in this process (the old harness) instead of the verifier's child",
    )
    ap.add_argument(
        "--ov-reshape",
        action="store_true",
        help="OpenVINO: reshape to the bound shapes before compiling (static compile); "
        "default compiles as `memshrink verify` does (dynamic when dims are symbolic)",
    )
    a = ap.parse_args(argv)
    import numpy as np

    shapes = {}
    for s in a.shape:
        n, _, d = s.rpartition("=")
        shapes[n] = tuple(int(x) for x in d.split(","))
    opts = dict(o.split("=", 1) for o in a.session_option)
    stages: dict[str, dict[str, int]] = {}

    def stage(name: str, fn):  # type: ignore[no-untyped-def]
        _reset()
        res = fn()
        st = _status()
        stages[name] = {
            "peak": st["VmHWM"] - base["VmRSS"],
            "after": st["VmRSS"] - base["VmRSS"],
            "anon": st["RssAnon"] - base["RssAnon"],
            "file": st["RssFile"] - base["RssFile"],
        }
        return res

    rng = np.random.default_rng(0)
    if not a.in_process and not a.ov_reshape:
        backend = "cpu" if a.backend == "ort" else "openvino"
        got = measure_as_verifier(a.model, shapes, opts, a.runs, backend)
        json.dump({"model": a.model, "backend": a.backend, **got}, sys.stdout)
        print()
        return 0
    if a.backend == "ort":
        import onnxruntime as ort

        so = ort.SessionOptions()
        for k, v in opts.items():
            if k == "execution_order":
                so.execution_order = getattr(ort.ExecutionOrder, v.upper())
            elif k == "enable_mem_pattern":
                so.enable_mem_pattern = v not in ("0", "false", "False")
            elif k == "enable_cpu_mem_arena":
                so.enable_cpu_mem_arena = v not in ("0", "false", "False")
            elif k == "graph_optimization_level":
                so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, v)
            else:
                so.add_session_config_entry(k, v)
        feeds = _feeds(a.model, shapes, rng)
        import gc

        gc.collect()
        base = _status()
        sess = stage(
            "session_creation",
            lambda: ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"]),
        )
        for r in range(a.runs):
            out = stage(f"run_{r + 1}", lambda: sess.run(None, feeds))
            del out
    else:
        import openvino as ov

        core = ov.Core()
        feeds = _feeds(a.model, shapes, rng)
        base = _status()
        model = stage("read_model", lambda: core.read_model(a.model))
        if shapes and a.ov_reshape:
            model.reshape({n: list(d) for n, d in shapes.items()})
        compiled = stage("compile_model", lambda: core.compile_model(model, "CPU"))
        req = compiled.create_infer_request()
        for r in range(a.runs):
            stage(f"run_{r + 1}", lambda: req.infer(feeds))
    json.dump(
        {"model": a.model, "backend": a.backend, "baseline": base, "stages": stages}, sys.stdout
    )
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
