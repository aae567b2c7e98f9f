"""What cuDNN's algorithm search costs the CUDA EP's first run, per convolution (GPU machine).

    python docs/bench/cuda_conv_search.py configs MODEL.onnx ... --out cfgs.json   # anywhere
    python docs/bench/cuda_conv_search.py grid --out cfgs.json                      # anywhere
    python docs/bench/cuda_conv_search.py measure cfgs.json --out rows.json [--fresh]  # GPU
    python docs/bench/cuda_conv_search.py pernode cfgs.json --out rows.json SET ...    # GPU

``configs``: a model's distinct convolutions (op, input shape, weight shape, attributes,
bias) in graph order, the first node of each. ``grid``: single convolutions over kernel,
stride, grouping, spatial size and channels (one factor at a time from a 3x3 base).

``measure``, default (sequence): one process per (set, algo search), which creates one
single-Conv session per configuration in order and runs it once (input bound from the host,
output left on the device: no host copy of it is counted); host RSS and NVML GPU memory before,
at the peak (VmHWM reset; GPU polled every 1 ms) and after each first run; every session stays
alive, as the Conv kernels of one model do. CUDA modules
lazily loaded by one configuration stay loaded for the next, so each row is what that
configuration adds to the ones before it: the model's first run, decomposed. The last row
repeats the first configuration (a control: a new session of a known configuration).
``--fresh``: one process per (configuration, algo search) instead, host only (several at once;
NVML's per-process figure needs the GPU to itself): what one convolution costs on its own.

``pernode``: per set, two models made of its distinct convolutions side by side (one graph
input each): each once, and each repeated as often as the model has such nodes; the verifier's
child measures both (host run 1 minus session creation, EXHAUSTIVE). The difference, less the
repeated nodes' outputs (copied to the host and held by the child), over the repeated nodes is
the per-Conv-node cost in that model's context.

Why: ``cudnn_conv_algo_search=EXHAUSTIVE`` (ORT's default) runs
``cudnnFindConvolutionForwardAlgorithmEx`` on each new input shape: every applicable
algorithm is timed, so the engines of each are loaded (host) and a transient workspace of the
largest algorithm's size is taken (``cudnn_conv_use_max_workspace``, default on). HEURISTIC asks
cuDNN's heuristics for one algorithm and loads only that one's engines.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
MiB = 1 << 20
ALGOS = ("EXHAUSTIVE", "HEURISTIC")


# ------------------------------------------------------------------ configurations (anywhere)


def model_configs(path: str, dims: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Distinct convolutions of a model in graph order, with their node counts."""
    from memshrink.estimate.cuda import CONV_OPS
    from memshrink.estimate.graph import build_view

    g = build_view(path, dims=dims or None).graph
    seen: dict[str, dict[str, Any]] = {}
    for n in g.nodes:
        if n.op_type not in CONV_OPS or n.index in g.folded:
            continue
        x = g.tensors[n.inputs[0]].shape
        w = g.tensors[n.inputs[1]].shape
        attrs = {k: v for k, v in n.attrs.items() if k != "auto_pad" or v != "NOTSET"}
        cfg = {
            "op": n.op_type,
            "x": list(x),
            "w": list(w),
            "bias": len(n.inputs) > 2 and bool(n.inputs[2]),
            "attrs": {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in attrs.items()},
        }
        key = json.dumps(cfg, sort_keys=True)
        if key in seen:
            seen[key]["nodes"] += 1
        else:
            seen[key] = {**cfg, "nodes": 1}
    return list(seen.values())


def grid_configs() -> dict[str, list[dict[str, Any]]]:
    """Single convolutions, one factor at a time from a 3x3 stride-1 64->64 conv at 56x56."""

    def conv(k: int, s: int, grp: int, hw: int, c: int) -> dict[str, Any]:
        return {
            "op": "Conv",
            "x": [1, c, hw, hw],
            "w": [c, c // grp, k, k],
            "bias": True,
            "attrs": {"pads": [k // 2] * 4, "strides": [s, s], "group": grp},
            "nodes": 1,
        }

    out: dict[str, list[dict[str, Any]]] = {}
    for k in (1, 3, 5, 7):
        for s in (1, 2):
            for grp in (1, 64):
                for hw in (14, 56, 224):
                    out[f"k{k}s{s}g{grp}hw{hw}c64"] = [conv(k, s, grp, hw, 64)]
    for k in (1, 3):
        for c in (16, 256):
            out[f"k{k}s1g1hw56c{c}"] = [conv(k, 1, 1, 56, c)]
    out["k3s1g8hw56c64"] = [conv(3, 1, 8, 56, 64)]
    # Rule checks: depthwise 1x1 over channels and sizes, grouped (not depthwise) 1x1,
    # strided 1x1 over channels and sizes.
    for c, hw in ((32, 56), (128, 28), (512, 28), (512, 112)):
        out[f"k1s1g{c}hw{hw}c{c}"] = [conv(1, 1, c, hw, c)]
    for grp in (4, 8, 32):
        out[f"k1s1g{grp}hw56c64"] = [conv(1, 1, grp, 56, 64)]
    for c, hw in ((256, 28), (256, 112), (1024, 14)):
        out[f"k1s2g1hw{hw}c{c}"] = [conv(1, 2, 1, hw, c)]
    return out


def single_conv_model(cfg: dict[str, Any]) -> Any:
    """A one-node model running ``cfg`` (seeded weights)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(cfg["w"], dtype=np.float32) * 0.01, "w")]
    ins = ["x", "w"]
    if cfg["bias"]:
        nout = cfg["w"][1] * cfg["attrs"].get("group", 1) if cfg["op"] == "ConvTranspose" else 0
        nout = nout or cfg["w"][0]
        inits.append(numpy_helper.from_array(np.zeros(nout, np.float32), "b"))
        ins.append("b")
    node = helper.make_node(cfg["op"], ins, ["y"], **cfg["attrs"])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, cfg["x"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([node], "conv", [x], [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def side_by_side_model(cfgs: list[dict[str, Any]], repeat: bool) -> Any:
    """Each configuration's Conv over its own graph input, once or ``nodes`` times."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits, ins, outs = [], [], [], []
    for i, c in enumerate(cfgs):
        ins.append(helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, c["x"]))
        inits.append(numpy_helper.from_array(np.zeros(c["w"], np.float32), f"w{i}"))
        b = []
        if c["bias"]:
            inits.append(numpy_helper.from_array(np.zeros(c["w"][0], np.float32), f"b{i}"))
            b = [f"b{i}"]
        for r in range(c["nodes"] if repeat else 1):
            nodes.append(
                helper.make_node(c["op"], [f"x{i}", f"w{i}", *b], [f"y{i}_{r}"], **c["attrs"])
            )
            outs.append(helper.make_tensor_value_info(f"y{i}_{r}", TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "side_by_side", ins, outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _out_bytes(c: dict[str, Any]) -> int:
    x, w, a = c["x"], c["w"], c["attrs"]
    s, p = a.get("strides", [1, 1]), a.get("pads", [0] * 4)
    hw = [(x[2 + j] + p[j] + p[j + 2] - w[2 + j]) // s[j] + 1 for j in range(2)]
    return int(x[0] * w[0] * hw[0] * hw[1] * 4)


def cmd_pernode(args: argparse.Namespace) -> int:
    import onnx

    from memshrink.verify.api import profile

    sets = json.loads(Path(args.cfgs).read_text())
    work = Path(tempfile.mkdtemp(prefix="convpernode-"))
    res: dict[str, Any] = {}
    for tag in args.sets:
        fig = {}
        for rep in (False, True):
            p = work / f"{tag}.{int(rep)}.onnx"
            onnx.save(side_by_side_model(sets[tag], rep), str(p))
            run = profile(str(p), backends="cuda", runs=1).runs[0]
            st = {s["name"]: s for s in run.stages}
            fig[rep] = (st["run1"]["peak"] - st["session"]["peak"]) / MiB
        extra = sum(c["nodes"] - 1 for c in sets[tag])
        outs = sum(_out_bytes(c) * (c["nodes"] - 1) for c in sets[tag]) / MiB
        res[tag] = {
            "run1_minus_session_once": round(fig[False], 1),
            "run1_minus_session_repeated": round(fig[True], 1),
            "repeated_nodes": extra,
            "their_outputs_mib": round(outs, 1),
            "per_node_mib": round((fig[True] - fig[False] - outs) / max(extra, 1), 2),
        }
        print(tag, res[tag], flush=True)
        Path(args.out).write_text(json.dumps(res, indent=1))
    return 0


# ------------------------------------------------------------------ measuring child (GPU)


def child(cfgs_path: str, algo: str, out: str, gpu: bool) -> None:
    import numpy as np
    import onnx
    import onnxruntime as ort

    from memshrink.verify.measure import read_status, reset_peak

    cfgs = json.loads(Path(cfgs_path).read_text())
    cfgs = [*cfgs, cfgs[0]] if gpu else cfgs  # control: the first configuration once more
    probe = None
    if gpu:
        from memshrink.verify.child import _nvml_probe

        probe = _nvml_probe(0)[0]
    tmp = Path(tempfile.mkdtemp(prefix="convsearch-"))
    rows: list[dict[str, Any]] = []
    kept: list[Any] = []
    base = read_status()["VmRSS"]
    popts = {"cudnn_conv_algo_search": algo}
    for i, cfg in enumerate(cfgs):
        p = tmp / f"c{i}.onnx"
        onnx.save(single_conv_model(cfg), str(p))
        feed = {"x": np.random.default_rng(1).standard_normal(cfg["x"], dtype=np.float32)}
        so = ort.SessionOptions()
        so.log_severity_level = 3
        h0 = read_status()["VmRSS"]
        g0 = probe() if probe else None
        sess = ort.InferenceSession(
            str(p), so, providers=[("CUDAExecutionProvider", popts)], enable_fallback=0
        )
        assert sess.get_providers()[0] == "CUDAExecutionProvider"
        h1 = read_status()["VmRSS"]
        g1 = probe() if probe else None
        peak = [g1 or 0]
        stop = threading.Event()

        def poll(peak: list[int] = peak, stop: threading.Event = stop) -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], probe() or 0)  # type: ignore[misc]
                time.sleep(0.001)

        th = threading.Thread(target=poll, daemon=True)
        if probe:
            th.start()
        io = sess.io_binding()
        io.bind_cpu_input("x", feed["x"])
        io.bind_output("y", "cuda")  # the output stays on the device: no host copy to count
        reset_peak()
        t0 = time.perf_counter()
        sess.run_with_iobinding(io)
        secs = time.perf_counter() - t0
        stop.set()
        if probe:
            th.join()
        st = read_status()
        g2 = probe() if probe else None
        row = {
            "i": i,
            "cfg": cfg,
            "algo": algo,
            "session_host": (h1 - h0) / MiB,
            "run_host_peak": (st["VmHWM"] - h1) / MiB,
            "run_host_after": (st["VmRSS"] - h1) / MiB,
            "host_total": (st["VmRSS"] - base) / MiB,
            "seconds": round(secs, 4),
        }
        if probe:
            row.update(
                session_gpu=((g1 or 0) - (g0 or 0)) / MiB,
                run_gpu_peak=(max(peak[0], g2 or 0) - (g1 or 0)) / MiB,
                run_gpu_after=((g2 or 0) - (g1 or 0)) / MiB,
            )
        rows.append(row)
        kept.append((sess, io))  # as in one model: every Conv kernel keeps its cuDNN state
    Path(out).write_text(json.dumps(rows))


def _spawn(cfgs: list[dict[str, Any]], algo: str, gpu: bool, work: Path, tag: str) -> Any:
    cp = work / f"{tag}.{algo}.cfg.json"
    op = work / f"{tag}.{algo}.rows.json"
    cp.write_text(json.dumps(cfgs))
    cmd = [sys.executable, __file__, "child", str(cp), algo, str(op)] + (["--gpu"] if gpu else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        return {"tag": tag, "algo": algo, "error": r.stderr[-2000:]}
    return {"tag": tag, "algo": algo, "rows": json.loads(op.read_text())}


def cmd_measure(args: argparse.Namespace) -> int:
    sets: dict[str, list[dict[str, Any]]] = json.loads(Path(args.cfgs).read_text())
    work = Path(tempfile.mkdtemp(prefix="convsearch-"))
    jobs = [(tag, algo) for tag in sets for algo in ALGOS]
    res: list[Any] = []
    if args.fresh:
        with ThreadPoolExecutor(args.jobs) as ex:
            futs = [ex.submit(_spawn, sets[t], a, False, work, t) for t, a in jobs]
            for f in futs:
                res.append(f.result())
                print(json.dumps(res[-1])[:300], flush=True)
                Path(args.out).write_text(json.dumps(res, indent=1))
    else:
        for t, a in jobs:
            res.append(_spawn(sets[t], a, True, work, t))
            print(json.dumps(res[-1])[:300], flush=True)
            Path(args.out).write_text(json.dumps(res, indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("configs")
    c.add_argument("models", nargs="+")
    c.add_argument("--out", required=True)
    c.add_argument("--dim", action="append", default=[], metavar="SYMBOL=N")
    gr = sub.add_parser("grid")
    gr.add_argument("--out", required=True)
    m = sub.add_parser("measure")
    m.add_argument("cfgs")
    m.add_argument("--out", required=True)
    m.add_argument("--fresh", action="store_true")
    m.add_argument("--jobs", type=int, default=8)
    pn = sub.add_parser("pernode")
    pn.add_argument("cfgs")
    pn.add_argument("sets", nargs="+")
    pn.add_argument("--out", required=True)
    ch = sub.add_parser("child")
    ch.add_argument("cfgs")
    ch.add_argument("algo")
    ch.add_argument("out")
    ch.add_argument("--gpu", action="store_true")
    args = ap.parse_args()
    if args.cmd == "configs":
        dims = {k: int(v) for k, v in (d.split("=", 1) for d in args.dim)}
        sets = {Path(m).name.removesuffix(".onnx"): model_configs(m, dims) for m in args.models}
        Path(args.out).write_text(json.dumps(sets, indent=1))
        print({k: len(v) for k, v in sets.items()})
        return 0
    if args.cmd == "grid":
        Path(args.out).write_text(json.dumps(grid_configs(), indent=1))
        return 0
    if args.cmd == "pernode":
        return cmd_pernode(args)
    if args.cmd == "child":
        child(args.cfgs, args.algo, args.out, args.gpu)
        return 0
    return cmd_measure(args)


if __name__ == "__main__":
    raise SystemExit(main())
