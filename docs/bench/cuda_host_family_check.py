"""Check the CUDA EP's per-kernel-family host model on graphs it was not fitted on (GPU machine).

    python docs/bench/cuda_host_family_check.py measure --out rows.json [--only NAME ...]
    python docs/bench/cuda_host_family_check.py opt-graphs --out ops.json MODEL.onnx ...
    python docs/bench/cuda_host_family_check.py [--results rows.json]     # table, anywhere

``measure``: each case is a small graph built in code, profiled through
``memshrink.verify.profile(..., backends="cuda")`` (the verifier's child: host RSS peak per
stage over the child's baseline); the row keeps run 1 minus session creation, what
``memshrink estimate --backend cuda`` predicts for it (``cuda.host_libraries``) and the kernel
families it counts. Why these cases: each tests one claim of the family rule that the sweep
(``cuda_host_op_sweep.py``) did not: three ops of one family cost one family (``unary3``),
IsNaN is its own module (``erf_isnan``), cuDNN and cuBLAS share their first-use state
(``conv_matmul``), an Add after a Conv loads the binary module unless a Relu follows it (the
CUDA ``FusedConv``: ``conv_add`` / ``conv_add_relu``), and what further GEMM shapes cost at
BERT's and GPT-2's sizes (``gemm_*``).

``opt-graphs``: the op types ONNX Runtime's CUDA EP really runs after its graph optimizations
(``optimized_model_filepath``, level ALL), per model: which fusions replace the families the
estimator reads from the graph as written.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

MiB = 1 << 20
F = T.FLOAT
RNG = np.random.default_rng(0)


def _w(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
    return nh.from_array(RNG.standard_normal(shape, dtype=np.float32) * 0.01, name)


def _model(nodes: list[Any], x: list[int], inits: list[Any], outs: list[str]) -> onnx.ModelProto:
    g = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", F, x)],
        [h.make_tensor_value_info(o, F, None) for o in outs],
        inits,
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def _gemm_set(
    shapes: list[tuple[int, int, int]], batched: list[tuple[int, int]]
) -> onnx.ModelProto:
    """One MatMul per (M, K, N) shape over slices of one input, plus batched attention GEMMs
    ((batch, seq): [b,12,s,64]x[b,12,64,s] and [b,12,s,s]x[b,12,s,64])."""
    big = max(max(m for m, _, _ in shapes), 1)
    kmax = max(k for _, k, _ in shapes)
    nodes: list[Any] = []
    inits: list[Any] = []
    outs: list[str] = []
    for i, (m, k, n) in enumerate(shapes):
        inits.append(_w(f"w{i}", (k, n)))
        inits.append(nh.from_array(np.array([0, 0], np.int64), f"s{i}"))
        inits.append(nh.from_array(np.array([m, k], np.int64), f"e{i}"))
        nodes.append(h.make_node("Slice", ["x", f"s{i}", f"e{i}"], [f"a{i}"]))
        nodes.append(h.make_node("MatMul", [f"a{i}", f"w{i}"], [f"y{i}"]))
        outs.append(f"y{i}")
    for j, (b, s) in enumerate(batched):  # q from x (a Slice and a Reshape), so not folded
        rows = b * 12 * s * 64 // kmax
        inits.append(nh.from_array(np.array([0, 0], np.int64), f"qs{j}"))
        inits.append(nh.from_array(np.array([rows, kmax], np.int64), f"qe{j}"))
        inits.append(nh.from_array(np.array([b, 12, s, 64], np.int64), f"qr{j}"))
        inits.append(_w(f"k{j}", (b, 12, 64, s)))
        nodes.append(h.make_node("Slice", ["x", f"qs{j}", f"qe{j}"], [f"qf{j}"]))
        nodes.append(h.make_node("Reshape", [f"qf{j}", f"qr{j}"], [f"q{j}"]))
        nodes.append(h.make_node("MatMul", [f"q{j}", f"k{j}"], [f"p{j}"]))
        nodes.append(h.make_node("MatMul", [f"p{j}", f"q{j}"], [f"c{j}"]))
        outs.append(f"c{j}")
    return _model(nodes, [big, kmax], inits, outs)


BERT = [(2048, 768, 768), (2048, 768, 3072), (2048, 3072, 768)]
BERT1 = [(512, 768, 768), (512, 768, 3072), (512, 3072, 768)]
GPT2 = [(128, 768, 2304), (128, 768, 768), (128, 768, 3072), (128, 3072, 768)]


def _convs(specs: list[tuple[str, int, int, int, int, bool]], x: list[int]) -> onnx.ModelProto:
    """Parallel convolutions of ``x``: (op, out channels, kernel, stride, group, bias) each."""
    nodes, inits, outs = [], [], []
    cin = x[1]
    for i, (op, cout, k, st, grp, bias) in enumerate(specs):
        wshape = (cin, cout // grp, k, k) if op == "ConvTranspose" else (cout, cin // grp, k, k)
        inits.append(_w(f"w{i}", wshape))
        ins = ["x", f"w{i}"]
        if bias:
            inits.append(_w(f"b{i}", (cout,)))
            ins.append(f"b{i}")
        pad = 0 if op == "ConvTranspose" else k // 2
        nodes.append(h.make_node(op, ins, [f"y{i}"], pads=[pad] * 4, strides=[st, st], group=grp))
        outs.append(f"y{i}")
    return _model(nodes, x, inits, outs)


def conv_cases() -> dict[str, onnx.ModelProto]:
    """What a convolution's first run costs the host, by what varies between configurations."""
    x = [1, 64, 56, 56]
    c = "Conv"
    return {
        "conv_nobias": _convs([(c, 64, 3, 1, 1, False)], x),
        "conv_two_cfg": _convs([(c, 64, 3, 1, 1, True), (c, 128, 3, 1, 1, True)], x),
        "conv_two_geo": _convs([(c, 64, 3, 1, 1, True), (c, 64, 1, 1, 1, True)], x),
        "conv_resnet_geo": _convs(
            [(c, 64, 1, 1, 1, True), (c, 64, 3, 1, 1, True), (c, 64, 3, 2, 1, True)]
            + [(c, 64, 7, 2, 1, True), (c, 64, 1, 2, 1, True)],
            x,
        ),
        "conv_resnet_cfg": _convs(
            [(c, n, 1, 1, 1, True) for n in (64, 128, 256, 512)]
            + [(c, n, 3, 1, 1, True) for n in (64, 128, 256, 512)],
            x,
        ),
        "convtranspose": _convs([("ConvTranspose", 64, 2, 2, 1, True)], x),
        "conv_512": _convs([(c, 64, 3, 1, 1, True)], [1, 64, 512, 512]),
        "gconv1x1": _convs([(c, 64, 1, 1, 8, True)], x),
        "dw5": _convs([(c, 64, 5, 1, 64, True)], x),
        "mb_geo": _convs(
            [(c, 64, 1, 1, 1, True), (c, 64, 1, 1, 8, True), (c, 64, 1, 2, 1, True)]
            + [(c, 64, 3, 1, 64, True), (c, 64, 3, 2, 1, True), (c, 64, 5, 1, 64, True)],
            x,
        ),
        "avgpool": _model(
            [h.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3])], x, [], ["y"]
        ),
        "conv_maxpool": _model(
            [
                h.make_node("Conv", ["x", "w", "b"], ["y0"], pads=[1] * 4),
                h.make_node("MaxPool", ["x"], ["y1"], kernel_shape=[3, 3]),
            ],
            x,
            [_w("w", (64, 64, 3, 3)), _w("b", (64,))],
            ["y0", "y1"],
        ),
        "maxpool": _model(
            [h.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3])], x, [], ["y"]
        ),
    }


def cases() -> dict[str, onnx.ModelProto]:
    """The check graphs (deterministic: seeded weights)."""
    x = [4, 128, 768]
    out: dict[str, onnx.ModelProto] = {}
    out["unary3"] = _model(
        [
            h.make_node("Erf", ["x"], ["a"]),
            h.make_node("Sqrt", ["a"], ["b"]),
            h.make_node("Cast", ["b"], ["y"], to=F),
        ],
        x,
        [],
        ["y"],
    )
    c = nh.from_array(np.float32([1.001]), "c")
    out["erf_isnan"] = _model(
        [
            h.make_node("Erf", ["x"], ["a"]),
            h.make_node("IsNaN", ["a"], ["m"]),
            h.make_node("Where", ["m", "c", "a"], ["y"]),
        ],
        x,
        [c],
        ["y"],
    )
    out["where"] = _model(
        [h.make_node("Erf", ["x"], ["a"]), h.make_node("Cast", ["a"], ["m"], to=T.BOOL)]
        + [h.make_node("Where", ["m", "c", "x"], ["y"])],
        x,
        [c],
        ["y"],
    )
    conv_x = [1, 64, 56, 56]
    wc = _w("wc", (64, 64, 3, 3))
    bc = _w("bc", (64,))
    out["conv"] = _model(
        [h.make_node("Conv", ["x", "wc", "bc"], ["y"], pads=[1] * 4)], conv_x, [wc, bc], ["y"]
    )
    out["conv_matmul"] = _model(
        [
            h.make_node("Conv", ["x", "wc", "bc"], ["a"], pads=[1] * 4),
            h.make_node("MatMul", ["a", "wm"], ["y"]),
        ],
        conv_x,
        [wc, bc, _w("wm", (56, 56))],
        ["y"],
    )
    out["conv_add"] = _model(
        [
            h.make_node("Conv", ["x", "wc", "bc"], ["a"], pads=[1] * 4),
            h.make_node("Add", ["a", "x"], ["y"]),
        ],
        conv_x,
        [wc, bc],
        ["y"],
    )
    out["conv_add_relu"] = _model(
        [
            h.make_node("Conv", ["x", "wc", "bc"], ["a"], pads=[1] * 4),
            h.make_node("Add", ["a", "x"], ["r"]),
            h.make_node("Relu", ["r"], ["y"]),
        ],
        conv_x,
        [wc, bc],
        ["y"],
    )
    out["dwconv"] = _model(
        [h.make_node("Conv", ["x", "wd", "bc"], ["y"], pads=[1] * 4, group=64)],
        conv_x,
        [_w("wd", (64, 1, 3, 3)), bc],
        ["y"],
    )
    out["clip"] = _model(
        [h.make_node("Clip", ["x", "lo", "hi"], ["y"])],
        x,
        [nh.from_array(np.float32(0), "lo"), nh.from_array(np.float32(6), "hi")],
        ["y"],
    )
    out["gather"] = _model(
        [h.make_node("Gather", ["x", "i"], ["y"], axis=1)],
        x,
        [nh.from_array(np.arange(64, dtype=np.int64), "i")],
        ["y"],
    )
    out.update(conv_cases())
    out["gemm_one_bert"] = _gemm_set(BERT[:1], [])
    out["gemm_bert_b4"] = _gemm_set(BERT, [(4, 512)])
    out["gemm_bert_b1"] = _gemm_set(BERT1, [(1, 512)])
    out["gemm_bert_both"] = _gemm_set(BERT + BERT1, [(4, 512), (1, 512)])
    out["gemm_gpt2"] = _gemm_set(GPT2, [(1, 128)])
    out["gemm_gpt2_head"] = _gemm_set([*GPT2, (128, 768, 50257)], [(1, 128)])
    return out


def predict(path: Path) -> dict[str, Any]:
    from memshrink.estimate import cuda
    from memshrink.estimate.graph import build_view

    g = build_view(str(path)).graph
    return {"pred": round(cuda.host_libraries(g) / MiB, 1), "families": cuda.kernel_families(g)}


def cmd_measure(args: argparse.Namespace) -> int:
    from memshrink.verify.api import profile

    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, model in cases().items():
        if args.only and name not in args.only:
            continue
        path = work / f"fam_{name}.onnx"
        onnx.save(model, str(path))
        run = profile(str(path), backends="cuda", runs=2).runs[0]
        st = {s["name"]: s for s in run.stages}
        base = run.stages[0]["before"]
        row = {
            "case": name,
            "ok": run.ok,
            "session": round((st["session"]["peak"] - base) / MiB, 1),
            "run1": round((st["run1"]["peak"] - base) / MiB, 1),
            **predict(path),
        }
        row["run_minus_session"] = round(row["run1"] - row["session"], 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


def cmd_opt_graphs(args: argparse.Namespace) -> int:
    import onnxruntime as ort

    res: dict[str, Any] = {}
    for m in args.models:
        so = ort.SessionOptions()
        dst = Path(args.dir) / (Path(m).stem + ".cuda-opt.onnx")
        so.optimized_model_filepath = str(dst)
        sess = ort.InferenceSession(
            m, so, providers=["CUDAExecutionProvider"], provider_options=[{}]
        )
        assert sess.get_providers()[0] == "CUDAExecutionProvider"
        del sess
        g = onnx.load(str(dst), load_external_data=False).graph
        res[m] = dict(Counter(f"{n.domain + ':' if n.domain else ''}{n.op_type}" for n in g.node))
        print(m, res[m], flush=True)
        Path(args.out).write_text(json.dumps(res, indent=1))
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    """Host per stage (MiB over the child's baseline, the verifier's figure) vs the estimate."""
    from memshrink.estimate import estimate
    from memshrink.verify.api import profile

    res: dict[str, Any] = {}
    flags = {"0": False, "1": True, "false": False, "true": True}
    opts: dict[str, Any] = {}
    for kv in args.session_option:
        key, value = kv.split("=", 1)
        opts[key] = flags.get(value.lower(), value)
    for m in args.models:
        popts = dict(kv.split("=", 1) for kv in args.provider_option)
        run = profile(
            m,
            backends="cuda",
            runs=3,
            session_options=opts or None,
            provider_options={"cuda": popts} if popts else None,
        ).runs[0]
        base = run.baseline_rss or 0
        host = estimate(m, backend="cuda").prediction.details["host"]
        res[m] = {
            "ok": run.ok,
            "host": {s["name"]: round((s["peak"] - base) / MiB, 1) for s in run.stages},
            "pred": {k: round(v / MiB, 1) for k, v in host.items()},
            "session_options": opts,
            "provider_options": dict(kv.split("=", 1) for kv in args.provider_option),
        }
        print(m, json.dumps(res[m]), flush=True)
        Path(args.out).write_text(json.dumps(res, indent=1))
    return 0


def cmd_table(args: argparse.Namespace) -> int:
    rows = json.loads(Path(args.results).read_text())
    work = Path("/tmp/memshrink-family-check")
    work.mkdir(parents=True, exist_ok=True)
    made = cases()
    print("| case | run 1 - session (MiB) | predicted | err | families |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        path = work / f"fam_{r['case']}.onnx"
        onnx.save(made[r["case"]], str(path))
        p = predict(path)
        m = r["run_minus_session"]
        err = f"{(p['pred'] - m) / m * 100:+.0f}%" if m else "-"
        fams = ", ".join(sorted(p["families"]))
        print(f"| {r['case']} | {m:.1f} | {p['pred']:.1f} | {err} | {fams} |")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    m = sub.add_parser("measure")
    m.add_argument("--out", required=True)
    m.add_argument("--dir", default="/tmp/memshrink-family-check")
    m.add_argument("--only", nargs="*", default=None)
    o = sub.add_parser("opt-graphs")
    o.add_argument("--out", required=True)
    o.add_argument("--dir", default="/tmp")
    o.add_argument("models", nargs="+")
    pr = sub.add_parser("profile")
    pr.add_argument("--out", required=True)
    pr.add_argument("--session-option", action="append", default=[], metavar="KEY=VALUE")
    pr.add_argument("--provider-option", action="append", default=[], metavar="KEY=VALUE")
    pr.add_argument("models", nargs="+")
    ap.add_argument(
        "--results", default=str(Path(__file__).with_name("cuda_host_family_check.json"))
    )
    args = ap.parse_args()
    if args.cmd == "measure":
        return cmd_measure(args)
    if args.cmd == "opt-graphs":
        return cmd_opt_graphs(args)
    if args.cmd == "profile":
        return cmd_profile(args)
    return cmd_table(args)


if __name__ == "__main__":
    raise SystemExit(main())
