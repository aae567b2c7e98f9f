"""Measure one model on one runtime in *this* fresh process: exact per-stage RSS peaks.

Used by ``estimate_bench.py`` as ground truth until ``memshrink.profile`` (the verifier) is
available. Method (``MEASURING.md``): reset ``VmHWM`` by writing ``5`` to
``/proc/self/clear_refs`` before each stage and read it after; report deltas over the baseline
taken after importing the runtime and building the inputs.

    python docs/bench/estimate_measure.py MODEL.onnx --backend ort|openvino \
        [--shape x=1,3,224,224] [--session-option enable_mem_pattern=0] [--runs 3]

Prints one JSON object: per stage ``peak``/``after``/``anon``/``file`` in bytes (deltas).
"""

from __future__ import annotations

import argparse
import json
import sys


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--backend", default="ort", choices=["ort", "openvino"])
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--session-option", action="append", default=[])
    ap.add_argument("--runs", type=int, default=3)
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
        import onnx

        m = onnx.load(a.model, load_external_data=False)
        feeds = {}
        inits = {i.name for i in m.graph.initializer}
        for vi in m.graph.input:
            if vi.name in inits:
                continue
            dims = shapes.get(vi.name) or tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
            dt = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
            feeds[vi.name] = (
                rng.random(dims) if dt.kind == "f" else rng.integers(0, 2, dims)
            ).astype(dt)
        del m
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
        import onnx

        m = onnx.load(a.model, load_external_data=False)
        inits = {i.name for i in m.graph.initializer}
        specs = []
        for vi in m.graph.input:
            if vi.name in inits:
                continue
            dims = shapes.get(vi.name) or tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
            specs.append(
                (vi.name, dims, onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
            )
        del m
        feeds = {
            n: (rng.random(d) if dt.kind == "f" else rng.integers(0, 2, d)).astype(dt)
            for n, d, dt in specs
        }
        base = _status()
        model = stage("read_model", lambda: core.read_model(a.model))
        if shapes:
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
