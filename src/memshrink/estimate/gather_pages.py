"""File pages a Gather touches when it reads a memory-mapped table in place (ORT CPU, external data).

ORT maps external initializers and ``Gather`` reads an embedding table's rows straight from the
mapping, so run 1 faults in file-backed pages: resident (``RssFile``), clean, evictable. A read
fault maps the whole aligned ``fault_around_bytes`` window around the faulting page (64 KiB by
default, ``mm/filemap.c``; the file is in the page cache after saving or loading it), so a
lookup of a ``R``-byte row touches the windows that overlap it. For ``n`` uniform random ids
over a ``T``-byte table a given window is missed by one lookup with probability
``1 - (W + R) / T`` (rows straddling a window boundary included), so the expected touched part
is ``T * (1 - (1 - (W + R) / T) ** n)``. Measured on BERT's 94 MB word-embedding table with
numpy reading random rows from the mapped file: 0.092 / 0.305 / 0.770 / 0.996 of the table for
128 / 512 / 2,048 / 8,192 ids, against 0.089 / 0.313 / 0.777 / 0.998 predicted; ORT on BERT
b4x512 after ``external-data`` (2,048 ids, the verifier's uniform ids): +68.9 MiB ``RssFile``
in run 1, 69.5 predicted (with the 1.5 MiB position table).

Caveat (Linux 6.18, ext4): a file written with large ``write`` calls can sit in the page
cache as large folios, and a fault maps the whole folio: a 12 MiB table written in one call was
mapped whole by 32 random reads (1.01 of it), the same table written in 64 KiB pieces or read
back after dropping it from the cache by 0.15 (0.16 predicted). The rule assumes small folios.

Ids that come from a graph input are assumed **uniform random over the whole table** (what
``memshrink verify`` feeds: uniform in the sidecar's range, which for the suite models is the
vocabulary); real text repeats ids and touches less, so this is an upper estimate of the
typical case (the worst case, ``min(1, n * (W + R) / T)``, is only reached by ids chosen to hit
distinct windows). So are ids computed from a graph input by element-wise arithmetic (tf2onnx's
Keras ``Embedding``: ``where(ids < 0, ids + N, ids)`` as Add / Mul / Cast; before session 9 the
rule stopped there and counted 0.2 MiB for 256 ids into a 98 MiB table, measured +12.4 MiB on
the file ``optimize`` wrote, 15.0 predicted now). Ids computed inside the graph without an
input (position ids: ``Range``, a constant, a slice of one) are taken as one contiguous run.
"""

from __future__ import annotations

from dataclasses import dataclass

from memshrink.estimate.graph import GraphInfo

FAULT_AROUND = 64 * 1024  # /sys/kernel/debug/fault_around_bytes, Linux default
PAGE = 4096
# Ops that pass ids through unchanged in value (a random id stays a random id).
_ID_PASSTHROUGH = frozenset(
    {"Cast", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Slice", "Split", "Expand"}
)

# Element-wise arithmetic on ids (tf2onnx lowers Keras ``Embedding``'s negative-index wrap,
# ``where(ids < 0, ids + N, ids)``, to Less / Not / Cast / Mul / Add): an id computed from an
# input id is as random as it is, so every input of these ops is followed.
_ID_ARITH = frozenset({"Add", "Sub", "Mul", "Where", "Min", "Max", "Clip", "Mod", "Abs", "Neg"})


@dataclass
class GatherPages:
    touched: int  # bytes of file pages the runs fault in (all tables)
    tables: dict[str, int]  # table -> touched bytes
    random_ids: bool  # some table is indexed by ids from a graph input (uniform assumption)


def _from_input(g: GraphInfo, name: str) -> bool:
    """Whether ``name``'s values come from a graph input through id-preserving ops."""
    seen: set[str] = set()
    stack = [name]
    while stack:
        n = stack.pop()
        if n in seen or n not in g.tensors:
            continue
        seen.add(n)
        t = g.tensors[n]
        if t.kind == "input":
            return True
        if t.producer is None:
            continue
        node = g.nodes[t.producer]
        if node.op_type in _ID_PASSTHROUGH and node.inputs and node.inputs[0]:
            stack.append(node.inputs[0])
        elif node.op_type in _ID_ARITH:
            stack.extend(i for i in node.inputs if i)
    return False


def touched_fraction(n_ids: int, table: int, row: int, window: int = FAULT_AROUND) -> float:
    """Expected part of a ``table``-byte mapped table that ``n_ids`` uniform random row reads
    of ``row`` bytes fault in, with the kernel's fault-around ``window``."""
    if table <= 0 or n_ids <= 0:
        return 0.0
    p = min(1.0, (window + row) / table)
    return 1.0 - (1.0 - p) ** n_ids


def _contiguous(n_ids: int, table: int, row: int, window: int = FAULT_AROUND) -> int:
    """A run of ``n_ids`` consecutive rows: the windows it spans."""
    return min(table, -(-min(table, n_ids * row) // window) * window)


def gather_pages(
    g: GraphInfo, tables: set[str], id_range: tuple[int, int] | None = None
) -> GatherPages:
    """Predicted file pages touched by the runs in the mapped ``tables`` (initializers read
    only by ``Gather`` along axis 0, ``weights.split_weights``; the caller passes them only when
    the weights are stored externally). ``id_range`` (``[lo, hi)``, the estimator-only session
    option ``memshrink.int_range``, like ``verify --int-range``): input ids are uniform in it,
    so only those rows can be read; default: the whole table."""
    out: dict[str, int] = {}
    random_any = False
    for name in sorted(tables):
        t = g.tensors.get(name)
        if t is None or not t.nbytes or not t.shape:
            continue
        rows = t.shape[0] or 1
        row = t.nbytes // rows
        n_random = n_range = 0
        for c in sorted(set(t.consumers)):
            node = g.nodes[c]
            if node.op_type != "Gather" or len(node.inputs) < 2 or node.inputs[0] != name:
                continue
            if int(node.attrs.get("axis", 0)) != 0:
                continue
            ids = g.tensors.get(node.inputs[1])
            if ids is None or ids.shape is None:
                continue
            n = 1
            for d in ids.shape:
                n *= d
            if _from_input(g, node.inputs[1]):
                n_random += n
            else:
                n_range = max(n_range, n)
        touched = 0
        if n_random:
            random_any = True
            span = t.nbytes
            if id_range is not None:
                lo, hi = max(0, id_range[0]), min(rows, id_range[1])
                span = max(0, hi - lo) * row
            touched = int(span * touched_fraction(n_random, span, row))
        if n_range:
            touched = max(touched, _contiguous(n_range, t.nbytes, row))
        out[name] = -(-touched // PAGE) * PAGE if touched else 0
    return GatherPages(sum(out.values()), out, random_any)
