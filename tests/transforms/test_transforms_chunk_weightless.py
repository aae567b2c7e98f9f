"""chunk: weightless cores (``chunking.weightless``) on a hand-built two-layer attention block.

Tolerance: each chunk runs the same kernels on fewer batch rows (MatMul blocking may depend on
the batch), so outputs are compared at atol 1e-5, rtol 1e-5 on ONNX Runtime CPU — inside the
pass's stated atol 1e-4, rtol 1e-4.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from fixtures_onnx import run_ort
from onnx import TensorProto, helper, numpy_helper

from memshrink.checks import check_model
from memshrink.manager import PassContext
from memshrink.model import load
from memshrink.transforms.chunk import ChunkPass, _predict, _shapes, apply, entries_for
from memshrink.transforms.chunking import weightless
from memshrink.transforms.chunking.region import discover_best
from memshrink.writer import save_model

RNG = np.random.default_rng(0)


def _const(name: str, arr: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(arr, name)


def _layer(i: int, x: str, batch: int, seq: int, heads: int, dim: int) -> tuple[list, list]:
    """One BERT-like layer: biased Q/K/V projections, scaled masked Softmax attention, output
    projection + residual + LayerNorm, a GELU-free FFN (MatMul, Relu, MatMul)."""
    h = heads * dim
    p = f"l{i}_"
    nodes = []
    inits = []
    for t in ("q", "k", "v"):
        nodes += [
            helper.make_node("MatMul", [x, p + "w" + t], [p + t + "m"]),
            helper.make_node("Add", [p + t + "m", p + "b" + t], [p + t]),
            helper.make_node("Reshape", [p + t, "heads"], [p + t + "h"]),
        ]
        inits += [_const(p + "w" + t, (RNG.standard_normal((h, h)) * 0.3).astype(np.float32)),
                  _const(p + "b" + t, (RNG.standard_normal(h) * 0.1).astype(np.float32))]  # fmt: skip
    nodes += [
        helper.make_node("Transpose", [p + "qh"], [p + "qt"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", [p + "kh"], [p + "kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", [p + "vh"], [p + "vt"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", [p + "qt", p + "kt"], [p + "s"]),
        helper.make_node("Div", [p + "s", "scale"], [p + "sd"]),
        helper.make_node("Add", [p + "sd", "mask"], [p + "sm"]),
        helper.make_node("Softmax", [p + "sm"], [p + "pr"], axis=-1),
        helper.make_node("MatMul", [p + "pr", p + "vt"], [p + "o"]),
        helper.make_node("Transpose", [p + "o"], [p + "ot"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", [p + "ot", "flat"], [p + "of"]),
        helper.make_node("MatMul", [p + "of", p + "wo"], [p + "om"]),
        helper.make_node("Add", [p + "om", p + "bo"], [p + "ob"]),
        helper.make_node("Add", [p + "ob", x], [p + "res"]),
        helper.make_node("LayerNormalization", [p + "res", "gamma", "beta"], [p + "ln"], axis=-1),
        helper.make_node("MatMul", [p + "ln", p + "w1"], [p + "f1"]),
        helper.make_node("Relu", [p + "f1"], [p + "f1r"]),
        helper.make_node("MatMul", [p + "f1r", p + "w2"], [p + "f2"]),
        helper.make_node("Add", [p + "f2", p + "ln"], [p + "y"]),
    ]
    inits += [_const(p + "wo", (RNG.standard_normal((h, h)) * 0.3).astype(np.float32)),
              _const(p + "bo", (RNG.standard_normal(h) * 0.1).astype(np.float32)),
              _const(p + "w1", (RNG.standard_normal((h, 4 * h)) * 0.3).astype(np.float32)),
              _const(p + "w2", (RNG.standard_normal((4 * h, h)) * 0.3).astype(np.float32))]  # fmt: skip
    return nodes, inits


def bert_like(batch: int = 4, seq: int = 64, heads: int = 4, dim: int = 8) -> onnx.ModelProto:
    """Two layers; the attention scores (batch × heads × seq²) are the largest tensors."""
    h = heads * dim
    n0, i0 = _layer(0, "x", batch, seq, heads, dim)
    n1, i1 = _layer(1, "l0_y", batch, seq, heads, dim)
    inits = (
        i0
        + i1
        + [
            _const("heads", np.asarray([batch, seq, heads, dim], np.int64)),
            _const("flat", np.asarray([batch, seq, h], np.int64)),
            _const("scale", np.asarray(np.sqrt(dim), np.float32)),
            _const("gamma", np.ones(h, np.float32)),
            _const("beta", np.zeros(h, np.float32)),
        ]
    )
    vi = helper.make_tensor_value_info
    g = helper.make_graph(
        n0 + n1, "g",
        [vi("x", TensorProto.FLOAT, [batch, seq, h]),
         vi("mask", TensorProto.FLOAT, [batch, 1, 1, seq])],
        [vi("l1_y", TensorProto.FLOAT, [batch, seq, h])], inits,
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return onnx.shape_inference.infer_shapes(m)


def _feeds(batch: int = 4, seq: int = 64, h: int = 32) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    mask = np.where(rng.random((batch, 1, 1, seq)) < 0.2, -1e4, 0.0).astype(np.float32)
    return {"x": rng.standard_normal((batch, seq, h)).astype(np.float32), "mask": mask}


def _readers(model: ir.Model) -> Counter[str]:
    """Nodes reading each initializer."""
    inits = set(model.graph.initializers)
    return Counter(x.name for n in model.graph for x in n.inputs
                   if x is not None and x.name in inits)  # fmt: skip


def bert_batch_region(tmp_path: Path) -> tuple[ir.Model, dict, Any]:
    """``bert_like`` saved and loaded, its estimated shapes, and its batch region (2 chunks)."""
    src = tmp_path / "bert.onnx"
    onnx.save_model(bert_like(), src)
    model = load(src)
    _, est = _predict(model, PassContext())
    shapes = _shapes(est)
    batch = discover_best(model.graph, shapes, 18, entries_for(model, shapes, "batch", 2), "b")
    return model, shapes, batch


def test_cores_are_the_attention_between_the_projections(tmp_path: Path) -> None:
    model, shapes, batch = bert_batch_region(tmp_path)
    assert [v.name for v in weightless.ends(batch, model.graph)] == ["l0_of", "l1_of"]
    cores = weightless.cores(batch, model.graph)
    assert [n.op_type for n in cores[0].nodes] == [
        "Reshape", "Reshape", "Reshape", "Transpose", "Transpose", "Transpose", "MatMul", "Div",
        "Add", "Softmax", "MatMul", "Transpose", "Reshape",
    ]  # fmt: skip
    assert {v.name for v in cores[0].externals} == {"l0_q", "l0_k", "l0_v", "mask"}
    assert [v.name for v in cores[1].outputs] == ["l1_of"]


@pytest.mark.parametrize("count", [2, 4])
def test_weightless_chunks_match_and_share_no_weight(tmp_path: Path, count: int) -> None:
    src = tmp_path / "bert.onnx"
    onnx.save_model(bert_like(), src)
    model = load(src)
    _, est = _predict(model, PassContext())
    _, st = apply(model, _shapes(est), "batch", count, 2, weightless=True)
    check_model(model)
    assert st.outputs == ["l0_of", "l1_of"] and st.extra_flops == 0.0
    assert st.nodes_before == 26
    # every weight (2-D initializer) is read by one node, as in the original
    two_d = {
        k for k, v in model.graph.initializers.items() if v.shape is not None and len(v.shape) == 2
    }
    assert two_d and all(c == 1 for k, c in _readers(model).items() if k in two_d)
    softmaxes = [n for n in model.graph if n.op_type == "Softmax"]
    assert len(softmaxes) == 2 * count
    out = tmp_path / f"wl{count}.onnx"
    save_model(model, out)
    feeds = _feeds()
    np.testing.assert_allclose(run_ort(out, feeds)[0], run_ort(src, feeds)[0], atol=1e-5, rtol=1e-5)


def test_a_core_that_reads_outside_the_batch_region_is_refused(tmp_path: Path) -> None:
    """A Softmax over the batch axis is not row-independent: the core is left whole."""
    proto = bert_like()
    for n in proto.graph.node:
        if n.op_type == "Softmax" and n.output[0] == "l0_pr":
            n.attribute[0].i = 0
    src = tmp_path / "bad.onnx"
    onnx.save_model(proto, src)
    model = load(src)
    _, est = _predict(model, PassContext())
    shapes = _shapes(est)
    batch = discover_best(model.graph, shapes, 18, entries_for(model, shapes, "batch", 2), "b")
    names = [r.outputs[0].name for r in weightless.cores(batch, model.graph)]
    assert "l0_of" not in names


def test_the_pass_offers_weightless_candidates(tmp_path: Path) -> None:
    src = tmp_path / "bert.onnx"
    onnx.save_model(bert_like(seq=128), src)
    model = load(src)
    p = ChunkPass()
    p.options.weightless = True
    p.options.modes = "batch"
    res = p.run(model, PassContext())
    wl = [c for c in res.stats["candidates"] if c.get("weightless")]
    assert {c["chunks"] for c in wl} == {2, 4}
    # x4 equal chunks quarter the scores (the largest tensors): predicted 5.7 -> 2.2 MiB here
    best = min(c["predicted_activations"] for c in wl if "predicted_activations" in c)
    assert best < 0.5 * res.stats["predicted_activations_before"]


def test_a_graph_without_cores_gets_one_refusal(tmp_path: Path) -> None:
    """A CNN has no weight-free MatMul/Softmax: one refused row, no trial per K."""
    from transforms.test_transforms_chunk import cnn

    src = tmp_path / "cnn.onnx"
    onnx.save_model(cnn(), src)
    p = ChunkPass()
    p.options.modes = "batch"
    res = p.run(load(src), PassContext())
    wl = [c for c in res.stats["candidates"] if c.get("weightless")]
    assert wl == [{"mode": "batch", "weightless": True, "refused": "no weightless core"}]
