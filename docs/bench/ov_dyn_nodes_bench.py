"""Compile cost per runtime node under dynamic shapes (native OpenVINO; session 14).

    python docs/bench/ov_dyn_nodes_bench.py [UNIT ...]

Builds chains of 1 and 33 units of one kind on a symbolic batch, measures each in a fresh
process the verifier's way (read_model, compile_model with the ov.Model alive, drop it, three
infers; RSS anon / file deltas over the post-import baseline), and prints the per-unit slope
at read, compile and infer 3 beside the estimator's (docs/estimate.md, "Session 14: dynamic
runtime nodes").
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

MiB = 1 << 20
UNITS = ("fc", "fc_static", "conv", "conv1", "dw", "slicepad", "concat", "ln", "eltwise", "cast")

CHILD = r"""
import gc, json, sys
import numpy as np
def mem():
    d = {}
    for line in open('/proc/self/status'):
        if line.startswith(('RssAnon', 'RssFile')):
            k, v = line.split(':'); d[k] = int(v.split()[0]) * 1024
    return d['RssAnon'] + d['RssFile']
import openvino as ov
core = ov.Core()
feed = np.random.default_rng(0).standard_normal(json.loads(sys.argv[2])).astype(np.float32)
m0 = mem(); out = {}
model = core.read_model(sys.argv[1]); out['read'] = mem() - m0
cm = core.compile_model(model, 'CPU'); out['compile'] = mem() - m0
del model; gc.collect()
req = cm.create_infer_request()
for _ in range(3):
    req.infer({0: feed})
out['infer3'] = mem() - m0
print(json.dumps(out))
"""


def _inits() -> list[onnx.TensorProto]:
    a = lambda v, n: numpy_helper.from_array(np.array(v, np.int64), n)  # noqa: E731
    return [
        a([0], "st"), a([31], "en"), a([32], "big"), a([3], "ax"),
        a([0, 0, 0, 0, 0, 0, 0, 1], "pd"),
        numpy_helper.from_array(np.ones(32, np.float32), "g"),
    ]  # fmt: skip


def build(unit: str, n: int) -> tuple[onnx.ModelProto, list[int]]:
    """n units of ``unit``; returns the model and the shape to feed (batch 2)."""
    rng = np.random.default_rng(0)
    nodes: list[onnx.NodeProto] = []
    inits = _inits()
    kernel = unit in ("fc", "fc_static", "conv", "conv1", "dw")
    if unit.startswith("fc"):
        shape: list = ["B" if unit == "fc" else 2, 16, 64]
    elif kernel:
        shape = ["B", 16, 16, 16]
    else:
        shape = ["B", 8, 32, 32]
    x = "x"
    for i in range(n):
        y = f"y{i}"
        if unit.startswith("fc"):
            w = rng.standard_normal((64, 64)).astype(np.float32) * 0.1
            inits += [numpy_helper.from_array(w, f"w{i}")]
            inits += [numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), f"b{i}")]
            nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"])]
            nodes += [helper.make_node("Add", [f"m{i}", f"b{i}"], [y])]
        elif kernel:
            k, grp = (1, 1) if unit == "conv1" else (3, 16 if unit == "dw" else 1)
            w = rng.standard_normal((16, 16 // grp, k, k)).astype(np.float32) * 0.1
            inits += [numpy_helper.from_array(w, f"w{i}")]
            inits += [numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), f"b{i}")]
            pads = [k // 2] * 4
            nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [y], pads=pads, group=grp)]
        elif unit == "slicepad":
            nodes += [helper.make_node("Slice", [x, "st", "en", "ax"], [f"a{i}"])]
            nodes += [helper.make_node("Pad", [f"a{i}", "pd"], [y])]
        elif unit == "concat":
            nodes += [helper.make_node("Slice", [x, "st", "en", "ax"], [f"a{i}"])]
            nodes += [helper.make_node("Slice", [x, "en", "big", "ax"], [f"b{i}"])]
            nodes += [helper.make_node("Concat", [f"b{i}", f"a{i}"], [y], axis=3)]
        elif unit == "ln":
            nodes += [helper.make_node("LayerNormalization", [x, "g"], [y], axis=-1)]
        elif unit == "eltwise":
            nodes += [helper.make_node("Sigmoid", [x], [f"a{i}"])]
            nodes += [helper.make_node("Mul", [f"a{i}", x], [y])]
        elif unit == "cast":
            nodes += [helper.make_node("Cast", [x], [f"c{i}"], to=TensorProto.FLOAT16)]
            nodes += [helper.make_node("Cast", [f"c{i}"], [y], to=TensorProto.FLOAT)]
        x = y
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, [2 if isinstance(d, str) else d for d in shape]


def main(argv: list[str]) -> int:
    from memshrink.estimate import estimate

    for unit in argv or UNITS:
        meas, pred = {}, {}
        with tempfile.TemporaryDirectory(prefix="ovdyn-") as tmp:
            for n in (1, 33):
                m, feed = build(unit, n)
                p = Path(tmp) / f"{unit}{n}.onnx"
                onnx.save(m, p)
                r = subprocess.run(
                    [sys.executable, "-c", CHILD, str(p), json.dumps(feed)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                meas[n] = json.loads(r.stdout)
                e = estimate(str(p), backend="openvino", shapes={"x": tuple(feed)})
                pk = e.stage_peaks()
                pred[n] = {"read": pk["read_model"], "compile": pk["compile_model"]}
                pred[n]["infer3"] = pk["steady_state"]
        slope = lambda d, k: (d[33][k] - d[1][k]) / 32 / MiB  # noqa: E731
        print(
            f"{unit:10s} "
            + "  ".join(
                f"{k} {slope(meas, k):.3f} (pred {slope(pred, k):.3f})"
                for k in ("read", "compile", "infer3")
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
