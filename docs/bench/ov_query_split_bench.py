"""OpenVINO: a query-row split of attention cores, measured against the estimate.

    python docs/bench/ov_query_split_bench.py stack gpt 1,4,16 4 rt guard,qscale
    python docs/bench/ov_query_split_bench.py stack bert 1,16 2 pad guard

``stack WHICH KS LAYERS MASK FLAGS``: LAYERS chained attention layers (x -> Q/K/V projections
-> core -> output projection; ``gpt`` [1, 12, 1024, 64], ``bert`` [4, 12, 512, 64], ``vit``
[1, 4, 4096, 32]), each core's Q cut into K row pieces (``Split``; Kᵀ and V read whole),
MASK ``none`` / ``pad`` (an additive [B, 1, 1, S] mask from an input) / ``causal`` (constant
bool, ``Where``) / ``rt`` (an additive causal mask made at run time and sliced per piece, as
gpt2 dynamo's), FLAGS ``guard`` (the exporters' ``IsNaN -> Where`` after the Softmax) and
``qscale`` (the scale on Q and Kᵀ before the MatMul, as dynamo's SDPA), ``pretrans`` (Q cut
before its Reshape/Transpose, the pieces joined after the output's, as ``chunk`` writes it).
Each model runs in a child (``ov_split_copies_bench.CHILD``: stage peaks over the post-import baseline, runtime
graph layer types); the prediction is ``memshrink estimate --backend openvino``, steady state.
Results: docs/estimate.md, "Session 12: the query split's Subgraphs".
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ov_split_copies_bench import CHILD

F = TensorProto.FLOAT


def model(
    k, b, h, s, d, proj=True, scale=True, mask=None, guard=False, qscale=False, pretrans=False
):
    guard = bool(guard)
    nodes, inits = [], []
    rng = np.random.default_rng(0)
    ins = [helper.make_tensor_value_info("x", F, [b, s, h * d])]
    inits.append(numpy_helper.from_array(np.array([b, s, h, d], np.int64), "shp"))
    inits.append(numpy_helper.from_array(np.array([b, s, h * d], np.int64), "shp2"))
    inits.append(numpy_helper.from_array(np.array(0.125, np.float32), "sc"))
    inits.append(numpy_helper.from_array(np.array(0.0, np.float32), "zero"))
    for c in "qkvo":
        w = (rng.standard_normal((h * d, h * d)) * 0.03).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"W{c}"))
    for c in "qkv":
        nodes += [
            helper.make_node("MatMul", ["x", f"W{c}"], [f"{c}m"]),
            helper.make_node("Reshape", [f"{c}m", "shp"], [f"{c}r"]),
            helper.make_node("Transpose", [f"{c}r"], [c], perm=[0, 2, 1, 3]),
        ]
    nodes.append(helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]))
    if mask == "pad":
        ins.append(helper.make_tensor_value_info("m", F, [b, s]))
        inits.append(numpy_helper.from_array(np.array([1, 2], np.int64), "ax12"))
        inits.append(numpy_helper.from_array(np.array(-10000.0, np.float32), "big"))
        nodes += [
            helper.make_node("Unsqueeze", ["m", "ax12"], ["mu"]),
            helper.make_node("Mul", ["mu", "big"], ["am"]),
        ]
    if qscale:
        nodes.append(helper.make_node("Mul", ["kt", "sc"], ["kts"]))
    if mask == "rt":
        ins.append(helper.make_tensor_value_info("m", F, [1, s]))
        inits.append(numpy_helper.from_array(np.tril(np.ones((s, s), bool))[None, None], "tri"))
        inits.append(numpy_helper.from_array(np.array([1, 2], np.int64), "ax12"))
        inits.append(numpy_helper.from_array(np.array(0.5, np.float32), "half"))
        inits.append(numpy_helper.from_array(np.array(-1e4, np.float32), "ninf"))
        inits.append(numpy_helper.from_array(np.array([2], np.int64), "ax2"))
        nodes += [
            helper.make_node("Unsqueeze", ["m", "ax12"], ["mu"]),
            helper.make_node("Greater", ["mu", "half"], ["mb"]),
            helper.make_node("And", ["tri", "mb"], ["mk"]),
            helper.make_node("Where", ["mk", "zero", "ninf"], ["cb"]),
        ]
    additive = mask == "rt"
    if mask == "rt":
        mask = "causal"
    elif mask == "causal":
        inits.append(numpy_helper.from_array(np.tril(np.ones((s, s), bool))[None, None], "cb"))
        inits.append(numpy_helper.from_array(np.array([2], np.int64), "ax2"))
        inits.append(numpy_helper.from_array(np.array(-1e4, np.float32), "ninf"))
    qs = ["q"] if k == 1 else [f"q{i}" for i in range(k)]
    if k > 1 and pretrans:
        r = s // k
        inits.append(numpy_helper.from_array(np.array([b, r, h, d], np.int64), "shpp"))
        inits.append(numpy_helper.from_array(np.array([b, r, h * d], np.int64), "shpo"))
        nodes.append(
            helper.make_node("Split", ["qm"], [f"qmp{i}" for i in range(k)], axis=1, num_outputs=k)
        )
        for i in range(k):
            nodes += [
                helper.make_node("Reshape", [f"qmp{i}", "shpp"], [f"qrp{i}"]),
                helper.make_node("Transpose", [f"qrp{i}"], [f"q{i}"], perm=[0, 2, 1, 3]),
            ]
    elif k > 1:
        nodes.append(helper.make_node("Split", ["q"], qs, axis=2, num_outputs=k))
    outs = []
    for i, q in enumerate(qs):
        if qscale:
            nodes.append(helper.make_node("Mul", [q, "sc"], [f"qs{i}"]))
            q = f"qs{i}"
        nodes.append(helper.make_node("MatMul", [q, "kts" if qscale else "kt"], [f"s{i}"]))
        src = f"s{i}"
        if scale and not qscale:
            nodes.append(helper.make_node("Mul", [src, "sc"], [f"ss{i}"]))
            src = f"ss{i}"
        if mask == "pad":
            nodes.append(helper.make_node("Add", [src, "am"], [f"sm{i}"]))
            src = f"sm{i}"
        if mask == "causal":
            r = s // k
            nodes.append(helper.make_node("Slice", ["cb", f"st{i}", f"en{i}", "ax2"], [f"cm{i}"]))
            inits += [
                numpy_helper.from_array(np.array([i * r], np.int64), f"st{i}"),
                numpy_helper.from_array(np.array([(i + 1) * r], np.int64), f"en{i}"),
            ]
            if additive:
                if k == 1:
                    nodes.pop()
                nodes.append(
                    helper.make_node("Add", [src, "cb" if k == 1 else f"cm{i}"], [f"sm{i}"])
                )
            else:
                nodes.append(helper.make_node("Where", [f"cm{i}", src, "ninf"], [f"sm{i}"]))
            src = f"sm{i}"
        nodes += [
            helper.make_node("Softmax", [src], [f"p{i}"], axis=-1),
            helper.make_node("MatMul", [f"pg{i}" if guard else f"p{i}", "v"], [f"o{i}"]),
        ]
        if guard:
            nodes[-1:-1] = [
                helper.make_node("Equal", [f"p{i}", f"p{i}"], [f"eq{i}"]),
                helper.make_node("Where", [f"eq{i}", f"p{i}", "zero"], [f"pg{i}"]),
            ]
        outs.append(f"o{i}")
    if k > 1 and pretrans:
        for i in range(k):
            nodes += [
                helper.make_node("Transpose", [f"o{i}"], [f"ot{i}"], perm=[0, 2, 1, 3]),
                helper.make_node("Reshape", [f"ot{i}", "shpo"], [f"orp{i}"]),
            ]
        nodes.append(helper.make_node("Concat", [f"orp{i}" for i in range(k)], ["or"], axis=1))
    elif k > 1:
        nodes.append(helper.make_node("Concat", outs, ["o"], axis=2))
    else:
        nodes.append(helper.make_node("Identity", outs, ["o"]))
    if not (k > 1 and pretrans):
        nodes += [
            helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", ["ot", "shp2"], ["or"]),
        ]
    nodes.append(helper.make_node("MatMul", ["or", "Wo"], ["y"]))
    g = helper.make_graph(
        nodes, "att", ins, [helper.make_tensor_value_info("y", F, [b, s, h * d])], inits
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def predict(path):
    j = Path(str(path) + ".est.json")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "memshrink",
            "estimate",
            str(path),
            "--backend",
            "openvino",
            "--json",
            str(j),
        ],
        capture_output=True,
        text=True,
    )
    return json.loads(j.read_text())


if __name__ == "__main__" and sys.argv[1] != "stack":
    cfgs = {"gpt": (1, 12, 1024, 64), "bert": (4, 12, 512, 64), "vit": (1, 4, 4096, 32)}
    which = sys.argv[1]
    ks = [int(x) for x in sys.argv[2].split(",")]
    prec = sys.argv[3] if len(sys.argv) > 3 else "default"
    mask = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] != "none" else None
    guard = len(sys.argv) > 5 and "guard" in sys.argv[5]
    qscale = len(sys.argv) > 5 and "qscale" in sys.argv[5]
    out = Path(tempfile.gettempdir()) / "ov_query_split_bench"
    out.mkdir(exist_ok=True)
    for k in ks:
        which_m = which + (mask or "") + ("guard" if guard else "") + ("qscale" if qscale else "")
        p = out / f"{which_m}_k{k}.onnx"
        onnx.save_model(model(k, *cfgs[which], mask=mask, guard=guard, qscale=qscale), p)
        r = json.loads(
            subprocess.run(
                [sys.executable, "-c", CHILD, str(p), prec, "--rt"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        est = predict(p)
        print(which_m, k, prec, json.dumps(r), flush=True)
        (out / f"est_{which_m}_k{k}.json").write_text(json.dumps(est))


def stack(m1, layers):
    """Chain `layers` copies of a one-layer model (x -> y), names prefixed per layer."""
    g = m1.graph
    extra_in = [i for i in g.input if i.name != "x"]
    nodes, inits = [], []
    for li in range(layers):

        def rn(t, li=li):
            if t == "x":
                return "x" if li == 0 else f"L{li - 1}_y"
            if t in {i.name for i in extra_in} or t == "":
                return t
            if t == "y" and li == layers - 1:
                return "y"
            return f"L{li}_{t}"

        for n in g.node:
            c = onnx.NodeProto()
            c.CopyFrom(n)
            del c.input[:]
            c.input.extend(rn(t) for t in n.input)
            del c.output[:]
            c.output.extend(rn(t) for t in n.output)
            c.name = f"L{li}_{n.name}"
            nodes.append(c)
        for i in g.initializer:
            c = onnx.TensorProto()
            c.CopyFrom(i)
            c.name = rn(i.name)
            inits.append(c)
    g2 = helper.make_graph(nodes, "stack", list(g.input), list(g.output), inits)
    return helper.make_model(g2, opset_imports=list(m1.opset_import))


def main2():
    cfgs = {"gpt": (1, 12, 1024, 64), "bert": (4, 12, 512, 64), "vit": (1, 4, 4096, 32)}
    which, ks, layers, mask, flags = (
        sys.argv[2],
        [int(x) for x in sys.argv[3].split(",")],
        int(sys.argv[4]),
        sys.argv[5],
        sys.argv[6],
    )
    mask = None if mask == "none" else mask
    out = Path(tempfile.gettempdir()) / "ov_query_split_bench"
    out.mkdir(exist_ok=True)
    for k in ks:
        tag = f"{which}_{mask}_{flags}_L{layers}"
        p = out / f"{tag}_k{k}.onnx"
        onnx.save_model(
            stack(
                model(
                    k,
                    *cfgs[which],
                    mask=mask,
                    guard="guard" in flags,
                    qscale="qscale" in flags,
                    pretrans="pretrans" in flags,
                ),
                layers,
            ),
            p,
        )
        r = json.loads(
            subprocess.run(
                [sys.executable, "-c", CHILD, str(p), "default", "--rt"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        est = predict(p)["stages"]
        pc, ps = est["compile_model"]["peak"] / 2**20, est["steady_state"]["peak"] / 2**20
        print(
            f"{tag} K={k} meas compile {r['compile']:.1f} infer3 {r['infer3']:.1f} | pred compile {pc:.1f} steady {ps:.1f} | miss compile {pc - r['compile']:+.1f} infer3 {ps - r['infer3']:+.1f} | subgraphs {r['types'].get('Subgraph', 0)}",
            flush=True,
        )


if __name__ == "__main__" and sys.argv[1] == "stack":
    main2()
