"""OpenVINO: what a Transpose / Reshape / Softmax / activation MatMul runtime node costs.

    python docs/bench/ov_plain_nodes_bench.py 16,128 "softmax;softmax,transpose;softmax,reshape3"
    SH=4,12,128,128 python docs/bench/ov_plain_nodes_bench.py 16,128 "softmax,matmul"

Each family is a chain of N units on x [SH] (default [1, 12, 64, 64]), static shapes; a unit
is its comma-separated ops (``softmax``, ``sigmoid``, ``transpose`` = perm 0,1,3,2,
``transpose2`` = perm 0,2,1,3, ``reshape3`` = Reshape to 3-D, Softmax, Reshape back,
``matmul`` = MatMul(x, x)). Each model runs in a child (``ov_split_copies_bench.CHILD``: stage
peaks over the post-import baseline, runtime layer types); the slope between the two counts is
the cost of one unit; subtract the Softmax family's to get one op's.
Results: docs/estimate.md, "Session 13: plain runtime nodes, native recurrent nodes".
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ov_split_copies_bench import CHILD

F = TensorProto.FLOAT
SH = [int(v) for v in os.environ.get("SH", "1,12,64,64").split(",")]


def build(units: list[str], n: int) -> onnx.ModelProto:
    nodes, inits = [], []
    inits.append(numpy_helper.from_array(np.array([SH[0], SH[1], SH[2] * SH[3]], np.int64), "r3"))
    inits.append(numpy_helper.from_array(np.array(SH, np.int64), "r4"))
    x = "x"
    for i in range(n):
        for j, u in enumerate(units):
            y = f"n{i}_{j}"
            if u == "softmax":
                nodes.append(helper.make_node("Softmax", [x], [y], axis=-1))
            elif u == "sigmoid":
                nodes.append(helper.make_node("Sigmoid", [x], [y]))
            elif u == "transpose":
                nodes.append(helper.make_node("Transpose", [x], [y], perm=[0, 1, 3, 2]))
            elif u == "transpose2":
                nodes.append(helper.make_node("Transpose", [x], [y], perm=[0, 2, 1, 3]))
            elif u == "reshape3":
                nodes.append(helper.make_node("Reshape", [x, "r3"], [y + "a"]))
                nodes.append(helper.make_node("Softmax", [y + "a"], [y + "b"], axis=-1))
                nodes.append(helper.make_node("Reshape", [y + "b", "r4"], [y]))
            elif u == "matmul":
                nodes.append(helper.make_node("MatMul", [x, x], [y]))
            x = y
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, SH)],
        [helper.make_tensor_value_info("y", F, SH)],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def main() -> None:
    counts = [int(v) for v in sys.argv[1].split(",")]
    out = Path(os.environ.get("TMPDIR", "/tmp")) / "ov_plain_nodes_bench"
    out.mkdir(exist_ok=True)
    for fam in sys.argv[2].split(";"):
        res = {}
        for n in counts:
            p = out / f"{fam.replace(',', '_')}_{'x'.join(map(str, SH))}_{n}.onnx"
            onnx.save_model(build(fam.split(","), n), p)
            r = subprocess.run(
                [sys.executable, "-c", CHILD, str(p), "default", "--rt"],
                capture_output=True,
                text=True,
                check=True,
            )
            res[n] = json.loads(r.stdout)
            print(fam, n, json.dumps(res[n]), flush=True)
        a, b = min(res), max(res)
        per = {k: (res[b][k] - res[a][k]) / (b - a) for k in ("compile", "compile_anon", "infer3")}
        print(f"== {fam}: per unit " + " ".join(f"{k} {v:.4f}" for k, v in per.items()))


if __name__ == "__main__":
    main()
