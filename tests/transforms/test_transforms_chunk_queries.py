"""chunk: attention cores cut along their query rows, Kᵀ and V whole (``weightless.queries``).

Hand-built one-layer attention blocks at batch 1: heads as an axis (``[1, H, S, D]``, a padding
mask ``[1, 1, 1, S]`` or a causal mask sliced from a constant, as GPT-2's legacy export) and
heads merged into the batch (``[H, S, D]``) with SAM's decomposed relative positions (two
``Einsum``s of Q with per-row tables). Tolerance: every piece runs the same kernels on fewer
query rows, and Softmax normalizes each row alone, so outputs are compared at atol 1e-6,
rtol 1e-6 on ONNX Runtime CPU (measured bit-identical), inside the pass's stated 1e-4.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from fixtures_onnx import run_ort
from onnx import TensorProto, helper, numpy_helper

from memshrink.checks import check_model
from memshrink.estimate import estimate
from memshrink.manager import PassContext
from memshrink.model import load
from memshrink.transforms.chunk import ChunkPass, _predict, _query_rows, _shapes, apply
from memshrink.transforms.chunking import rules, weightless
from memshrink.transforms.chunking.region import node_facts
from memshrink.writer import save_model

RNG = np.random.default_rng(0)
E, H, D = 16, 2, 8  # embedding, heads, head dim


def _c(name: str, arr: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(arr, name)


def _w(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.3).astype(np.float32)


def attention(seq: int = 64, mask: str = "padding", form: str = "4d",
              symbolic: bool = False) -> onnx.ModelProto:  # fmt: skip
    """One attention layer at batch 1: Q/K/V projections, scores, mask, Softmax, ·V, output
    projection. ``mask``: "padding" (input ``[1,1,1,S]`` added), "causal" (a ``[1,1,2S,2S]``
    bool constant sliced to ``[1,1,S,S]``, ``Where``), "none". ``form``: "4d" (heads an axis)
    or "relpos" (``[H, S, D]``, SAM's relative positions on an ``s × s`` grid, ``S = s²``)."""
    s = int(round(seq**0.5))
    n = helper.make_node
    nodes, inits = [], []
    for t in "qkv":
        nodes += [n("MatMul", ["x", "w" + t], [t + "m"]), n("Add", [t + "m", "b" + t], [t])]
        inits += [_c("w" + t, _w(E, E)), _c("b" + t, _w(E))]
    if form == "4d":
        nodes += [
            n("Reshape", ["q", "heads"], ["qh"]), n("Reshape", ["k", "heads"], ["kh"]),
            n("Reshape", ["v", "heads"], ["vh"]),
            n("Transpose", ["qh"], ["qt"], perm=[0, 2, 1, 3]),
            n("Transpose", ["kh"], ["kt"], perm=[0, 2, 3, 1]),
            n("Transpose", ["vh"], ["vt"], perm=[0, 2, 1, 3]),
            n("MatMul", ["qt", "kt"], ["s0"]), n("Mul", ["s0", "scale"], ["s1"]),
        ]  # fmt: skip
    else:  # SAM: q, k, v as [H, S, D]; Q·Kᵀ + decomposed relative positions
        nodes += [
            n("Reshape", ["q", "heads"], ["qh"]), n("Reshape", ["k", "heads"], ["kh"]),
            n("Reshape", ["v", "heads"], ["vh"]),
            n("Transpose", ["qh"], ["qp"], perm=[0, 2, 1, 3]),
            n("Transpose", ["kh"], ["kp"], perm=[0, 2, 1, 3]),
            n("Transpose", ["vh"], ["vp"], perm=[0, 2, 1, 3]),
            n("Reshape", ["qp", "hsd"], ["q3"]), n("Reshape", ["kp", "hsd"], ["k3"]),
            n("Reshape", ["vp", "hsd"], ["vt"]),
            n("Mul", ["q3", "scale"], ["qs"]),
            n("Transpose", ["k3"], ["kt"], perm=[0, 2, 1]),
            n("MatMul", ["qs", "kt"], ["s0"]),
            n("Reshape", ["q3", "grid"], ["qg"]),
            n("Einsum", ["qg", "rel_h"], ["rh"], equation="bhwc,hkc->bhwk"),
            n("Einsum", ["qg", "rel_w"], ["rw"], equation="bhwc,wkc->bhwk"),
            n("Unsqueeze", ["rh", "ax4"], ["rh5"]), n("Unsqueeze", ["rw", "ax3"], ["rw5"]),
            n("Add", ["rh5", "rw5"], ["rel5"]), n("Reshape", ["rel5", "hss"], ["rel"]),
            n("Add", ["s0", "rel"], ["s1"]),
        ]  # fmt: skip
        inits += [
            _c("hsd", np.asarray([H, seq, D], np.int64)),
            _c("grid", np.asarray([H, s, s, D], np.int64)),
            _c("hss", np.asarray([H, seq, seq], np.int64)),
            _c("rel_h", _w(s, s, D)), _c("rel_w", _w(s, s, D)),
            _c("ax4", np.asarray([4], np.int64)), _c("ax3", np.asarray([3], np.int64)),
        ]  # fmt: skip
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq" if symbolic else seq, E])
    ]
    if mask == "padding":
        nodes.append(n("Add", ["s1", "mask"], ["sm"]))
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, 1, seq]))
    elif mask == "causal":
        tri = np.tril(np.ones((2 * seq, 2 * seq), bool))[None, None]
        nodes += [
            n("Slice", ["bias", "zero2", "seq2", "ax23"], ["causal"]),
            n("Where", ["causal", "s1", "neg"], ["sm"]),
        ]
        inits += [_c("bias", tri), _c("zero2", np.zeros(2, np.int64)),
                  _c("seq2", np.asarray([seq, seq], np.int64)),
                  _c("ax23", np.asarray([2, 3], np.int64)),
                  _c("neg", np.asarray(-1e4, np.float32))]  # fmt: skip
    else:
        nodes.append(n("Identity", ["s1"], ["sm"]))
    tail = "o4" if form == "4d" else "o3"
    nodes += [n("Softmax", ["sm"], ["pr"], axis=-1), n("MatMul", ["pr", "vt"], [tail])]
    if form != "4d":
        nodes.append(n("Reshape", ["o3", "heads_t"], ["o4"]))
        inits.append(_c("heads_t", np.asarray([1, H, seq, D], np.int64)))
    nodes += [
        n("Transpose", ["o4"], ["ot"], perm=[0, 2, 1, 3]), n("Reshape", ["ot", "flat"], ["of"]),
        n("MatMul", ["of", "wo"], ["om"]), n("Add", ["om", "bo"], ["y"]),
    ]  # fmt: skip
    inits += [
        _c("wo", _w(E, E)), _c("bo", _w(E)),
        _c("heads", np.asarray([1, -1 if symbolic else seq, H, D], np.int64)),
        _c("flat", np.asarray([1, -1 if symbolic else seq, E], np.int64)),
        _c("scale", np.asarray(D**-0.5, np.float32)),
    ]  # fmt: skip
    out = [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq" if symbolic else seq, E])
    ]
    g = helper.make_graph(nodes, "g", inputs, out, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return onnx.shape_inference.infer_shapes(m)


def _feeds(seq: int = 64, mask: str = "padding") -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    f = {"x": rng.standard_normal((1, seq, E)).astype(np.float32)}
    if mask == "padding":
        f["mask"] = np.where(rng.random((1, 1, 1, seq)) < 0.2, -1e4, 0.0).astype(np.float32)
    return f


def _loaded(tmp_path: Path, **kw: object) -> tuple[Path, ir.Model, dict]:
    src = tmp_path / "attn.onnx"
    onnx.save_model(attention(**kw), src)  # type: ignore[arg-type]
    model = load(src)
    _, est = _predict(model, PassContext())
    return src, model, _shapes(est)


def _readers(model: ir.Model, name: str, op: str) -> int:
    return sum(
        1 for n in model.graph if n.op_type == op and any(x is not None and x.name == name
                                                           for x in n.inputs)
    )  # fmt: skip


def test_query_stretch_slices_q_and_reads_kt_and_v_whole(tmp_path: Path) -> None:
    _, model, shapes = _loaded(tmp_path)
    (core,) = weightless.graph_cores(model.graph)
    r = weightless.queries(core, model.graph, shapes, 18, "q")
    assert [n.op_type for n in r.nodes] == [
        "Reshape", "Transpose", "MatMul", "Mul", "Add", "Softmax", "MatMul", "Transpose", "Reshape"
    ]  # fmt: skip
    # Q sliced along its rows (before its head Reshape: the most compute); Kᵀ, V and the
    # broadcast padding mask are read whole
    assert {v.name: r.axes[v] for v in r.externals} == {"q": 1}
    assert [v.name for v in r.outputs] == ["of"]
    assert weightless.query_rows(r) == 64


@pytest.mark.parametrize(("mask", "form"), [("padding", "4d"), ("causal", "4d"),
                                            ("none", "relpos")])  # fmt: skip
@pytest.mark.parametrize("count", [2, 4])
def test_query_pieces_match_the_original(tmp_path: Path, mask: str, form: str, count: int) -> None:
    src, model, shapes = _loaded(tmp_path, mask=mask, form=form)
    _, st = apply(model, shapes, "queries", count, 2, queries=True)
    check_model(model)
    assert st.outputs == ["of"] and st.extra_flops == 0.0
    # every piece reads the one Kᵀ and the one V: no copy, no slice of either
    assert _readers(model, "kt", "MatMul") == count and _readers(model, "vt", "MatMul") == count
    assert not any(n.op_type == "Slice" and n.inputs[0].name in ("kt", "vt") for n in model.graph)
    assert sum(n.op_type == "Softmax" for n in model.graph) == count
    if mask == "causal":  # the [1, 1, S, S] mask: its query axis sliced per piece
        assert _readers(model, "causal", "Slice") == count
    if form == "relpos":  # the per-row table of the Einsum over query rows: sliced per piece
        assert _readers(model, "rel_h", "Slice") == count
        assert _readers(model, "rel_w", "Slice") == 0
    out = tmp_path / f"q{count}.onnx"
    save_model(model, out)
    feeds = _feeds(mask=mask)
    np.testing.assert_allclose(run_ort(out, feeds)[0], run_ort(src, feeds)[0], atol=1e-6, rtol=1e-6)


def test_estimator_keeps_kt_and_v_alive_through_every_piece(tmp_path: Path) -> None:
    _, model, shapes = _loaded(tmp_path, seq=256)
    apply(model, shapes, "queries", 4, 2, queries=True)
    out = tmp_path / "q4.onnx"
    save_model(model, out)
    est = estimate(out, backend="ort")
    g, order = est.prediction.graph, est.prediction.order
    steps = {name: [s for s, i in enumerate(order) if name in g.nodes[i].inputs]
             for name in ("kt", "vt")}  # fmt: skip
    assert all(len(v) == 4 for v in steps.values())
    plan = est.prediction.details["plan"]
    for name, readers in steps.items():
        (buf,) = [b for b in plan.buffers if name in b.tensors]
        # allocated before the first piece, freed after the last piece reads it
        assert buf.start < min(readers) and buf.end >= max(readers)
        assert buf.size == 256 * E * 4


def test_pass_picks_a_query_split_at_batch_1_with_a_bound_symbolic_sequence(
    tmp_path: Path,
) -> None:
    src = tmp_path / "sym.onnx"
    onnx.save_model(attention(seq=256, symbolic=True), src)
    p = ChunkPass()
    p.options.modes = "batch"
    ctx = PassContext(dims={"seq": 256}, backend="ort", deploy_only=True)
    model = load(src)
    res = p.run(model, ctx)
    qs = [c for c in res.stats["candidates"] if c.get("queries")]
    assert {c["chunks"] for c in qs} == {2, 4, 8, 16}
    assert res.modified and res.stats["mode"] == "queries" and res.stats["queries"]
    assert (
        res.stats["predicted_activations_after"] < 0.5 * res.stats["predicted_activations_before"]
    )
    out = tmp_path / "sym.q.onnx"
    save_model(model, out)
    feeds = _feeds(seq=256)
    np.testing.assert_allclose(run_ort(out, feeds)[0], run_ort(src, feeds)[0], atol=1e-6, rtol=1e-6)


def test_fused_contrib_attention_is_refused(tmp_path: Path) -> None:
    n = helper.make_node
    g = helper.make_graph(
        [n("Attention", ["x", "w", "b"], ["a"], domain="com.microsoft", num_heads=H),
         n("MatMul", ["a", "wo"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, E])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, E])],
        [_c("w", _w(E, 3 * E)), _c("b", _w(3 * E)), _c("wo", _w(E, E))],
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18),
                                            helper.make_opsetid("com.microsoft", 1)])  # fmt: skip
    m.ir_version = 9
    src = tmp_path / "fused.onnx"
    onnx.save_model(m, src)
    model = load(src)
    assert _query_rows(model, {"x": (1, 64, E), "a": (1, 64, E), "y": (1, 64, E)}) == 0


def _einsum(eq: str, shapes: list[tuple[int, ...]], out: tuple[int, ...]) -> rules.NodeFacts:
    xs = [ir.Value(name=f"i{i}") for i in range(len(shapes))]
    node = ir.Node("", "Einsum", xs, [ir.AttrString("equation", eq)], num_outputs=1)
    node.outputs[0].name = "o"
    return node_facts(node, {**{f"i{i}": s for i, s in enumerate(shapes)}, "o": out}, 18)


def test_einsum_rule_slices_operands_with_the_free_index_and_refuses_a_contracted_one() -> None:
    f = _einsum("bhwc,hkc->bhwk", [(2, 8, 8, 4), (8, 8, 4)], (2, 8, 8, 8))
    assert rules.forward(f, [1, None]) == ([1], {1: 0})  # the table's h rows sliced
    f = _einsum("bhwc,wkc->bhwk", [(2, 8, 8, 4), (8, 8, 4)], (2, 8, 8, 8))
    assert rules.forward(f, [1, None]) == ([1], {})  # no h in the w table: read whole
    with pytest.raises(rules.Refuse, match="contracts"):
        rules.forward(f, [3, None])
    with pytest.raises(rules.Refuse, match="ellipsis"):
        rules.forward(_einsum("...c,kc->...k", [(2, 4), (3, 4)], (2, 3)), [0, None])


def test_heads_pieces_cut_along_their_query_rows_match_and_slice_kt_once_per_head(
    tmp_path: Path,
) -> None:
    from transforms.test_transforms_chunk_weightless import _feeds as bert_feeds
    from transforms.test_transforms_chunk_weightless import bert_like

    src = tmp_path / "bert.onnx"
    onnx.save_model(bert_like(), src)  # batch 4, 4 heads, seq 64
    model = load(src)
    _, est = _predict(model, PassContext())
    apply(model, _shapes(est), "batch", 4, 2, weightless=True, heads=True, query_chunks=4)
    check_model(model)
    assert sum(n.op_type == "Softmax" for n in model.graph) == 2 * 4 * 4
    for layer in ("l0", "l1"):
        # Kᵀ and V sliced once per head; each head's slices read by its 4 query pieces
        kt = [n for n in model.graph if n.op_type == "Slice" and n.inputs[0].name == f"{layer}_kt"]
        assert len(kt) == 4
        assert all(_readers(model, n.outputs[0].name or "", "MatMul") == 4 for n in kt)
    out = tmp_path / "hq.onnx"
    save_model(model, out)
    feeds = bert_feeds()
    np.testing.assert_allclose(run_ort(out, feeds)[0], run_ort(src, feeds)[0], atol=1e-6, rtol=1e-6)


def test_the_pass_offers_query_pieces_inside_the_best_heads_layout(tmp_path: Path) -> None:
    from transforms.test_transforms_chunk_weightless import bert_like

    src = tmp_path / "bert.onnx"
    onnx.save_model(bert_like(seq=128), src)
    p = ChunkPass()
    p.options.modes = "batch"
    p.options.max_chunks = 4  # fewer trials: the test is about which are offered
    p.options.queries_batched = True  # off by default at batch > 1
    p.options.guard_backends = p.options.prefer_backends = ""
    res = p.run(load(src), PassContext())
    hq = [c for c in res.stats["candidates"] if c.get("query_chunks")]
    best_heads = min(
        (c for c in res.stats["candidates"] if c.get("heads") and not c.get("query_chunks")),
        key=lambda c: c["predicted_activations"],
    )
    assert {c["query_chunks"] for c in hq} == {2, 4, 8}
    assert {c["chunks"] for c in hq} == {best_heads["chunks"]}
    assert all("predicted_activations" in c for c in hq)
    # the whole cores along their query rows are offered at this batch (4) too
    assert any(c.get("queries") for c in res.stats["candidates"])


def test_by_default_no_query_split_is_tried_where_a_batch_axis_exists(tmp_path: Path) -> None:
    from transforms.test_transforms_chunk_weightless import bert_like

    src = tmp_path / "bert.onnx"
    onnx.save_model(bert_like(seq=128), src)
    p = ChunkPass()
    p.options.modes = "batch"
    p.options.max_chunks = 2
    p.options.guard_backends = p.options.prefer_backends = ""
    res = p.run(load(src), PassContext())
    assert not [c for c in res.stats["candidates"] if c.get("queries") or c.get("query_chunks")]


@pytest.mark.parametrize("mask", ["padding", "causal"])
def test_a_count_that_does_not_divide_the_rows_gives_a_shorter_last_piece(
    tmp_path: Path, mask: str
) -> None:
    # 50 query rows in 4 pieces: ceil(50 / 4) = 13 rows each, the last 11 (ViT's 197 tokens
    # have no divisor at all); the first three share one shape, so they reuse one buffer set
    src, model, shapes = _loaded(tmp_path, seq=50, mask=mask)
    _, st = apply(model, shapes, "queries", 4, 2, queries=True)
    check_model(model)
    assert st.pieces == [4]
    rows = sorted(
        n.outputs[0].shape[1]
        for n in model.graph
        if n.op_type == "Slice" and n.inputs[0].name == "q"
    )
    assert rows == [11, 13, 13, 13]
    assert sum(n.op_type == "Softmax" for n in model.graph) == 4
    out = tmp_path / "q4.onnx"
    save_model(model, out)
    feeds = _feeds(seq=50, mask=mask)
    np.testing.assert_allclose(run_ort(out, feeds)[0], run_ort(src, feeds)[0], atol=1e-6, rtol=1e-6)


def test_piece_edges_refuse_an_empty_last_piece(tmp_path: Path) -> None:
    _, model, shapes = _loaded(tmp_path, seq=10)
    (r,) = weightless.query_regions(model.graph, shapes, 18, "q")
    assert weightless.piece_edges(r, 5) is None  # divides: equal pieces
    assert weightless.piece_edges(r, 4) == [0, 3, 6, 9, 10]
    with pytest.raises(rules.Refuse, match="no rows"):
        weightless.piece_edges(r, 8)  # ceil(10 / 8) = 2 rows: 7 pieces cover 14 > 10


def test_query_counts_are_divisors_and_powers_of_two() -> None:
    from memshrink.transforms.chunk import query_counts

    assert query_counts(197, 197, 16) == [2, 4, 8, 16]
    assert query_counts(64, 4096, 16) == [2, 4, 8, 16]
    assert query_counts(1500, 1500, 16) == [2, 3, 4, 5, 6, 8, 10, 12, 15, 16]
    assert query_counts(5, 5, 16) == [2, 4, 5]


def test_heads_at_batch_1_slice_kt_and_v_per_head_and_match(tmp_path: Path) -> None:
    src, model, shapes = _loaded(tmp_path, seq=64)
    _, st = apply(model, shapes, "queries", H, 2, queries=True, heads=True)
    check_model(model)
    assert st.pieces == [H]
    assert sum(n.op_type == "Softmax" for n in model.graph) == H
    # Q, Kᵀ and V sliced once per head (the heads axis); the padding mask read whole
    for name in ("qt", "kt", "vt"):
        assert sum(n.op_type == "Slice" and n.inputs[0].name == name for n in model.graph) == H
    assert not any(n.op_type == "Slice" and n.inputs[0].name == "mask" for n in model.graph)
    out = tmp_path / "h.onnx"
    save_model(model, out)
    feeds = _feeds(seq=64)
    np.testing.assert_allclose(run_ort(out, feeds)[0], run_ort(src, feeds)[0], atol=1e-6, rtol=1e-6)


def two_cores(big: int = 64, small: int = 32) -> onnx.ModelProto:
    """Two independent attention layers (inputs ``a_x`` [1, big, E], ``b_x`` [1, small, E]),
    outputs summed per layer: scores big² and small² (1/4 of the big one's at 64 / 32)."""
    parts = [onnx.compose.add_prefix(attention(seq=s, mask="none"), p)
             for p, s in (("a_", big), ("b_", small))]  # fmt: skip
    g = helper.make_graph(
        [n for m in parts for n in m.graph.node], "two",
        [i for m in parts for i in m.graph.input], [o for m in parts for o in m.graph.output],
        [t for m in parts for t in m.graph.initializer],
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return onnx.shape_inference.infer_shapes(m)


def test_scaled_counts_give_each_core_the_pieces_its_scores_need(tmp_path: Path) -> None:
    src = tmp_path / "two.onnx"
    onnx.save_model(two_cores(), src)
    feeds = {"a_x": _feeds(64, "none")["x"], "b_x": _feeds(32, "none")["x"]}
    ref = run_ort(src, feeds)
    for scaled, pieces in ((False, [8, 8]), (True, [8, 2])):
        model = load(src)
        _, est = _predict(model, PassContext())
        _, st = apply(model, _shapes(est), "queries", 8, 2, queries=True, scaled=scaled)
        # big: 64² scores in 8 pieces of 512 rows² ... small (1/4): ceil(8 / 4) = 2 pieces
        assert st.pieces == pieces
        assert sum(n.op_type == "Softmax" for n in model.graph) == sum(pieces)
        out = tmp_path / f"two{scaled}.onnx"
        save_model(model, out)
        for a, b in zip(run_ort(out, feeds), ref, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize(("seq", "max_chunks", "heads"), [(50, 4, False), (3, 4, True)])
def test_pass_offers_uneven_pieces_and_heads_only_where_rows_are_few(
    tmp_path: Path, seq: int, max_chunks: int, heads: bool
) -> None:
    src = tmp_path / "odd.onnx"
    onnx.save_model(attention(seq=seq), src)
    p = ChunkPass()
    p.options.modes = "batch"
    p.options.max_chunks = max_chunks
    p.options.min_gain = 0.0
    res = p.run(load(src), PassContext(backend="ort", deploy_only=True))
    cands = res.stats["candidates"]
    qs = [c for c in cands if c.get("queries") and not c.get("heads") and "refused" not in c]
    # 50 rows: 2 divides, 4 a shorter last piece; 3 rows: 2 (2 + 1 rows) and 3
    assert {c["chunks"] for c in qs} == ({2, 4} if seq == 50 else {2, 3})
    # heads only where the rows cannot give max_chunks pieces (3 < 4), not at 50 >= 4
    hs = [c for c in cands if c.get("heads") and "refused" not in c]
    assert [c["chunks"] for c in hs] == ([H] if heads else [])
    assert all("predicted_activations" in c for c in qs + hs)


def test_a_scaled_layout_that_cuts_the_same_cores_alike_is_not_tried_twice(tmp_path: Path) -> None:
    from memshrink.transforms.chunk import Duplicate

    src = tmp_path / "two.onnx"
    onnx.save_model(two_cores(64, 8), src)  # scores 64² and 8²: the small core 1/64
    model = load(src)
    _, est = _predict(model, PassContext())
    seen: set[tuple] = set()
    _, st = apply(model, _shapes(est), "queries", 4, 2, queries=True, seen=seen)
    assert st.pieces == [4]  # the small core is under 1/QUERY_SHARE: whole
    # scaled: ceil(4 × 1/64) = 1 piece for the small core, so the same rewrite
    with pytest.raises(Duplicate):
        apply(load(src), _shapes(est), "queries", 4, 2, queries=True, seen=seen, scaled=True)


def _summary(r: object) -> tuple:
    """A query region by names: its nodes, externals with their axes, outputs, work."""
    return (
        [n.name for n in r.nodes],  # type: ignore[attr-defined]
        sorted((v.name, r.axes[v]) for v in r.externals),  # type: ignore[attr-defined]
        [v.name for v in r.outputs],  # type: ignore[attr-defined]
        r.work,  # type: ignore[attr-defined]
    )


@pytest.mark.parametrize("form", ["4d", "relpos"])
def test_a_clone_grows_only_the_entry_that_won_and_gets_the_same_region(
    tmp_path: Path, form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``query_memo``: the search over a core's entries runs once per graph structure; a
    clone (each candidate's trial) grows only the winning entry, to the same region. A graph
    whose constant differs (another scale) is searched afresh."""
    from memshrink.transforms.chunking import query_memo

    query_memo.clear()
    _, model, shapes = _loaded(tmp_path, form=form, mask="none")
    calls = [0]
    real = weightless.discover

    def counting(*a: object, **k: object) -> object:
        calls[0] += 1
        return real(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(weightless, "discover", counting)
    (first,) = weightless.query_regions(model.graph, shapes, 18, "q")
    searched = calls[0]
    assert searched > 1  # Q's MatMul operand and its ancestors along their axes
    clone = model.clone()
    (again,) = weightless.query_regions(clone.graph, shapes, 18, "q")
    assert calls[0] == searched + 1
    assert _summary(again) == _summary(first) and again.nodes[0] is not first.nodes[0]
    scale = clone.graph.initializers["scale"]
    scale.const_value = ir.tensor(np.asarray(0.5, np.float32), name="scale")
    weightless.query_regions(clone.graph, shapes, 18, "q")
    assert calls[0] == 2 * searched + 1
