"""Parts whose numerics change when ONNX Runtime may not prepack their weights.

``PartitionedSession``'s lean defaults set ``session.disable_prepacking`` so that weights stay
mapped from the parts' data files. For int4 weights that also changes the arithmetic: ORT's
``MatMulNBits`` with ``accuracy_level`` 4 computes on prepacked blocks with int8 activations,
and without prepacking falls back to dequantized f32; ORT fuses
``DequantizeLinear`` of an INT4 / UINT4 weight + ``MatMul`` into such a ``MatMulNBits`` itself
(``session.qdq_matmulnbits_accuracy_level``, default 4). Measured on ORT 1.32 (session 11): a
block-wise int4 MLP 4.2e-3 off (outputs ~1), a 4-bit Llama with ``accuracy_level=4`` 5.2e-3 off
(logits ~0.65); with levels 0 (unset) to 3 bit-identical (x86: fp16 / bf16 compute types fall
back to f32). Such a part keeps ORT's
prepacking, so a streamed model computes what the original computes (docs/partition.md).
"""

from __future__ import annotations

import mmap
import os

from memshrink.protowire import LEN, VARINT, Truncated, iter_fields, read_varint

_MODEL_GRAPH = 7
_GRAPH_NODE, _GRAPH_INIT = 1, 5
_NODE_OP_TYPE, _NODE_ATTRIBUTE = 4, 5
_ATTR_NAME, _ATTR_I = 1, 3
_TENSOR_DATA_TYPE = 2
_INT4S = {21, 22}  # TensorProto.UINT4, INT4 (the runtime imports no onnx: the EP's venv has none)
#: the MatMulNBits accuracy level computed on prepacked blocks only (int8 activations)
_PACKED_LEVEL = 4


def prepacking_changes_numerics(path: str | os.PathLike) -> str | None:
    """Why disabling prepacking would change this model's outputs on ORT CPU, or None. Reads
    the wire format: weights are skipped by length; only op types, initializer types and
    MatMulNBits attributes are read. A file that cannot be read gives None: loading it is the
    runtime's to fail, with its message."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            for fnum, wt, _, s, e in iter_fields(buf, 0, len(buf)):
                if fnum == _MODEL_GRAPH and wt == LEN:
                    return _graph_reason(buf, s, e)
    except (OSError, ValueError, IndexError, Truncated):
        return None
    return None


def _graph_reason(buf: mmap.mmap, start: int, end: int) -> str | None:
    for fnum, wt, _, s, e in iter_fields(buf, start, end):
        if wt != LEN:
            continue
        if fnum == _GRAPH_INIT and _data_type(buf, s, e) in _INT4S:
            return "an int4 weight (ORT fuses its DequantizeLinear + MatMul into MatMulNBits)"
        if fnum == _GRAPH_NODE and _op_type(buf, s, e) == b"MatMulNBits":
            level = _int_attribute(buf, s, e, b"accuracy_level")
            if level >= _PACKED_LEVEL:
                return f"MatMulNBits with accuracy_level {level}"
    return None


def _data_type(buf: mmap.mmap, start: int, end: int) -> int:
    for fnum, wt, _, s, e in iter_fields(buf, start, end):
        if fnum == _TENSOR_DATA_TYPE and wt == VARINT:
            return read_varint(buf, s, e)[0]
    return 0


def _int_attribute(buf: mmap.mmap, start: int, end: int, name: bytes) -> int:
    """A NodeProto's int attribute ``name`` (0 when absent)."""
    for fnum, wt, _, s, e in iter_fields(buf, start, end):
        if fnum != _NODE_ATTRIBUTE or wt != LEN:
            continue
        found, value = False, 0
        for afn, awt, _, a_s, a_e in iter_fields(buf, s, e):
            if afn == _ATTR_NAME and awt == LEN:
                found = bytes(buf[a_s:a_e]) == name
            elif afn == _ATTR_I and awt == VARINT:
                value = read_varint(buf, a_s, a_e)[0]
        if found:
            return value
    return 0


def _op_type(buf: mmap.mmap, start: int, end: int) -> bytes:
    for fnum, wt, _, s, e in iter_fields(buf, start, end):
        if fnum == _NODE_OP_TYPE and wt == LEN:
            return bytes(buf[s:e])
    return b""
