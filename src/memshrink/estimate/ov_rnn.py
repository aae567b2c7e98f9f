"""OpenVINO CPU: what a native LSTM / GRU / RNN sequence node holds beyond its ONNX edges.

The plugin runs each as one ``RNNSeq`` node (oneDNN's RNN primitive). Measured on single
nodes (``memshrink.verify.profile``, bf16 host, OpenVINO 2026.4; docs/estimate.md, "Session
13: native recurrent nodes"), the first infer grows beyond the planned edges by, per
sequence element S x B and direction D:

- at a bf16 / f16 inference precision, the input and the output sequence in the low
  precision: ``2 (I + H)`` bytes (X converted before the node, Y before its reorder to f32);
- for an LSTM, its cell states in f32 at every step: ``4 H`` bytes, at any precision.

LSTM S 100-800, B 16 / 64, I 64 / 128, H 32-128, GRU and RNN at H 64 / 128: within 0.4 MiB
of the measured growth but for S 100 (+1.6). A second LSTM in the graph adds 0.7 MiB, not
its own buffer: the buffer lives at its node's step only (``transient``), so the plan shares
it. Bidirectional nodes measured 7 MiB above this (not modelled).
"""

from __future__ import annotations

from memshrink.estimate.graph import GraphInfo, NodeInfo

RNN_OPS = frozenset({"LSTM", "GRU", "RNN"})


def rnn_scratch(g: GraphInfo, node: NodeInfo, half: bool) -> int:
    """Bytes ``node`` (an LSTM / GRU / RNN) holds at its step beyond its edges; 0 for other
    ops or where the input shape is unknown."""
    if node.op_type not in RNN_OPS or not node.inputs:
        return 0
    x = g.tensors.get(node.inputs[0])
    if x is None or not x.shape or len(x.shape) != 3:
        return 0
    h = int(node.attrs.get("hidden_size", 0) or 0)
    if h <= 0:
        return 0
    layout = int(node.attrs.get("layout", 0) or 0)
    s, b, i = (x.shape[1], x.shape[0], x.shape[2]) if layout else x.shape
    d = 2 if node.attrs.get("direction", "forward") in ("bidirectional", b"bidirectional") else 1
    per = (2 * (i + h) if half else 0) + (4 * h if node.op_type == "LSTM" else 0)
    return int(s * b * d * per)
