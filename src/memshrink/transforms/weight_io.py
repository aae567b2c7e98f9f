"""Reading weights without keeping them resident: positional reads instead of memory maps.

Why: ``ExternalTensor.numpy()`` maps the whole data file and keeps the map on the tensor for
as long as the tensor lives. Every page a pass touches then stays in the process's RSS until
the end of the run (GPT-2 large: folding the tied 257 MB LM head left 246 MiB of file pages
mapped through the rest of ``optimize``). ``pread`` copies only what is asked for into a
buffer the caller frees, so a pass holds one block, not the weight.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import tempfile
from collections.abc import Iterator

import numpy as np
import onnx_ir as ir

from memshrink.errors import ModelLoadError

#: Bytes per block when a weight is streamed.
BLOCK = 8 << 20
#: Rewritten tensors at least this big go to the spill file instead of the heap.
SPILL_MIN_BYTES = 64 << 10
_ALIGN = 4096
#: Spill file names: ``.memshrink-spill-<pid>-<random>.data``.
SPILL_PREFIX = ".memshrink-spill-"


class SpillFile:
    """A temp file holding rewritten weights until the model is saved (removed at exit).

    Why: a pass that rewrites many weights would otherwise keep every rewritten tensor in the
    heap until the writer runs. Pages written here live in the page cache, not in the RSS, and
    the writer copies them file-to-file like any external weight.
    """

    _shared: SpillFile | None = None
    #: Folder of new spill files (None: the system's temp folder). ``optimize`` sets it to the
    #: output's folder: a tmpfs ``/tmp`` would hold the rewritten weights in RAM, and the same
    #: file system lets the writer copy them kernel-side (``copy_file_range``).
    directory: str | None = None

    def __init__(self) -> None:
        folder = self.directory if self.directory and os.path.isdir(self.directory) else None
        fd, path = tempfile.mkstemp(
            prefix=f"{SPILL_PREFIX}{os.getpid()}-", suffix=".data", dir=folder
        )
        self.fd = fd
        self.path = path
        self.size = 0
        atexit.register(self.close)

    @classmethod
    def shared(cls) -> SpillFile:
        """The run's spill file; a new one when the last was closed or its folder is gone.

        Why the existence check: tensors name the spill by path, so a spill whose folder was
        moved or deleted (a user moving the last output's folder) must not be written again.
        """
        spill = cls._shared
        if spill is None or spill.fd < 0 or not os.path.exists(spill.path):
            if spill is not None:
                spill.close()
            spill = cls._shared = cls()
        return spill

    @classmethod
    def start_run(cls, directory: str | None) -> None:
        """Begin a new run's spill in ``directory``: each ``optimize`` gets its own file
        next to its own output, never the previous run's (whose folder may have moved)."""
        if cls._shared is not None:
            cls._shared.close()
            cls._shared = None
        cls.directory = directory
        if directory:
            remove_orphan_spills(directory)

    def begin(self) -> int:
        self.size = (self.size + _ALIGN - 1) // _ALIGN * _ALIGN
        return self.size

    def reserve(self, nbytes: int) -> int:
        """Room for ``nbytes`` at an aligned offset (filled later with ``write_at``)."""
        offset = self.begin()
        self.size = offset + nbytes
        return offset

    def write_at(self, data: bytes | memoryview, pos: int) -> None:
        view = memoryview(data).cast("B")
        while view.nbytes:
            n = os.pwrite(self.fd, view, pos)
            pos += n
            view = view[n:]

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


def remove_orphan_spills(directory: str) -> list[str]:
    """Delete spill files in ``directory`` whose process is gone; return their names.

    Why: a spill file is removed at exit, but a killed ``optimize`` (SIGKILL, OOM killer) leaves
    it next to the output, as large as the weights it rewrote. Its name carries the writing
    process's id, so a later run can tell an orphan from a live run's file."""
    removed = []
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            if not (name.startswith(SPILL_PREFIX) and name.endswith(".data")):
                continue
            pid = name[len(SPILL_PREFIX) :].split("-", 1)[0]
            if not pid.isdigit() or _alive(int(pid)):
                continue
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(directory, name))
                removed.append(name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _pread_into(fd: int, view: memoryview, pos: int) -> None:
    """Fill ``view`` from ``fd`` at ``pos`` (loops over short reads)."""
    done = 0
    while done < view.nbytes:
        n = os.preadv(fd, [view[done:]], pos + done)
        if n <= 0:
            raise OSError(f"file ended early at byte {pos + done}")
        done += n


def _storage_dtype(tensor: ir.TensorProtocol) -> np.dtype:
    return np.dtype(tensor.dtype.numpy()).newbyteorder("<")


def read_array(tensor: ir.TensorProtocol) -> np.ndarray:
    """The tensor's values in a fresh array; a file-backed tensor is read with ``pread`` and
    not mapped, so its pages leave the RSS once the caller drops the array."""
    if not isinstance(tensor, ir.ExternalTensor) or tensor.dtype.bitwidth % 8:
        return np.asarray(tensor.numpy())
    arr = np.empty(tuple(tensor.shape.numpy()), dtype=_storage_dtype(tensor))
    if arr.nbytes:
        fd = os.open(tensor.path, os.O_RDONLY)
        try:
            _pread_into(fd, arr.reshape(-1).view(np.uint8).data, tensor.offset or 0)
        finally:
            os.close(fd)
    return arr


def read_slice(t: ir.TensorProtocol, axis: int, lo: int, hi: int) -> np.ndarray | None:
    """Slice ``[lo, hi)`` along ``axis`` of a file-backed tensor, read with ``pread``: only the
    bytes of the slice pass through memory, and none of the file is mapped into this process
    (slicing the memory map touched every page of every split weight: BERT-base ``--passes
    all`` peaked at 373 MiB of RSS, 134 without the channel split). None: not a plain file
    tensor."""
    if not isinstance(t, ir.ExternalTensor) or t.dtype.bitwidth < 8 or not t.path:
        return None
    dtype = _storage_dtype(t)
    dims = [int(d) for d in t.shape.numpy()]
    outer = int(np.prod(dims[:axis], dtype=np.int64))
    inner = int(np.prod(dims[axis + 1 :], dtype=np.int64)) * dtype.itemsize
    run, stride = (hi - lo) * inner, dims[axis] * inner
    out = np.empty(dims[:axis] + [hi - lo] + dims[axis + 1 :], dtype=dtype)
    view = out.reshape(-1).view(np.uint8).data
    fd = os.open(t.path, os.O_RDONLY)
    try:
        for i in range(outer):
            at = (t.offset or 0) + i * stride + lo * inner
            _pread_into(fd, view[i * run : (i + 1) * run], at)
    except OSError as exc:
        raise ModelLoadError(f"{t.path}: ended early while reading {t.name}") from exc
    finally:
        os.close(fd)
    return out


def iter_blocks(tensor: ir.ExternalTensor, block: int = BLOCK) -> Iterator[np.ndarray]:
    """The tensor's values as flat arrays of at most ``block`` bytes, in order."""
    dtype = _storage_dtype(tensor)
    per = max(1, block // dtype.itemsize)
    fd = os.open(tensor.path, os.O_RDONLY)
    try:
        base = tensor.offset or 0
        for start in range(0, tensor.size, per):
            arr = np.empty(min(per, tensor.size - start), dtype=dtype)
            _pread_into(fd, arr.view(np.uint8).data, base + start * dtype.itemsize)
            yield arr
    finally:
        os.close(fd)


def transpose_2d_to_spill(
    tensor: ir.ExternalTensor, name: str, block: int = BLOCK
) -> ir.ExternalTensor:
    """``tensor.T`` (2-D, file-backed) written to the spill file, one block in memory at a time.

    The side with more entries is read contiguously: row blocks are written to their strided
    places in the output (each output row gets one piece per block), column blocks are read
    row by row and written contiguously. Either way every read or write piece holds at least
    ``block / min(rows, cols)`` bytes, so the number of system calls stays small; a block
    and its transpose are the memory it holds.
    """
    rows, cols = (int(d) for d in tensor.shape.numpy())
    dtype = np.dtype((np.void, _storage_dtype(tensor).itemsize))  # bytes moved, not values
    item = dtype.itemsize
    spill = SpillFile.shared()
    out = spill.reserve(rows * cols * item)
    base = tensor.offset or 0
    fd = os.open(tensor.path, os.O_RDONLY)
    try:
        if rows >= cols:
            step = max(1, block // (cols * item))
            for r0 in range(0, rows, step):
                n = min(step, rows - r0)
                blk = np.empty((n, cols), dtype=dtype)
                _pread_into(fd, blk.reshape(-1).view(np.uint8).data, base + r0 * cols * item)
                t = np.ascontiguousarray(blk.T)
                del blk
                for j in range(cols):
                    spill.write_at(t[j].view(np.uint8).data, out + (j * rows + r0) * item)
        else:
            step = max(1, block // (rows * item))
            for c0 in range(0, cols, step):
                n = min(step, cols - c0)
                blk = np.empty((rows, n), dtype=dtype)
                for i in range(rows):
                    view = blk[i].view(np.uint8).data
                    _pread_into(fd, view, base + (i * cols + c0) * item)
                t = np.ascontiguousarray(blk.T)
                spill.write_at(t.reshape(-1).view(np.uint8).data, out + c0 * rows * item)
    finally:
        os.close(fd)
    return spill.tensor(out, tensor.dtype, (cols, rows), name)
