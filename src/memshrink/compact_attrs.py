"""Large scalar-list attributes (a tree ensemble's ``nodes_*``) kept out of Python objects.

onnx_ir stores an INTS/FLOATS attribute as a tuple of Python ints/floats (32 bytes an element
where the file spends 4-8) and a STRINGS attribute as one ``str`` per element (~60 bytes).
skl2onnx writes a forest into such lists: a 24 MiB RandomForest became ~220 MiB of Python
objects per loaded copy, and ``optimize`` loads it up to three times. No pass reads these
values; they are carried to the save. So, at load, a list of at least :data:`THRESHOLD`
elements is taken off the proto *before* onnx_ir sees it and put back as a
:class:`CompactList` (a read-only numpy array that behaves like the tuple and serializes to
the same bytes) or, for strings, a tuple whose equal elements share one ``str``.

The estimator's protos need the structure, types and small attributes only: the helpers at
the end drop the large lists from them (in place, or while parsing ONNX inference's bytes) and
keep each one's element count (:func:`note_lengths`).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections import Counter
from collections.abc import Hashable, Iterable, Iterator, Sequence, Sized
from typing import Any, overload

import numpy as np
import onnx
import onnx_ir as ir

from memshrink.irgraphs import graphs
from memshrink.protoscan import _encode_varint, _key, _len_field
from memshrink.protowalk import all_graphs
from memshrink.protowire import LEN, iter_fields

#: Lists shorter than this stay ordinary tuples (kernel_shape, perm, ... are tiny).
THRESHOLD = 4096
_MARK = "\x00memshrink.compact:"
_CHUNK = 1 << 16  # elements converted to Python objects at a time when iterating


class CompactList(Sequence):
    """A read-only INTS/FLOATS attribute value backed by one numpy array (float32, the proto's
    own type; ints in the narrowest type holding them): every element round-trips exactly."""

    __slots__ = ("_arr", "_digest")

    def __init__(self, arr: np.ndarray) -> None:
        arr = np.ascontiguousarray(arr)
        arr.setflags(write=False)
        self._arr = arr
        self._digest: bytes | None = None

    @property
    def array(self) -> np.ndarray:
        """The values (read-only)."""
        return self._arr

    def __len__(self) -> int:
        return int(self._arr.shape[0])

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[Any, ...]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return tuple(self._arr[i].tolist())
        return self._arr[i].item()

    def __iter__(self) -> Iterator[Any]:
        # In chunks: a full ``tolist`` would briefly hold every element as a Python object.
        for start in range(0, len(self), _CHUNK):
            yield from self._arr[start : start + _CHUNK].tolist()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CompactList):
            return bool(np.array_equal(self._arr, other._arr))
        if isinstance(other, (tuple, list)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:  # not the equal tuple's hash: don't mix both as dict keys
        return hash(self.digest())

    def digest(self) -> bytes:
        """A content hash (dtype and bytes), computed once: the estimator fingerprints the
        graph after every pass."""
        if self._digest is None:
            h = hashlib.blake2b(str(self._arr.dtype).encode(), digest_size=16)
            h.update(self._arr.tobytes())  # a copy of one list, once per list
            self._digest = h.digest()
        return self._digest

    def __repr__(self) -> str:
        return f"CompactList({len(self)} x {self._arr.dtype}, blake2b={self.digest().hex()})"


class _CompactAttr(ir.Attr):
    """An ``ir.Attr`` whose value is kept as given (``Attr.__init__`` would make a tuple)."""

    __slots__ = ()

    def __init__(
        self, name: str, type_: ir.AttributeType, value: Any, doc_string: str | None
    ) -> None:
        super().__init__(name, type_, None, doc_string=doc_string)
        self._value = value


def _narrow(arr: np.ndarray) -> np.ndarray:
    """The smallest signed int type holding every value (node ids, feature ids and flags fit
    int32 or int8): 8 bytes an element become 1-4, and ``.item()`` still gives Python ints."""
    if arr.size == 0:
        return arr
    lo, hi = int(arr.min()), int(arr.max())
    for dt in (np.int8, np.int16, np.int32):
        info = np.iinfo(dt)
        if info.min <= lo and hi <= info.max:
            return arr.astype(dt)
    return arr


def _take(attr: onnx.AttributeProto) -> Any | None:
    """The compact value of a large list attribute, its field cleared; None if small."""
    if attr.type == onnx.AttributeProto.FLOATS and len(attr.floats) >= THRESHOLD:
        value: Any = CompactList(np.fromiter(attr.floats, np.float32, len(attr.floats)))
        attr.ClearField("floats")
    elif attr.type == onnx.AttributeProto.INTS and len(attr.ints) >= THRESHOLD:
        value = CompactList(_narrow(np.fromiter(attr.ints, np.int64, len(attr.ints))))
        attr.ClearField("ints")
    elif attr.type == onnx.AttributeProto.STRINGS and len(attr.strings) >= THRESHOLD:
        shared: dict[bytes, str] = {}
        value = tuple(
            shared.get(s) or shared.setdefault(s, s.decode("utf-8")) for s in attr.strings
        )
        attr.ClearField("strings")
    else:
        return None
    return value


def lift(raw: memoryview, taken: dict[str, tuple[Any, str]]) -> bytes | None:
    """``protoscan``'s list lifter: one attribute's bytes with a large list, parsed alone and
    returned without it (marked for :func:`put_back`; the value goes into ``taken``); None
    when its lists are short. The skeleton then never holds the lists: parsing a 24 MiB
    forest's skeleton with them cost ~+100 MiB before :func:`take_large_lists` could run."""
    if len(raw) < THRESHOLD:  # an element takes at least one byte: too short to be large
        return None
    attr = onnx.AttributeProto.FromString(bytes(raw))
    value = _take(attr)
    if value is None:
        return None
    mark = f"{_MARK}s{len(taken)}"
    taken[mark] = (value, attr.doc_string)
    attr.doc_string = mark
    return attr.SerializeToString()


def _proto_nodes(proto: onnx.ModelProto) -> Iterator[onnx.NodeProto]:
    for g in all_graphs(proto):
        yield from g.node
    for f in proto.functions:
        yield from f.node


def has_large_lists(proto: onnx.ModelProto) -> bool:
    """Whether any node attribute holds a list of at least THRESHOLD elements."""
    return any(
        max(len(a.floats), len(a.ints), len(a.strings)) >= THRESHOLD
        for n in _proto_nodes(proto)
        for a in n.attribute
    )


def take_large_lists(proto: onnx.ModelProto) -> dict[str, tuple[Any, str]]:
    """Clear the large lists off ``proto`` (in place), marking each attribute; returns
    marker -> (compact value, the attribute's own doc_string) for :func:`put_back`."""
    taken: dict[str, tuple[Any, str]] = {}
    for node in _proto_nodes(proto):
        for attr in node.attribute:
            value = _take(attr)
            if value is not None:
                mark = f"{_MARK}{len(taken)}"
                taken[mark] = (value, attr.doc_string)
                attr.doc_string = mark
    return taken


def drop_large_lists(proto: onnx.ModelProto) -> int:
    """Clear every list of at least THRESHOLD elements off ``proto`` (in place); returns how
    many. For protos that only describe structure (the estimator's cached, shape-inferred
    view), never for one that is saved or run."""
    dropped = 0
    for node in _proto_nodes(proto):
        for attr in node.attribute:
            for field in ("floats", "ints", "strings"):
                if len(getattr(attr, field)) >= THRESHOLD:
                    attr.ClearField(field)
                    dropped += 1
    return dropped


def _ir_nodes(model: ir.Model) -> Iterator[ir.Node]:
    for graph in graphs(model):
        yield from graph
    for function in model.functions.values():
        yield from ir.traversal.RecursiveGraphIterator(function)


def put_back(model: ir.Model, taken: dict[str, tuple[Any, str]]) -> None:
    """Give the marked attributes of the deserialized ``model`` their compact values."""
    if not taken:
        return
    left = dict(taken)
    for node in _ir_nodes(model):
        for name, attr in list(node.attributes.items()):
            doc = attr.doc_string
            if doc and doc.startswith(_MARK) and doc in left:
                value, own_doc = left.pop(doc)
                node.attributes[name] = _CompactAttr(name, attr.type, value, own_doc or None)
    if left:  # a marker onnx_ir dropped: the values would be lost on save
        raise RuntimeError(f"compact_attrs: {len(left)} attribute list(s) not restored")


#: doc_string the estimator's weight-free proto gives a large list (it survives ONNX's
#: inference and the drops): rules that count elements (ORT's tree ensembles) still can.
LENGTH_NOTE = "memshrink.list_length="


def note_lengths(node: onnx.NodeProto, ir_node: ir.Node) -> None:
    """Write each large list's element count into its attribute's doc_string."""
    for attr in node.attribute:
        value = ir_node.attributes[attr.name].value if attr.name in ir_node.attributes else None
        if isinstance(value, ir.Graph):  # subgraph nodes were serialized in the same order
            value = (value,)
        if isinstance(value, tuple) and value and isinstance(value[0], ir.Graph):
            protos = [attr.g] if attr.HasField("g") else list(attr.graphs)
            for gp, graph in zip(protos, value, strict=False):
                for sub_np, sub_node in zip(gp.node, graph, strict=False):
                    note_lengths(sub_np, sub_node)
        elif isinstance(value, (CompactList, tuple)) and len(value) >= THRESHOLD:
            attr.doc_string = f"{LENGTH_NOTE}{len(value)}"


class ListLength(Sized):
    """A dropped list's element count: ``len`` works; its values are gone (reading them
    raises rather than giving a silent empty list)."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"ListLength({self.n})"


def noted_length(attr: onnx.AttributeProto) -> ListLength | None:
    """The count :func:`note_lengths` wrote, if this attribute's list was dropped."""
    doc = attr.doc_string
    if doc.startswith(LENGTH_NOTE) and not (attr.ints or attr.floats or attr.strings):
        return ListLength(int(doc[len(LENGTH_NOTE) :]))
    return None


def digest_value(value: Any) -> Hashable:
    """A key for an attribute value that allocates little: the cached digest of a
    CompactList, a long tuple of strings itself (its ``repr`` would copy every element),
    else ``repr`` (a float's ``hash`` is not stable for NaN)."""
    if isinstance(value, CompactList):
        return value.digest()
    if isinstance(value, tuple) and len(value) >= THRESHOLD and isinstance(value[0], str):
        return value
    return repr(value)


# Wire-level field numbers (onnx.proto): what can hold a node, and an attribute's lists.
_MODEL_GRAPH, _MODEL_FUNCTIONS, _GRAPH_NODE, _FUNCTION_NODE, _NODE_ATTRIBUTE = 7, 25, 1, 7, 5
_ATTR_G, _ATTR_GRAPHS = 6, 11
_ATTR_LISTS = frozenset({7, 8, 9})  # floats, ints, strings


def parse_without_large_lists(data: bytes) -> onnx.ModelProto:
    """``ModelProto.FromString(data)`` without the lists of at least THRESHOLD elements: the
    shape-inferred model comes back from ONNX's C++ as bytes, and parsing a forest's lists
    costs ~4x the file in Python protobuf; only its structure and types are kept."""
    view = memoryview(data)
    new = _Dropper(view).message(0, len(data), "model")
    return onnx.ModelProto.FromString(bytes(view) if new is None else new)


class _PathRewriter:
    """Rebuilds only the messages on a path to a rewritten field (protoscan's approach);
    subclasses say which fields change (``_field``) and which messages change whole
    (``_enter``). Everything else is copied as bytes."""

    _CHILDREN = {
        "model": {_MODEL_GRAPH: "graph", _MODEL_FUNCTIONS: "function"},
        "graph": {_GRAPH_NODE: "node"},
        "function": {_FUNCTION_NODE: "node"},
        "node": {_NODE_ATTRIBUTE: "attribute"},
        "attribute": {_ATTR_G: "graph", _ATTR_GRAPHS: "graph"},
    }

    def __init__(self, buf: memoryview) -> None:
        self.buf = buf

    def _enter(self, start: int, end: int, kind: str) -> bool:
        """Whether the message at ``start:end`` changes whatever its fields do."""
        return False

    def _field(
        self, kind: str, fnum: int, wtype: int, pstart: int, pend: int, entered: bool
    ) -> list[Any] | None:
        """The bytes that replace one field ([] drops it), or None to keep or descend."""
        return None

    def message(self, start: int, end: int, kind: str) -> bytes | None:
        pieces = self.pieces(start, end, kind)
        return None if pieces is None else b"".join([piece_bytes(p) for p in pieces])

    def pieces(self, start: int, end: int, kind: str) -> list[Any] | None:
        """The rewritten message as pieces to concatenate (None: unchanged). Why pieces: a
        nested message's bytes joined at every level were a copy of the whole model per level
        (a forest's save: graph, node and model copies of 24 MiB at once)."""
        entered = self._enter(start, end, kind)
        children = self._CHILDREN[kind]
        pieces: list[Any] = []
        changed = entered
        for fnum, wtype, fstart, pstart, pend in iter_fields(self.buf, start, end):
            replaced = self._field(kind, fnum, wtype, pstart, pend, entered)
            if replaced is not None:
                pieces.extend(replaced)
                changed = True
                continue
            child = children.get(fnum) if wtype == LEN else None
            new = self.pieces(pstart, pend, child) if child else None
            if new is None:
                pieces.append(self.buf[fstart:pend])
            else:
                size = sum(len(p) for p in new)
                pieces.append(_key(fnum, LEN) + _encode_varint(size))
                pieces.extend(new)
                changed = True
        return pieces if changed else None


class _Dropper(_PathRewriter):
    """Drops the lists of every attribute that holds at least THRESHOLD elements."""

    def _large(self, start: int, end: int) -> bool:
        """Whether the attribute's lists hold at least THRESHOLD elements (an element takes
        1-11 bytes unpacked, so short spans are decided without walking them)."""
        if end - start < 2 * THRESHOLD:
            return False
        count = 0
        for fnum, wtype, _, pstart, pend in iter_fields(self.buf, start, end):
            if fnum in _ATTR_LISTS:
                if wtype == LEN and fnum != 9:  # packed floats / ints
                    count += (pend - pstart) // 4 if fnum == 7 else _varints(self.buf, pstart, pend)
                else:
                    count += 1
                if count >= THRESHOLD:
                    return True
        return False

    def _enter(self, start: int, end: int, kind: str) -> bool:
        return kind == "attribute" and self._large(start, end)

    def _field(
        self, kind: str, fnum: int, wtype: int, pstart: int, pend: int, entered: bool
    ) -> list[Any] | None:
        return [] if entered and fnum in _ATTR_LISTS else None


#: (domain, op type) -> prefixes of the list attributes whose *contents* ONNX's inference
#: function never reads (it tests only their presence): a tree ensemble's per-node and per-leaf
#: lists. Its outputs' types come from ``classlabels_*`` and ``n_targets``, which are not here.
#: Why: inferring a forest with its lists spliced in makes ONNX's C++ parse them (24 MiB
#: RandomForest: +150 MiB RSS per inference). ``test_estimate_list_free_inference.py``.
INFERENCE_IGNORES: dict[tuple[str, str], tuple[str, ...]] = {
    ("ai.onnx.ml", "TreeEnsembleClassifier"): ("nodes_", "class_"),
    ("ai.onnx.ml", "TreeEnsembleRegressor"): ("nodes_", "target_"),
}


def inference_ignores(proto: onnx.ModelProto, table: dict[bytes, tuple[Any, str]]) -> bool:
    """Whether every list marked in ``proto`` (``table``: :func:`marked`'s) sits in its main
    graph on an attribute :data:`INFERENCE_IGNORES` names: then ONNX's inference gives the
    same result with the lists spliced in and without them."""
    found = 0
    for node in proto.graph.node:
        prefixes = INFERENCE_IGNORES.get((node.domain, node.op_type), ())
        for a in node.attribute:
            if a.doc_string.encode() in table:
                if not a.name.startswith(prefixes):
                    return False
                found += 1
    return found == len(table)  # else a marker elsewhere (a subgraph, a function)


def _varints(buf: memoryview, start: int, end: int) -> int:
    """How many varints a packed payload holds (bytes without the continuation bit)."""
    return int(np.count_nonzero(np.frombuffer(buf[start:end], np.uint8) < 0x80))


# ---------------------------------------------------------------- writing lists without a proto

_KEY_FLOATS, _KEY_INTS, _KEY_STRINGS = 0x3D, 0x40, 0x4A  # fields 7 (I32), 8 (VARINT), 9 (LEN)
_ATTR_DOC = 13


def holds_large_list(node: ir.Node) -> bool:
    """Whether ``node`` has a list attribute that :func:`marked` would take out."""
    return any(a.type in _LIST_TYPES and _is_large(a.value) for a in node.attributes.values())


def _is_large(value: Any) -> bool:
    if isinstance(value, CompactList):
        return True
    return isinstance(value, tuple) and len(value) >= THRESHOLD and isinstance(value[0], str)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if not n:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def wire_list(value: Any) -> bytes:
    """The list's fields as protobuf writes them for an AttributeProto (unpacked: onnx.proto is
    proto2): one key per element, then a float's 4 bytes, an int's varint (two's complement,
    10 bytes when negative) or a string's length and bytes. Built with numpy from the array,
    never as a repeated field of Python objects."""
    return b"".join(list(wire_slices(value)))


def wire_slices(value: Any) -> Iterator[bytes]:
    """:func:`wire_list`'s bytes, ``_WIRE_SLICE`` elements at a time (joined, the same bytes).

    Why slices: the varint arithmetic holds ~50 bytes an element in temporaries (a forest's
    740k-element class_ids: +37 MiB at the save), and a save that writes each slice as it is
    made never holds a whole list's fields (a forest's 493k ``nodes_modes`` strings: a list of
    493k references and 5.9 MB joined, +22 MiB measured, per list)."""
    n = len(value)
    if not isinstance(value, CompactList):
        fields: dict[str, bytes] = {}
        for i in range(0, n, _WIRE_SLICE):
            yield b"".join([_string_field(s, fields) for s in value[i : i + _WIRE_SLICE]])
        return
    arr = value.array
    for i in range(0, n, _WIRE_SLICE):
        part = arr[i : i + _WIRE_SLICE]
        if arr.dtype == np.float32:
            rows = np.empty((len(part), 5), np.uint8)
            rows[:, 0] = _KEY_FLOATS
            rows[:, 1:] = part.astype("<f4").view(np.uint8).reshape(len(part), 4)
            yield rows.tobytes()
        else:
            yield _wire_ints(part.astype(np.int64).view(np.uint64))


def _string_field(s: str, fields: dict[str, bytes]) -> bytes:
    """One STRINGS element's field (key, length, UTF-8 bytes), made once per distinct string
    (``fields`` remembers them: a forest's modes are a few strings repeated)."""
    enc = fields.get(s)
    if enc is None:
        raw = s.encode("utf-8")
        enc = fields[s] = bytes([_KEY_STRINGS]) + _varint(len(raw)) + raw
    return enc


_WIRE_SLICE = 1 << 16  # elements


def _varint_sizes(v: np.ndarray) -> np.ndarray:
    """Bytes of each varint of the int64 values ``v`` (viewed as uint64): 1 + one per
    further 7 bits (10 for a negative value)."""
    nb = np.ones(len(v), np.int64)
    for k in range(1, 10):
        nb += v >= np.uint64(1 << (7 * k))
    return nb


class WireList:
    """A marked list's fields (:func:`wire_list`), made only when written: ``len()`` counts
    them without making them.

    Why: a save spliced every list's fields into pieces before writing the first byte (a
    nested message's length prefix needs its children's sizes), so all of them were in
    memory at once: the 24 MiB forest's save peaked at +54 MiB over what the process held.
    With the sizes counted ahead, the writer makes one list's fields at a time."""

    __slots__ = ("value", "_size")

    def __init__(self, value: Any) -> None:
        self.value = value
        self._size: int | None = None

    def __len__(self) -> int:
        if self._size is None:
            self._size = _wire_size(self.value)
        return self._size

    def tobytes(self) -> bytes:
        return wire_list(self.value)

    def slices(self) -> Iterator[bytes]:
        """The fields a slice at a time (:func:`wire_slices`): what the save writes."""
        return wire_slices(self.value)


def _wire_size(value: Any) -> int:
    """``len(wire_list(value))`` without building it (strings: each distinct one's field
    times its count)."""
    if not isinstance(value, CompactList):
        fields: dict[str, bytes] = {}
        return sum(len(_string_field(s, fields)) * k for s, k in Counter(value).items())
    arr = value.array
    n = len(arr)
    if arr.dtype == np.float32:
        return 5 * n
    return n + sum(
        int(_varint_sizes(arr[i : i + _WIRE_SLICE].astype(np.int64).view(np.uint64)).sum())
        for i in range(0, n, _WIRE_SLICE)
    )


def piece_bytes(piece: bytes | memoryview | WireList) -> bytes | memoryview:
    """A piece of :func:`splice_pieces` as bytes (a :class:`WireList` made now)."""
    return piece.tobytes() if isinstance(piece, WireList) else piece


def piece_slices(pieces: Iterable[bytes | memoryview | WireList]) -> Iterator[bytes | memoryview]:
    """The pieces of :func:`splice_pieces` as bytes to write one after another, each
    :class:`WireList` a slice at a time (never one list's fields whole)."""
    for piece in pieces:
        if isinstance(piece, WireList):
            yield from piece.slices()
        else:
            yield piece


def _wire_ints(v: np.ndarray) -> bytes:
    """:func:`wire_list`'s fields of the int64 values ``v`` (viewed as uint64)."""
    n = len(v)
    nb = _varint_sizes(v)
    ends = np.cumsum(nb + 1)
    starts = ends - nb - 1
    out = np.empty(int(ends[-1]) if n else 0, np.uint8)
    out[starts] = _KEY_INTS
    for k in range(10):
        m = nb > k
        if not m.any():
            break
        byte = ((v[m] >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        byte[nb[m] > k + 1] |= 0x80
        out[starts[m] + 1 + k] = byte
    return out.tobytes()


@contextlib.contextmanager
def marked(model: ir.Model, table: dict[bytes, tuple[Any, str]], note: bool = False):
    """While inside, every large list attribute of ``model`` is an empty list marked in its
    ``doc_string``; ``table`` gets marker -> (value, the doc_string :func:`splice` writes: the
    attribute's own, or with ``note`` its :data:`LENGTH_NOTE`). Serialize inside, then
    :func:`splice` the bytes."""
    swapped: list[tuple[ir.Node, str, ir.Attr]] = []
    try:
        for node in _ir_nodes(model):
            for name, attr in list(node.attributes.items()):
                if attr.type in _LIST_TYPES and _is_large(attr.value):
                    mark = f"{_MARK}w{len(table)}"
                    doc = f"{LENGTH_NOTE}{len(attr.value)}" if note else attr.doc_string or ""
                    table[mark.encode()] = (attr.value, doc)
                    swapped.append((node, name, attr))
                    node.attributes[name] = _CompactAttr(name, attr.type, (), mark)
        yield table
    finally:
        for node, name, attr in reversed(swapped):
            node.attributes[name] = attr


def splice(data: bytes, table: dict[bytes, tuple[Any, str]], strict: bool = True) -> bytes:
    """``data`` (a serialized ModelProto made inside :func:`marked`) with each marked list's
    fields (:func:`wire_list`) where its marker was: the bytes protobuf writes for the model
    with the lists. ``strict``: every marker must be found (a save); the estimator's protos
    leave out functions, or a derived proto may hold some of the nodes only."""
    return b"".join([piece_bytes(p) for p in splice_pieces(data, table, strict)])


def splice_pieces(
    data: bytes, table: dict[bytes, tuple[Any, str]], strict: bool = True
) -> list[Any]:
    """:func:`splice`'s bytes as pieces to write one after another (no joined copy): bytes,
    memoryviews of ``data`` and :class:`WireList` (:func:`piece_bytes` makes each)."""
    if not table:
        return [data]
    splicer = _Splicer(memoryview(data), table)
    new = splicer.pieces(0, len(data), "model")
    if new is None and not strict:
        return [data]
    if new is None or strict and splicer.spliced != len(table):
        raise RuntimeError("compact_attrs: a list marker was lost in serialization")
    return new


_LIST_TYPES = frozenset({ir.AttributeType.INTS, ir.AttributeType.FLOATS, ir.AttributeType.STRINGS})


class _Splicer(_PathRewriter):
    """Writes each marked list's fields where its marker's ``doc_string`` was: a list
    attribute has no fields 10-12, so its lists (7-9) come right before ``doc_string`` (13)
    in protobuf's order."""

    def __init__(self, buf: memoryview, table: dict[bytes, tuple[Any, str]]) -> None:
        super().__init__(buf)
        self.table = table
        self.spliced = 0

    def _field(
        self, kind: str, fnum: int, wtype: int, pstart: int, pend: int, entered: bool
    ) -> list[Any] | None:
        if kind != "attribute" or fnum != _ATTR_DOC or wtype != LEN:
            return None
        hit = self.table.get(bytes(self.buf[pstart:pend]))
        if hit is None:
            return None
        self.spliced += 1
        doc = [_len_field(_ATTR_DOC, hit[1].encode())] if hit[1] else []
        return [WireList(hit[0]), *doc]
