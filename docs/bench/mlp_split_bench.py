"""A transformer MLP split along its hidden channels: measured on each runtime against the estimate.

    python docs/bench/mlp_split_bench.py OUTDIR 2048x256x1024,2048x384x1536 1,2,4,8 [BACKENDS]

One block as the TorchScript exporter writes it (LayerNorm -> MatMul + bias -> the tanh GELU
spelled out in Mul/Add/Tanh -> MatMul + bias -> residual Add), input ``x[batch, seq, H]`` with
symbolic dims (bound to 8 x N/8), weights in an external file. ``NxHxF``: N = batch x seq rows,
H the model width, F the hidden width. Each K > 1 is ``chunk``'s own channel split
(``chunking.channels.split_channels``, K slices, partial sums added). Every file runs in its own
process per backend (``memshrink profile``, highest stage over the post-import baseline) and is
predicted with ``memshrink estimate --backend B`` (highest stage). Prints one JSON row per
(size, K, backend). Results: docs/estimate.md, "Session 13: split transformer MLPs".
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32 = TensorProto.FLOAT
OVEP = str(Path(__file__).resolve().parents[2] / ".cache" / "venv-ovep" / "bin" / "python")


def block(n: int, h: int, f: int) -> onnx.ModelProto:
    """The unsplit block; weights seeded, symbolic batch/seq."""
    rng = np.random.default_rng(0)
    w = lambda *s: (rng.standard_normal(s) * 0.03).astype(np.float32)  # noqa: E731
    inits = [
        numpy_helper.from_array(np.ones(h, np.float32), "ln_s"),
        numpy_helper.from_array(np.zeros(h, np.float32), "ln_b"),
        numpy_helper.from_array(w(h, f), "W1"),
        numpy_helper.from_array(w(f), "b1"),
        numpy_helper.from_array(w(f, h), "W2"),
        numpy_helper.from_array(w(h), "b2"),
    ]
    for name, val in (("c3", 0.044715), ("c1", 1.0), ("cs", 0.7978845834732056), ("ch", 0.5)):
        inits.append(numpy_helper.from_array(np.array(val, np.float32), name))
    nodes = [
        helper.make_node("LayerNormalization", ["x", "ln_s", "ln_b"], ["n"], axis=-1),
        helper.make_node("MatMul", ["n", "W1"], ["a0"]),
        helper.make_node("Add", ["b1", "a0"], ["a"]),
        helper.make_node("Mul", ["a", "a"], ["g0"]),
        helper.make_node("Mul", ["a", "g0"], ["g1"]),
        helper.make_node("Mul", ["c3", "g1"], ["g2"]),
        helper.make_node("Add", ["a", "g2"], ["g3"]),
        helper.make_node("Mul", ["cs", "g3"], ["g4"]),
        helper.make_node("Tanh", ["g4"], ["g5"]),
        helper.make_node("Add", ["c1", "g5"], ["g6"]),
        helper.make_node("Mul", ["a", "g6"], ["g7"]),
        helper.make_node("Mul", ["ch", "g7"], ["g"]),
        helper.make_node("MatMul", ["g", "W2"], ["r0"]),
        helper.make_node("Add", ["b2", "r0"], ["r"]),
        helper.make_node("Add", ["x", "r"], ["y"]),
    ]
    dims = ["batch", "seq", h]
    g = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", F32, dims)],
        [helper.make_tensor_value_info("y", F32, dims)],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def write(n: int, h: int, f: int, k: int, path: Path) -> None:
    """Write the block split into ``k`` channel slices (k = 1: whole), external weights."""
    import onnx_ir as ir

    import memshrink
    from memshrink.transforms.chunking.channels import split_channels

    proto = block(n, h, f)
    static = onnx.shape_inference.infer_shapes(_bound(proto, n), strict_mode=True)
    shapes = {
        vi.name: tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        for vi in [*static.graph.value_info, *static.graph.input, *static.graph.output]
    }
    model = ir.serde.deserialize_model(proto)
    if k > 1:
        st = split_channels(model.graph, shapes, k)
        assert st.blocks == 1, st
    memshrink.save(model, str(path))
    path.with_suffix(".onnx.json").write_text(json.dumps({"dims": {"batch": 8, "seq": n // 8}}))


def _bound(proto: onnx.ModelProto, n: int) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(proto)
    d = m.graph.input[0].type.tensor_type.shape.dim
    d[0].dim_value, d[1].dim_value = 8, n // 8
    return m


def _peak(js: dict) -> float:
    return max(s["peak"] - js["baseline"]["rss"] for s in js["stages"]) / 2**20


def measure(path: Path, n: int, backend: str) -> dict:
    dims = ["--dim", "batch=8", "--dim", f"seq={n // 8}"]
    out = path.with_suffix(f".{backend}.prof.json")
    cmd = [sys.executable, "-m", "memshrink", "profile", str(path), "--backends", backend, "-q"]
    if backend == "ort-openvino":
        cmd += ["--python-for", f"ort-openvino={OVEP}"]
    subprocess.run([*cmd, *dims, "--json", str(out)], capture_output=True, check=False)
    run = json.loads(out.read_text())["runs"][0]
    est = path.with_suffix(f".{backend}.est.json")
    eb = {"cpu": "ort"}.get(backend, backend)
    subprocess.run(
        [sys.executable, "-m", "memshrink", "estimate", str(path), "--backend", eb, *dims,
         "--json", str(est)],
        capture_output=True, check=False,
    )  # fmt: skip
    e = json.loads(est.read_text())
    stages = {s["name"]: round((s["peak"] - run["baseline"]["rss"]) / 2**20, 1)
              for s in run["stages"]}  # fmt: skip
    return {"measured": round(_peak(run), 1), "stages": stages, "predicted": _pred(e)}


def _pred(e: dict) -> dict:
    return {k: round(v["peak"] / 2**20, 1) for k, v in e["stages"].items()}


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    sizes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[2].split(",")]
    ks = [int(x) for x in sys.argv[3].split(",")]
    backends = (sys.argv[4] if len(sys.argv) > 4 else "cpu,openvino,ort-openvino").split(",")
    for n, h, f in sizes:
        for k in ks:
            p = out / f"mlp_{n}x{h}x{f}_k{k}.onnx"
            if not p.exists():
                write(n, h, f, k, p)
            for b in backends:
                row = {"size": f"{n}x{h}x{f}", "k": k, "backend": b, **measure(p, n, b)}
                print(json.dumps(row), flush=True)
