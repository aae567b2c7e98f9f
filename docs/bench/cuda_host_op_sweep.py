"""Host memory the CUDA EP's first run adds per op family (run on a GPU machine).

    python docs/bench/cuda_host_op_sweep.py --out rows.json

Each case is a one- or few-node model over a 4x128x768 fp32 input, profiled through
``memshrink.verify.profile(..., backends="cuda")`` (the verifier's child: host RSS peak per
stage); printed: session and run-1 host growth over the child's baseline, and what
``memshrink estimate --backend cuda`` predicts for the host. Why: the first run loads each
kernel family's CUDA module lazily, and the families cost very different amounts (session 6,
H100: the binary element-wise family ~106 MiB once, whichever of Add/Mul/Div/Sub/Pow/Equal comes
first; IsNaN ~19; a first MatMul ~100 more; Relu/Transpose/Slice/Split/Concat/LayerNorm 2-5).
Stored results (H100, onnxruntime-gpu 1.31.1; made by an earlier scratch copy of these cases):
docs/bench/cuda_host_op_sweep.json (single ops), cuda_host_op_combo.json (combinations),
cuda_host_chain_sweep.json (chains of 10 / 1,000 / 4,000 Add or Split+Concat nodes).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from memshrink.estimate import estimate  # noqa: E402
from memshrink.verify.api import profile  # noqa: E402

F = T.FLOAT
SHAPE = [4, 128, 768]
C1 = nh.from_array(np.float32([1.001]), "c")
W = nh.from_array(np.random.default_rng(0).random((768, 768), dtype=np.float32), "w")


def chain(ops: list[str]) -> onnx.ModelProto:
    """``x -> op -> op ...``: binary ops take the scalar ``c``; IsNaN / Equal feed a Where."""
    nodes, prev = [], "x"
    for k, op in enumerate(ops):
        out = f"t{k}"
        if op == "MatMul":
            nodes.append(h.make_node("MatMul", [prev, "w"], [out]))
        elif op == "IsNaN":
            nodes.append(h.make_node("IsNaN", [prev], [f"b{k}"]))
            nodes.append(h.make_node("Where", [f"b{k}", "c", prev], [out]))
        elif op == "Equal":
            nodes.append(h.make_node("Equal", [prev, prev], [f"b{k}"]))
            nodes.append(h.make_node("Where", [f"b{k}", prev, "c"], [out]))
        elif op in ("Add", "Mul", "Div", "Sub", "Pow"):
            nodes.append(h.make_node(op, [prev, "c"], [out]))
        elif op == "Softmax":
            nodes.append(h.make_node(op, [prev], [out], axis=-1))
        else:
            nodes.append(h.make_node(op, [prev], [out]))
        prev = out
    nodes.append(h.make_node("Identity", [prev], ["y"]))
    g = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", F, SHAPE)],
        [h.make_tensor_value_info("y", F, SHAPE)],
        [C1, W],
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 18)], ir_version=9)


CASES = {
    "relu": ["Relu"],
    "add": ["Add"],
    "mul": ["Mul"],
    "equal_where": ["Equal"],
    "isnan_where": ["IsNaN"],
    "softmax": ["Softmax"],
    "erf": ["Erf"],
    "matmul": ["MatMul"],
    "add_mul": ["Add", "Mul"],
    "add_matmul": ["Add", "MatMul"],
    "add_isnan": ["Add", "IsNaN"],
    "add_equal": ["Add", "Equal"],
    "add_matmul_isnan": ["Add", "MatMul", "IsNaN"],
    "add_matmul_equal": ["Add", "MatMul", "Equal"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="cuda_host_op_sweep_rows.json")
    ap.add_argument("--dir", default="/tmp")
    args = ap.parse_args()
    rows = []
    for name, ops in CASES.items():
        path = Path(args.dir) / f"op_{name}.onnx"
        onnx.save(chain(ops), str(path))
        run = profile(str(path), backends="cuda", runs=2).runs[0]
        st = {s["name"]: s for s in run.stages}
        base = run.stages[0]["before"]
        mib = 1 << 20
        host = estimate(str(path), backend="cuda").prediction.details.get("host", {})
        row = {
            "case": name,
            "ok": run.ok,
            "session": round((st["session"]["peak"] - base) / mib, 1),
            "run1": round((st["run1"]["peak"] - base) / mib, 1),
            "pred_session_host": round(host.get("session_creation", 0) / mib, 1),
            "pred_run_host": round(host.get("run_1", 0) / mib, 1),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
