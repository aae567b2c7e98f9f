"""Predicted vs measured memory, per model, on ONNX Runtime CPU and OpenVINO CPU.

    python docs/bench/estimate_bench.py [--models NAME ...] [--backends ort openvino]
        [--json out.json] [--zoo-dir /tmp/estimate_zoo]

Models: the ``models/`` suite entries already built in ``.cache/models`` (BERT-base, GPT-2,
ResNet-50, MobileNetV2, U-Net; BERT also at batch 4 x seq 512 through ``--dim``), and the
``onnx`` wheel's zoo graphs with seeded weights in external files (``estimate_zoo.py``).
Ground truth: one fresh process per model x backend (``--repeat N``: N, median per stage;
``estimate_measure.py``: ORT CPU through ``memshrink verify``'s own child, OpenVINO in
process; exact ``VmHWM`` per stage, deltas over the post-import baseline). Errors are
(predicted - measured) / measured of the stage peaks: session creation (OpenVINO:
compile_model) and steady state (the third run). onnxsim's ``plan_activation_memory`` arena
and a plain greedy plan are printed beside the runtime-faithful prediction.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).parent))

MiB = 1 << 20
SUITE = {
    # name: (file in .cache/models, dims)
    "bert-base": ("bert-base.onnx", {}),
    "bert-base-ext": ("bert-base-ext.onnx", {}),
    "bert-base-b4s512-ext": ("bert-base-ext.onnx", {"batch": 4, "sequence": 512}),
    "gpt2": ("gpt2.onnx", {}),
    "resnet50": ("resnet50.onnx", {}),
    "resnet50-b16": ("resnet50-b16.onnx", {}),
    "mobilenetv2": ("mobilenetv2.onnx", {}),
    "unet": ("unet.onnx", {}),
    "gpt2-ext": ("gpt2-ext.onnx", {}),
    "vit-b16-ext": ("vit-b16-ext.onnx", {}),
    "multibranch": ("multibranch.onnx", {}),
    "resnet50-960": ("resnet50-960.onnx", {}),
}


def _shape_args(path: Path, dims: dict[str, int]) -> list[str]:
    """Concrete --shape flags for the measuring child (from the estimator's own bindings)."""
    from memshrink.estimate.graph import build_view

    view = build_view(str(path), dims=dims)
    return [f"{k}={','.join(map(str, v))}" for k, v in view.bindings.items()]


def measure(
    path: Path, backend: str, shapes: list[str], ov_static: bool = False, repeat: int = 1
) -> dict:
    """Stage measurements of ``repeat`` fresh processes; each figure is taken from the
    processes of the most frequent mode (``modal``: glibc puts embedded models' stages in one
    of a few modes at random per process, and a median of a bimodal sample can be the rare
    middle mode), their ``median_low``; ``spread`` keeps every process's peaks."""
    runs = [_measure_once(path, backend, shapes, ov_static) for _ in range(repeat)]
    out: dict = {}
    for stage in runs[0]:
        pick = modal([r[stage]["peak"] for r in runs])
        out[stage] = {
            k: statistics.median_low(r[stage][k] for i, r in enumerate(runs) if i in pick)
            for k in runs[0][stage]
        }
        out[stage]["spread"] = [r[stage]["peak"] for r in runs]
    return out


def modal(values: list[int], rel: float = 0.02) -> set[int]:
    """Indices of the values in the largest cluster (sorted values within ``rel`` of their
    neighbour join it); ties go to the cluster holding the median."""
    order = sorted(range(len(values)), key=values.__getitem__)
    clusters: list[list[int]] = []
    for i in order:
        if clusters and values[i] - values[clusters[-1][-1]] <= rel * values[clusters[-1][-1]]:
            clusters[-1].append(i)
        else:
            clusters.append([i])
    med = order[(len(order) - 1) // 2]
    best = max(clusters, key=lambda c: (len(c), med in c))
    return set(best)


def _measure_once(path: Path, backend: str, shapes: list[str], ov_static: bool) -> dict:
    cmd = [
        sys.executable,
        str(Path(__file__).parent / "estimate_measure.py"),
        str(path),
        "--backend",
        backend,
    ]
    for s in shapes:
        cmd += ["--shape", s]
    if ov_static:
        cmd.append("--ov-reshape")
    # launched the way a user runs `memshrink verify`: from a neutral directory, with only
    # memshrink on the path (the launch context moves embedded models' glibc mode)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(
        cmd, capture_output=True, text=True, timeout=900, cwd=tempfile.gettempdir(), env=env
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr else "failed")
    return json.loads(out.stdout)["stages"]


def onnxsim_arena(path: Path, dims: dict[str, int]) -> int | None:
    try:
        import onnxsim

        from memshrink.estimate import graph as G

        irm, _ = G._as_ir(str(path))
        view = G.build_view(str(path), dims=dims)
        proto = G._cached_infer(irm, G._fingerprint(irm), view.bindings, symbolic_tool=True)[0]
        return int(onnxsim.plan_activation_memory(proto, run_shape_inference=False).arena_bytes)
    except Exception as exc:  # noqa: BLE001 - a comparison column, not the benchmark
        print(f"  onnxsim failed: {exc}", file=sys.stderr)
        return None


def pct(pred: float, meas: float) -> float:
    return 100.0 * (pred - meas) / meas if meas else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="*")
    ap.add_argument("--backends", nargs="*", default=["ort", "openvino"])
    ap.add_argument("--zoo-dir", default="/tmp/estimate_zoo")
    ap.add_argument("--no-zoo", action="store_true")
    ap.add_argument("--json")
    ap.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="NAME=PATH[:DIM=N,...]",
        help="also bench this file (e.g. an `optimize --passes all` output) under NAME",
    )
    ap.add_argument("--repeat", type=int, default=1, help="fresh processes per model (median)")
    ap.add_argument(
        "--ov-static",
        action="store_true",
        help="OpenVINO: reshape to the bound shapes before compiling (and predict that); "
        "default: compile as `memshrink verify` does, dynamic when the model's dims are symbolic",
    )
    a = ap.parse_args(argv)
    from memshrink.estimate import estimate

    models: list[tuple[str, Path, dict[str, int]]] = []
    cache = ROOT / ".cache" / "models"
    for name, (fname, dims) in SUITE.items():
        if (cache / fname).is_file():
            models.append((name, cache / fname, dims))
    if not a.no_zoo:
        import estimate_zoo

        Path(a.zoo_dir).mkdir(parents=True, exist_ok=True)
        for z in estimate_zoo.NAMES:
            p = Path(a.zoo_dir) / f"{z}-b1.onnx"
            if not p.is_file():
                estimate_zoo.make(z, a.zoo_dir)
            models.append((f"zoo-{z}", p, {}))
    if a.models:
        models = [m for m in models if m[0] in a.models]
    for spec in a.file:
        name, _, rest = spec.partition("=")
        fpath, _, dimspec = rest.partition(":")
        fdims = {k: int(v) for k, v in (d.split("=") for d in dimspec.split(",") if d)}
        models.append((name, Path(fpath), fdims))
    rows = []
    for name, path, dims in models:
        shapes = _shape_args(path, dims)
        arena = onnxsim_arena(path, dims)
        for be in a.backends:
            t = time.perf_counter()
            # The ground truth is the verifier's child (estimate_measure.py): it holds each run's
            # outputs through the next run and feeds integer inputs over the sidecar's range,
            # which is what the estimator assumes by default (``memshrink.hold_outputs=0`` and
            # ``memshrink.int_range`` describe other callers).
            so: dict | None = {"reshape": 1} if be == "openvino" and a.ov_static else None
            est = estimate(str(path), backend=be, dims=dims, session_options=so)
            secs = time.perf_counter() - t
            pred = est.stage_peaks()
            try:
                meas = measure(path, be, shapes, a.ov_static, a.repeat)
            except Exception as exc:  # noqa: BLE001
                print(f"{name} {be}: measurement failed: {exc}", file=sys.stderr)
                continue
            first = "session_creation" if be == "ort" else "compile_model"
            post = meas[first]["after"]
            row = {
                "model": name,
                "backend": be,
                "estimate_s": round(secs, 3),
                "nodes": len(est.view.graph.nodes),
                "pred_create": pred[first],
                "meas_create": meas[first]["peak"],
                "pred_run1": pred["run_1"],
                "meas_run1": meas["run_1"]["peak"],
                "pred_steady": pred["steady_state"],
                "meas_steady": meas["run_3"]["peak"],
                "meas_act_run1": meas["run_1"]["peak"] - post,
                "meas_act_steady": meas["run_3"]["peak"] - post,
                "processes": a.repeat,
                "spread_run1": meas["run_1"]["spread"],
                "spread_steady": meas["run_3"]["spread"],
                "pred_act_steady": est.prediction.stages[-1].activations,
                "pred_modes": {s.name: dict(s.modes) for s in est.prediction.stages if s.modes},
                "spread_create": meas[first]["spread"],
                "greedy": est.prediction.planners["greedy_by_size"],
                "onnxsim_arena": arena,
                "partial": est.partial,
            }
            row["err_create_%"] = round(pct(row["pred_create"], row["meas_create"]), 1)
            row["err_run1_%"] = round(pct(row["pred_run1"], row["meas_run1"]), 1)
            row["err_steady_%"] = round(pct(row["pred_steady"], row["meas_steady"]), 1)
            rows.append(row)
            f = lambda v: "-" if v is None else f"{v / MiB:7.1f}"  # noqa: E731
            print(
                f"{name:22} {be:8} create {f(row['pred_create'])}/{f(row['meas_create'])} "
                f"({row['err_create_%']:+5.1f}%)  run1 {f(row['pred_run1'])}/{f(row['meas_run1'])} "
                f"({row['err_run1_%']:+5.1f}%)  steady {f(row['pred_steady'])}/{f(row['meas_steady'])} "
                f"({row['err_steady_%']:+5.1f}%)  act steady pred {f(row['pred_act_steady'])} "
                f"meas {f(row['meas_act_steady'])} greedy {f(row['greedy'])} onnxsim {f(arena)} "
                f"[{secs:.2f}s]",
                flush=True,
            )
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
