"""chunk: regions entered at interior tensors (``chunking.cone``) over an FPN-like top-down path,
and the nearest ``Resize`` rule (``chunking.resize``).

Tolerance: each chunk runs the same kernels over the same input rows as the original, on fewer
rows (a conv's blocking may differ), so outputs are compared at atol 1e-5, rtol 1e-5 on ONNX
Runtime CPU and on OpenVINO CPU (inference precision f32) — inside the pass's stated atol 1e-4, rtol 1e-4.
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
from memshrink.transforms.chunk import ChunkPass, _predict, _shapes, apply
from memshrink.transforms.chunking import cone
from memshrink.transforms.chunking.rules import NodeFacts, Refuse, forward, need
from memshrink.writer import save_model

RNG = np.random.default_rng(0)


def _w(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.2).astype(np.float32), name)


def fpn_like(
    h: int = 48,
    w: int = 32,
    s: int = 2,
    c: int = 8,
    ctm: str = "asymmetric",
    nearest: str = "floor",
    sizes: bool = False,
) -> onnx.ModelProto:
    """A backbone of three levels (3×3 convs, ``s``×``s`` max pools between them), 1×1
    laterals, a top-down path (nearest ×``s`` Resize of the coarser merge + the lateral) and a
    3×3 output conv per level: outputs p2 (finest) .. p4, as a detector's FPN."""
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["c2"], ["q3"], kernel_shape=[s, s], strides=[s, s]),
        helper.make_node("Conv", ["q3", "w1"], ["c3"], pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["c3"], ["q4"], kernel_shape=[s, s], strides=[s, s]),
        helper.make_node("Conv", ["q4", "w2"], ["c4"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c4", "l4"], ["m4"]),
    ]
    inits = [
        _w("w0", c, 3, 3, 3),
        _w("w1", c, c, 3, 3),
        _w("w2", c, c, 3, 3),
        _w("l4", c, c, 1, 1),
        numpy_helper.from_array(np.array([1, 1, s, s], dtype=np.float32), "scales"),
    ]
    outs = []
    for lvl, fine, coarse, ext in ((3, "c3", "m4", h // s), (2, "c2", "m3", h)):
        resize_in = [coarse, "", "scales"]
        if sizes:
            name = f"sizes{lvl}"
            inits.append(
                numpy_helper.from_array(
                    np.array([1, c, ext, w // s ** (lvl - 2)], dtype=np.int64), name
                )
            )
            resize_in = [coarse, "", "", name]
        nodes += [
            helper.make_node("Conv", [fine, f"l{lvl}"], [f"lat{lvl}"]),
            helper.make_node(
                "Resize",
                resize_in,
                [f"up{lvl}"],
                mode="nearest",
                coordinate_transformation_mode=ctm,
                nearest_mode=nearest,
            ),
            helper.make_node("Add", [f"lat{lvl}", f"up{lvl}"], [f"m{lvl}"]),
        ]
        inits.append(_w(f"l{lvl}", c, c, 1, 1))
    for lvl in (2, 3, 4):
        nodes.append(
            helper.make_node("Conv", [f"m{lvl}", f"o{lvl}"], [f"p{lvl}"], pads=[1, 1, 1, 1])
        )
        inits.append(_w(f"o{lvl}", c, c, 3, 3))
        outs.append(helper.make_tensor_value_info(f"p{lvl}", TensorProto.FLOAT, None))
    g = helper.make_graph(
        nodes,
        "fpn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, h, w])],
        outs,
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return onnx.shape_inference.infer_shapes(m)


def _feeds(h: int, w: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((1, 3, h, w)).astype(np.float32)}


def _run_ov(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import openvino as ov

    core = ov.Core()
    # f32: where the CPU has bf16 units OpenVINO may pick bf16 per layer, and a chunked layer
    # (other shapes) is then rounded differently from the original's
    compiled = core.compile_model(
        core.read_model(str(path)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
    )
    res = compiled(feeds)
    return [np.asarray(res[o]) for o in compiled.outputs]


def test_the_cone_of_p2_is_the_top_down_merge(tmp_path: Path) -> None:
    src = tmp_path / "fpn.onnx"
    onnx.save_model(fpn_like(), src)
    model = load(src)
    _, est = _predict(model, PassContext())
    shapes = _shapes(est)
    names = [v.name for v in cone.ends(model.graph, shapes, 2, min_fraction=0.0)]
    assert "p2" in names and "m3" in names
    assert "c2" not in names  # its cone reads the graph input only: the spatial mode's region
    p2 = next(v for v in model.graph.outputs if v.name == "p2")
    r = cone.region(model.graph, shapes, 18, p2, 2, "t")
    assert [n.op_type for n in r.nodes] == ["Conv", "Resize", "Add", "Conv"]
    assert {v.name for v in r.externals} == {"c2", "m3"}
    assert [v.name for v in r.outputs] == ["p2"]


@pytest.mark.parametrize(
    ("s", "ctm", "nearest", "sizes", "count", "stagger"),
    [
        (2, "asymmetric", "floor", False, 4, 0),
        (2, "asymmetric", "floor", False, 3, 2),  # bands not aligned to the scale: cropped
        (2, "half_pixel", "round_prefer_floor", True, 2, 0),
        (2, "pytorch_half_pixel", "round_prefer_ceil", False, 4, 1),
        (3, "asymmetric", "floor", False, 5, 0),
        (3, "half_pixel", "round_prefer_floor", True, 4, 1),
    ],
)
def test_cone_bands_match_on_ort_and_openvino(
    tmp_path: Path, s: int, ctm: str, nearest: str, sizes: bool, count: int, stagger: int
) -> None:
    h, w = (48, 32) if s == 2 else (54, 27)
    src = tmp_path / "fpn.onnx"
    onnx.save_model(fpn_like(h, w, s, ctm=ctm, nearest=nearest, sizes=sizes), src)
    model = load(src)
    _, est = _predict(model, PassContext())
    region, st = apply(model, _shapes(est), "spatial", count, 2, stagger, cone="p2")
    check_model(model)
    assert st.nodes_before == 4 and st.chunks == count and st.outputs == ["p2"]
    out = tmp_path / "o.onnx"
    save_model(model, out)
    m = onnx.load(out)
    assert sum(n.op_type == "Resize" for n in m.graph.node) == count + 1  # p3's merge: whole
    feeds = _feeds(h, w)
    for run in (run_ort, _run_ov):
        for a, b in zip(run(out, feeds), run(src, feeds), strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)


def _resize(in_shape: tuple[int, ...], out_shape: tuple[int, ...], **attrs: object) -> NodeFacts:
    import onnx_ir as ir

    scales = ir.Value(
        name="scales",
        const_value=ir.tensor(
            np.array([o / i for i, o in zip(in_shape, out_shape, strict=True)], dtype=np.float32)
        ),
    )
    node = ir.node("Resize", [ir.Value(name="x"), None, scales], attributes=attrs)
    return NodeFacts(node, [in_shape, None, (4,)], [out_shape], 18)


@pytest.mark.parametrize(
    "attrs",
    [
        {"mode": "linear"},  # blends two rows: would need a halo
        {"mode": "cubic"},
        {"mode": "nearest", "coordinate_transformation_mode": "align_corners"},
        {
            "mode": "nearest",
            "coordinate_transformation_mode": "asymmetric",
            "nearest_mode": "round_prefer_floor",
        },
        {
            "mode": "nearest",
            "coordinate_transformation_mode": "half_pixel",
            "nearest_mode": "floor",
        },
        {"mode": "nearest", "coordinate_transformation_mode": "tf_crop_and_resize"},
        {
            "mode": "nearest",
            "coordinate_transformation_mode": "asymmetric",
            "nearest_mode": "floor",
            "antialias": 1,
        },
    ],
)
def test_resize_modes_not_proven_are_refused(attrs: dict[str, object]) -> None:
    f = _resize((1, 4, 8, 8), (1, 4, 16, 16), **attrs)
    with pytest.raises(Refuse):
        forward(f, [2, None, None])


def test_resize_non_integer_scale_refused_and_need_rows() -> None:
    ok = {
        "mode": "nearest",
        "coordinate_transformation_mode": "asymmetric",
        "nearest_mode": "floor",
    }
    with pytest.raises(Refuse):
        forward(_resize((1, 4, 8, 8), (1, 4, 12, 12), **ok), [2, None, None])
    f = _resize((1, 4, 8, 8), (1, 4, 24, 24), **ok)
    assert forward(f, [2, None, None]) == ([2], {})
    # output rows 4..10 read input rows floor(4/3) = 1 .. ceil(10/3) = 4
    assert need(f, [2, None, None], 2, (4, 10)) == [(1, 4), None, None]


def test_pass_chunks_the_top_down_merge_under_the_estimator(tmp_path: Path) -> None:
    """At a resolution where the stride-1 merge is the activation peak, the search picks the
    cone of p2 (bands over C2 and the coarser merge), and it lowers the prediction."""
    h, w = 384, 256
    src = tmp_path / "fpn.onnx"
    onnx.save_model(fpn_like(h, w, c=16), src)
    model = load(src)
    res = ChunkPass(modes="spatial").run(model, PassContext())
    st = res.stats
    assert any(c.get("cone") == "p2" and "predicted_activations" in c for c in st["candidates"])
    assert res.modified and st.get("cone") == "p2", st.get("reason")
    assert st["predicted_activations_after"] < st["predicted_activations_before"] * 0.95
    out = tmp_path / "o.onnx"
    save_model(model, out)
    feeds = _feeds(h, w)
    for a, b in zip(run_ort(out, feeds), run_ort(src, feeds), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)
