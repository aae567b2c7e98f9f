"""ORT CPU's recurrent-kernel temporaries (``ort_rnn``): the formula per op, and the gate
buffer as ORT 1.32's own arena log requests it."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate.graph import build_view
from memshrink.estimate.ort_rnn import recurrent_scratch
from memshrink.estimate.ort_scratch import cpu_kernel_scratch

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _rnn(
    op: str,
    s: int,
    b: int,
    i: int,
    h: int,
    direction: str = "forward",
    inputs: tuple[str, ...] = ("B",),
    outputs: tuple[bool, ...] = (True, True, True),
    **attrs: object,
) -> onnx.ModelProto:
    """One recurrent node on ``x[s, b, i]``; ``inputs`` names the optional ones present."""
    d = 2 if direction == "bidirectional" else 1
    k = GATES[op]
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((d, k * h, i)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal((d, k * h, h)).astype(np.float32), "R"),
    ]
    if "B" in inputs:
        inits.append(numpy_helper.from_array(np.zeros((d, 2 * k * h), np.float32), "B"))
    gin = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [s, b, i])]
    if "sl" in inputs:
        gin.append(helper.make_tensor_value_info("sl", TensorProto.INT32, [b]))
    names = ["x", "W", "R", "B" if "B" in inputs else "", "sl" if "sl" in inputs else ""]
    n_out = 3 if op == "LSTM" else 2
    outs = [f"y{j}" if outputs[j] else "" for j in range(n_out)]
    node = helper.make_node(op, names, outs, hidden_size=h, direction=direction, **attrs)
    shapes = [[s, d, b, h], [d, b, h], [d, b, h]]
    gout = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[j])
        for j, n in enumerate(outs)
        if n
    ]
    m = helper.make_model(
        helper.make_graph([node], "rnn", gin, gout, inits),
        opset_imports=[helper.make_opsetid("", 14)],
    )
    m.ir_version = 8
    return m


def _scratch(m: onnx.ModelProto) -> list[int]:
    g = build_view(m).graph
    return cpu_kernel_scratch(g, g.nodes[0], 2)


def test_lstm_forward_gates_are_the_whole_sequence():
    """Forward LSTM with bias, every output: H x2, B x H x3, gates 4H x B x S, bias H x4,
    then B ints of sequence lengths (no ``sequence_lens``)."""
    s, b, i, h = 400, 64, 32, 64
    want = [4 * h] * 2 + [4 * b * h] * 3 + [4 * 4 * h * b * s] + [4 * h] * 4 + [4 * b]
    assert _scratch(_rnn("LSTM", s, b, i, h)) == want
    assert 4 * 4 * h * b * s == 26_214_400  # 25 MiB: 4x the output Y (6.25 MiB)


def test_lstm_bidirectional_reverse_copies_and_missing_states():
    """Bidirectional, ``sequence_lens`` given, Y_h / Y_c left out: a D x B x H buffer for
    each missing state, both directions' buffers at once, the reverse one with reversed
    copies of X and of its output."""
    s, b, i, h = 20, 3, 5, 8
    m = _rnn("LSTM", s, b, i, h, "bidirectional", ("B", "sl"), (True, False, False))
    per = [4 * h] * 2 + [4 * b * h] * 3 + [4 * 4 * h * b * s] + [4 * h] * 4
    want = [4 * 2 * b * h] * 2 + per + per + [4 * s * b * i, 4 * s * b * h]
    assert _scratch(m) == want


def test_gru_linear_before_reset_and_reverse():
    """Reverse GRU, bias, ``linear_before_reset=1``, no Y_h: D x B x H for Y_h; B x H x2,
    biases x4, the linear output, gates 3H x B x S, reversed X and Y, B ints."""
    s, b, i, h = 30, 4, 6, 10
    m = _rnn("GRU", s, b, i, h, "reverse", ("B",), (True, False), linear_before_reset=1)
    bh = 4 * b * h
    want = [bh] + [bh] * 2 + [bh] * 4 + [bh] + [4 * 3 * h * b * s]
    want += [4 * s * b * i, 4 * s * b * h, 4 * b]
    assert _scratch(m) == want
    # linear_before_reset=0, no bias: only the two state buffers, the gates and the lengths
    m0 = _rnn("GRU", s, b, i, h, inputs=())
    assert _scratch(m0) == [bh, bh, 4 * 3 * h * b * s, 4 * b]


def test_rnn_x_times_w_and_missing_y():
    """RNN: ``X W^T`` for one direction (S x B x H) and, without Y, a buffer for all of it."""
    s, b, i, h = 50, 8, 4, 16
    assert _scratch(_rnn("RNN", s, b, i, h)) == [4 * s * b * h]
    m = _rnn("RNN", s, b, i, h, "bidirectional", outputs=(False, True))
    assert _scratch(m) == [4 * s * b * h, 4 * s * 2 * b * h]


def test_layout_1_and_unknown_shapes_take_nothing():
    """``layout=1`` (refused by ORT CPU) and an X of unknown shape predict no temporaries."""
    g = build_view(_rnn("LSTM", 10, 2, 3, 4, layout=0)).graph
    g.nodes[0].attrs["layout"] = 1
    assert recurrent_scratch(g, g.nodes[0]) == []
    g = build_view(_rnn("GRU", 10, 2, 3, 4)).graph
    g.tensors["x"].shape = None
    assert recurrent_scratch(g, g.nodes[0]) == []


def test_dynamic_quantize_lstm_adds_the_quantized_input():
    """``DynamicQuantizeLSTM``: the LSTM buffers plus, per direction, the uint8 input
    (``max(S x B x I, B x H)`` bytes) and the int32 accumulator (B x 4H)."""
    s, b, i, h = 12, 2, 16, 8
    m = _rnn("LSTM", s, b, i, h)
    g = build_view(m).graph
    node = g.nodes[0]
    node.op_type, node.domain = "DynamicQuantizeLSTM", "com.microsoft"
    base = [4 * h] * 2 + [4 * b * h] * 3 + [4 * 4 * h * b * s] + [4 * h] * 4 + [4 * b]
    assert recurrent_scratch(g, node) == base + [s * b * i, 4 * b * 4 * h]


_ARENA = r"""
import sys, numpy as np, onnxruntime as ort
ort.set_default_logger_severity(0)
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
s = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
s.run(None, {"x": np.ones([int(d) for d in sys.argv[2].split(",")], np.float32)})
"""


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_gate_buffer_is_an_arena_request(tmp_path, op):
    """ORT's verbose arena log: after the outputs (Y 400 KiB fits the first 1 MiB region),
    the region that opens next is asked for exactly the predicted gate buffer."""
    s, b, i, h = 100, 16, 8, 64
    model = _rnn(op, s, b, i, h, outputs=(True, True, op == "LSTM"))
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    gates = 4 * GATES[op] * h * b * s
    assert max(_scratch(model)) == gates
    out = subprocess.run(
        [sys.executable, "-c", _ARENA, path, f"{s},{b},{i}"],
        capture_output=True,
        text=True,
        check=True,
    )
    asked = [int(x) for x in re.findall(r"\(requested\) num_bytes: (\d+)", out.stderr + out.stdout)]
    assert gates in asked, (asked, gates)
