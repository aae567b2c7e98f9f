"""OpenVINO: a native LSTM / GRU / RNN node's low-precision sequences and LSTM cell states
(session 13, ``ov_rnn``), and oneDNN's GEMM library pages it loads (docs/estimate.md,
"Session 13: native recurrent nodes").

Known answers from the rule's formula on hand-built single nodes.
"""

from __future__ import annotations

from pathlib import Path

from estimate.test_estimate_openvino import _save
from estimate.test_estimate_ort_rnn_scratch import _rnn

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.openvino import OV_CALIBRATION, lib_pages
from memshrink.estimate.ov_rnn import rnn_scratch

MiB = 1 << 20


def test_scratch_is_the_low_precision_sequences_and_lstm_cell_states() -> None:
    """S x B x D x (2 (I + H) at bf16, + 4 H for an LSTM): forward LSTM 400 x 64, I 64, H 64
    at bf16 12.5 MiB (measured 12.5 above the edges), at f32 6.25 (6.3); GRU / RNN at H 128
    9.375 (9.4 / 9.3); layout 1 (batch first) reads the same dims from [B, S, I]."""
    cases = [
        ("LSTM", {}, True, 12.5),
        ("LSTM", {}, False, 6.25),
        ("GRU", {}, True, 400 * 64 * 2 * (64 + 128) / MiB),
        ("RNN", {}, False, 0.0),
        ("LSTM", {"direction": "bidirectional"}, True, 25.0),
    ]
    for op, kw, half, mib in cases:
        h = 128 if op == "GRU" else 64
        g = build_view(_rnn(op, 400, 64, 64, h, **kw)).graph  # type: ignore[arg-type]
        assert rnn_scratch(g, g.nodes[0], half) == int(mib * MiB), (op, kw, half)
    # batch first: x [B, S, I] = [64, 400, 64]
    first = build_view(_rnn("LSTM", 64, 400, 64, 64, layout=1)).graph
    assert rnn_scratch(first, first.nodes[0], True) == 400 * 64 * 512


def test_the_scratch_is_in_the_first_infer_and_the_library_is_onednns(tmp_path: Path) -> None:
    """The run stages hold the scratch beside the edges: bf16 minus f32 is the low-precision
    sequences (the cell states are in both), and the graph takes the FC library base
    (``ov_lib``), not the element-wise one."""
    p = _save(_rnn("LSTM", 200, 64, 64, 64), tmp_path / "l.onnx")
    e = estimate(p, backend="openvino", session_options={"INFERENCE_PRECISION_HINT": "bf16"})
    f = estimate(p, backend="openvino", session_options={"INFERENCE_PRECISION_HINT": "f32"})
    act = {s.name: s.activations for s in e.prediction.stages}
    act32 = {s.name: s.activations for s in f.prediction.stages}
    scratch16 = 200 * 64 * (2 * 128 + 4 * 64)
    scratch32 = 200 * 64 * 4 * 64
    # the edges are the same at both precisions here (the f32 input and output are the graph's)
    assert act["run_1"] - act32["run_1"] == scratch16 - scratch32
    g = build_view(p).graph
    c = OV_CALIBRATION
    assert lib_pages(g, c) == int(c["ov_lib"] + c["ov_lib_per_op_type"] * 1)
