"""What OpenVINO CPU (and the ORT OpenVINO EP) spend per node: hand-built graphs swept by count.

    python docs/bench/ov_pernode_bench.py [--families conv1x1_same ...] [--counts 8 32 128]
        [--backends openvino ort-openvino] [--out /tmp/ovacc/micro] [--json rows.json]

Each family is a chain of N nodes of one kind with tiny weights (so the re-laid-out copies
are negligible), written with 64 KiB-aligned external data by memshrink's own writer, static
input shapes. Each (family, N, backend) is measured in ``memshrink verify``'s child (one fresh
process, exact ``VmHWM`` per stage, anon and file split over the post-import baseline). The
slope over N is the per-node cost; families with identical nodes against families whose nodes
all differ in shape separate what a node costs from what a new JIT kernel costs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
MiB = 1 << 20
RNG = np.random.default_rng(0)


def _w(name: str, shape: tuple[int, ...], inits: list) -> str:
    a = (RNG.standard_normal(shape) * 0.05).astype(np.float32)
    inits.append(numpy_helper.from_array(a, name))
    return name


def _conv(nodes, inits, x, cin, cout, k=1, group=1, tag="c"):  # type: ignore[no-untyped-def]
    w = _w(f"{tag}_w", (cout, cin // group, k, k), inits)
    b = _w(f"{tag}_b", (cout,), inits)
    y = f"{tag}_y"
    nodes.append(
        helper.make_node("Conv", [x, w, b], [y], kernel_shape=[k, k], pads=[k // 2] * 4,
                         group=group)
    )  # fmt: skip
    r = f"{tag}_r"
    nodes.append(helper.make_node("Relu", [y], [r]))
    return r


def build(family: str, n: int, dynamic: bool = False) -> tuple[onnx.ModelProto, int]:
    """(model, number of Conv nodes) of one family with ``n`` repeated units; ``dynamic``
    makes the batch dim symbolic (``N``, bound to 1 when measured), as exporters write it."""
    nodes: list = []
    inits: list = []
    hw = 28
    c0 = 32
    convs = 0
    if family == "conv1x1_distinct":
        c0 = 16
    x = "x"
    c = c0
    for i in range(n):
        t = f"n{i}"
        if family == "conv1x1_same":
            x = _conv(nodes, inits, x, c, c, tag=t)
            convs += 1
        elif family == "conv1x1_distinct":  # every Conv a new (cin, cout): a new JIT kernel
            x = _conv(nodes, inits, x, c, c + 1, tag=t)
            c += 1
            convs += 1
        elif family == "conv1x1_distinct16":  # new (cin, cout) in steps of 16 (real widths)
            x = _conv(nodes, inits, x, c, c + 16, tag=t)
            c += 16
            convs += 1
        elif family == "dw_same":
            x = _conv(nodes, inits, x, c, c, k=3, group=c, tag=t)
            convs += 1
        elif family == "conv3x3_same":
            x = _conv(nodes, inits, x, c, c, k=3, tag=t)
            convs += 1
        elif family == "split4_conv":  # a 1x1 Conv split into 4 on output channels + Concat
            parts = [_conv(nodes, inits, x, c, c // 4, tag=f"{t}_{j}") for j in range(4)]
            y = f"{t}_cat"
            nodes.append(helper.make_node("Concat", parts, [y], axis=1))
            x = y
            convs += 4
        elif family == "slice_concat":  # Slice the channels in two, Relu each, Concat
            halves = []
            for j in range(2):
                s = f"{t}_s{j}"
                st = _w(f"{t}_st{j}", (1,), inits)
                en = _w(f"{t}_en{j}", (1,), inits)
                ax = _w(f"{t}_ax{j}", (1,), inits)
                inits[-3] = numpy_helper.from_array(np.array([j * c // 2], np.int64), st)
                inits[-2] = numpy_helper.from_array(np.array([(j + 1) * c // 2], np.int64), en)
                inits[-1] = numpy_helper.from_array(np.array([1], np.int64), ax)
                nodes.append(helper.make_node("Slice", [x, st, en, ax], [s]))
                r = f"{t}_r{j}"
                nodes.append(helper.make_node("Relu", [s], [r]))
                halves.append(r)
            y = f"{t}_cat"
            nodes.append(helper.make_node("Concat", halves, [y], axis=1))
            x = y
        elif family == "reshape_transpose":  # layout only: [N,C,H,W] -> [N,H,W,C] and back
            sh = _w(f"{t}_sh", (3,), inits)
            inits[-1] = numpy_helper.from_array(np.array([0, c, hw * hw], np.int64), sh)
            a, b2, y = f"{t}_a", f"{t}_b", f"{t}_y"
            nodes.append(helper.make_node("Reshape", [x, sh], [a]))
            nodes.append(helper.make_node("Transpose", [a], [b2], perm=[0, 2, 1]))
            back = _w(f"{t}_bk", (4,), inits)
            inits[-1] = numpy_helper.from_array(np.array([0, c, hw, hw], np.int64), back)
            nodes.append(helper.make_node("Transpose", [b2], [f"{t}_t"], perm=[0, 2, 1]))
            nodes.append(helper.make_node("Reshape", [f"{t}_t", back], [y]))
            x = y
        elif family in (
            "attn_head",
            "matmul_act",
        ):  # one attention head: two activation x activation MatMuls
            sh = _w(f"{t}_sh", (3,), inits)
            inits[-1] = numpy_helper.from_array(np.array([0, c, hw * hw], np.int64), sh)
            back = _w(f"{t}_bk", (4,), inits)
            inits[-1] = numpy_helper.from_array(np.array([0, c, hw, hw], np.int64), back)
            r, tr, qk, sm, av, y = (f"{t}_{s}" for s in ("r", "tr", "qk", "sm", "av", "y"))
            nodes.append(helper.make_node("Reshape", [x, sh], [r]))
            nodes.append(helper.make_node("Transpose", [r], [tr], perm=[0, 2, 1]))
            nodes.append(helper.make_node("MatMul", [r, tr], [qk]))
            if family == "attn_head":
                nodes.append(helper.make_node("Softmax", [qk], [sm], axis=-1))
            else:  # matmul_act: the same two MatMuls without the Softmax between them
                sm = qk
            nodes.append(helper.make_node("MatMul", [sm, r], [av]))
            nodes.append(helper.make_node("Reshape", [av, back], [y]))
            x = y
        elif family == "add":  # residual Add of two activations (not fusable into a Conv)
            r = f"{t}_r"
            nodes.append(helper.make_node("Sigmoid", [x], [r]))
            y = f"{t}_add"
            nodes.append(helper.make_node("Add", [x, r], [y]))
            x = y
        else:
            raise SystemExit(f"unknown family {family}")
    graph = helper.make_graph(
        nodes,
        f"{family}_{n}",
        [
            helper.make_tensor_value_info(
                "x", TensorProto.FLOAT, ["N" if dynamic else 1, c0, hw, hw]
            )
        ],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, convs


FAMILIES = (
    "conv1x1_same",
    "conv1x1_distinct",
    "conv1x1_distinct16",
    "dw_same",
    "conv3x3_same",
    "split4_conv",
    "slice_concat",
    "add",
    "reshape_transpose",
    "attn_head",
    "matmul_act",
)


def save(m: onnx.ModelProto, path: Path) -> None:
    from memshrink.model import load
    from memshrink.model import save as ms_save

    ms_save(load(m), str(path), external=True)


def measure(
    path: Path, backend: str, python: str | None, dims: dict[str, int], hint: str | None = None
) -> dict:
    from memshrink.verify import profile

    py = {backend: python} if python else None
    so = {"INFERENCE_PRECISION_HINT": hint} if hint and backend == "openvino" else None
    rep = profile(str(path), backends=(backend,), python=py, dims=dims or None, session_options=so)
    run = rep.runs[0]
    if run.status != "ok":
        raise RuntimeError(f"{path.name} {backend}: {run.status}: {run.error}")
    b = run.child["baseline"]
    out = {}
    for s in run.child["stages"]:
        out[s["name"]] = {
            "peak": (s["peak"] - b["rss"]) / MiB,
            "anon": (s["anon_peak"] - b["anon"]) / MiB,
            "file": (s["file_peak"] - b["file"]) / MiB,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", nargs="*", default=list(FAMILIES))
    ap.add_argument("--counts", nargs="*", type=int, default=[8, 32, 128])
    ap.add_argument("--backends", nargs="*", default=["openvino"])
    ap.add_argument("--out", default="/tmp/ov_pernode")
    ap.add_argument("--python-ovep", default=str(ROOT / ".cache/venv-ovep/bin/python"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--predict", action="store_true", help="also print the estimator's figures")
    ap.add_argument("--dynamic", action="store_true", help="symbolic batch (N=1), as exported")
    ap.add_argument("--hint", default=None, help="INFERENCE_PRECISION_HINT (openvino), e.g. f32")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for fam in a.families:
        for n in a.counts:
            m, convs = build(fam, n, a.dynamic)
            dims = {"N": 1} if a.dynamic else {}
            p = out / f"{fam}_{n}{'_dyn' if a.dynamic else ''}.onnx"
            save(m, p)
            for be in a.backends:
                py = a.python_ovep if be == "ort-openvino" else None
                meas = measure(p, be, py, dims, a.hint)
                row = {"family": fam, "n": n, "nodes": len(m.graph.node), "convs": convs,
                       "backend": be, "dynamic": a.dynamic, "hint": a.hint or "default",
                       "stages": meas}  # fmt: skip
                if a.predict:
                    from memshrink.estimate import estimate

                    opt = {"INFERENCE_PRECISION_HINT": a.hint} if a.hint else None
                    est = estimate(str(p), backend=be, dims=dims or None, session_options=opt)
                    row["pred"] = {k: v / MiB for k, v in est.stage_peaks().items()}
                rows.append(row)
                cells = " ".join(
                    f"{k}:{v['peak']:.1f}(a{v['anon']:+.1f},f{v['file']:+.1f})"
                    for k, v in meas.items()
                    if k in ("read", "compile", "infer1", "session", "run1")
                )
                pred = row.get("pred")
                ptxt = (" pred " + " ".join(f"{v:.1f}" for v in pred.values())) if pred else ""
                print(f"{fam:18s} n={n:4d} nodes={len(m.graph.node):4d} {be}: {cells}{ptxt}",
                      flush=True)  # fmt: skip
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
