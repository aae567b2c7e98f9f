"""CUDA EP: predicted (``memshrink estimate --backend cuda``) vs measured (the verifier), per stage.

    python docs/bench/estimate_cuda_bench.py [--results docs/bench/estimate_cuda_results.json]
        [--models NAME ...]                       # table: prediction here vs stored measurements
    python docs/bench/estimate_cuda_bench.py measure --out results.json [--models NAME ...]
        [--models-dir DIR] [--budget-s 420]       # on the GPU machine (onnxruntime-gpu, NVML)

``measure`` runs, per model, ``memshrink.verify.profile(..., backends=("cuda",), runs=3)``: one
fresh child process, NVML per-process GPU memory polled every 1 ms per stage, minus an empty
CUDA session measured in its own process; host ``VmHWM`` per stage over the child's baseline.
It then runs a diagnostic child per model with ONNX Runtime's verbose log on, keeping the BFC
arena lines (``Reserving``/``Extending``), the initializer plan and the node placement, once
with the default arena (kNextPowerOfTwo) and once with ``kSameAsRequested``, and for CNNs once
with ``cudnn_conv_algo_search=HEURISTIC`` (the workspace of the exhaustive search). Small
hand-made graphs (one MatMul, one Conv, one large Add) isolate cuBLAS, cuDNN and the arena.

The table compares per stage: GPU (MiB over the empty session at the same stage, as verify
prints it: ``session`` over its creation figure, runs over it after its run) and host (MiB over
the child's post-import baseline); error = (predicted - measured) / measured.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

MiB = 1 << 20
# name: (file, dims); the same files the CPU bench uses (``python -m models build NAME``).
SUITE: dict[str, tuple[str, dict[str, int]]] = {
    "bert-base-ext": ("bert-base-ext.onnx", {}),
    "bert-base": ("bert-base.onnx", {}),
    "gpt2-ext": ("gpt2-ext.onnx", {}),
    "gpt2": ("gpt2.onnx", {}),
    "resnet50": ("resnet50.onnx", {}),
    "resnet50-b16": ("resnet50-b16.onnx", {}),
    "mobilenetv2": ("mobilenetv2.onnx", {}),
    "unet": ("unet.onnx", {}),
    "bert-base-b4s512-ext": ("bert-base-ext.onnx", {"batch": 4, "sequence": 512}),
}
CNN = {"resnet50", "resnet50-b16", "mobilenetv2", "unet"}
KEEP = re.compile(
    r"BFCArena|Extend|Reserv|statically allocates|placed on|Memcpy|cudnn|workspace|"
    r"Total allocated|Allocated memory|Arena|fallback|CPUExecutionProvider",
    re.I,
)


# ------------------------------------------------------------------ hand-made graphs


def synthetic_models(out: Path) -> dict[str, Path]:
    """One MatMul (cuBLAS), one Conv (cuDNN), one large Add (arena, weights), built in code."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    out.mkdir(parents=True, exist_ok=True)

    def save(name: str, nodes, inputs, outputs, inits) -> Path:  # type: ignore[no-untyped-def]
        g = helper.make_graph(nodes, name, inputs, outputs, inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        p = out / f"{name}.onnx"
        onnx.save_model(m, p)
        return p

    f = TensorProto.FLOAT
    w = numpy_helper.from_array(rng.standard_normal((1024, 1024), dtype=np.float32), "w")
    mm = save(
        "synth-matmul",
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [helper.make_tensor_value_info("x", f, [1024, 1024])],
        [helper.make_tensor_value_info("y", f, [1024, 1024])],
        [w],
    )
    wc = numpy_helper.from_array(rng.standard_normal((64, 64, 3, 3), dtype=np.float32), "w")
    cv = save(
        "synth-conv",
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        [helper.make_tensor_value_info("x", f, [1, 64, 56, 56])],
        [helper.make_tensor_value_info("y", f, [1, 64, 56, 56])],
        [wc],
    )
    n = 16 << 20  # 64 MiB of float32
    wa = numpy_helper.from_array(rng.standard_normal((1, n), dtype=np.float32), "w")
    ad = save(
        "synth-add64m",
        [
            helper.make_node("Add", ["x", "w"], ["t"]),
            helper.make_node("Relu", ["t"], ["u"]),
            helper.make_node("ReduceSum", ["u"], ["y"], keepdims=0),
        ],
        [helper.make_tensor_value_info("x", f, [1, n])],
        [helper.make_tensor_value_info("y", f, [])],
        [wa],
    )
    out_ = {"synth-matmul": mm, "synth-conv": cv, "synth-add64m": ad}
    # MatMul chains with external weights: k layers of d x d (how the host stages weights).
    for k, d in ((4, 2048), (16, 1024), (4, 4096), (1, 4096)):
        name = f"synth-ext-{k}x{d * d * 4 >> 20}m"
        nodes, inits, prev = [], [], "x"
        for i in range(k):
            inits.append(
                numpy_helper.from_array(rng.standard_normal((d, d), dtype=np.float32), f"w{i}")
            )
            nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]))
            prev = f"m{i}"
        g = helper.make_graph(
            nodes,
            name,
            [helper.make_tensor_value_info("x", f, [64, d])],
            [helper.make_tensor_value_info(prev, f, [64, d])],
            inits,
        )
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        p = out / f"{name}.onnx"
        onnx.save_model(m, p, save_as_external_data=True, location=f"{name}.onnx.data")
        out_[name] = p
    return out_


# ------------------------------------------------------------------ diagnostic child


def _feeds_for(path: str, dims: dict[str, int]) -> dict[str, Any]:
    from memshrink.verify.api import _feeds  # the verifier's own feeds (sidecar, seed 0)
    from memshrink.verify.kinds import read_io, resolve_model

    ref = resolve_model(path, "model", Path(path).parent)
    arrays, _ = _feeds(read_io(ref), ref.path, None, None, dims or None, None, 0)
    return arrays


def diag_child(path: str, popts: dict[str, str], dims: dict[str, int]) -> None:
    """Runs in its own process: verbose ORT log on stderr, NVML after each stage on stdout."""
    import onnxruntime as ort
    import pynvml

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)

    def used() -> int:
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        return int(procs[0].usedGpuMemory or 0) if procs else 0

    feeds = _feeds_for(path, dims)
    ort.set_default_logger_severity(0)
    so = ort.SessionOptions()
    so.log_severity_level = 0
    so.log_verbosity_level = 0
    res: dict[str, Any] = {"before": used()}
    opts = {"use_tf32": "0", **popts}
    sess = ort.InferenceSession(
        path, so, providers=[("CUDAExecutionProvider", opts)], enable_fallback=0
    )
    res["providers"] = sess.get_providers()
    res["session"] = used()
    for r in range(1, 4):
        sess.run(None, feeds)
        res[f"run{r}"] = used()
    print("RESULT " + json.dumps(res), flush=True)


def run_diag(path: str, popts: dict[str, str], dims: dict[str, int]) -> dict[str, Any]:
    code = (
        "import json,sys; sys.path.insert(0, sys.argv[1]);"
        "import estimate_cuda_bench as b;"
        "b.diag_child(sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4]))"
    )
    cmd = [sys.executable, "-c", code, str(Path(__file__).parent), path]
    cmd += [json.dumps(popts), json.dumps(dims)]
    t0 = time.time()
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    keep: list[str] = []
    tail: list[str] = []
    n_lines = 0
    assert p.stderr is not None and p.stdout is not None
    for line in p.stderr:
        n_lines += 1
        if KEEP.search(line) and len(keep) < 600:
            keep.append(line.rstrip()[-300:])
        tail = (tail + [line.rstrip()[-300:]])[-6:]
    out = p.stdout.read()
    p.wait(timeout=300)
    res: dict[str, Any] = {"rc": p.returncode, "log_lines": n_lines, "kept": keep}
    if p.returncode:
        res["stderr_tail"] = tail
    res["seconds"] = round(time.time() - t0, 1)
    for line in out.splitlines():
        if line.startswith("RESULT "):
            res.update(json.loads(line[7:]))
    return res


# ------------------------------------------------------------------ measurement


def profile_row(path: str, dims: dict[str, int]) -> dict[str, Any]:
    from memshrink.verify import profile

    p = profile(path, backends=("cuda",), runs=3, dims=dims or None)
    r = p.runs[0]
    gpu = r.child.get("gpu") or {}
    base = gpu.get("empty_session_baseline")
    row: dict[str, Any] = {
        "status": r.status,
        "error": r.error,
        "gpu_empty_session": base,
        # per stage (session, run1): verify compares each stage with its own (gpu_delta)
        "gpu_empty_session_stages": gpu.get("empty_session_stages"),
        "host_baseline": r.baseline_rss,
        "gpu_before_cuda_init": gpu.get("before_cuda_init"),
        "driver": gpu.get("driver"),
        "runtime": r.child.get("runtime"),
        "stages": {},
    }
    for s in r.stages:
        g = s.get("gpu") or {}
        row["stages"][s["name"]] = {
            "gpu_peak": g.get("peak"),
            "gpu_after": g.get("after"),
            "gpu_before": g.get("before"),
            "host_peak": s["peak"],
            "host_after": s["after"],
            "host_before": s["before"],
            "anon_before": s["anon_before"],
            "file_before": s["file_before"],
            "anon_peak": s["anon_peak"],
            "file_peak": s["file_peak"],
            "anon_after": s["anon_after"],
            "file_after": s["file_after"],
            "device_used_after": (s.get("extra") or {}).get("device_used_after"),
            "seconds": s["seconds"],
        }
    return row


def cmd_measure(args: argparse.Namespace) -> int:
    t0 = time.time()
    mdir = Path(args.models_dir)
    out = Path(args.out)
    results: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        import onnxruntime as ort

        results["onnxruntime"] = ort.__version__
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        results["gpu"] = pynvml.nvmlDeviceGetName(h)
        results["driver"] = pynvml.nvmlSystemGetDriverVersion()
    except Exception as exc:  # noqa: BLE001 - recorded, the loop still runs
        results["setup_error"] = repr(exc)
    jobs: list[tuple[str, str, dict[str, int]]] = []
    synth = synthetic_models(Path(args.synth_dir))
    for name in args.synth_first:
        jobs.append((name, str(synth[name]), {}))
    for name in args.models:
        f, dims = SUITE[name]
        jobs.append((name, str(mdir / f), dims))
    for name in synth:
        if name not in args.synth_first:
            jobs.append((name, str(synth[name]), {}))
    rows: dict[str, Any] = {}
    results["models"] = rows
    # Pass 1 gives every model its verifier figures; the diagnostics come after, in budget.
    passes: list[tuple[str, dict[str, str]]] = [
        ("profile", {}),
        ("diag_default", {}),
        ("diag_heuristic", {"cudnn_conv_algo_search": "HEURISTIC"}),
        ("diag_same_as_requested", {"arena_extend_strategy": "kSameAsRequested"}),
    ]
    passes = [p for p in passes if p[0] in args.passes]
    for label, popts in passes:
        for name, path, dims in jobs:
            row = rows.setdefault(name, {"path": path, "dims": dims})
            if label == "diag_heuristic" and name not in CNN and name != "synth-conv":
                continue
            if time.time() - t0 > args.budget_s:
                row[label] = {"skipped": "budget"}
                continue
            if not Path(path).exists():
                row[label] = {"skipped": f"missing {path}"}
                continue
            try:
                row[label] = (
                    profile_row(path, dims) if label == "profile" else run_diag(path, popts, dims)
                )
            except Exception as exc:  # noqa: BLE001 - recorded, the loop goes on
                row[label] = {"error": repr(exc)}
            print(f"{label} {name}: {time.time() - t0:.0f} s", flush=True)
            out.write_text(json.dumps(results, indent=1))
    out.write_text(json.dumps(results, indent=1))
    return 0


# ------------------------------------------------------------------ table


def _pct(p: float, m: float) -> str:
    return f"{100 * (p - m) / abs(m):+.1f}%" if m else "n/a"


def _empty_at(prof: dict[str, Any], stage: str) -> int:
    """The empty session's figure verify subtracts at ``stage`` (the same stage; rows measured
    before per-stage figures were recorded: the after-run figure, as verify did then)."""
    from memshrink.verify.gpu_delta import matched_baseline

    stages = prof.get("gpu_empty_session_stages")
    return matched_baseline(stage, stages, int(prof["gpu_empty_session"]))


def table_rows(results: dict[str, Any], names: list[str] | None) -> list[dict[str, Any]]:
    """Predicted vs measured per model and stage (MiB), GPU and host."""
    from memshrink.estimate import estimate
    from memshrink.estimate.backends import VERIFY_STAGES

    rows = []
    for name, row in results["models"].items():
        if names and name not in names:
            continue
        prof = row.get("profile") or {}
        if prof.get("status") != "ok":
            continue
        local = row["path"]
        if name in SUITE:
            local = str(ROOT / ".cache" / "models" / SUITE[name][0])
        elif not Path(local).exists():
            local = str(synthetic_models(Path("/tmp/memshrink-cuda-synth"))[name])
        if not Path(local).exists():
            continue
        est = estimate(local, backend="cuda", dims=row.get("dims") or None)
        dev = est.prediction.details["device"]
        host = est.prediction.details["host"]
        profs = [prof, *results.get("repeats", {}).get(name, [])]
        for key, stage in VERIFY_STAGES["cuda"].items():
            s = prof["stages"].get(stage)
            if s is None:
                continue
            seen = [
                (p["stages"][stage]["gpu_peak"] - _empty_at(p, stage)) / MiB
                for p in profs
                if p.get("status") == "ok" and stage in p["stages"]
            ]
            rows.append(
                {
                    "model": name,
                    "stage": key,
                    "gpu_pred": dev[key] / MiB,
                    "gpu_meas": (s["gpu_peak"] - _empty_at(prof, stage)) / MiB,
                    "gpu_spread": (min(seen), max(seen), len(seen)),
                    "host_pred": host[key] / MiB,
                    "host_meas": (s["host_peak"] - prof["host_baseline"]) / MiB,
                }
            )
    return rows


def cmd_table(args: argparse.Namespace) -> int:
    results = json.loads(Path(args.results).read_text())
    print(
        f"GPU: {results.get('gpu')}, driver {results.get('driver')}, onnxruntime-gpu "
        f"{results.get('onnxruntime')}, measured {results.get('when')}"
    )
    print(
        "| model | stage | GPU pred/meas MiB | err | GPU meas min..max (n) | host pred/meas MiB | err |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in table_rows(results, args.models):
        lo, hi, n = r["gpu_spread"]
        print(
            f"| {r['model']} | {r['stage']} | {r['gpu_pred']:.0f}/{r['gpu_meas']:.0f} | "
            f"{_pct(r['gpu_pred'], r['gpu_meas'])} | {lo:.0f}..{hi:.0f} ({n}) | "
            f"{r['host_pred']:.0f}/{r['host_meas']:.0f} | {_pct(r['host_pred'], r['host_meas'])} |"
        )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    m = sub.add_parser("measure")
    m.add_argument("--out", required=True)
    m.add_argument("--models", nargs="*", default=list(SUITE))
    m.add_argument("--models-dir", default=str(ROOT / ".cache" / "models"))
    m.add_argument("--synth-dir", default="/tmp/memshrink-cuda-synth")
    m.add_argument("--synth-first", nargs="*", default=["synth-matmul", "synth-conv"])
    m.add_argument("--budget-s", type=float, default=420)
    m.add_argument(
        "--passes",
        nargs="*",
        default=["profile", "diag_default", "diag_heuristic", "diag_same_as_requested"],
    )
    ap.add_argument(
        "--results", default=str(Path(__file__).with_name("estimate_cuda_results.json"))
    )
    ap.add_argument("--models", nargs="*", default=None)
    args = ap.parse_args()
    return cmd_measure(args) if args.cmd == "measure" else cmd_table(args)


if __name__ == "__main__":
    sys.exit(main())
