"""The caller holds a run's outputs until the next run returns: ORT's numpy outputs are
zero-copy views of its arena chunks, so those chunks stay in use through the next run."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnxruntime as ort

from memshrink.estimate import ort as ortsim
from memshrink.estimate.graph import build_view
from memshrink.estimate.schedule import schedule

F = onnx.TensorProto.FLOAT
N = 1024  # 4 MiB fp32 tensors: above the arena's first regions


def _chain() -> onnx.ModelProto:
    g = oh.make_graph(
        [oh.make_node("Neg", ["x"], ["t"]), oh.make_node("Neg", ["t"], ["y"])],
        "chain",
        [oh.make_tensor_value_info("x", F, [N, N])],
        [oh.make_tensor_value_info("y", F, [N, N])],
    )
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 18)])


def test_ort_outputs_are_zero_copy_views() -> None:
    """The rule's premise, on the real runtime: the returned array does not own its data; it
    keeps ORT's buffer alive (a capsule holding the OrtValue) for as long as it lives."""
    m = _chain()
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.ones((N, N), np.float32)
    (y,) = sess.run(None, {"x": x})
    assert not y.flags.owndata
    assert y.base is not None and type(y.base).__name__ == "PyCapsule"
    np.testing.assert_allclose(y, x, atol=0, rtol=0)  # Neg(Neg(x)) == x exactly


def test_held_outputs_keep_their_chunks_through_the_next_run() -> None:
    v = build_view(_chain())
    order = schedule(v.graph, "ort_default")
    plan = ortsim.plan(v.graph, order)
    released = ortsim.simulate(plan, len(order), mem_pattern=False, hold_outputs=False)
    held = ortsim.simulate(plan, len(order), mem_pattern=False, hold_outputs=True)
    # Released before the next run, later runs reuse run 1's chunks exactly.
    assert released.steady_state == released.run_1
    # Held, the next run's output cannot take the previous output's chunk: the arena writes
    # at least one more output's worth of pages.
    out_bytes = sum(b.size for b in plan.buffers if b.is_output)
    assert held.steady_state >= held.run_1 + out_bytes


def _upsample(n_nodes: int) -> onnx.ModelProto:
    """x[1,256,64,64] -> ConvTranspose(W: 256x128x2x2, 1 MiB) n times on the same filter
    (a chunked decoder shares it) -> a small output."""
    w = onnx.numpy_helper.from_array(np.zeros((256, 128, 2, 2), np.float32), "W")
    nodes = [
        oh.make_node("ConvTranspose", ["x", "W"], [f"u{i}"], strides=[2, 2]) for i in range(n_nodes)
    ]
    nodes += [oh.make_node("ReduceSum", [f"u{i}"], [f"y{i}"]) for i in range(n_nodes)]
    g = oh.make_graph(
        nodes,
        "up",
        [oh.make_tensor_value_info("x", F, [1, 256, 64, 64])],
        [oh.make_tensor_value_info(f"y{i}", F, [1, 1, 1, 1]) for i in range(n_nodes)],
        [w],
    )
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 18)])


def test_session_creation_arena_chunks_are_replayed_first() -> None:
    v = build_view(_upsample(2))
    assert ortsim.creation_arena(v.graph) == [256 * 128 * 4 * 4]  # one prepack per filter
    order = schedule(v.graph, "ort_default")
    plan = ortsim.plan(v.graph, order)
    bare = ortsim.simulate(plan, len(order), mem_pattern=False, hold_outputs=True)
    warm = ortsim.simulate(
        plan, len(order), mem_pattern=False, hold_outputs=True, creation=[1 << 20]
    )
    # The creation chunk takes a 1 MiB region of its own; its pages are weights, not run growth.
    assert warm.regions[0] == 1 << 20 and len(warm.touched) == len(warm.regions)
    assert warm.run_1 == sum(warm.touched_run_1)
    assert abs(warm.run_1 - bare.run_1) <= 1 << 20  # atol 1 MiB: only the region sizes move
