"""ORT CPU with the arena off: the runs replayed through glibc's heap (``ort_arena_off``).

Measured (``memshrink profile --session-option enable_cpu_mem_arena=0``, 3 processes each,
identical; docs/estimate.md, "Session 13: weights inside bodies", "The arena off"), run 1 / run 3 MiB over the
process baseline: LSTM S 400 x B 64 x I 64 x H 128 73.1 / 86.0 (main predicted 74.5 / 74.5,
now 74.4 / 83.7); H 64: 41.4 / 66.7 (42.5 / 42.4 -> 42.5 / 61.2); S 200 x B 32 x H 256:
43.8 / 50.3 (44.8 / 44.8 -> 44.6 / 63.4: that process's address class kept the gate buffer's
hole merged).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.glibc_heap import GlibcHeap
from memshrink.estimate.lifetimes import Buffer
from memshrink.estimate.ort import OrtPlan
from memshrink.estimate.ort_arena_off import arena_off_runs

MiB = 1 << 20


def test_a_block_mmapped_in_run_1_leapfrogs_in_later_runs():
    """An 8 MiB tensor, then a 40 MiB temporary (over glibc's 32 MiB cap: always mmapped).
    Run 1 maps both; freeing the 8 MiB mapping lifts the threshold past it, so run 2 carves it
    from the heap top (peak as run 1), and its pinned hole is 96 bytes short for run 3's:
    run 3 peaks with the hole and a new copy, 8 MiB above run 1."""
    plan = OrtPlan(
        buffers=[
            Buffer(0, 8 * MiB, 0, 1, ["y"]),
            Buffer(1, 40 * MiB, 0, 0, ["tmp"], transient=True, scratch=True),
        ]
    )
    heap = GlibcHeap(212 * 1024, 212 * 1024)
    run_1, run_3 = arena_off_runs(plan, 2, heap, hold_outputs=False)
    assert run_1 == pytest.approx(48 * MiB, abs=64 * 1024)
    assert run_3 == pytest.approx(48 * MiB + 8 * MiB, abs=256 * 1024)  # hole + new copy


def _lstm(path: str) -> None:
    s, b, i, h = 400, 64, 64, 64
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((1, 4 * h, i)).astype(np.float32), "W")
    r = numpy_helper.from_array(rng.standard_normal((1, 4 * h, h)).astype(np.float32), "R")
    g = helper.make_graph(
        [
            helper.make_node("LSTM", ["x", "W", "R"], ["y"], hidden_size=h),
            helper.make_node("ReduceSum", ["y"], ["s"], keepdims=0),
        ],
        "g",
        [helper.make_tensor_value_info("x", T.FLOAT, [s, b, i])],
        [helper.make_tensor_value_info("s", T.FLOAT, [])],
        [w, r],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.save(m, path)


def test_lstm_later_runs_grow_with_the_arena_off(tmp_path):
    """Measured 41.4 / 66.7 MiB run 1 / run 3 (the 6.5 MiB Y and the 25 MiB gate buffer)."""
    path = str(tmp_path / "lstm.onnx")
    _lstm(path)
    off = estimate(path, backend="ort", session_options={"enable_cpu_mem_arena": 0})
    st = {s.name: s.peak for s in off.prediction.stages}
    assert st["run_1"] == pytest.approx(41.4 * MiB, rel=0.1)
    assert st["steady_state"] == pytest.approx(66.7 * MiB, rel=0.1)
    assert any("arena off" in a for a in off.prediction.assumptions)
