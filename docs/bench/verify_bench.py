"""Per-stage memory of BERT-base (embedded vs external data) and ResNet-50 b16 on every backend.

Runs ``memshrink.profile`` (one child process per model x backend), prints each stage table,
then checks the figures against MEASURING.md within +-10 %.

    python docs/bench/verify_bench.py                                  # cpu, openvino (+ EPs found)
    python docs/bench/verify_bench.py --backends cpu,openvino,ort-openvino \\
        --python-for ort-openvino=.cache/venv-ovep/bin/python --json out.json
    python docs/bench/verify_bench.py --backends cuda --models bert-base  # on the GPU machine

Models come from the ``models/`` suite (``models.build``); with ``--synthetic`` (or where the
suite cannot build) a BERT-base-sized stand-in is built here with onnx.helper: 12 layers of
MatMul/Add/Softmax/LayerNormalization, hidden 768, 30522-token embedding, ~417 MiB fp32.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

MiB = 1024 * 1024

# MEASURING.md (2 cores, onnxruntime 1.32, openvino 2026.4), MiB of absolute process RSS,
# except activations: RSS growth after the run over the state after session creation/compile.
REFERENCE: dict[tuple[str, str, str], float] = {
    ("bert-base", "cpu", "session peak"): 684,
    ("bert-base-ext", "cpu", "session peak"): 388,
    ("bert-base", "openvino", "read peak"): 901,
    ("bert-base", "openvino", "read after"): 484,
    ("bert-base-ext", "openvino", "read peak"): 66,
    ("bert-base", "openvino", "compile peak"): 857,
    ("bert-base-ext", "openvino", "compile peak"): 857,
    ("bert-base", "ort-openvino", "session peak"): 1383,
    ("bert-base-ext", "ort-openvino", "session peak"): 888,
    ("resnet50-b16", "cpu", "activations run1"): 93,
    ("resnet50-b16", "cpu", "activations steady"): 203,
    ("resnet50-b16", "openvino", "activations run1"): 72,
    ("resnet50-b16", "openvino", "activations steady"): 78,
    # GPU.md (H200, onnxruntime-gpu 1.31.1), NVML per-process, counted from before CUDA init.
    ("bert-base", "cuda", "gpu session after"): 1115,
    ("bert-base", "cuda", "gpu run1 after"): 1187,
}


def _synthetic_bert(folder: Path, external: bool) -> Path:
    """A BERT-base-sized encoder (not the real graph: no attention mask, ReLU FFN)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    h, heads, ffn, vocab, layers, seq = 768, 12, 3072, 30522, 12, 128
    inits: list[Any] = []
    nodes: list[Any] = []

    def w(name: str, *shape: int) -> str:
        inits.append(numpy_helper.from_array((rng.standard_normal(shape, np.float32) * 0.02), name))
        return name

    def const(name: str, values: list[int]) -> str:
        inits.append(numpy_helper.from_array(np.array(values, np.int64), name))
        return name

    def node(op: str, ins: list[str], out: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    split_shape = const("split_shape", [1, seq, heads, h // heads])
    merge_shape = const("merge_shape", [1, seq, h])
    x = node("Gather", [w("word_emb", vocab, h), "input_ids"], "emb")
    x = node("Add", [x, w("pos_emb", seq, h)], "emb_pos")
    x = node("LayerNormalization", [x, w("ln_e_g", h), w("ln_e_b", h)], "emb_ln", axis=-1)
    for i in range(layers):
        p = f"l{i}_"

        def proj(name: str, inp: str, n_in: int, n_out: int, p: str = p) -> str:
            m = node("MatMul", [inp, w(p + name + "_w", n_in, n_out)], p + name + "_mm")
            return node("Add", [m, w(p + name + "_b", n_out)], p + name)

        def heads_of(t: str, perm: list[int], p: str = p) -> str:
            r = node("Reshape", [t, split_shape], t + "_r")
            return node("Transpose", [r], t + "_t", perm=perm)

        q = heads_of(proj("q", x, h, h), [0, 2, 1, 3])
        k = heads_of(proj("k", x, h, h), [0, 2, 3, 1])
        v = heads_of(proj("v", x, h, h), [0, 2, 1, 3])
        s = node("MatMul", [q, k], p + "scores")
        s = node("Mul", [s, w(p + "scale", 1)], p + "scaled")
        a = node("Softmax", [s], p + "probs", axis=-1)
        c = node("MatMul", [a, v], p + "ctx")
        c = node("Transpose", [c], p + "ctx_t", perm=[0, 2, 1, 3])
        c = node("Reshape", [c, merge_shape], p + "ctx_r")
        o = node("Add", [proj("o", c, h, h), x], p + "res1")
        x1 = node(
            "LayerNormalization", [o, w(p + "ln1_g", h), w(p + "ln1_b", h)], p + "ln1", axis=-1
        )
        f = node("Relu", [proj("ff1", x1, h, ffn)], p + "act")
        o2 = node("Add", [proj("ff2", f, ffn, h), x1], p + "res2")
        x = node(
            "LayerNormalization", [o2, w(p + "ln2_g", h), w(p + "ln2_b", h)], p + "ln2", axis=-1
        )
    nodes[-1].output[0] = "last_hidden_state"
    graph = helper.make_graph(
        nodes,
        "synthetic_bert_base",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, seq, h])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    name = "synthetic-bert-base" + ("-ext" if external else "")
    path = folder / f"{name}.onnx"
    onnx.save_model(
        model, path, save_as_external_data=external, all_tensors_to_one_file=True,
        location=path.name + ".data", size_threshold=1024,
    )  # fmt: skip
    return path


def _model(name: str, synthetic: bool, folder: Path) -> tuple[Path | None, str]:
    if not synthetic:
        try:
            sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
            import models

            return models.build(name), "models suite"
        except Exception as exc:  # no torch, export failure: say so, use the stand-in
            print(f"[bench] models.build({name!r}) failed: {exc}; using the synthetic stand-in",
                  file=sys.stderr)  # fmt: skip
    if name.startswith("bert-base"):
        return _synthetic_bert(folder, external=name.endswith("-ext")), "synthetic BERT-base"
    return None, "no stand-in (needs torch to build)"


def _stage(run: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((s for s in run["stages"] if s["name"] == name), None)


def derived(model: str, run: dict[str, Any]) -> dict[str, float]:
    """The quantities MEASURING.md reports, in MiB, from one run's stages."""
    from memshrink.verify.gpu_delta import matched_baseline

    out: dict[str, float] = {}
    if run["status"] != "ok":
        return out
    stages = run["stages"]
    first = stages[0]["name"]
    if run["backend"] == "openvino":
        for key in ("read", "compile"):
            s = _stage(run, key)
            if s:
                out[f"{key} peak"] = s["peak"] / MiB
                out[f"{key} after"] = s["after"] / MiB
        ref = _stage(run, "compile")
    else:
        s = _stage(run, "session")
        if s:
            out["session peak"] = s["peak"] / MiB
            out["session after"] = s["after"] / MiB
        ref = s
    runs = [s for s in stages if s["name"] != first and s["name"] != "compile"]
    if ref and runs:
        out["activations run1"] = (runs[0]["after"] - ref["after"]) / MiB
        out["activations steady"] = (runs[-1]["after"] - ref["after"]) / MiB
    gpu = run.get("gpu")
    if gpu:
        base0 = gpu.get("before_cuda_init") or 0
        empty = gpu.get("empty_session_baseline")
        if empty is not None:
            out["gpu empty-session baseline"] = (empty - base0) / MiB
        for s in stages:
            g = s.get("gpu") or {}
            if g.get("after") is not None:
                out[f"gpu {s['name']} after"] = (g["after"] - base0) / MiB
                out[f"gpu {s['name']} peak"] = ((g.get("peak") or 0) - base0) / MiB
                if empty is not None:  # at the same stage, as verify prints it (gpu_delta)
                    base = matched_baseline(s["name"], gpu.get("empty_session_stages"), empty)
                    out[f"gpu {s['name']} over empty session"] = ((g.get("peak") or 0) - base) / MiB
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--models", default="bert-base,bert-base-ext,resnet50-b16")
    ap.add_argument("--backends", default="cpu,openvino,ort-openvino")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--python-for", action="append", default=[], metavar="BACKEND=PATH")
    ap.add_argument("--synthetic", action="store_true", help="use the onnx.helper BERT stand-in")
    ap.add_argument("--json", help="write all results here")
    ap.add_argument("--markdown", action="store_true", help="also print the comparison as markdown")
    args = ap.parse_args(argv)

    from memshrink.verify import profile

    python = dict(a.split("=", 1) for a in args.python_for)
    results: dict[str, Any] = {}
    rows: list[tuple[str, str, str, float, float | None]] = []
    with tempfile.TemporaryDirectory(prefix="verify-bench-") as tmp:
        for name in [m for m in args.models.split(",") if m]:
            path, source = _model(name, args.synthetic, Path(tmp))
            if path is None:
                print(f"\n=== {name}: skipped, {source} ===")
                continue
            print(
                f"\n=== {name} ({source}: {path.name}, {os.path.getsize(path) / MiB:.0f} MiB .onnx) ==="
            )
            rep = profile(path, backends=args.backends, runs=args.runs, python=python or None,
                          progress=lambda m: print(m, file=sys.stderr, flush=True))  # fmt: skip
            print(rep.format_table())
            d = rep.to_dict()
            d["source"] = source
            results[name] = d
            for run in d["runs"]:
                got = derived(name, run)
                run["derived_mib"] = got
                keys = {k for (m, b, k) in REFERENCE if m == name and b == run["backend"]}
                for key in sorted(set(got) | keys):
                    if key in keys or not key.endswith(" peak") or not key.startswith("gpu"):
                        rows.append((name, run["backend"], key, got.get(key, float("nan")),
                                     REFERENCE.get((name, run["backend"], key))))  # fmt: skip
    print("\n=== against MEASURING.md / GPU.md (MiB; +-10 % band) ===")
    header = (
        f"{'model':<14} {'backend':<13} {'quantity':<24} {'measured':>9} {'reference':>9}  verdict"
    )
    print(header)
    md = [
        "| model | backend | quantity | measured MiB | MEASURING.md | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for model, backend, key, got, ref in rows:
        if ref is None:
            verdict = ""
        elif got != got:  # NaN: not measured
            verdict = "not measured"
        else:
            verdict = (
                "within 10 %"
                if abs(got - ref) <= 0.10 * ref
                else f"off by {100 * (got - ref) / ref:+.0f} %"
            )
        refs = "-" if ref is None else f"{ref:.0f}"
        print(f"{model:<14} {backend:<13} {key:<24} {got:9.0f} {refs:>9}  {verdict}")
        md.append(f"| {model} | {backend} | {key} | {got:.0f} | {refs} | {verdict} |")
    if args.markdown:
        print("\n" + "\n".join(md))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"results": results, "rows": rows}, indent=1, default=str)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
