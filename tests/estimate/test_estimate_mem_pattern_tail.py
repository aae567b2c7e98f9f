"""ORT's memory-pattern planner counts the free tail below its high-water mark as a gap.

Known answers measured on ORT 1.32 (docs/estimate.md, "The memory-pattern block's tail gap"):
deeplab-800's run 1 traced with the arena off under an ``LD_PRELOAD`` malloc logger (every
64-byte-aligned allocation and free, the graph output left out as ORT leaves it out), and the
block ORT allocated in run 2 of the same process.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest

from memshrink.estimate.graph import build_view
from memshrink.estimate.lifetimes import Buffer
from memshrink.estimate.ort_optimized import optimize
from memshrink.estimate.ort_pattern import hash_numbered, orders, pattern_band
from memshrink.estimate.planners import best_fit, check_no_overlap
from memshrink.estimate.schedule import ort_default

# Run 1 of deeplab-800 up to the ASPP head: +size allocates the next buffer (numbered from 1),
# -k frees buffer k. The four processes differ only where ORT's hash-numbered ReorderOutput
# nodes put the ASPP branches: the three frees after ``cat`` and the one after ``conv2d_60``.
_HEAD = [40960000, 10240000, -1, 40960000, 10240000, -4, -2, 20480000, 20480000, -3, 5120000]
_HEAD += [-6, 5120000, -7, -8, 10240000, 10240000, -5, 2560000, -10, 2560000, 20480000, 5120000]
_HEAD += [-9, 5120000, -14, -15, 2560000, 2560000, 2560000, 20480000, -13, 8192, -19, 8192, -20]
_HEAD += [1024, -21, 1024, -22, -23, 12800000]


def _trace(after_cat: tuple[int, int, int], after_head: int) -> list[int]:
    return [*_HEAD, *(-k for k in after_cat), 12800000, -24, -25, -12, 320000, -after_head]


def _buffers(trace: list[int]) -> list[Buffer]:
    """One step per event: a buffer starts at its allocation and ends just before its free;
    the trace ends with the Upsample's 81.92 MB output, then conv2d_60 and it are freed."""
    trace = [*trace, 81920000, -26, -27]
    bufs: list[Buffer] = []
    for t, x in enumerate(trace):
        if x > 0:
            bufs.append(Buffer(len(bufs) + 1, x, t, len(trace)))
        else:
            bufs[-x - 1].end = t - 1
    return bufs


@pytest.mark.parametrize(
    ("after_cat", "after_head", "ort_block"),
    [
        ((17, 16, 11), 18, 82_240_000),
        ((16, 18, 17), 11, 84_800_000),
        ((17, 18, 11), 16, 159_040_000),
        ((16, 18, 11), 17, 161_600_000),
    ],
)
def test_best_fit_replays_ort_pattern_block_of_traced_processes(after_cat, after_head, ort_block):
    bufs = _buffers(_trace(after_cat, after_head))
    peak, placements = best_fit(bufs, align=64)
    assert peak == ort_block  # exact (atol = 0): the size ORT requested in run 2
    assert check_no_overlap(placements)


def test_tail_gap_beats_a_looser_inner_gap():
    """Live [0,10) and [50,60), high-water 96: a 35-byte tensor wastes 5 in the inner gap and 1
    in the tail [60,96), so ORT puts it at 60 (the pre-tail rule put it at 10)."""
    bufs = [
        Buffer(0, 10, 0, 9),  # stays live
        Buffer(1, 40, 0, 1),  # frees [10,50)
        Buffer(2, 10, 0, 9),  # stays live at 50
        Buffer(3, 36, 0, 1),  # raises the high-water mark to 96, then frees
        Buffer(4, 35, 2, 9),
    ]
    peak, placements = best_fit(bufs, align=1)
    assert {p.buffer.id: p.offset for p in placements}[4] == 60
    assert peak == 96


def _aspp_head(hw: int = 8, c: int = 32, b: int = 16) -> onnx.ModelProto:
    """deeplab's ASPP head in miniature: four sibling Conv+Relu branches and a pooled one
    (ReduceMean, Expand: planar) into one Concat, so ORT's NCHWc transformer ends each branch
    in a final ReorderOutput."""
    rng = np.random.default_rng(0)

    def w(name: str, *shape: int) -> onnx.TensorProto:
        return onh.from_array((rng.standard_normal(shape) * 0.05).astype(np.float32), name)

    inits = [w("W0", c, 16, 3, 3), w("Wp", b, c, 1, 1), w("Wc", b, 5 * b, 1, 1)]
    inits.append(onh.from_array(np.array([1, b, hw, hw], np.int64), "shp"))
    nodes = [
        oh.make_node("Conv", ["x", "W0"], ["f"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["f"], ["fr"]),
    ]
    for i in range(4):
        inits.append(w(f"Wb{i}", b, c, 1, 1))
        nodes += [
            oh.make_node("Conv", ["fr", f"Wb{i}"], [f"b{i}"]),
            oh.make_node("Relu", [f"b{i}"], [f"br{i}"]),
        ]
    nodes += [
        oh.make_node("ReduceMean", ["fr"], ["gp"], axes=[2, 3], keepdims=1),
        oh.make_node("Conv", ["gp", "Wp"], ["pc"]),
        oh.make_node("Relu", ["pc"], ["pr"]),
        oh.make_node("Expand", ["pr", "shp"], ["pe"]),
        oh.make_node("Concat", ["br0", "br1", "br2", "br3", "pe"], ["cat"], axis=1),
        oh.make_node("Conv", ["cat", "Wc"], ["y"]),
    ]
    x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 16, hw, hw])
    y = oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, b, hw, hw])
    g = oh.make_graph(nodes, "aspp", [x], [y], inits)
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def test_hash_numbered_reorders_give_every_branch_order():
    """Permuting the final ReorderOutputs' indices runs the four branches in all 24 orders
    (ORT's profiler showed 14 orders in 18 deeplab-800 processes); the unpermuted numbering is
    the estimator's own DEFAULT order."""
    g = optimize(build_view(_aspp_head()).graph).graph
    assert len(hash_numbered(g)) >= 5
    os_ = orders(g)
    assert os_[0] == ort_default(g)
    branch_orders = set()
    for o in os_:
        assert sorted(o) == list(range(len(g.nodes)))
        assert all(o.index(g.tensors[i].producer) < o.index(k) for k in o for i in
                   g.nodes[k].inputs if i and g.tensors[i].producer is not None)  # fmt: skip
        branch_orders.add(
            tuple(g.nodes[k].outputs[0] for k in o if g.nodes[k].outputs[0] in BRANCHES)
        )
    assert len(branch_orders) == 24


BRANCHES = {"br0", "br1", "br2", "br3"}


def test_pattern_band_reports_each_order_block():
    g = optimize(build_view(_aspp_head()).graph).graph

    def block_of(o: list[int]) -> int:  # stand-in planner: 2 when br3 runs first, else 1
        first = next(g.nodes[k].outputs[0] for k in o if g.nodes[k].outputs[0] in BRANCHES)
        return 2 if first == "br3" else 1

    band = pattern_band(g, block_of)
    assert band is not None
    assert (band.low, band.high) == (1, 2)
    assert band.share_at_least(2) == pytest.approx(0.25, abs=1e-9)
