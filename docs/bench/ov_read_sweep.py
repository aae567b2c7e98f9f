"""What OpenVINO's ``read_model`` spends per node kind: hand-built chains, ``read_model`` only.

    python docs/bench/ov_read_sweep.py [--families relu identity ...] [--counts 32 256]
        [--out /tmp/ov_read] [--json rows.json] [--model PATH ...]

Why: the read cost fitted on CNN sweeps (per node, per Conv, per initializer kept in the
.onnx) over-predicts TorchScript transformer exports by 50-68 % (issue #5): they are made of
many small ``Constant`` / ``Identity`` / shape-arithmetic nodes and small initializers. Each
family is a chain of N units of one kind, written by memshrink's writer (64 KiB-aligned
external data for tensors of 1 KiB or more, smaller ones inside the .onnx). Each file is read
in a fresh process that imports openvino, makes its ``Core`` and then measures ``read_model``
the way ``memshrink verify``'s child does (``Meter``: exact ``VmHWM`` and sampled anon / file
over the post-import baseline). The slope over N is the cost of one unit. ``--model`` measures
existing files the same way (the held-out exports).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ov_pernode_bench import save  # noqa: E402  (memshrink's writer, external data)

MiB = 1 << 20

CHILD = r"""
import json, sys
import openvino as ov
from memshrink.verify.measure import Meter
core = ov.Core()
m = Meter()
with m.stage("read"):
    model = core.read_model(sys.argv[1])
s = m.stages[0]
b = m.baseline
print(json.dumps({"peak": (s.peak - b["VmRSS"]) / 2**20, "anon": (s.anon_peak - b["RssAnon"]) / 2**20,
                  "file": (s.file_peak - b["RssFile"]) / 2**20,
                  "anon_after": (s.anon_after - b["RssAnon"]) / 2**20}))
"""


def _i64(name: str, vals: list[int], inits: list[Any]) -> str:
    inits.append(numpy_helper.from_array(np.array(vals, np.int64), name))
    return name


def _const(nodes: list[Any], name: str, arr: np.ndarray) -> str:
    nodes.append(
        helper.make_node("Constant", [], [name], value=numpy_helper.from_array(arr, name + "_v"))
    )
    return name


def build(family: str, n: int, dyn: bool = False) -> onnx.ModelProto:
    """A chain of ``n`` units of ``family`` on ``x[1, 64, 64]`` (float32; ``dyn``: the first
    two dims symbolic, as the exporters write a batch and a sequence)."""
    nodes: list[Any] = []
    inits: list[Any] = []
    x = "x"
    for i in range(n):
        t = f"u{i}"
        if family == "relu":
            nodes.append(helper.make_node("Relu", [x], [t]))
        elif family == "relu_longnames":  # TorchScript-like names (~60 chars)
            t = f"/model/encoder/layer.{i}/attention/output/dense/Relu_output_0"
            nodes.append(helper.make_node("Relu", [x], [t], name=t[:-9]))
        elif family == "relu_doc":  # 1 KB doc_string per node: proto bytes, no more ov ops
            nodes.append(helper.make_node("Relu", [x], [t], doc_string="d" * 1000))
        elif family == "relu_meta":  # dynamo's five metadata_props per node (~2 KB)
            node = helper.make_node("Relu", [x], [t])
            for k in ("namespace", "class_hierarchy", "fx_node", "name_scopes", "stack_trace"):
                helper.set_metadata_props(node, {f"pkg.torch.onnx.{k}": "m" * 400})
            nodes.append(node)
        elif family == "identity":
            nodes.append(helper.make_node("Identity", [x], [t]))
        elif family == "const_add":  # a Constant node (scalar) read by an Add
            c = _const(nodes, t + "_c", np.array(0.5, np.float32))
            nodes.append(helper.make_node("Add", [x, c], [t]))
        elif family == "init_add":  # the same scalar as an initializer (inside the .onnx)
            inits.append(numpy_helper.from_array(np.array(0.5, np.float32), t + "_c"))
            nodes.append(helper.make_node("Add", [x, t + "_c"], [t]))
        elif family == "ext_add":  # a 64-float bias (256 B -> inside) vs 1 KiB+ (external)
            inits.append(numpy_helper.from_array(np.full((64,), 0.5, np.float32), t + "_c"))
            nodes.append(helper.make_node("Add", [x, t + "_c"], [t]))
        elif family == "matmul_ext":  # a 64x64 weight (16 KiB, external)
            w = np.full((64, 64), 0.01, np.float32)
            inits.append(numpy_helper.from_array(w, t + "_w"))
            nodes.append(helper.make_node("MatMul", [x, t + "_w"], [t]))
        elif family == "shape_reshape":  # TorchScript's computed Reshape target
            # Shape -> Gather(0) -> Unsqueeze -> Concat(., [-1, 64]) -> Reshape
            s, g, u, cat = t + "_s", t + "_g", t + "_u", t + "_cat"
            nodes.append(helper.make_node("Shape", [x], [s]))
            idx = _const(nodes, t + "_i", np.array(0, np.int64))
            nodes.append(helper.make_node("Gather", [s, idx], [g], axis=0))
            ax = _const(nodes, t + "_a", np.array([0], np.int64))
            nodes.append(helper.make_node("Unsqueeze", [g, ax], [u]))
            rest = _const(nodes, t + "_r", np.array([-1, 64], np.int64))
            nodes.append(helper.make_node("Concat", [u, rest], [cat], axis=0))
            nodes.append(helper.make_node("Reshape", [x, cat], [t]))
        else:
            raise SystemExit(f"unknown family {family}")
        x = t
    graph = helper.make_graph(
        nodes,
        f"{family}_{n}",
        [
            helper.make_tensor_value_info(
                "x", TensorProto.FLOAT, ["b", "s", 64] if dyn else [1, 64, 64]
            )
        ],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


FAMILIES = (
    "relu",
    "relu_longnames",
    "relu_doc",
    "relu_meta",
    "identity",
    "const_add",
    "init_add",
    "ext_add",
    "matmul_ext",
    "shape_reshape",
)


def measure_read(path: Path, python: str = sys.executable) -> dict[str, float]:
    """``read_model`` of ``path`` in a fresh process: MiB over the post-``Core()`` baseline."""
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [python, "-c", CHILD, str(path.resolve())], capture_output=True, text=True, check=True, env=env,
        cwd="/",
    )  # fmt: skip
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", nargs="*", default=[], help="measure these files instead")
    ap.add_argument("--families", nargs="*", default=list(FAMILIES))
    ap.add_argument("--counts", nargs="*", type=int, default=[32, 256])
    ap.add_argument("--dyn", action="store_true", help="symbolic batch and sequence dims")
    ap.add_argument("--out", type=Path, default=Path("/tmp/ov_read"))
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, object]] = []
    for p in a.model:
        meas = measure_read(Path(p))
        rows.append({"model": p, **meas})
        print(f"{Path(p).name}: " + " ".join(f"{k} {v:.2f}" for k, v in meas.items()), flush=True)
    for fam in a.families if not a.model else []:
        for n in a.counts:
            m = build(fam, n, a.dyn)
            p = a.out / f"{fam}_{n}{'_dyn' if a.dyn else ''}.onnx"
            save(m, p)
            meas = measure_read(p)
            rows.append({"family": fam, "n": n, "dyn": a.dyn, "nodes": len(m.graph.node), **meas})
            print(f"{fam:16s} n={n:4d} nodes={len(m.graph.node):5d} "
                  + " ".join(f"{k} {v:.2f}" for k, v in meas.items()), flush=True)  # fmt: skip
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
