"""A model's graph inputs/outputs, read without reading its weights.

Why: feeds are made in the parent from the declared inputs, and a model with embedded weights
would otherwise be parsed whole (hundreds of MiB) just to learn a few names and shapes. The file
is memory-mapped and the protobuf wire format is walked: initializers are skipped by length,
except for their names and dims (used to infer valid index ranges for ``Gather``).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import onnx
from onnx import TensorProto

from memshrink.errors import ModelLoadError
from memshrink.protowire import LEN, VARINT, Truncated, iter_fields, read_varint

# Field numbers from onnx.proto.
_MODEL_GRAPH, _MODEL_METADATA = 7, 14
_ENTRY_KEY, _ENTRY_VALUE = 1, 2
_GRAPH_NODE, _GRAPH_INIT, _GRAPH_INPUT, _GRAPH_OUTPUT = 1, 5, 11, 12
_TENSOR_DIMS, _TENSOR_DATA_TYPE, _TENSOR_NAME = 1, 2, 8
#: element types that make a graph compute below f32 (its rounding then depends on where a
#: runtime places each kernel: see ``ModelIO.reduced_float``)
_REDUCED_FLOATS: dict[int, str] = {TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "bfloat16"}
_NODE_OP_TYPE = 4

Dim = int | str | None


@dataclass
class TensorInfo:
    name: str
    elem_type: int
    dims: list[Dim] | None  # None: no shape declared (unknown rank)

    @property
    def dtype(self) -> str:
        return str(onnx.helper.tensor_dtype_to_np_dtype(self.elem_type))


@dataclass
class ModelIO:
    """What feeding and comparing need: inputs (minus initializers), outputs, Gather bounds."""

    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    index_bounds: dict[str, int] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)  # the model's metadata_props
    # "float16"/"bfloat16" when a weight or a graph input/output has that type: the graph
    # computes (partly) below f32, even behind f32 inputs and outputs (keep_io_types)
    reduced_float: str | None = None


def _fields(buf: mmap.mmap, start: int, end: int) -> Iterator[tuple[int, int, Any]]:
    """Yield ``(field, wire_type, value_or_(start, end))`` for one message's varint and
    length-delimited fields (the fixed-size ones are skipped)."""
    for fnum, wt, _, ps, pe in iter_fields(buf, start, end):
        if wt == VARINT:
            yield fnum, wt, read_varint(buf, ps, pe)[0]
        elif wt == LEN:
            yield fnum, wt, (ps, pe)


def _dims_of(vi: onnx.ValueInfoProto) -> list[Dim] | None:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    out: list[Dim] = []
    for d in t.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:  # -1: "unknown" (older converters)
            out.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            out.append(d.dim_param)
        else:
            out.append(None)
    return out


def _tensor_name_dims(buf: mmap.mmap, start: int, end: int) -> tuple[str, list[int], int]:
    """A TensorProto's name, dims and element type (its data is skipped by length)."""
    name, dims, dtype = "", [], 0
    for fnum, wt, val in _fields(buf, start, end):
        if fnum == _TENSOR_DATA_TYPE and wt == 0:
            dtype = val
        elif fnum == _TENSOR_NAME and wt == 2:
            s, e = val
            name = bytes(buf[s:e]).decode()
        elif fnum == _TENSOR_DIMS and wt == 0:
            dims.append(val)
        elif fnum == _TENSOR_DIMS and wt == 2:  # packed
            s, e = val
            p = s
            while p < e:
                d, p = read_varint(buf, p, e)
                dims.append(d)
    return name, dims, dtype


def read_model_io(path: str | os.PathLike) -> ModelIO:
    """Inputs/outputs of the ONNX file at ``path``; weights are never read."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _scan(buf)
    except (OSError, ValueError, IndexError) as exc:
        raise ModelLoadError(f"cannot read ONNX model {os.fspath(path)}: {exc}") from exc
    except Truncated:
        raise ModelLoadError(
            f"{os.fspath(path)}: truncated or not an ONNX model (protobuf structure is broken)"
        ) from None


def _scan(buf: mmap.mmap) -> ModelIO:
    graph = None
    metadata: dict[str, str] = {}
    for fnum, wt, val in _fields(buf, 0, len(buf)):
        if fnum == _MODEL_GRAPH and wt == 2:
            graph = val
        elif fnum == _MODEL_METADATA and wt == 2:
            entry = {k: bytes(buf[v[0] : v[1]]).decode("utf-8", "replace")
                     for k, w, v in _fields(buf, *val) if w == 2}  # fmt: skip
            metadata[entry.get(_ENTRY_KEY, "")] = entry.get(_ENTRY_VALUE, "")
    if graph is None:
        raise ModelLoadError("no graph in the file (not an ONNX model?)")
    inits: dict[str, list[int]] = {}
    types: set[int] = set()
    inputs: list[onnx.ValueInfoProto] = []
    outputs: list[onnx.ValueInfoProto] = []
    nodes: list[onnx.NodeProto] = []
    for fnum, wt, val in _fields(buf, *graph):
        if wt != 2:
            continue
        s, e = val
        if fnum == _GRAPH_INIT:
            name, dims, dtype = _tensor_name_dims(buf, s, e)
            inits[name] = dims
            types.add(dtype)
        elif fnum == _GRAPH_INPUT:
            inputs.append(onnx.ValueInfoProto.FromString(bytes(buf[s:e])))
        elif fnum == _GRAPH_OUTPUT:
            outputs.append(onnx.ValueInfoProto.FromString(bytes(buf[s:e])))
        elif fnum == _GRAPH_NODE and _op_type(buf, s, e) == b"Gather":
            # only Gathers are read: parsing every node would copy a forest's attribute
            # lists (~4x the file: the parent of `verify` peaked at 645 MiB for 24 MiB)
            nodes.append(onnx.NodeProto.FromString(bytes(buf[s:e])))
    ins = [
        TensorInfo(vi.name, vi.type.tensor_type.elem_type, _dims_of(vi))
        for vi in inputs
        if vi.name not in inits
    ]
    outs = [TensorInfo(vi.name, vi.type.tensor_type.elem_type, _dims_of(vi)) for vi in outputs]
    bounds = _gather_bounds(nodes, inits, {i.name for i in ins})
    types |= {t.elem_type for t in ins + outs}
    low = sorted(_REDUCED_FLOATS[t] for t in types & _REDUCED_FLOATS.keys())
    return ModelIO(ins, outs, bounds, metadata, low[0] if low else None)


def _op_type(buf: mmap.mmap, start: int, end: int) -> bytes:
    """A NodeProto's op_type, read from its fields (an attribute is one field, whatever its
    size: nothing is parsed)."""
    for fnum, wt, _, pstart, pend in iter_fields(buf, start, end):
        if fnum == _NODE_OP_TYPE and wt == LEN:
            return bytes(buf[pstart:pend])
    return b""


def _gather_bounds(
    nodes: list[onnx.NodeProto], inits: dict[str, list[int]], input_names: set[str]
) -> dict[str, int]:
    """Integer inputs used directly as Gather indices into an initializer: valid upper bound."""
    bounds: dict[str, int] = {}
    for n in nodes:
        if n.op_type != "Gather" or n.domain not in ("", "ai.onnx") or len(n.input) < 2:
            continue
        data, idx = n.input[0], n.input[1]
        if idx not in input_names or data not in inits:
            continue
        axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
        shape = inits[data]
        if -len(shape) <= axis < len(shape):
            size = shape[axis]
            bounds[idx] = min(bounds.get(idx, size), size)
    return bounds
