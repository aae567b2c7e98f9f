"""The ModelProto's raw-data strings in the glibc replay of an embedded model's session
creation (``ort_weights.creation_blocks``, ``glibc_heap.verifier_threshold``): which strings the
heap serves, and why a freed string's hole never takes its own session copy."""

from __future__ import annotations

from fixtures_onnx import weight_chain

from memshrink.estimate.glibc_heap import replay, request2size, verifier_threshold
from memshrink.estimate.graph import build_view
from memshrink.estimate.ort_weights import PROTO_FIELDS, creation_blocks
from memshrink.estimate.weights import split_weights

KiB = 1024


def test_verifier_threshold_follows_the_feeds():
    """The verifier's child starts at 212 KiB (its imports); numpy reads an .npz feed in
    chunks of at most 256 KiB, each a bytes object that is mmapped and freed (traced: 260 KiB
    after a 602 KB image)."""
    assert verifier_threshold([]) == 212 * KiB
    assert verifier_threshold([128 * 8]) == 212 * KiB  # BERT's ids
    assert verifier_threshold([3 * 224 * 224 * 4]) == 260 * KiB  # 266240: the traced value
    # a 240 KiB feed is read whole: ALIGN_UP(request2size(245760 + 33) + 8, 4096)
    assert verifier_threshold([240 * KiB]) == 244 * KiB
    assert verifier_threshold([100 * KiB]) == 212 * KiB  # below the threshold: heap-served


def test_a_freed_string_hole_never_takes_its_own_copy():
    """Four embedded 100,000-byte Add weights (kept, never rewritten): each string is followed
    by its tensor's small fields, alive with the ModelProto, so the copies (96 bytes more
    each, posix_memalign) fit no string hole and all four extend the heap top. Without the
    fields the second and third freed strings would merge and take the later copies."""
    m = weight_chain("Add", 4, (25_000,), [25_000], [25_000])
    g = build_view(m).graph
    b = creation_blocks(g, split_weights(g), [], embedded=True)
    assert b.threshold == 212 * KiB  # a 100 KB input: heap-served strings
    heap = replay(b, spares="consolidated")
    string = request2size(100_001)
    fields = request2size(PROTO_FIELDS)
    copy = request2size(100_000 + 96)
    assert (string, fields, copy) == (100_016, 64, 100_112)
    assert heap.top == 4 * (string + fields) + 4 * copy
    assert heap.holes == 4 * string  # the strings' holes, apart
    b.events = [e for e in b.events if not e[1].startswith("fields:")]
    assert replay(b, spares="consolidated").top == 4 * string + 2 * copy  # merged: 2 reuse
