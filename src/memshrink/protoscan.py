"""Read an .onnx file without copying its weights into memory.

``onnx.load`` parses the whole ModelProto, so an embedded 417 MiB model costs the file
bytes plus the parsed copy (≈ 2× the weights) before any work starts. This module walks
the protobuf wire format over a memory map instead and rewrites every large
``TensorProto.raw_data`` into an external-data reference *into the .onnx file itself*
(offset and length of the payload). The result is a small "skeleton" ModelProto that
onnx-ir deserializes into lazy, memory-mapped ``ExternalTensor`` objects: weights are
only touched when a pass needs their values, and a save can stream them with
``copy_file_range`` without ever holding them in RSS.

Only the message fields that can hold tensors are descended into:
ModelProto.graph/functions, GraphProto.node/initializer, NodeProto.attribute,
FunctionProto.node, AttributeProto.t/g/tensors/graphs. Everything else is copied
byte-for-byte.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from memshrink.errors import ModelLoadError
from memshrink.protowire import LEN, VARINT, Truncated, iter_fields, read_varint

# Field numbers (onnx.proto3)
_MODEL_GRAPH, _MODEL_FUNCTIONS = 7, 25
_GRAPH_NODE, _GRAPH_INITIALIZER = 1, 5
_NODE_ATTRIBUTE = 5
_FUNCTION_NODE = 7
_ATTR_T, _ATTR_G, _ATTR_TENSORS, _ATTR_GRAPHS = 5, 6, 10, 11
_ATTR_SCALAR_LISTS = frozenset({7, 8, 9})  # floats, ints, strings
_TENSOR_RAW_DATA, _TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 9, 13, 14
_ENTRY_KEY, _ENTRY_VALUE = 1, 2
_DATA_LOCATION_EXTERNAL = 1


@dataclass
class ScanResult:
    """The weight-free skeleton and what was lifted out of it."""

    skeleton: bytes
    lifted_tensors: int = 0
    lifted_bytes: int = 0
    embedded_tensors: int = 0  # small tensors left inline
    external_refs: int = 0  # tensors that already referenced external files
    notes: list[str] = field(default_factory=list)
    # what ``lift_lists`` took off large scalar-list attributes (``compact_attrs.lift``),
    # marker -> (compact value, the attribute's own doc_string)
    lists: dict = field(default_factory=dict)


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field_number: int, wire_type: int) -> bytes:
    return _encode_varint((field_number << 3) | wire_type)


def _len_field(field_number: int, payload: bytes) -> bytes:
    return _key(field_number, LEN) + _encode_varint(len(payload)) + payload


#: Replaces one attribute holding a scalar list (its bytes) by smaller bytes, recording what it
#: took in the dict; None keeps it (``compact_attrs.lift``).
ListLifter = Callable[[memoryview, dict], "bytes | None"]


class _Rewriter:
    def __init__(
        self,
        buf: memoryview,
        location: str,
        threshold: int,
        lift_lists: ListLifter | None = None,
        release: Callable[[int, int], None] | None = None,
    ) -> None:
        self.buf = buf
        self.location = location
        self.threshold = threshold
        self.lift_lists = lift_lists
        self.release = release
        self.result = ScanResult(skeleton=b"")

    def _message(
        self,
        start: int,
        end: int,
        children: dict[int, Callable[[int, int], bytes | None]],
    ) -> bytes | None:
        """Rewrite one message; None means "unchanged, copy the original bytes"."""
        pieces: list[bytes | memoryview] = []
        changed = False
        for fnum, wtype, fstart, pstart, pend in iter_fields(self.buf, start, end):
            handler = children.get(fnum) if wtype == LEN else None
            new = handler(pstart, pend) if handler else None
            if new is None:
                pieces.append(self.buf[fstart:pend])
            else:
                pieces.append(_len_field(fnum, new))
                changed = True
        if not changed:
            return None
        return b"".join(pieces)

    def model(self, start: int, end: int) -> bytes | None:
        return self._message(
            start, end, {_MODEL_GRAPH: self.graph, _MODEL_FUNCTIONS: self.function}
        )

    def graph(self, start: int, end: int) -> bytes | None:
        return self._message(start, end, {_GRAPH_NODE: self.node, _GRAPH_INITIALIZER: self.tensor})

    def function(self, start: int, end: int) -> bytes | None:
        return self._message(start, end, {_FUNCTION_NODE: self.node})

    def node(self, start: int, end: int) -> bytes | None:
        return self._message(start, end, {_NODE_ATTRIBUTE: self.attribute})

    def attribute(self, start: int, end: int) -> bytes | None:
        # An attribute holds one kind of value. A list of scalars (a forest's ``nodes_*``:
        # skl2onnx writes them unpacked, one field per value) cannot hold a tensor: stop at
        # its first element instead of walking 500k fields in Python (a 24 MiB RandomForest:
        # 148 s of a 169 s `optimize` went here). Writers put fields in number order, so a
        # tensor or graph (5, 6) comes before the lists (7-9); a file that mixes them keeps
        # its tensor inline (copied as is), which is correct, only not lazily loaded.
        for fnum, _, _, _, _ in iter_fields(self.buf, start, end):
            if fnum in _ATTR_SCALAR_LISTS:
                # a long list (a forest's): parsed alone and kept compact, never as part of
                # the skeleton (a 24 MiB forest's skeleton parse was ~+100 MiB)
                if self.lift_lists is None:
                    return None
                lifted = self.lift_lists(self.buf[start:end], self.result.lists)
                if lifted is not None and self.release is not None:
                    self.release(start, end)  # read once: its pages need not stay mapped
                return lifted
            if fnum in (_ATTR_T, _ATTR_G, _ATTR_TENSORS, _ATTR_GRAPHS):
                break
        return self._message(
            start,
            end,
            {
                _ATTR_T: self.tensor,
                _ATTR_G: self.graph,
                _ATTR_TENSORS: self.tensor,
                _ATTR_GRAPHS: self.graph,
            },
        )

    def tensor(self, start: int, end: int) -> bytes | None:
        raw: tuple[int, int, int] | None = None  # field_start, payload_start, payload_end
        external = False
        for fnum, wtype, fstart, pstart, pend in iter_fields(self.buf, start, end):
            if fnum == _TENSOR_RAW_DATA and wtype == LEN:
                raw = (fstart, pstart, pend)
            elif fnum == _TENSOR_DATA_LOCATION and wtype == VARINT:
                value, _ = read_varint(self.buf, pstart, pend)
                external = value == _DATA_LOCATION_EXTERNAL
        if external:
            self.result.external_refs += 1
            return None
        if raw is None or raw[2] - raw[1] < self.threshold:
            self.result.embedded_tensors += 1
            return None
        fstart, pstart, pend = raw
        self.result.lifted_tensors += 1
        self.result.lifted_bytes += pend - pstart
        entries = b"".join(
            _len_field(
                _TENSOR_EXTERNAL_DATA,
                _len_field(_ENTRY_KEY, key.encode()) + _len_field(_ENTRY_VALUE, value.encode()),
            )
            for key, value in (
                ("location", self.location),
                ("offset", str(pstart)),
                ("length", str(pend - pstart)),
            )
        )
        return b"".join(
            [
                self.buf[start:fstart],
                self.buf[pend:end],
                entries,
                _key(_TENSOR_DATA_LOCATION, VARINT),
                _encode_varint(_DATA_LOCATION_EXTERNAL),
            ]
        )


def _drop_pages(mm: mmap.mmap, start: int, end: int) -> None:
    """Drop the whole pages of ``mm[start:end]`` from the process's resident set.

    Why: a file's mapped pages count in the RSS once read, until the map is closed; a
    forest's lists (24 MiB, each read once by the lifter) stayed resident to the end of the
    scan, +24 MiB over what it keeps (VmHWM of a load: 100 -> 76 MiB measured). The pages
    stay in the page cache; a later read of the range faults them in again, unchanged
    (a read-only shared map)."""
    page = mmap.PAGESIZE
    first, last = -(-start // page) * page, end // page * page
    if last > first and hasattr(mm, "madvise"):
        mm.madvise(mmap.MADV_DONTNEED, first, last - first)


def scan_model_file(
    path: str, location: str, threshold: int = 1024, lift_lists: ListLifter | None = None
) -> ScanResult:
    """Build the weight-free skeleton of the .onnx at ``path``.

    ``location`` is the name written into the lifted tensors' external-data entries (the
    .onnx file's own name, resolved against its folder). ``lift_lists`` is given each
    attribute that holds a scalar list. Raises ModelLoadError
    for truncated or non-protobuf input.
    """
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size == 0:
            raise ModelLoadError(f"{path}: file is empty, not an ONNX model")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    buf = memoryview(mm)
    result: ScanResult | None = None
    try:
        rewriter = _Rewriter(buf, location, threshold, lift_lists, partial(_drop_pages, mm))
        new = rewriter.model(0, size)
        rewriter.result.skeleton = new if new is not None else bytes(buf)
        result = rewriter.result
    except (Truncated, IndexError):
        pass  # raised below, once no frame holds a view into the map
    rewriter = None  # type: ignore[assignment]
    buf.release()
    mm.close()
    if result is None:
        raise ModelLoadError(
            f"{path}: truncated or not an ONNX model (protobuf structure is broken)"
        )
    return result
