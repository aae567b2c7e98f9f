"""An FPN-like graph built in code: a small backbone, 1×1 laterals, a nearest-Resize top-down
path and 3×3 output convs (``fpn-800``'s structure in miniature), for the chunk and estimator
tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

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
