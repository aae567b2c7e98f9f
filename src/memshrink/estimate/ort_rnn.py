"""Per-run temporaries of ORT CPU's recurrent kernels (``LSTM``, ``GRU``, ``RNN``,
``DynamicQuantizeLSTM``), all taken from the arena through ``GetTempSpaceAllocator``.

Why: the gate pre-activations of the whole sequence are kept in one buffer per direction
(``X W^T`` for every step, computed by one GEMM before the recurrence), so the scratch is
``gates x hidden x batch x seq`` floats, often larger than the node's output ``Y``
(``onnxruntime/core/providers/cpu/rnn/``; docs/estimate.md, "Session 12: recurrent kernels").

* ``LSTM`` (``deep_cpu_lstm.cc`` / ``uni_directional_lstm.cc``): a ``D x B x H`` buffer for a
  missing ``Y_h`` and one for a missing ``Y_c``; then per direction (a bidirectional node
  builds both directions before computing either) ``H`` x2, ``B x H`` x3, the gates
  ``4H x B x S``, the fused bias ``H`` x4 when ``B`` is given, and for the reverse direction
  a reversed copy of X (``S x B x I``) and of its output (``S x B x H``); then, while
  computing, ``B`` ints of sequence lengths when ``sequence_lens`` is absent.
  ``DynamicQuantizeLSTM`` adds, per direction while computing, the quantized input
  (``max(S x B x I, B x H)`` bytes) and the int32 accumulator (``B x 4H``).
* ``GRU`` (``deep_cpu_gru.cc``): ``D x B x H`` for a missing ``Y_h``; per direction ``B x H``
  x2, with ``B`` two more ``B x H`` plus one (``linear_before_reset=0``) or two
  (``=1``) more, ``linear_before_reset=1`` one more ``B x H``, the gates ``3H x B x S``,
  and the same reverse copies as LSTM. The forward direction is still held while the
  backward one is built.
* ``RNN`` (``rnn.cc``): ``X W^T`` for one direction at a time (``S x B x H``) and, when
  ``Y`` is not an output, a ``S x D x B x H`` buffer for it.

Shapes are ``layout=0`` (``[S, B, I]``); ORT CPU refuses ``layout=1``.
"""

from __future__ import annotations

from memshrink.estimate.graph import GraphInfo, NodeInfo
from memshrink.estimate.ort_optimized import MS_DOMAIN

FLOAT = 1
F32 = 4
I32 = 4
RNN_OPS = ("LSTM", "GRU", "RNN")


def _has(node: NodeInfo, i: int, outputs: bool = False) -> bool:
    names = node.outputs if outputs else node.inputs
    return len(names) > i and bool(names[i])


def _dims(g: GraphInfo, node: NodeInfo) -> tuple[int, int, int, int, int] | None:
    """(directions, seq, batch, input size, hidden size), or None when unknown."""
    x = g.tensors.get(node.inputs[0]) if node.inputs else None
    if x is None or x.elem_type != FLOAT or not x.shape or len(x.shape) != 3:
        return None
    if int(node.attrs.get("layout", 0) or 0) != 0:
        return None
    seq, batch, inp = (int(d) for d in x.shape)
    hidden = node.attrs.get("hidden_size")
    if hidden is None:
        r = g.tensors.get(node.inputs[2]) if len(node.inputs) > 2 else None
        if r is None or not r.shape or len(r.shape) != 3:
            return None
        hidden = r.shape[2]
    dirs = 2 if str(node.attrs.get("direction", "forward")) == "bidirectional" else 1
    return dirs, seq, batch, inp, int(hidden)


def _reverse(direction: str, d: int) -> bool:
    return direction == "reverse" or (direction == "bidirectional" and d == 1)


def lstm_scratch(g: GraphInfo, node: NodeInfo, quantized: bool = False) -> list[int]:
    """Temporaries of one ``LSTM`` / ``DynamicQuantizeLSTM`` call, in allocation order."""
    dims = _dims(g, node)
    if dims is None:
        return []
    dirs, s, b, i, h = dims
    direction = str(node.attrs.get("direction", "forward"))
    out: list[int] = []
    for k in (1, 2):  # Y_h, Y_c
        if not _has(node, k, outputs=True):
            out.append(F32 * dirs * b * h)
    for d in range(dirs):
        out += [F32 * h] * 2 + [F32 * b * h] * 3 + [F32 * 4 * h * b * s]
        if _has(node, 3):
            out += [F32 * h] * 4
        if _reverse(direction, d):
            out += [F32 * s * b * i, F32 * s * b * h]
    for _ in range(dirs):
        if not _has(node, 4):
            out.append(I32 * b)
        if quantized:
            out += [max(s * b * i, b * h), I32 * b * 4 * h]
    return out


def gru_scratch(g: GraphInfo, node: NodeInfo) -> list[int]:
    """Temporaries of one ``GRU`` call, in allocation order."""
    dims = _dims(g, node)
    if dims is None:
        return []
    dirs, s, b, i, h = dims
    direction = str(node.attrs.get("direction", "forward"))
    lbr = bool(int(node.attrs.get("linear_before_reset", 0) or 0))
    bh = F32 * b * h
    out: list[int] = []
    if not _has(node, 1, outputs=True):
        out.append(dirs * bh)
    for d in range(dirs):
        out += [bh, bh]
        if _has(node, 3):
            out += [bh, bh] + ([bh, bh] if lbr else [bh])
        if lbr:
            out.append(bh)
        out.append(F32 * 3 * h * b * s)
        if _reverse(direction, d):
            out += [F32 * s * b * i, F32 * s * b * h]
        if not _has(node, 4):
            out.append(I32 * b)
    return out


def rnn_scratch(g: GraphInfo, node: NodeInfo) -> list[int]:
    """Temporaries of one ``RNN`` call, in allocation order."""
    dims = _dims(g, node)
    if dims is None:
        return []
    dirs, s, b, _, h = dims
    out = [F32 * s * b * h]
    if not _has(node, 0, outputs=True):
        out.append(F32 * s * dirs * b * h)
    return out


def recurrent_scratch(g: GraphInfo, node: NodeInfo) -> list[int]:
    """The arena temporaries of a recurrent node on ORT CPU (empty for any other node)."""
    std = node.domain in ("", "ai.onnx")
    if std and node.op_type == "LSTM":
        return lstm_scratch(g, node)
    if std and node.op_type == "GRU":
        return gru_scratch(g, node)
    if std and node.op_type == "RNN":
        return rnn_scratch(g, node)
    if node.domain == MS_DOMAIN and node.op_type == "DynamicQuantizeLSTM":
        return lstm_scratch(g, node, quantized=True)
    return []
