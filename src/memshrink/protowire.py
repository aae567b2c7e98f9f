"""The protobuf wire format, read in place over a memory map: no ModelProto is parsed.

Two readers must not parse a whole model (an embedded one is hundreds of MiB): the loader's
weight-lifting scan (``protoscan``) and the verifier's input/output scan
(``verify.modelinfo``). They share this decoder, which checks every length against the
message's end, so a truncated or non-protobuf file raises :class:`Truncated` instead of
reading past it.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator

# Wire types
VARINT, I64, LEN, I32 = 0, 1, 2, 5

Buffer = memoryview | bytes | mmap.mmap


class Truncated(Exception):
    """The bytes end inside a field, or are not a protobuf message."""


def read_varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise Truncated
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise Truncated


def iter_fields(buf: Buffer, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """Yield (field_number, wire_type, field_start, payload_start, payload_end).

    For varints the "payload" is the varint itself.
    """
    pos = start
    while pos < end:
        field_start = pos
        key, pos = read_varint(buf, pos, end)
        fnum, wtype = key >> 3, key & 7
        if fnum == 0:
            raise Truncated
        if wtype == VARINT:
            value_start = pos
            _, pos = read_varint(buf, pos, end)
            yield fnum, wtype, field_start, value_start, pos
        elif wtype == I64:
            pos += 8
            if pos > end:
                raise Truncated
            yield fnum, wtype, field_start, pos, pos
        elif wtype == I32:
            pos += 4
            if pos > end:
                raise Truncated
            yield fnum, wtype, field_start, pos, pos
        elif wtype == LEN:
            length, pos = read_varint(buf, pos, end)
            payload_start = pos
            pos += length
            if pos > end:
                raise Truncated
            yield fnum, wtype, field_start, payload_start, pos
        else:  # groups (3, 4) and reserved types never appear in ONNX files
            raise Truncated
