"""glibc's main arena replayed (``estimate.glibc_heap``): the rules of ``malloc.c`` that decide
how much of ORT CPU's freed weight copies stays resident, on hand-made block sequences."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from memshrink.estimate.glibc_heap import (
    PAGE,
    GlibcHeap,
    replay,
    request2size,
    resident_after_creation,
)
from memshrink.estimate.graph import build_view
from memshrink.estimate.ort_heap import CreationBlocks
from memshrink.estimate.ort_weights import conv_weights

MiB = 1 << 20
N = 9 * MiB  # a 512 x 512 x 3 x 3 filter


def test_freed_mmapped_block_raises_threshold_to_its_page_rounded_size():
    h = GlibcHeap()
    a = h.alloc(N)
    assert a in h.mmapped  # above the 128 KiB starting threshold
    h.free(a)
    assert h.threshold == (request2size(N) + 8 + PAGE - 1) // PAGE * PAGE
    assert h.trim_threshold == 2 * h.threshold
    b = h.alloc(N)  # the same request now lies below the threshold: served by the heap
    assert b not in h.mmapped and h.top == request2size(N)


def test_aligned_blocks_leapfrog_and_leave_holes():
    """A, V, S, K per filter (A and K posix_memalign'd): the holes A, V, S leave cannot take
    the next A (96 bytes more) where its tcache'd spare pins them, so the heap keeps growing."""
    pinned, merged = GlibcHeap(threshold=32 * MiB), GlibcHeap(threshold=32 * MiB)
    for h, pin in ((pinned, True), (merged, False)):
        for _ in range(4):
            a = h.alloc(N, aligned=True, pin=pin)
            v, s = h.alloc(N), h.alloc(N)
            h.alloc(N, aligned=True, pin=pin)  # K, kept
            for x in (s, v, a):
                h.free(x)
    assert merged.resident <= 7 * N + 4096  # kept 4 N + one reused 3 N hole
    assert pinned.resident >= 8 * N  # fragmented: at least one more hole
    assert pinned.holes >= 4 * N


def test_top_is_trimmed_only_when_the_freed_block_reaches_it():
    h = GlibcHeap(threshold=32 * MiB, trim_threshold=2 * MiB)
    a = h.alloc(4 * MiB)
    b = h.alloc(4 * MiB)
    h.free(a)  # below a live block: a resident hole
    assert h.holes == request2size(4 * MiB) and h.brk >= 8 * MiB
    h.free(b)  # merges with the hole into the top, above the trim threshold: returned
    assert h.top == 0 and h.brk <= 128 * 1024 + PAGE and h.resident == 0


def test_rotations_average_pinned_and_unpinned_aligned_blocks():
    b = CreationBlocks()
    for i in range(4):
        b.alloc(f"A:{i}", N, aligned=True)
        b.alloc(f"V:{i}", N)
        b.alloc(f"S:{i}", N)
        b.alloc(f"K:{i}", N, aligned=True)
        b.free(f"S:{i}", f"V:{i}", f"A:{i}")
    runs = [replay(b, r).resident for r in range(4)]
    resident, peak = resident_after_creation(b)
    assert min(runs) <= resident <= max(runs) and resident == sum(runs) // 4
    assert peak >= resident


def test_conv_bn_then_mul_is_fused_twice():
    """Caffe2 exports (DenseNet-121, Inception v2) write BN's scale as a Mul by a constant after
    it: ConvBNFusion and ConvMulFusion each rewrite the weight (two passes, traced)."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
        helper.make_node("Mul", ["n", "k"], ["y"]),
    ]
    inits = [helper.make_tensor("w", f, [16, 16, 1, 1], [0.1] * 256)]
    inits += [helper.make_tensor(n, f, [16], [1.0] * 16) for n in "sbmv"]
    inits.append(helper.make_tensor("k", f, [1, 16, 1, 1], [2.0] * 16))
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", f, [1, 16, 8, 8])],
        [helper.make_tensor_value_info("y", f, [1, 16, 8, 8])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    (cw,) = conv_weights(build_view(m).graph, 8)
    assert cw.rounds == 2 and cw.fused
    onnx.checker.check_model(m)
