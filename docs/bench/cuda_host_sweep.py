"""CUDA EP host memory per convolution / GEMM: a sweep of hand-built graphs, and BERT's arena.

    python docs/bench/cuda_host_sweep.py measure --out sweep.json [--only conv]   # GPU machine
    python docs/bench/cuda_host_sweep.py bert --out bert.json                      # GPU machine
    python docs/bench/cuda_host_sweep.py [--results docs/bench/cuda_host_sweep.json]  # table

Why: after ``chunk``, ResNet-50 b16 rose from 715 to 1376 MiB of host RSS on the CUDA EP. Each
graph here repeats one op N times, either with one shape (N nodes, one configuration) or with
N distinct shapes, so the host cost splits into "per node" and "per distinct configuration".
``measure`` runs each graph through ``memshrink.verify.profile(..., backends=("cuda",))`` (one
fresh child, host ``VmHWM`` per stage over the child's baseline, NVML per process minus an
empty session). ``bert`` builds BERT b4x512, runs ``--passes all`` and logs the CUDA BFC arena
(ORT verbose log: every ``Extending`` request) of both files, per stage.
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
sys.path.insert(0, str(ROOT))

MiB = 1 << 20
STAGES = ("session", "run1", "run3")


def _save(out: Path, name: str, nodes: list[Any], x: Any, y: Any, inits: list[Any]) -> Path:
    import onnx
    from onnx import helper

    g = helper.make_graph(nodes, name, [x], [y], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    p = out / f"{name}.onnx"
    onnx.save_model(m, p)
    return p


def conv_chain(out: Path, n: int, distinct: bool, c: int = 32, hw: int = 56) -> Path:
    """N 3x3 convolutions in a chain: one shape (pads 1) or N shapes (pads 0, -2 px each)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    size = hw + 2 * n if distinct else hw
    nodes, inits, prev = [], [], "x"
    for i in range(n):
        w = rng.standard_normal((c, c, 3, 3), dtype=np.float32) * 0.05
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        pads = [0, 0, 0, 0] if distinct else [1, 1, 1, 1]
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], pads=pads))
        prev = f"c{i}"
    end = size - 2 * n if distinct else size
    f = TensorProto.FLOAT
    x = helper.make_tensor_value_info("x", f, [1, c, size, size])
    y = helper.make_tensor_value_info(prev, f, [1, c, end, end])
    return _save(out, f"conv-{'distinct' if distinct else 'same'}-{n}", nodes, x, y, inits)


def matmul_chain(out: Path, n: int, distinct: bool, d: int = 256) -> Path:
    """N MatMuls in a chain: one shape (d x d) or N shapes (widths d, d+16, d+32, ...)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    widths = [d + (16 * i if distinct else 0) for i in range(n + 1)]
    nodes, inits, prev = [], [], "x"
    for i in range(n):
        w = rng.standard_normal((widths[i], widths[i + 1]), dtype=np.float32) * 0.05
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]))
        prev = f"m{i}"
    f = TensorProto.FLOAT
    x = helper.make_tensor_value_info("x", f, [64, widths[0]])
    y = helper.make_tensor_value_info(prev, f, [64, widths[-1]])
    return _save(out, f"matmul-{'distinct' if distinct else 'same'}-{n}", nodes, x, y, inits)


def relu_chain(out: Path, n: int) -> Path:
    """N element-wise ops (Relu) in a chain: the per-node cost of any CUDA kernel."""
    from onnx import TensorProto, helper

    nodes, prev = [], "x"
    for i in range(n):
        nodes.append(helper.make_node("Relu", [prev], [f"r{i}"]))
        prev = f"r{i}"
    f = TensorProto.FLOAT
    x = helper.make_tensor_value_info("x", f, [1, 4096])
    y = helper.make_tensor_value_info(prev, f, [1, 4096])
    return _save(out, f"relu-{n}", nodes, x, y, [])


def sweep_graphs(out: Path, only: str = "") -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    g: dict[str, Path] = {}
    for n in (1, 4, 16, 64, 256):
        g[f"conv-same-{n}"] = conv_chain(out, n, False)
    for n in (4, 16, 64):
        g[f"conv-distinct-{n}"] = conv_chain(out, n, True)
    for n in (64, 512):
        g[f"relu-{n}"] = relu_chain(out, n)
    for n in (1, 16, 64):
        g[f"matmul-same-{n}"] = matmul_chain(out, n, False)
    for n in (4, 16):
        g[f"matmul-distinct-{n}"] = matmul_chain(out, n, True)
    return {k: v for k, v in g.items() if only in k}


def profile_row(path: str, popts: dict[str, str] | None = None) -> dict[str, Any]:
    from memshrink.verify import profile

    p = profile(
        path, backends=("cuda",), runs=3, provider_options={"cuda": popts} if popts else None
    )
    r = p.runs[0]
    gpu = r.child.get("gpu") or {}
    base = gpu.get("empty_session_baseline") or 0
    row: dict[str, Any] = {"status": r.status, "error": r.error, "stages": {}}
    for s in r.stages:
        g = s.get("gpu") or {}
        row["stages"][s["name"]] = {
            "host": int(s["peak"]) - int(r.baseline_rss or 0),
            "host_after": int(s["after"]) - int(r.baseline_rss or 0),
            "anon_peak": s.get("anon_peak"),
            "gpu": None if g.get("peak") is None else int(g["peak"]) - int(base),
            "seconds": s.get("seconds"),
        }
    return row


def cmd_measure(a: argparse.Namespace) -> int:
    t0 = time.time()
    res: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        import onnxruntime as ort
        import pynvml

        pynvml.nvmlInit()
        res["onnxruntime"] = ort.__version__
        res["gpu"] = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
        res["driver"] = pynvml.nvmlSystemGetDriverVersion()
    except Exception as exc:  # noqa: BLE001 - recorded, the sweep still runs
        res["setup_error"] = repr(exc)
    rows: dict[str, Any] = {}
    res["graphs"] = rows
    jobs = [(k, str(p), None) for k, p in sweep_graphs(Path(a.work), a.only).items()]
    if not a.only or "heur" in a.only:
        heur = {"cudnn_conv_algo_search": "HEURISTIC"}
        jobs += [(f"{k}-heuristic", p, heur) for k, p, _ in jobs if k.startswith("conv-same-")]
    for name, path, popts in jobs:
        if time.time() - t0 > a.budget_s:
            rows[name] = {"skipped": "budget"}
            continue
        try:
            rows[name] = profile_row(path, popts)
        except Exception as exc:  # noqa: BLE001 - recorded, the loop goes on
            rows[name] = {"error": repr(exc)}
        print(f"{name}: {time.time() - t0:.0f} s {_brief(rows[name])}", flush=True)
        Path(a.out).write_text(json.dumps(res, indent=1))
    Path(a.out).write_text(json.dumps(res, indent=1))
    return 0


def _brief(row: dict[str, Any]) -> str:
    st = row.get("stages") or {}
    return " ".join(
        f"{k}={st[k]['host'] / MiB:.0f}/{(st[k]['gpu'] or 0) / MiB:.0f}" for k in STAGES if k in st
    )


# ------------------------------------------------------------------ BERT: the arena per stage

ARENA = re.compile(r"Extending|Extend|Reserv|bfc_arena|Allocated memory|Total allocated", re.I)


def arena_child(path: str, save_optimized: bool) -> None:
    """Own process: ORT verbose log on stderr, NVML per-process after each stage on stdout."""
    import onnxruntime as ort

    from memshrink.verify.api import _feeds
    from memshrink.verify.kinds import read_io, resolve_model

    dry = os.environ.get("SWEEP_DRY_RUN") == "1"  # CPU EP, no NVML: tests the script here
    if not dry:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)

    def used() -> int:
        if dry:
            return 0
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        return int(procs[0].usedGpuMemory or 0) if procs else 0

    ref = resolve_model(path, "model", Path(path).parent)
    feeds, _ = _feeds(read_io(ref), ref.path, None, None, None, None, 0)
    ort.set_default_logger_severity(0)
    so = ort.SessionOptions()
    so.log_severity_level = 0
    if save_optimized:  # ORT's CUDA-optimized graph: which fusions ran
        so.optimized_model_filepath = path + ".cuda-opt.onnx"
    res: dict[str, Any] = {"before": used()}
    ep = ("CPUExecutionProvider", {}) if dry else ("CUDAExecutionProvider", {"use_tf32": "0"})
    sess = ort.InferenceSession(path, so, providers=[ep], enable_fallback=0)
    res["session"] = used()
    for r in range(1, 4):
        print(f"=== STAGE run{r}", file=sys.stderr, flush=True)
        sess.run(None, feeds)
        res[f"run{r}"] = used()
    print("RESULT " + json.dumps(res), flush=True)


def run_arena(path: str, save_optimized: bool = True) -> dict[str, Any]:
    """One child: NVML per stage, the arena log lines, and the extensions per stage."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import cuda_host_sweep as b;"
        "b.arena_child(sys.argv[2], sys.argv[3] == '1')"
    )
    cmd = [sys.executable, "-c", code, str(Path(__file__).parent), path, str(int(save_optimized))]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    keep: list[str] = []
    assert p.stderr is not None and p.stdout is not None
    for line in p.stderr:
        if (ARENA.search(line) or "=== STAGE" in line) and len(keep) < 3000:
            keep.append(line.rstrip()[-240:])
    out = p.stdout.read()
    p.wait(timeout=300)
    res: dict[str, Any] = {"rc": p.returncode, "arena_log": keep, "extends": _extends(keep)}
    for line in out.splitlines():
        if line.startswith("RESULT "):
            res.update(json.loads(line[7:]))
    return res


def _extends(lines: list[str]) -> list[tuple[str, str]]:
    """(stage, line) for each arena extension; stage "session" before the first run."""
    stage, out = "session", []
    for line in lines:
        if "=== STAGE" in line:
            stage = line.split()[-1]
        elif "xtend" in line:
            out.append((stage, line[-160:]))
    return out


def optimized_ops(path: str) -> dict[str, int]:
    import onnx

    m = onnx.load(path, load_external_data=False)
    ops: dict[str, int] = {}
    for n in m.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    return ops


def cmd_bert(a: argparse.Namespace) -> int:
    import models

    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {}
    for name in a.models:
        t0 = time.time()
        src = Path(models.build(name))
        dst = work / f"{name}.all.onnx"
        opt = subprocess.run(
            [sys.executable, "-m", "memshrink", "optimize", str(src), str(dst), "--passes", "all"],
            capture_output=True,
            text=True,
        )
        row: dict[str, Any] = {"optimize_rc": opt.returncode, "optimize_tail": opt.stderr[-800:]}
        res[name] = row
        for label, path, repeats in (("original", src, 1), ("all", dst, a.repeats)):
            if not path.exists():
                continue
            row[label] = run_arena(str(path))
            cuda_opt = str(path) + ".cuda-opt.onnx"
            if Path(cuda_opt).exists():
                row[label]["cuda_optimized_ops"] = optimized_ops(cuda_opt)
            # the weights' copy order differs per process: repeat the stage figures
            row[label]["repeats"] = [
                {k: v for k, v in run_arena(str(path), False).items() if k != "arena_log"}
                for _ in range(repeats - 1)
            ]
        row["seconds"] = round(time.time() - t0, 1)
        Path(a.out).write_text(json.dumps(res, indent=1))
        print(f"{name}: {row['seconds']} s", flush=True)
    return 0


# ------------------------------------------------------------------ table


def cmd_table(a: argparse.Namespace) -> int:
    from memshrink.estimate import estimate

    res = json.loads(Path(a.results).read_text())
    print(
        f"GPU: {res.get('gpu')}, driver {res.get('driver')}, onnxruntime {res.get('onnxruntime')}"
    )
    print("| graph | host run 1 meas / pred (MiB) | err | GPU run 1 meas / pred (MiB) |")
    print("| --- | --- | --- | --- |")
    graphs = sweep_graphs(Path("/tmp/memshrink-cuda-sweep"))
    for name, row in res["graphs"].items():
        st = (row.get("stages") or {}).get("run1")
        base = name.removesuffix("-heuristic")
        if not st or base not in graphs:
            continue
        est = estimate(str(graphs[base]), backend="cuda")
        hp = est.prediction.details["host"]["run_1"]
        gp = est.prediction.details["device"]["run_1"]
        err = 100 * (hp - st["host"]) / st["host"]
        print(
            f"| {name} | {st['host'] / MiB:.0f} / {hp / MiB:.0f} | {err:+.1f}% | "
            f"{(st['gpu'] or 0) / MiB:.0f} / {gp / MiB:.0f} |"
        )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--results", default=str(Path(__file__).with_name("cuda_host_sweep.json")))
    sub = ap.add_subparsers(dest="cmd")
    m = sub.add_parser("measure")
    m.add_argument("--out", required=True)
    m.add_argument("--work", default="/tmp/memshrink-cuda-sweep")
    m.add_argument("--only", default="")
    m.add_argument("--budget-s", type=float, default=300)
    b = sub.add_parser("bert")
    b.add_argument("--out", required=True)
    b.add_argument("--work", default="/tmp/memshrink-cuda-bert")
    b.add_argument("--models", nargs="*", default=["bert-base-b4s512"])
    b.add_argument("--repeats", type=int, default=3, help="processes per rewritten model")
    a = ap.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if a.cmd == "measure":
        return cmd_measure(a)
    if a.cmd == "bert":
        return cmd_bert(a)
    return cmd_table(a)


if __name__ == "__main__":
    raise SystemExit(main())
