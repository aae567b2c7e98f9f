"""chunk: overlapping bands (``chunking.overlap``) on a small high-resolution ResNet-like CNN.

Tolerance: every exact output row is computed by the same kernels over the same input rows as
the original, but on fewer rows (ORT's conv blocking may differ), so outputs are compared at
atol 1e-5, rtol 1e-5 — inside the pass's stated atol 1e-4, rtol 1e-4.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from fixtures_onnx import run_ort
from onnx import TensorProto, helper, numpy_helper

from memshrink.checks import check_model
from memshrink.manager import PassContext
from memshrink.model import load
from memshrink.transforms.chunk import ChunkPass, _predict, _shapes, apply, entries_for
from memshrink.transforms.chunking.overlap import ends, overlap_plans
from memshrink.transforms.chunking.region import cuts, discover_best
from memshrink.transforms.chunking.rules import Refuse
from memshrink.writer import save_model

RNG = np.random.default_rng(0)


def _w(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.2).astype(np.float32), name)


def _block(x: str, name: str, cin: int, mid: int, cout: int, stride: int) -> tuple[list, list]:
    """A ResNet bottleneck: 1x1 → 3x3 (stride) → 1x1, plus the skip (1x1 projection when the
    shape changes), Add, Relu."""
    n = [
        helper.make_node("Conv", [x, f"{name}w1"], [f"{name}c1"]),
        helper.make_node("Relu", [f"{name}c1"], [f"{name}r1"]),
        helper.make_node("Conv", [f"{name}r1", f"{name}w2"], [f"{name}c2"], pads=[1, 1, 1, 1],
                         strides=[stride, stride]),
        helper.make_node("Relu", [f"{name}c2"], [f"{name}r2"]),
        helper.make_node("Conv", [f"{name}r2", f"{name}w3"], [f"{name}c3"]),
    ]  # fmt: skip
    inits = [_w(f"{name}w1", mid, cin, 1, 1), _w(f"{name}w2", mid, mid, 3, 3),
             _w(f"{name}w3", cout, mid, 1, 1)]  # fmt: skip
    skip = x
    if stride != 1 or cin != cout:
        n.append(helper.make_node("Conv", [x, f"{name}wd"], [f"{name}d"], strides=[stride, stride]))
        inits.append(_w(f"{name}wd", cout, cin, 1, 1))
        skip = f"{name}d"
    n += [helper.make_node("Add", [f"{name}c3", skip], [f"{name}a"]),
          helper.make_node("Relu", [f"{name}a"], [f"{name}out"])]  # fmt: skip
    return n, inits


def hires_resnet(h: int = 96, w: int = 64) -> onnx.ModelProto:
    """Stem (7x7/s2 conv, 3x3/s2 max pool), two stride-1 blocks, a stride-2 block, one more
    block, global pool and a classifier: ResNet-50's shape in miniature, batch 1."""
    nodes = [
        helper.make_node("Conv", ["x", "ws", "bs"], ["s"], pads=[3, 3, 3, 3], strides=[2, 2]),
        helper.make_node("Relu", ["s"], ["sr"]),
        helper.make_node("MaxPool", ["sr"], ["mp"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
    ]  # fmt: skip
    inits = [_w("ws", 8, 3, 7, 7), _w("bs", 8)]
    x = "mp"
    for name, cin, mid, cout, stride in [("a", 8, 4, 16, 1), ("b", 16, 4, 16, 1),
                                         ("c", 16, 8, 32, 2), ("d", 32, 8, 32, 1)]:  # fmt: skip
        n, i = _block(x, name, cin, mid, cout, stride)
        nodes += n
        inits += i
        x = f"{name}out"
    nodes += [
        helper.make_node("GlobalAveragePool", [x], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    inits += [_w("wf", 10, 32), _w("bf", 10)]
    g = helper.make_graph(
        nodes, "hires", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits,
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return onnx.shape_inference.infer_shapes(m)


def _src(tmp: Path, h: int = 96) -> Path:
    p = tmp / f"hires{h}.onnx"
    onnx.save_model(hires_resnet(h), p)
    return p


def _feeds(h: int = 96) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((1, 3, h, 64)).astype(np.float32)}


def _region(path: Path):  # noqa: ANN202
    model = load(path)
    _, est = _predict(model, PassContext())
    shapes = _shapes(est)
    entries = entries_for(model, shapes, "spatial", 2)
    return model, shapes, discover_best(model.graph, shapes, 18, entries, "t")


def test_cuts_are_block_boundaries_and_ends_follow_the_strides(tmp_path: Path) -> None:
    _, _, region = _region(_src(tmp_path))
    names = [v.name for v in cuts(region)]
    assert names[:3] == ["s", "sr", "mp"]
    assert {"aout", "bout", "cout", "dout"} <= set(names)
    assert "ac1" not in names and "cd" not in names  # mid-block values: the skip is read later
    # first and last boundary per stride, at most half the largest tensor (s: 8x48x32)
    assert [v.name for v in ends(region)] == ["mp", "bout", "cout", "dout"]


@pytest.mark.parametrize(
    ("h", "end", "count"),
    [(96, "mp", 2), (101, "bout", 3), (96, "cout", 4), (101, "cout", 2), (101, "dout", 3)],
)
def test_overlap_bands_match_and_slice_only_at_the_ends(
    tmp_path: Path, h: int, end: str, count: int
) -> None:
    src = _src(tmp_path, h)
    model = load(src)
    _, est = _predict(model, PassContext())
    region, st = apply(model, _shapes(est), "spatial", count, 2, end=end, overlap=True)
    check_model(model)
    out = tmp_path / f"o_{h}_{end}_{count}.onnx"
    save_model(model, out)
    feeds = _feeds(h)
    np.testing.assert_allclose(run_ort(out, feeds)[0], run_ort(src, feeds)[0], atol=1e-5, rtol=1e-5)
    m = onnx.load(out)
    slices = [n for n in m.graph.node if n.op_type == "Slice"]
    assert len(slices) <= 2 * count  # the input band and the output part of each chunk
    assert [v.name for v in region.outputs] == [f"{end}__unchunked"]
    assert st.shape_classes == count  # every chunk's length differs: no planner chaining
    assert st.extra_flops > 0


def test_interior_convs_keep_their_pads(tmp_path: Path) -> None:
    """Bands read no neighbour rows through slices: each copy keeps the original's pads on
    the top (rows map onto global rows) and reads zeros at an interior border."""
    model, shapes, region = _region(_src(tmp_path))
    from memshrink.transforms.chunking.region import cut

    r = cut(region, next(v for v in cuts(region) if v.name == "cout"))
    plans = overlap_plans(r, 3)
    starts = [p.value_range[r.externals[0]][0] for p in plans]
    assert starts[0] == 0 and all(s % 8 == 0 for s in starts)  # aligned to the stride 8
    lengths = [p.value_range[r.externals[0]][1] - s for p, s in zip(plans, starts, strict=True)]
    assert len(set(lengths)) == 3
    for p in plans:
        for node, nd in p.needs.items():
            if node.op_type == "Conv":
                c = p.clipped[node][0]
                assert c is not None and nd[0] is not None and c[0] - nd[0][0] >= 0


def test_overlap_refuses_transposed_convs() -> None:
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["e"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("ConvTranspose", ["e", "w2"], ["y"], strides=[2, 2]),
    ]
    g = helper.make_graph(
        nodes, "up", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 32, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 32, 8])],
        [_w("w1", 4, 2, 3, 3), _w("w2", 4, 2, 2, 2)],
    )  # fmt: skip
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    proto.ir_version = 9
    model = load(onnx.shape_inference.infer_shapes(proto))
    _, est = _predict(model, PassContext())
    shapes = _shapes(est)
    region = discover_best(model.graph, shapes, 18, entries_for(model, shapes, "spatial", 2), "u")
    with pytest.raises(Refuse):
        overlap_plans(region, 2)


def test_pass_lists_overlap_candidates(tmp_path: Path) -> None:
    model = load(_src(tmp_path))
    res = ChunkPass(modes="spatial", max_chunks=2).run(model, PassContext())
    cands = [c for c in res.stats["candidates"] if c.get("overlap")]
    assert {c["end"] for c in cands} == {"mp", "bout", "cout", "dout"}
    assert any("predicted_activations" in c for c in cands)


@pytest.mark.parametrize(("end", "reblocked"), [("cout", ["cout"]), ("bout", [])])
def test_concat_read_by_a_residual_add_is_reblocked(
    tmp_path: Path, end: str, reblocked: list[str]
) -> None:
    """A region output read by the next block's Add gets an identity depthwise 1x1 Conv after
    its Concat (``chunking.reblock``); one read by Convs only (a projection block) does not."""
    src = _src(tmp_path)
    model = load(src)
    _, est = _predict(model, PassContext())
    _, st = apply(model, _shapes(est), "spatial", 3, 2, end=end, overlap=True)
    assert st.reblocked == reblocked
    out = tmp_path / "o.onnx"
    save_model(model, out)
    m = onnx.load(out)
    dw = [n for n in m.graph.node if n.op_type == "Conv" and n.input[0].endswith("__chunked")]
    assert len(dw) == len(reblocked)
    for n in dw:
        w = numpy_helper.to_array(next(i for i in m.graph.initializer if i.name == n.input[1]))
        assert w.shape == (32, 1, 1, 1) and np.all(w == 1) and len(n.input) == 2
    feeds = _feeds()
    np.testing.assert_array_equal(run_ort(out, feeds)[0], run_ort(src, feeds)[0])


def dilated_net(h: int = 80, w: int = 48) -> onnx.ModelProto:
    """A DeepLab-like trunk: stem (3x3/s2), residual blocks whose 3x3 convs are dilated by 2
    and 3 (pads = dilation), an ASPP-like pair of parallel dilated convs (4, 6) concatenated
    along channels, and a 1x1 classifier: dilation widens the halo by the dilation."""
    nodes = [helper.make_node("Conv", ["x", "ws"], ["s"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["s"], ["sr"])]  # fmt: skip
    inits = [_w("ws", 16, 3, 3, 3)]
    x = "sr"
    for name, d in (("a", 2), ("b", 3)):
        nodes += [
            helper.make_node("Conv", [x, f"{name}w"], [f"{name}c"], pads=[d] * 4,
                             dilations=[d, d]),
            helper.make_node("Add", [f"{name}c", x], [f"{name}a"]),
            helper.make_node("Relu", [f"{name}a"], [f"{name}out"]),
        ]  # fmt: skip
        inits.append(_w(f"{name}w", 16, 16, 3, 3))
        x = f"{name}out"
    for d in (4, 6):
        nodes.append(helper.make_node("Conv", [x, f"p{d}w"], [f"p{d}"], pads=[d] * 4,
                                      dilations=[d, d]))  # fmt: skip
        inits.append(_w(f"p{d}w", 16, 16, 3, 3))
    nodes += [helper.make_node("Concat", ["p4", "p6"], ["cat"], axis=1),
              helper.make_node("Conv", ["cat", "wc"], ["y"])]  # fmt: skip
    inits.append(_w("wc", 5, 32, 1, 1))
    g = helper.make_graph(
        nodes, "dilated", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, h // 2, w // 2])], inits,
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return onnx.shape_inference.infer_shapes(m)


@pytest.mark.parametrize(("end", "count"), [("aout", 2), ("bout", 3), ("", 2), ("", 4)])
def test_dilated_convs_get_their_halo(tmp_path: Path, end: str, count: int) -> None:
    """Overlapping bands (ending at a block) and exact bands (the whole net) over dilated
    convs compute the original's outputs: each conv reaches (k - 1) * d rows."""
    src = tmp_path / "dilated.onnx"
    onnx.save_model(dilated_net(), src)
    model = load(src)
    _, est = _predict(model, PassContext())
    _, st = apply(model, _shapes(est), "spatial", count, 2, end=end, overlap=bool(end))
    check_model(model)
    out = tmp_path / "o.onnx"
    save_model(model, out)
    feeds = {"x": np.random.default_rng(2).standard_normal((1, 3, 80, 48)).astype(np.float32)}
    np.testing.assert_allclose(run_ort(out, feeds)[0], run_ort(src, feeds)[0], atol=1e-5, rtol=1e-5)
    assert st.extra_flops > 0


@pytest.mark.parametrize(("h", "inner"), [(96, ("mp", 2)), (101, ("cout", 2)), (96, ("cout", 3))])
def test_sub_bands_inside_bands_match(tmp_path: Path, h: int, inner: tuple[str, int]) -> None:
    """``chunking.nested``: each band's shallow layers split again into sub-bands (the band's
    edges are their real border) still give the original's outputs; the search finds the
    sub-band ends from the first band."""
    from memshrink.transforms.chunking.nested import band_end_names

    src = _src(tmp_path, h)
    model = load(src)
    _, est = _predict(model, PassContext())
    shapes = _shapes(est)
    probe = load(src)
    _, outer = apply(probe, shapes, "spatial", 2, 2, end="dout", overlap=True)
    assert inner[0] in band_end_names(probe.graph, outer, 2, 18)
    _, st = apply(model, shapes, "spatial", 2, 2, end="dout", overlap=True, inner=inner)
    check_model(model)
    assert st.extra_flops > outer.extra_flops and st.nodes_after > outer.nodes_after
    out = tmp_path / "o.onnx"
    save_model(model, out)
    feeds = _feeds(h)
    np.testing.assert_allclose(run_ort(out, feeds)[0], run_ort(src, feeds)[0], atol=1e-5, rtol=1e-5)


def test_pass_tries_sub_bands_when_asked(tmp_path: Path) -> None:
    model = load(_src(tmp_path))
    res = ChunkPass(modes="spatial", max_chunks=2, nested=True).run(model, PassContext())
    assert any(c.get("inner") for c in res.stats["candidates"])
