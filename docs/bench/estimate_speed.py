"""Estimator cost: wall time on a 5,000-node graph, and its own RSS on a 417 MiB-weight model.

python docs/bench/estimate_speed.py [--nodes 5000] [--model .cache/models/bert-base.onnx]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import onnx
import onnx.helper as oh

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))


def big_graph(n: int) -> onnx.ModelProto:
    """Residual blocks of MatMul/Add/Relu/Softmax/Reshape with weights, ~n nodes, static shapes."""
    F = onnx.TensorProto.FLOAT
    nodes, inits = [], []
    x = "x"
    i = 0
    while len(nodes) < n:
        w = f"w{i}"
        inits.append(oh.make_tensor(w, F, [64, 64], [0.0] * (64 * 64)))
        nodes += [
            oh.make_node("MatMul", [x, w], [f"m{i}"]),
            oh.make_node("Relu", [f"m{i}"], [f"r{i}"]),
            oh.make_node("Softmax", [f"r{i}"], [f"s{i}"], axis=-1),
            oh.make_node("Add", [f"s{i}", x], [f"a{i}"]),
            oh.make_node("Identity", [f"a{i}"], [f"o{i}"]),
        ]
        x = f"o{i}"
        i += 1
    g = oh.make_graph(
        nodes,
        "big",
        [oh.make_tensor_value_info("x", F, [8, 128, 64])],
        [oh.make_tensor_value_info(x, F, [8, 128, 64])],
        initializer=inits,
    )
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--model", default=".cache/models/bert-base.onnx")
    a = ap.parse_args()
    from memshrink.estimate import estimate

    t = time.perf_counter()
    acc = 0
    for i in range(10**6):
        acc += i
    print(
        f"machine speed check: 1M-iteration Python loop {time.perf_counter() - t:.3f} s "
        "(~0.04 s on an idle core; scale the timings below by it)"
    )
    m = big_graph(a.nodes)
    import onnx_ir as ir

    irm = ir.serde.deserialize_model(m)  # the pass manager hands over an in-memory ir.Model
    for be in ("ort", "openvino"):
        times, cpu = [], []
        for _ in range(3):
            t, c = time.perf_counter(), time.process_time()
            estimate(irm, backend=be)
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)  # what a shared machine's load does not inflate
        print(
            f"{len(m.graph.node)} nodes, backend {be}: first {times[0]:.2f} s, cached {min(times[1:]):.2f} s"
            f" (process CPU: first {cpu[0]:.2f} s, cached {min(cpu[1:]):.2f} s)"
        )
    if Path(a.model).is_file():
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        t = time.perf_counter()
        est = estimate(a.model)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"{a.model}: weights {est.view.weight_bytes / 2**20:.0f} MiB, estimate {time.perf_counter() - t:.2f} s, "
            f"process peak RSS {before:.0f} -> {after:.0f} MiB"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
