"""If nodes whose condition OpenVINO folds at compile (native OpenVINO; session 15).

    python docs/bench/ov_if_bench.py [N] [AXIS,COUNT,MODE ...]

Builds Relu -> COUNT x (If(Shape(h)[AXIS] == k) -> Sigmoid ...) on x [N, 1] (N symbolic),
measures each graph in a fresh process the verifier's way (read_model, compile_model with the
ov.Model alive, drop it, three infers; RSS anon + file over the post-import baseline), lists
the runtime graph's layer types, and prints the estimator's prediction beside it
(docs/estimate.md, "Session 15: If nodes folded at compile"). AXIS -1 reads the static dim
(folded), 0 the symbolic one (kept). MODE ``view``: the taken branch is a Squeeze (a view);
``id``: an Identity (the runtime graph keeps an Identity node).
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

sys.path.insert(0, str(Path(__file__).parent))
from ov_dyn_nodes_bench import CHILD  # noqa: E402

MiB = 1 << 20
F = TensorProto.FLOAT
RT = r"""
import collections, sys, openvino as ov
core = ov.Core(); cm = core.compile_model(core.read_model(sys.argv[1]), 'CPU')
ops = cm.get_runtime_model().get_ordered_ops()
print(dict(collections.Counter(op.get_rt_info()['layerType'].astype(str) for op in ops)))
"""


def build(axis: int, count: int = 1, mode: str = "view") -> onnx.ModelProto:
    c = lambda v, n: numpy_helper.from_array(np.array(v, np.int64), n)  # noqa: E731
    inits = [c([axis], "ax"), c([1], "one"), c([2], "two"), c([-1], "m1")]
    nodes = [helper.make_node("Relu", ["x"], ["h0"])]
    h = "h0"
    for i in range(count):
        if mode == "id":  # condition false: the else branch (an Identity) is taken
            t_node = helper.make_node("Relu", [h], [f"t{i}"])
            e_node = helper.make_node("Identity", [h], [f"e{i}"])
        else:  # condition true: the then branch (a Squeeze) is taken
            t_node = helper.make_node("Squeeze", [h, "one"], [f"t{i}"])
            e_node = helper.make_node("Reshape", [h, "m1"], [f"e{i}"])
        then = helper.make_graph([t_node], f"then{i}", [], [helper.make_tensor_value_info(f"t{i}", F, None)])  # fmt: skip
        other = helper.make_graph([e_node], f"else{i}", [], [helper.make_tensor_value_info(f"e{i}", F, None)])  # fmt: skip
        nodes += [
            helper.make_node("Shape", [h], [f"s{i}"]),
            helper.make_node("Gather", [f"s{i}", "ax"], [f"g{i}"], axis=0),
            helper.make_node("Equal", [f"g{i}", "two" if mode == "id" else "one"], [f"eq{i}"]),
            helper.make_node("Squeeze", [f"eq{i}"], [f"c{i}"]),
            helper.make_node("If", [f"c{i}"], [f"o{i}"], then_branch=then, else_branch=other),
            helper.make_node("Sigmoid", [f"o{i}"], [f"r{i}"]),
            helper.make_node("Identity", [f"r{i}"], [f"h{i + 1}"])
            if mode == "id"
            else helper.make_node("Unsqueeze", [f"r{i}", "one"], [f"h{i + 1}"]),
        ]
        h = f"h{i + 1}"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, ["N", 1])],
        [helper.make_tensor_value_info(h, F, None)],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def main(argv: list[str]) -> int:
    from memshrink.estimate import estimate

    n = int(argv[0]) if argv else 4_000_000
    cases = [a.split(",") for a in argv[1:]] or [
        ["-1", "1", "view"], ["0", "1", "view"], ["-1", "4", "view"], ["0", "4", "view"],
        ["-1", "1", "id"],
    ]  # fmt: skip
    for axis, count, mode in cases:
        with tempfile.TemporaryDirectory(prefix="ovif-") as tmp:
            p = str(Path(tmp) / "m.onnx")
            onnx.save(build(int(axis), int(count), mode), p)
            run = [sys.executable, "-c", CHILD, p, json.dumps([n, 1])]
            meas = json.loads(
                subprocess.run(run, capture_output=True, text=True, check=True).stdout
            )
            rt = subprocess.run([sys.executable, "-c", RT, p], capture_output=True, text=True)
            pk = estimate(p, backend="openvino", shapes={"x": (n, 1)}).stage_peaks()
        print(
            f"{mode:4s} axis {axis:>2s} x{count}: measured compile {meas['compile'] / MiB:6.1f} "
            f"infer3 {meas['infer3'] / MiB:6.1f} | predicted {pk['compile_model'] / MiB:6.1f} "
            f"{pk['steady_state'] / MiB:6.1f} | {rt.stdout.strip()}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
