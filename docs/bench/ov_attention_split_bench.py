"""OpenVINO's memory for one attention core, whole and split into K cores (batch or heads).

    python docs/bench/ov_attention_split_bench.py [--batch 4] [--seq 512]

Why: ``chunk``'s weightless cores (``chunking/weightless.py``) split BERT's attention between
its projections; on OpenVINO the split measured higher than predicted (BERT b4x512, compile
+~210 MiB; the heads split +33 MiB). Here the core alone, Q/K/V graph inputs
[B, 12, S, 64], ``Transpose -> MatMul -> Softmax -> MatMul``, and its ``Split`` ->
K cores -> ``Concat`` forms, each measured in ``memshrink profile``'s child (peak over the
post-import baseline per stage) at the host's default precision and at f32, beside the
estimator's prediction. Results: docs/chunk.md, "Weightless cores".
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import onnx
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
MiB = 1 << 20
HEADS, DIM = 12, 64


def core(q: str, k: str, v: str, t: int) -> list[onnx.NodeProto]:
    return [
        helper.make_node("Transpose", [k], [f"kt{t}"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", [q, f"kt{t}"], [f"sc{t}"]),
        helper.make_node("Softmax", [f"sc{t}"], [f"p{t}"], axis=-1),
        helper.make_node("MatMul", [f"p{t}", v], [f"o{t}"]),
    ]


def attention(batch: int, seq: int, k: int, axis: int) -> onnx.ModelProto:
    """One core (k = 1) or k cores along ``axis`` (0: batch, 1: heads)."""
    f = TensorProto.FLOAT
    if k == 1:
        nodes = [*core("q", "k", "v", 0), helper.make_node("Identity", ["o0"], ["y"])]
    else:
        nodes = [
            helper.make_node("Split", [n], [f"{n}{i}" for i in range(k)], axis=axis, num_outputs=k)
            for n in "qkv"
        ]
        for i in range(k):
            nodes += core(f"q{i}", f"k{i}", f"v{i}", i)
        nodes.append(helper.make_node("Concat", [f"o{i}" for i in range(k)], ["y"], axis=axis))
    shape = [batch, HEADS, seq, DIM]
    g = helper.make_graph(
        nodes, "attention", [helper.make_tensor_value_info(n, f, shape) for n in "qkv"],
        [helper.make_tensor_value_info("y", f, shape)],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def main() -> int:
    from memshrink.estimate import estimate
    from memshrink.verify import profile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    args = ap.parse_args()
    layouts = [(1, 0), (2, 0), (4, 0), (HEADS, 1)]
    print("| layout | precision | compile | infer 3 | predicted peak |")
    print("|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for k, axis in layouts:
            path = Path(tmp) / f"attention_{k}_{axis}.onnx"
            onnx.save_model(attention(args.batch, args.seq, k, axis), path)
            pred = max(estimate(str(path), backend="openvino").stage_peaks().values())
            for prec in ("default", "f32"):
                opts = {"openvino": {"INFERENCE_PRECISION_HINT": "f32"}} if prec == "f32" else None
                run = profile(str(path), backends="openvino", runs=3, provider_options=opts).runs[0]
                st = {s["name"]: s["peak_delta"] / MiB for s in run.to_dict()["stages"]}
                name = "whole" if k == 1 else f"{('batch', 'heads')[axis]} x{k}"
                print(f"| {name} | {prec} | {st['compile']:.1f} | {st['infer3']:.1f} | "
                      f"{pred / MiB:.1f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
