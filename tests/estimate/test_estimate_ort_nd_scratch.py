"""ORT CPU: GatherND / ScatterND malloc one uint64 offset per slice (``ort_scratch``).

Measured on a [4096, 1024] float input (fresh processes; docs/estimate.md, "Session 13"):
GatherND of 262,144 scalars run 1 / steady 12.9 / 14.9 MiB over an empty process, predicted
11.9 / 11.9 without the offsets, 13.9 / 13.9 with them; ScatterND of 65,536 scalars 27.0 /
27.5, predicted 26.9 / 26.9 without, 27.4 / 27.4 with.
"""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.ort_scratch import cpu_heap_scratch

N, D = 4096, 1024
MiB = 1 << 20


def _model(op: str, slices: int, depth: int) -> onnx.ModelProto:
    vi = helper.make_tensor_value_info
    ins = [vi("x", T.FLOAT, [N, D]), vi("i", T.INT64, [slices, depth])]
    args = ["x", "i"]
    if op == "ScatterND":
        ins.append(vi("u", T.FLOAT, [slices] + ([D] if depth == 1 else [])))
        args.append("u")
    g = helper.make_graph(
        [
            helper.make_node(op, args, ["y"]),
            helper.make_node("ReduceSum", ["y"], ["s"], keepdims=0),
        ],
        "g",
        ins,
        [vi("s", T.FLOAT, [])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


@pytest.mark.parametrize(
    ("op", "slices", "depth", "offsets"),
    [
        ("GatherND", 262144, 2, 2 * MiB),
        ("GatherND", 2048, 1, 16 * 1024),
        ("ScatterND", 65536, 2, 512 * 1024),
    ],
)
def test_offsets_are_one_uint64_per_slice(op, slices, depth, offsets):
    g = build_view(_model(op, slices, depth)).graph
    node = next(n for n in g.nodes if n.op_type == op)
    assert cpu_heap_scratch(g, node) == [offsets]


def test_gathernd_offsets_add_to_run_1(tmp_path):
    """The 2 MiB of offsets sit on top of the arena's pages at GatherND's step: run 1 above
    the 1 MiB output plus the fixed per-run cost by about that much (measured 12.9 MiB)."""
    path = str(tmp_path / "g.onnx")
    onnx.save(_model("GatherND", 262144, 2), path)
    st = {s.name: s for s in estimate(path, backend="ort").prediction.stages}
    run = st["run_1"]
    assert run.activations >= 2 * MiB + 1 * MiB - 64 * 1024  # offsets + output, atol 64 KiB


def test_kernel_malloc_below_the_threshold_reuses_a_freed_weight_hole():
    """Embedded weights leave freed copies in the heap and lift the mmap threshold: a kernel's
    0.5 MiB malloc is served from such a hole (no RSS), a larger one or one at or above the
    threshold is not (tv-retinanet's 0.35 MiB of GatherND offsets: run 1 unchanged from main,
    +10.0 % measured)."""
    from memshrink.estimate.backends import _heap_hole_fits
    from memshrink.estimate.glibc_heap import GlibcHeap

    heap = GlibcHeap(4 * MiB, 8 * MiB)
    a = heap.alloc(1 * MiB)
    heap.alloc(64 * 1024)  # keeps a's chunk off the top
    heap.free(a)
    assert _heap_hole_fits(heap, MiB // 2)
    assert not _heap_hole_fits(heap, 2 * MiB)
    low = GlibcHeap(256 * 1024, 256 * 1024)
    b = low.alloc(1 * MiB)  # mmapped: no hole
    low.free(b)
    assert not _heap_hole_fits(low, MiB // 2)
