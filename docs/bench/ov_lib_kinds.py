"""OpenVINO library pages by plugin node kind, the dynamic first infer's deferred pages, and
the DynamicQuantizeLinear kernels (session 10, docs/estimate.md "Session 10").

    python docs/bench/ov_lib_kinds.py build DIR        # the micro-graphs
    python docs/bench/ov_lib_kinds.py measure DIR ... # each file dynamic and static, in the
                                                       # verifier's child (estimate_measure.py)
    python docs/bench/ov_lib_kinds.py fit JSON DIR     # lib-page fit over node kinds

``measure`` takes extra ``FILE=NAME=D,D..[;NAME=D,..]`` arguments (real exports) beside the
micro-graphs, and prints one JSON row per file: per stage peak / anon / file MiB, ``dyn`` as
``memshrink verify`` compiles (symbolic dims) and ``static`` reshaped first. ``fit`` reads the
rows (``ov_lib_kinds.json``), counts ``ov_kinds.node_kinds`` per file and fits
``base(class) + slope * min(kinds, 10)`` to the static compile's file pages.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

HERE = Path(__file__).resolve().parent
B = "batch"


def _w(name: str, *shape: int) -> onnx.TensorProto:
    return nh.from_array(np.full(shape, 0.01, np.float32), name)


def _save(d: Path, name: str, nodes: list, inits: list, x: list, y: str = "y") -> None:
    g = h.make_graph(nodes, name, [h.make_tensor_value_info("x", T.FLOAT, x)],
                     [h.make_tensor_value_info(y, T.FLOAT, None)], inits)  # fmt: skip
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(d / f"{name}.onnx"))


def build(d: Path) -> dict[str, str]:
    """The micro-graphs; returns name -> shape binding for ``measure``."""
    d.mkdir(parents=True, exist_ok=True)
    _save(d, "relu", [h.make_node("Relu", ["x"], ["y"])], [], [B, 64])
    _save(d, "elt4", [h.make_node("Tanh", ["x"], ["a"]), h.make_node("Mul", ["a", "x"], ["b"]),
                      h.make_node("Add", ["b", "x"], ["c"]),
                      h.make_node("ReduceSum", ["c"], ["y"], keepdims=1)], [], [B, 64])  # fmt: skip
    _save(d, "matmul", [h.make_node("MatMul", ["x", "w"], ["y"])], [_w("w", 64, 64)], [B, 64])
    _save(d, "gemm_relu", [h.make_node("Gemm", ["x", "w", "b"], ["a"], transB=1),
                           h.make_node("Relu", ["a"], ["y"])],
          [_w("w", 64, 64), _w("b", 64)], [B, 64])  # fmt: skip
    _save(d, "conv_relu", [h.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]),
                           h.make_node("Relu", ["a"], ["y"])],
          [_w("w", 16, 3, 3, 3)], [B, 3, 32, 32])  # fmt: skip

    def br(op: str, name: str) -> onnx.GraphProto:
        return h.make_graph([h.make_node("Gemm", ["x", "w"], ["t"]), h.make_node(op, ["t"], ["o"])],
                            name, [], [h.make_tensor_value_info("o", T.FLOAT, None)])  # fmt: skip

    zero = nh.from_array(np.array(0, np.float32), "z")
    _save(d, "if_gemm", [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                         h.make_node("Greater", ["s", "z"], ["c"]),
                         h.make_node("If", ["c"], ["y"], then_branch=br("Relu", "t"),
                                     else_branch=br("Tanh", "e"))],
          [_w("w", 64, 64), zero], [B, 64])  # fmt: skip
    body = h.make_graph(
        [h.make_node("MatMul", ["s_in", "w"], ["m"]), h.make_node("Tanh", ["m"], ["s_out"]),
         h.make_node("Identity", ["c_in"], ["c_out"])], "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, []),
         h.make_tensor_value_info("s_in", T.FLOAT, None)],
        [h.make_tensor_value_info("c_out", T.BOOL, []),
         h.make_tensor_value_info("s_out", T.FLOAT, None)])  # fmt: skip
    _save(d, "loop_matmul", [h.make_node("Loop", ["n", "", "x"], ["y"], body=body)],
          [_w("w", 64, 64), nh.from_array(np.array(3, np.int64), "n")], [B, 64])  # fmt: skip
    for n in (4, 12):  # DynamicQuantizeLinear -> DequantizeLinear chains
        nodes, cur = [], "x"
        for i in range(n):
            nodes += [h.make_node("DynamicQuantizeLinear", [cur], [f"q{i}", f"s{i}", f"z{i}"]),
                      h.make_node("DequantizeLinear", [f"q{i}", f"s{i}", f"z{i}"], [f"d{i}"])]  # fmt: skip
            cur = f"d{i}"
        _save(d, f"dql{n}", nodes, [], [B, 16, 64], y=cur)
    shapes = {n: "x=2,64" for n in ("relu", "elt4", "matmul", "gemm_relu", "if_gemm",
                                     "loop_matmul")}  # fmt: skip
    shapes.update(conv_relu="x=2,3,32,32", dql4="x=2,16,64", dql12="x=2,16,64")
    return shapes


def _measure(path: str, shapes: str, static: bool) -> dict[str, dict[str, float]]:
    cmd = [sys.executable, str(HERE / "estimate_measure.py"), path, "--backend", "openvino"]
    for s in shapes.split(";"):
        cmd += ["--shape", s]
    if static:
        cmd.append("--ov-reshape")
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    out = json.loads(done.stdout)
    return {k: {f: round(v[f] / 2**20, 2) for f in ("peak", "anon", "file")}
            for k, v in out["stages"].items() if k in ("read_model", "compile_model", "run_1")}  # fmt: skip


def measure(d: Path, extra: list[str]) -> None:
    files = [(str(d / f"{n}.onnx"), s) for n, s in build(d).items()]
    files += [tuple(a.split("=", 1)) for a in extra]  # type: ignore[misc]
    for path, shapes in files:
        row = {"file": path, "shapes": shapes, "dyn": _measure(path, shapes, False),
               "static": _measure(path, shapes, True)}  # fmt: skip
        print(json.dumps(row), flush=True)


def fit(path: Path, micro: Path) -> None:
    """Rows whose file is gone (the sweep's temporary folders) are left out."""
    sys.path.insert(0, str(HERE.parents[1] / "src"))
    from memshrink.estimate.graph import build_view
    from memshrink.estimate.ov_kinds import CONV_KINDS, FC_KINDS, node_kinds

    build(micro)
    rows = json.loads(path.read_text())["rows"]
    xs, ys = [], []
    for r in rows:
        r["file"] = r["file"].replace("MICRO/", f"{micro}/")
        if not Path(r["file"]).is_file():
            continue
        shapes = {k: [int(x) for x in v.split(",")]
                  for k, v in (s.split("=") for s in r["shapes"].split(";") if s)}  # fmt: skip
        kinds = node_kinds(build_view(r["file"], shapes=shapes or None).graph)
        cls = "conv" if kinds & CONV_KINDS else "fc" if kinds & FC_KINDS else "eltwise"
        xs.append([cls == "eltwise", cls == "fc", cls == "conv", min(len(kinds), 10)])
        ys.append(r["static"]["compile_model"]["file"])
        print(f"{Path(r['file']).name:28s} {cls:8s} {len(kinds):2d} {ys[-1]:6.2f}")
    coef, *_ = np.linalg.lstsq(np.array(xs, float), np.array(ys), rcond=None)
    res = np.array(ys) - np.array(xs, float) @ coef
    print("bases eltwise / fc / conv, slope:", np.round(coef, 2),
          "rms", round(float(np.sqrt((res**2).mean())), 2))  # fmt: skip


if __name__ == "__main__":
    cmd, arg, *rest = sys.argv[1:]
    if cmd == "build":
        print(build(Path(arg)))
    elif cmd == "measure":
        measure(Path(arg), rest)
    else:
        fit(Path(arg), Path(rest[0]))
