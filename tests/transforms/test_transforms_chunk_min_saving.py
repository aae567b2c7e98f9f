"""``chunk.min_saving``: the ``all`` preset does not chunk for a saving smaller than what the
added nodes cost (real-world sweep: a tiny CNN saved 0.12 MiB predicted, OpenVINO compile
+5 MiB, ORT CPU +0.1 MiB measured)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper, numpy_helper

from memshrink.manager import PassContext
from memshrink.pipeline import resolve_pipeline
from memshrink.transforms.chunk import ChunkPass


def cnn(batch: int, hw: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    g = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("GlobalAveragePool", ["p"], ["y"]),
        ],
        "cnn",
        [helper.make_tensor_value_info("x", 1, [batch, 3, hw, hw])],
        [helper.make_tensor_value_info("y", 1, [batch, 8, 1, 1])],
        [w],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def test_min_saving_makes_a_tiny_gain_a_noop_with_reason() -> None:
    assert ChunkPass().run(ir.from_proto(cnn(batch=4, hw=32)), PassContext()).modified
    model = ir.from_proto(cnn(batch=4, hw=32))
    before = [n.op_type for n in model.graph]
    res = ChunkPass(min_saving="4MiB").run(model, PassContext())
    assert not res.modified and "under min_saving" in res.stats["reason"]
    assert [n.op_type for n in model.graph] == before


def test_the_all_preset_sets_min_saving() -> None:
    (chunk,) = [p for p in resolve_pipeline("all", {}) if p.name == "chunk"]
    assert chunk.options.min_saving == 4 << 20


def test_no_layout_is_tried_when_the_activations_are_under_min_saving() -> None:
    """A layout's predicted activations are >= 0, so it saves at most the model's own: under
    min_saving the search is skipped (no trial clones); at it, the search runs and refuses."""
    base = ChunkPass().run(ir.from_proto(cnn(batch=4, hw=32)), PassContext())
    before = base.stats["predicted_activations_before"]
    res = ChunkPass(min_saving=before + 1).run(ir.from_proto(cnn(batch=4, hw=32)), PassContext())
    assert not res.modified and "candidates" not in res.stats
    assert "no layout can save that much" in res.stats["reason"]
    res = ChunkPass(min_saving=before).run(ir.from_proto(cnn(batch=4, hw=32)), PassContext())
    assert not res.modified and res.stats["candidates"]
    assert res.stats["reason"].startswith("best candidate")


def ffn(batch: int = 2, seq: int = 256, h: int = 64, hidden: int = 1024) -> onnx.ModelProto:
    """A transformer FFN (MatMul, Relu, MatMul): a channel-split block of 2 MiB hidden tensors."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((h, hidden)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((hidden, h)).astype(np.float32), "w2")
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["a"]),
            helper.make_node("Relu", ["a"], ["r"]),
            helper.make_node("MatMul", ["r", "w2"], ["o"]),
            helper.make_node("Add", ["o", "x"], ["y"]),
        ],
        "ffn",
        [helper.make_tensor_value_info("x", 1, [batch, seq, h])],
        [helper.make_tensor_value_info("y", 1, [batch, seq, h])],
        [w1, w2],
    )
    return onnx.shape_inference.infer_shapes(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    )


def test_min_saving_also_bounds_the_channel_split() -> None:
    """The channel step obeys ``min_saving`` as the row layouts do (MobileNetV2 `all` split
    one block x8 for 2.6 MiB predicted: ORT CPU -3, OpenVINO +6, its EP +4 MiB measured)."""
    opts = {"modes": "channels"}
    res = ChunkPass(**opts).run(ir.from_proto(ffn()), PassContext())
    ch = res.stats["channels"]
    saving = ch["predicted_activations_before"] - ch["predicted_activations_after"]
    assert res.modified and saving > 1 << 20, ch
    model = ir.from_proto(ffn())
    before = [n.op_type for n in model.graph]
    res = ChunkPass(**opts, min_saving=saving + 1).run(model, PassContext())
    assert not res.modified and "under min_saving" in res.stats["channels"]["reason"]
    assert [n.op_type for n in model.graph] == before
    res = ChunkPass(**opts, min_saving=saving).run(ir.from_proto(ffn()), PassContext())
    assert res.modified  # the bound is inclusive, as the row layouts'
