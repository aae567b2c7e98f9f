"""``flush-subnormals``: f32 weights' subnormal values become zero.

Why: OpenVINO's CPU plugin shares a Constant's memory with the model only when its f32 data has
no subnormals; otherwise ``compile_model`` clones the weight (MEASURING.md). Flushing them ahead
of time lets it share. A subnormal f32 is below 1.18e-38 in magnitude, so each changed weight
moves by less than that; outputs change only where such tiny values mattered (the pass reports
how many values changed and the largest change). Tensors are streamed in chunks: a tensor with
no subnormals is read once and left untouched; a rewritten one goes, chunk by chunk, to a spill
file (``SpillFile``) that the writer copies from, so weights are never all held in memory.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import tempfile
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from memshrink.manager import Pass, PassContext, PassResult
from memshrink.model import iter_tensor_slots
from memshrink.transforms import register
from memshrink.transforms.dedup_weights import iter_tensor_chunks

TINY = float(np.finfo(np.float32).tiny)
#: Rewritten tensors at least this big go to the spill file instead of the heap.
SPILL_MIN_BYTES = 64 << 10
_ALIGN = 4096


class SpillFile:
    """A temp file holding rewritten weights until the model is saved (removed at exit).

    Why: a pass that rewrites many weights would otherwise keep every rewritten tensor in the
    heap until the writer runs. Pages written here live in the page cache, not in the RSS, and
    the writer copies them file-to-file like any external weight.
    """

    _shared: SpillFile | None = None

    def __init__(self) -> None:
        fd, path = tempfile.mkstemp(prefix="memshrink-spill-", suffix=".data")
        self.fd = fd
        self.path = path
        self.size = 0
        atexit.register(self.close)

    @classmethod
    def shared(cls) -> SpillFile:
        if cls._shared is None or cls._shared.fd < 0:
            cls._shared = cls()
        return cls._shared

    def begin(self) -> int:
        self.size = (self.size + _ALIGN - 1) // _ALIGN * _ALIGN
        return self.size

    def write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view.nbytes:
            n = os.pwrite(self.fd, view, self.size)
            self.size += n
            view = view[n:]

    def tensor(
        self, offset: int, dtype: ir.DataType, shape: tuple[int, ...], name: str
    ) -> ir.ExternalTensor:
        length = self.size - offset
        return ir.ExternalTensor(
            os.path.basename(self.path),
            offset,
            length,
            dtype,
            shape=ir.Shape(shape),
            name=name,
            base_dir=os.path.dirname(self.path),
        )

    def add_array(self, array: np.ndarray, dtype: ir.DataType, name: str) -> ir.TensorProtocol:
        """Store ``array`` (small ones stay in memory) and return a tensor for it."""
        if array.nbytes < SPILL_MIN_BYTES:
            return ir.Tensor(np.ascontiguousarray(array), dtype=dtype, name=name)
        offset = self.begin()
        self.write(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data)
        return self.tensor(offset, dtype, tuple(array.shape), name)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path)


def _subnormals(chunk: np.ndarray) -> np.ndarray:
    return (np.abs(chunk) < TINY) & (chunk != 0)


def _f32_chunks(tensor: ir.TensorProtocol):  # type: ignore[no-untyped-def]
    if isinstance(tensor, ir.ExternalTensor):
        for piece in iter_tensor_chunks(tensor):
            yield np.frombuffer(piece, dtype="<f4")
    else:
        yield np.asarray(tensor.numpy(), dtype=np.float32).reshape(-1)


@register
class FlushSubnormalsPass(Pass):
    name = "flush-subnormals"
    summary = "Set subnormal f32 weights to 0 so OpenVINO CPU shares weights instead of cloning."
    targets = ("session-creation",)
    exact = "not bit-exact: weights with |x| < 1.18e-38 become 0 (each moves by < 1.18e-38)"

    @dataclass
    class Options:
        min_bytes: int = 0  # skip tensors smaller than this

    def run(self, model: ir.Model, context: PassContext) -> PassResult:
        scanned = changed_tensors = changed_values = 0
        max_change = 0.0
        for tensor, setter in list(iter_tensor_slots(model)):
            if tensor.dtype != ir.DataType.FLOAT or tensor.nbytes < max(self.options.min_bytes, 4):
                continue
            scanned += 1
            count = 0
            for chunk in _f32_chunks(tensor):
                mask = _subnormals(chunk)
                n = int(np.count_nonzero(mask))
                if n:
                    count += n
                    max_change = max(max_change, float(np.max(np.abs(chunk[mask]))))
            if not count:
                continue
            changed_tensors += 1
            changed_values += count
            setter(self._flushed(tensor))
        return PassResult(
            modified=changed_tensors > 0,
            stats={
                "tensors_scanned": scanned,
                "tensors_changed": changed_tensors,
                "values_changed": changed_values,
                "max_change": max_change,
            },
        )

    @staticmethod
    def _flushed(tensor: ir.TensorProtocol) -> ir.TensorProtocol:
        shape = tuple(tensor.shape.numpy())
        name = tensor.name or ""
        if tensor.nbytes < SPILL_MIN_BYTES:
            arr = np.array(tensor.numpy(), dtype=np.float32, copy=True)
            arr[_subnormals(arr)] = 0.0
            return ir.Tensor(arr, dtype=ir.DataType.FLOAT, name=name)
        spill = SpillFile.shared()
        offset = spill.begin()
        for chunk in _f32_chunks(tensor):
            fixed = chunk.copy()
            fixed[_subnormals(fixed)] = 0.0
            spill.write(fixed.astype("<f4", copy=False).view(np.uint8).data)
        return spill.tensor(offset, ir.DataType.FLOAT, shape, name)
