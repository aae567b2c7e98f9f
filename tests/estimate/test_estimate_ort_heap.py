"""Arena regions that fit a hole session creation left add no RSS (``glibc_heap.hole_shares``
over ``ort_heap.CreationBlocks``). Rules checked on the replay, then against ONNX Runtime in
fresh processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate.api import estimate
from memshrink.estimate.glibc_heap import hole_shares
from memshrink.estimate.ort_heap import CreationBlocks
from memshrink.estimate.ort_weights import nchwc_block_size

MiB = 1 << 20


def test_blocks_freed_together_make_one_hole():
    b = CreationBlocks()
    for i in range(4):
        b.alloc(f"a{i}", 9 * MiB)  # above the threshold at first: mmapped, raises it
        b.free(f"a{i}")
    for i in range(4):
        b.alloc(f"s{i}", 8 * MiB)  # now below the raised threshold: heap top, adjacent
    b.alloc("kept", MiB)
    b.free(*(f"s{i}" for i in range(4)))
    # other freed blocks (conversion scratch, not aligned: no pinned spare) coalesce: one
    # 32 MiB hole, in every rotation
    assert hole_shares(b, [24 * MiB, 24 * MiB]) == [1.0, 0.0]


def test_pinned_holes_do_not_take_an_equal_region():
    """Two adjacent 4 MiB aligned weight copies, freed: unpinned they merge into an 8 MiB hole
    (``regions_in_holes``: a 4 MiB arena region fits). A freed aligned block whose trailing
    spare sits in the tcache leaves a hole 88 bytes short of an equal region
    (``posix_memalign`` asks 96 more) and does not merge forward: only the rotations where w0
    is unpinned (the two merge) or w1 is (its whole chunk is free) serve the region, 2 of 4.
    resnet50-960 nested: the old unpinned replay predicted run 1 25.0 MiB, measured 39.8-40.4
    in the processes whose 4 MiB holes were pinned (docs/estimate.md)."""
    b = CreationBlocks()
    b.alloc("m", 9 * MiB)  # mmapped, raises the threshold: the next blocks are heap-served
    b.free("m")
    b.alloc("w0", 4 * MiB, aligned=True)  # weight copies (ORT's allocator)
    b.alloc("w1", 4 * MiB, aligned=True)
    b.alloc("kept", MiB)  # a live block above them: the holes stay below the top
    b.free("w0", "w1")
    assert hole_shares(b, [4 * MiB]) == [0.5]  # exact shares (of 4 replays)
    assert hole_shares(b, [3 * MiB, 3 * MiB]) == [1.0, 1.0]  # smaller regions fit pinned holes


def _convs(n: int, c: int, hw: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(n):
        w = rng.standard_normal((c, c, 3, 3)).astype(np.float32)
        inits += [
            numpy_helper.from_array(w, f"W{i}"),
            numpy_helper.from_array(w[:, 0, 0, 0], f"B{i}"),
        ]
        nodes.append(helper.make_node("Conv", [x, f"W{i}", f"B{i}"], [f"c{i}"], pads=[1] * 4))
        x = f"c{i}"
    shape = [1, c, hw, hw]
    g = helper.make_graph(
        nodes,
        "convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


_CHILD = r"""
import json, sys, numpy as np, onnxruntime as ort
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024
x = np.random.default_rng(0).random(tuple(int(d) for d in sys.argv[2].split(",")), dtype=np.float32)
s = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
a = rss()
s.run(None, {"x": x})
r1 = rss()
s.run(None, {"x": x})
s.run(None, {"x": x})
print(json.dumps({"run_1": r1 - a, "steady_state": rss() - a}))
"""


def _run_growth(path: str, shape: str, env: dict[str, str]) -> dict[str, int]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    e.update(env)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, path, shape],
        capture_output=True,
        text=True,
        check=True,
        env=e,
    )
    return {k: int(v) for k, v in json.loads(out.stdout).items()}


@pytest.mark.skipif(nchwc_block_size() <= 1, reason="no NCHWc on this CPU (not x86-64)")
def test_arena_regions_in_freed_weight_holes_add_no_rss(tmp_path):
    """Six embedded 9 MiB filters: the freed ModelProto strings and weight copies leave holes
    that hold the whole arena (2 MiB activations). Default glibc: the runs add ~0 RSS, as
    predicted; with a fixed mmap threshold (no heap holes) they add the arena's fresh pages,
    which is the prediction before the hole credit."""
    path = str(tmp_path / "convs.onnx")
    onnx.save(_convs(6, 512, 32), path)
    est = estimate(path, backend="ort")
    stages = {s.name: s.activations for s in est.prediction.stages}
    fresh = est.prediction.planners["ort_steady_state"]  # the arena before the credit
    assert fresh >= 4 * MiB
    default = _run_growth(path, "1,512,32,32", {})
    fixed = _run_growth(path, "1,512,32,32", {"MALLOC_MMAP_THRESHOLD_": "131072"})
    for stage in ("run_1", "steady_state"):
        # atol 1.5 MiB: run bookkeeping outside the arena (``ort_run``), which grew to 1.18 MiB
        # on a machine at load 15 (session 12, twice); without the hole credit the prediction
        # is ``fresh``, >= 4 MiB away, so the bound still tells the rule from its absence
        assert abs(stages[stage] - default[stage]) <= 1.5 * MiB, (stage, stages, default)
    assert abs(fresh - fixed["steady_state"]) <= 1 * MiB, (fresh, fixed)
