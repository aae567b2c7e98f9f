"""``chunk`` splits LSTM / GRU along the batch: X, ``sequence_lens`` and ``initial_h`` are
sliced on their batch axes, Y is concatenated on axis 2 and Y_h on axis 1, whatever the
direction (known answers: the rule's axes, and ORT's outputs of the unsplit model)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from fixtures_onnx import run_ort
from onnx import TensorProto, helper, numpy_helper

import memshrink
from memshrink.manager import PassContext, PassManager
from memshrink.transforms.chunking import rules

B, T, IN, H, HG = 8, 20, 8, 6, 5


def _w(name: str, *shape: int) -> onnx.TensorProto:
    rng = np.random.default_rng(len(name) * 7 + sum(shape))
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)


def birnn() -> onnx.ModelProto:
    """Batch-first input (as torch exports), a bidirectional LSTM fed ``sequence_lens`` and an
    initial state, then a reverse GRU with ``linear_before_reset``; Y_h is a graph output."""
    n = helper.make_node
    nodes = [
        n("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
        n("LSTM", ["xt", "W", "R", "B", "lens", "h0"], ["Y", "Yh", ""],
          direction="bidirectional", hidden_size=H),
        n("Transpose", ["Y"], ["Yt"], perm=[0, 2, 1, 3]),
        n("Reshape", ["Yt", "shp"], ["feat"]),
        n("GRU", ["feat", "Wg", "Rg", "Bg", "lens"], ["Z", ""], direction="reverse",
          hidden_size=HG, linear_before_reset=1),
        n("Squeeze", ["Z", "ax1"], ["z"]),
        n("Transpose", ["z"], ["y"], perm=[1, 0, 2]),
    ]  # fmt: skip
    inits = [
        _w("W", 2, 4 * H, IN), _w("R", 2, 4 * H, H), _w("B", 2, 8 * H),
        _w("Wg", 1, 3 * HG, 2 * H), _w("Rg", 1, 3 * HG, HG), _w("Bg", 1, 6 * HG),
        numpy_helper.from_array(np.array([0, 0, 2 * H], np.int64), "shp"),
        numpy_helper.from_array(np.array([1], np.int64), "ax1"),
    ]  # fmt: skip
    g = helper.make_graph(
        nodes,
        "birnn",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, T, IN]),
            helper.make_tensor_value_info("lens", TensorProto.INT32, [B]),
            helper.make_tensor_value_info("h0", TensorProto.FLOAT, [2, B, H]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, T, HG]),
            helper.make_tensor_value_info("Yh", TensorProto.FLOAT, [2, B, H]),
        ],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        "x": rng.standard_normal((B, T, IN)).astype(np.float32),
        "lens": rng.integers(1, T + 1, B).astype(np.int32),  # every row its own length
        "h0": rng.standard_normal((2, B, H)).astype(np.float32),
    }


@pytest.fixture
def recurrent_ok():  # noqa: ANN201
    token = rules.RECURRENT_OK.set(True)  # what ``optimize --backend ort`` sets
    yield
    rules.RECURRENT_OK.reset(token)


def test_rule_axes_per_layout(recurrent_ok) -> None:  # noqa: ANN001
    m = ir.from_proto(birnn())
    lstm = next(x for x in m.graph if x.op_type == "LSTM")
    f = rules.NodeFacts(lstm, [(T, B, IN), None, None, None, (B,), (2, B, H), None],
                        [(T, 2, B, H), (2, B, H), None], 17)  # fmt: skip
    f.in_shapes = [(T, B, IN), (2, 4 * H, IN), (2, 4 * H, H), (2, 8 * H), (B,), (2, B, H)]
    out, sliced = rules.forward(f, [1, None, None, None, None, None])
    assert out == [2, 1, 1] and sliced == {4: 0, 5: 1}
    with pytest.raises(rules.Refuse, match="along axis 0 of X"):
        rules.forward(f, [0, None, None, None, None, None])  # the sequence axis
    lstm.attributes["layout"] = ir.Attr("layout", ir.AttributeType.INT, 1)
    out, sliced = rules.forward(f, [0, None, None, None, None, None])
    assert out == [0, 0, 0] and sliced == {4: 0, 5: 0}


def _chunk(src: Path, context: PassContext):  # noqa: ANN202
    opts = {"chunk": {"modes": "batch", "min_saving": 0, "min_gain": 0.0,
                      "guard_backends": "", "prefer_backends": ""}}  # fmt: skip
    return PassManager(["chunk"], options=opts).run(memshrink.load(src), context)


def test_only_when_deploying_on_ort_cpu(tmp_path: Path) -> None:
    """Without ``--backend ort`` (or with another backend) the recurrence stops the region:
    OpenVINO and its EP compile each chunk's LSTM, which their estimates do not see."""
    src = tmp_path / "rnn.onnx"
    onnx.save(birnn(), src)
    model, report = _chunk(src, PassContext())
    assert [x.op_type for x in model.graph].count("LSTM") == 1
    stops = report.passes[0].stats["stopped_at"]
    assert any("LSTM is split only when deploying on ORT CPU" in k for k in stops), stops
    model, _ = _chunk(src, PassContext(backend="openvino", deploy_only=True))
    assert [x.op_type for x in model.graph].count("LSTM") == 1


def test_bidirectional_lstm_and_reverse_gru_split_along_the_batch(tmp_path: Path) -> None:
    src, dst = tmp_path / "rnn.onnx", tmp_path / "out.onnx"
    onnx.save(birnn(), src)
    model, report = _chunk(src, PassContext(backend="ort", deploy_only=True))
    stats = report.passes[0].stats
    assert report.passes[0].modified, stats
    k = stats["chunks"]
    assert k >= 2 and set(stats["region_outputs"]) == {"y", "Yh"}
    ops = [x.op_type for x in model.graph]
    assert ops.count("LSTM") == k and ops.count("GRU") == k
    memshrink.save(model, dst)
    want, got = run_ort(src, _feeds()), run_ort(dst, _feeds())
    for a, b in zip(want, got, strict=True):  # chunk states atol 1e-4; measured exactly equal
        np.testing.assert_allclose(b, a, atol=1e-5, rtol=1e-5)


def seq_first() -> onnx.ModelProto:
    """torch ``LSTM(batch_first=False)`` as exported: X ``[T, B, IN]`` and ``h0`` / ``c0``
    ``[1, B, H]`` graph inputs read by an LSTM in ONNX's default layout 0, its Y squeezed to
    ``[T, B, H]`` and projected (a MatMul after: the batch on axis 1 throughout)."""
    n = helper.make_node
    nodes = [
        n("LSTM", ["x", "W", "R", "B", "", "h0", "c0"], ["Y", "Yh", "Yc"], hidden_size=H),
        n("Squeeze", ["Y", "ax1"], ["ys"]),
        n("MatMul", ["ys", "P"], ["y"]),
    ]  # fmt: skip
    inits = [
        _w("W", 1, 4 * H, IN), _w("R", 1, 4 * H, H), _w("B", 1, 8 * H), _w("P", H, 3),
        numpy_helper.from_array(np.array([1], np.int64), "ax1"),
    ]  # fmt: skip
    info = helper.make_tensor_value_info
    g = helper.make_graph(
        nodes, "seqfirst",
        [info("x", TensorProto.FLOAT, [T, B, IN]), info("h0", TensorProto.FLOAT, [1, B, H]),
         info("c0", TensorProto.FLOAT, [1, B, H])],
        [info("y", TensorProto.FLOAT, [T, B, 3]), info("Yh", TensorProto.FLOAT, [1, B, H]),
         info("Yc", TensorProto.FLOAT, [1, B, H])],
        inits,
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_seq_first_inputs_are_entered_at_their_batch_axis(tmp_path: Path) -> None:
    from memshrink.transforms.chunk import batch_axis

    m = ir.from_proto(seq_first())
    assert [batch_axis(v) for v in m.graph.inputs] == [0, 0, 0]  # RECURRENT_OK unset
    token = rules.RECURRENT_OK.set(True)
    try:
        assert [batch_axis(v) for v in m.graph.inputs] == [1, 1, 1]
    finally:
        rules.RECURRENT_OK.reset(token)
    src, dst = tmp_path / "sf.onnx", tmp_path / "out.onnx"
    onnx.save(seq_first(), src)
    model, report = _chunk(src, PassContext(backend="ort", deploy_only=True))
    stats = report.passes[0].stats
    assert report.passes[0].modified, stats
    k = stats["chunks"]
    assert k >= 2 and B % k == 0 and set(stats["region_outputs"]) == {"y", "Yh", "Yc"}
    assert [x.op_type for x in model.graph].count("LSTM") == k
    # X sliced on axis 1 (the batch), not 0 (the sequence): every piece keeps all T steps
    xs = [x for x in model.graph if x.op_type == "Slice" and x.inputs[0].name == "x"]
    assert len(xs) == k and all(x.outputs[0].shape[0] == T for x in xs)
    memshrink.save(model, dst)
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((T, B, IN)).astype(np.float32),
             "h0": rng.standard_normal((1, B, H)).astype(np.float32),
             "c0": rng.standard_normal((1, B, H)).astype(np.float32)}  # fmt: skip
    for a, b in zip(run_ort(src, feeds), run_ort(dst, feeds), strict=True):
        np.testing.assert_allclose(b, a, atol=1e-5, rtol=1e-5)
