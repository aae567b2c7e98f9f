"""External weights' glibc coin as a band (``details.glibc_band``): the four replayed address
rotations are heaps real processes have (RetinaNet ``all``: 9 of 14 processes at 108-114 MiB,
5 at 128-133; docs/estimate.md), so the estimate reports their extremes beside the mean."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate.api import estimate
from memshrink.estimate.backends import CALIBRATION
from memshrink.estimate.glibc_heap import ROTATIONS, replay
from memshrink.estimate.graph import build_view
from memshrink.estimate.ort_weights import nchwc_block_size, ort_cpu_weights
from memshrink.estimate.weights import split_weights

MiB = 1 << 20
FILTER = 256 * 256 * 3 * 3 * 4  # 2.25 MiB, the RetinaNet head's 3x3 filters


def _convs(n: int, path: str) -> str:
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(n):
        w = rng.standard_normal((256, 256, 3, 3)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"W{i}"))
        nodes.append(helper.make_node("Conv", [x, f"W{i}"], [f"c{i}"], pads=[1] * 4))
        x = f"c{i}"
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256, 4, 4])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path, save_as_external_data=True, location="w.data", size_threshold=0)
    return path


def test_external_band_spans_the_rotations_and_holds_the_mean(tmp_path):
    path = _convs(8, str(tmp_path / "m.onnx"))
    pred = estimate(path).prediction
    band = pred.details["glibc_band"]
    for st in pred.stages:
        lo, hi = band[st.name]
        assert lo <= st.peak <= hi, (st.name, lo / MiB, st.peak / MiB, hi / MiB)
    if nchwc_block_size() <= 1:
        return  # no conversion copies: nothing to leapfrog
    # the band's width is the rotations' spread of retained heap (same replay, read directly)
    view = build_view(path)
    w = ort_cpu_weights(
        view.graph, split_weights(view.graph), embedded=False, calibration=CALIBRATION
    )
    resident = [replay(w.blocks, r).resident for r in range(ROTATIONS)]
    lo, hi = band["steady_state"]
    assert abs((hi - lo) - (max(resident) - min(resident))) <= 4096  # atol one page
    # the coin is whole filters: at least one 2.25 MiB filter between the extremes
    assert hi - lo >= FILTER - 4096
    assert any("address coin" in a for a in pred.assumptions)


def test_no_conversions_no_band_width(tmp_path):
    """MatMul weights stay mapped and packed once: every rotation leaves the same heap."""
    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "W")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path, save_as_external_data=True, location="w.data", size_threshold=0)
    pred = estimate(path).prediction
    for lo, hi in pred.details["glibc_band"].values():
        assert hi - lo == 0  # atol 0: one heap
    assert not any("address coin" in a for a in pred.assumptions)
