"""OpenVINO: what a heads split of attention costs, and the MHA kernel's compile cost by width.

    python docs/bench/ov_split_copies_bench.py split     # whole vs 12 cores, Q/K/V inputs or projected
    python docs/bench/ov_split_copies_bench.py kernels   # N = 4 -> 16 attention blocks, S = 32..256

Each model runs in a child of its own (``read_model``, ``compile_model``, ``del model``, three
``infer``s with output copies), which prints its stage peaks (``VmHWM`` reset per stage) and
``RssAnon`` over the post-import baseline, and with ``--rt`` the runtime graph's layer types.
At the host's default precision (bf16 on AVX512-BF16) and at ``INFERENCE_PRECISION_HINT=f32``.
Results: docs/estimate.md, "Session 9: the heads split's copies".
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
CHILD = r"""
import json, sys
import numpy as np
import openvino as ov
def st():
    return {k: int(v.split()[0]) / 1024 for k, v in (l.split(":", 1) for l in open("/proc/self/status"))
            if k in ("VmHWM", "VmRSS", "RssAnon")}
def reset():
    open("/proc/self/clear_refs", "w").write("5")
core = ov.Core()
path, prec = sys.argv[1], sys.argv[2]
cfg = {} if prec == "default" else {"INFERENCE_PRECISION_HINT": prec}
b = st(); out = {}
m = core.read_model(path); reset()
c = core.compile_model(m, "CPU", cfg)
s = st(); out["compile"] = s["VmHWM"] - b["VmRSS"]; out["compile_anon"] = s["RssAnon"] - b["RssAnon"]
if "--rt" in sys.argv:
    types = {}
    for op in c.get_runtime_model().get_ordered_ops():
        t = str(op.get_rt_info()["layerType"].astype(str)); types[t] = types.get(t, 0) + 1
    out["types"] = types
del m; reset()
req = c.create_infer_request()
feeds = {i.get_any_name(): np.random.rand(*list(i.get_shape())).astype(np.float32) for i in c.inputs}
for r in range(3):
    o = [np.array(v, copy=True) for v in req.infer(feeds).values()]
    s = st(); out[f"infer{r + 1}"] = s["VmHWM"] - b["VmRSS"]; out[f"infer{r + 1}_anon"] = s["RssAnon"] - b["RssAnon"]
print(json.dumps(out))
"""


def _core(q: str, k: str, v: str, t: int, softmax: bool = True) -> list[onnx.NodeProto]:
    perm = [0, 1, 3, 2]
    mid = helper.make_node("Softmax", [f"sc{t}"], [f"p{t}"], axis=-1)
    if not softmax:
        mid = helper.make_node("Relu", [f"sc{t}"], [f"p{t}"])
    return [
        helper.make_node("Transpose", [k], [f"kt{t}"], perm=perm),
        helper.make_node("MatMul", [q, f"kt{t}"], [f"sc{t}"]),
        mid,
        helper.make_node("MatMul", [f"p{t}", v], [f"o{t}"]),
    ]


def split_model(n: int, proj: bool, b: int = 4, h: int = 12, s: int = 512, d: int = 64):
    """One core (n = 1) or n cores along the heads (``Split`` -> cores -> ``Concat``); Q/K/V
    graph inputs [b, h, s, d], or made by MatMul -> Reshape -> Transpose from x [b, s, h*d]."""
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    if proj:
        ins = [helper.make_tensor_value_info("x", F, [b, s, h * d])]
        rng = np.random.default_rng(0)
        inits.append(numpy_helper.from_array(np.array([b, s, h, d], np.int64), "shp"))
        for c in "qkv":
            w = (rng.standard_normal((h * d, h * d)) * 0.03).astype(np.float32)
            inits.append(numpy_helper.from_array(w, f"W{c}"))
            nodes += [
                helper.make_node("MatMul", ["x", f"W{c}"], [f"{c}m"]),
                helper.make_node("Reshape", [f"{c}m", "shp"], [f"{c}r"]),
                helper.make_node("Transpose", [f"{c}r"], [c], perm=[0, 2, 1, 3]),
            ]
    else:
        ins = [helper.make_tensor_value_info(c, F, [b, h, s, d]) for c in "qkv"]
    if n == 1:
        nodes += [*_core("q", "k", "v", 0), helper.make_node("Identity", ["o0"], ["y"])]
    else:
        for c in "qkv":
            outs = [f"{c}{i}" for i in range(n)]
            nodes.append(helper.make_node("Split", [c], outs, axis=1, num_outputs=n))
        for i in range(n):
            nodes += _core(f"q{i}", f"k{i}", f"v{i}", i)
        nodes.append(helper.make_node("Concat", [f"o{i}" for i in range(n)], ["y"], axis=1))
    g = helper.make_graph(nodes, "att", ins, [helper.make_tensor_value_info("y", F, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def blocks_model(n: int, s: int, softmax: bool):
    """n independent attention blocks, each on its own Q/K/V inputs [1, 4, s, 64]."""
    nodes: list[onnx.NodeProto] = []
    ins, outs = [], []
    for i in range(n):
        ins += [helper.make_tensor_value_info(f"{c}{i}", F, [1, 4, s, 64]) for c in "qkv"]
        nodes += _core(f"q{i}", f"k{i}", f"v{i}", i, softmax)
        outs.append(helper.make_tensor_value_info(f"o{i}", F, [1, 4, s, 64]))
    g = helper.make_graph(nodes, "blocks", ins, outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def run(model: onnx.ModelProto, tmp: Path, prec: str, rt: bool = False) -> dict:
    path = tmp / "m.onnx"
    onnx.save_model(model, path)
    args = [sys.executable, "-c", CHILD, str(path), prec] + (["--rt"] if rt else [])
    return json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)


def main() -> int:
    what = sys.argv[1] if len(sys.argv) > 1 else "split"
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        if what == "split":
            for proj in (False, True):
                for n in (1, 12):
                    for prec in ("default", "f32"):
                        r = run(split_model(n, proj), tmp, prec, rt=True)
                        print("projected" if proj else "inputs", n, prec, json.dumps(r))
        else:
            for s in (32, 64, 128, 256):
                for prec in ("default", "f32"):
                    a = {(sm, n): run(blocks_model(n, s, sm), tmp, prec)["compile_anon"]
                         for sm in (True, False) for n in (4, 16)}  # fmt: skip
                    mha = (a[(True, 16)] - a[(True, 4)]) / 12
                    plain = (a[(False, 16)] - a[(False, 4)]) / 12
                    print(f"S={s} {prec}: per block {mha:.3f}, Relu instead {plain:.3f}, "
                          f"kernel {mha - plain:.3f} MiB")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
