"""``dedup-weights``: one initializer for byte-identical weights.

Exporters duplicate tied weights (embeddings and LM heads, repeated constants); each copy
is loaded, mapped and sometimes prepacked separately. Candidates are grouped by dtype and
shape first (no data read), then hashed in streaming chunks, then compared byte by byte
before merging — a hash collision can never merge different weights.
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

import onnx_ir as ir

from memshrink.irgraphs import graphs
from memshrink.manager import Pass, PassContext, PassResult
from memshrink.transforms import register

_CHUNK = 4 << 20  # a few buffers of this size are the pass's working set


def iter_tensor_chunks(tensor: ir.TensorProtocol, chunk: int = _CHUNK) -> Iterator[bytes]:
    """Stream a tensor's bytes; file-backed tensors are read with pread (no mmap residency)."""
    if isinstance(tensor, ir.ExternalTensor):
        length = tensor.nbytes
        fd = os.open(tensor.path, os.O_RDONLY)
        try:
            done = 0
            base = tensor.offset or 0
            while done < length:
                data = os.pread(fd, min(chunk, length - done), base + done)
                if not data:
                    raise OSError(f"{tensor.path}: ended early reading {tensor.name}")
                done += len(data)
                yield data
        finally:
            os.close(fd)
    else:
        data = tensor.tobytes()
        for i in range(0, len(data), chunk):
            yield data[i : i + chunk]


def _read_range(tensor: ir.TensorProtocol, offset: int, length: int) -> bytes:
    if isinstance(tensor, ir.ExternalTensor):
        fd = os.open(tensor.path, os.O_RDONLY)
        try:
            return os.pread(fd, length, (tensor.offset or 0) + offset)
        finally:
            os.close(fd)
    return tensor.tobytes()[offset : offset + length]


def sample_digest(tensor: ir.TensorProtocol, block: int = 4096, blocks: int = 8) -> bytes:
    """Digest of a few spread-out blocks: a cheap first filter before hashing everything.

    Different weights almost always differ in the sampled blocks, so full hashes are only
    computed for the rare groups whose samples agree.
    """
    n = tensor.nbytes
    h = hashlib.blake2b(digest_size=16)
    if n <= block * blocks:
        h.update(_read_range(tensor, 0, n))
        return h.digest()
    for i in range(blocks):
        h.update(_read_range(tensor, (n - block) * i // (blocks - 1), block))
    return h.digest()


def tensor_digest(tensor: ir.TensorProtocol) -> bytes:
    h = hashlib.blake2b(digest_size=32)
    for piece in iter_tensor_chunks(tensor):
        h.update(piece)
    return h.digest()


def tensors_equal(a: ir.TensorProtocol, b: ir.TensorProtocol) -> bool:
    """Byte comparison, chunk-aligned on both sides."""
    buf_a = b""
    gen_b = iter_tensor_chunks(b)
    buf_b = b""
    for piece in iter_tensor_chunks(a):
        buf_a += piece
        while len(buf_b) < len(buf_a):
            nxt = next(gen_b, None)
            if nxt is None:
                return False
            buf_b += nxt
        n = len(buf_a)
        if buf_a != buf_b[:n]:
            return False
        buf_a, buf_b = b"", buf_b[n:]
    return buf_b == b"" and next(gen_b, None) is None


@register
class DedupWeightsPass(Pass):
    name = "dedup-weights"
    summary = "Merge byte-identical initializers into one (streamed hashing, byte-checked)."
    targets = ("weights", "session-creation")
    exact = True

    @dataclass
    class Options:
        min_bytes: int = 64

    def run(self, model: ir.Model, context: PassContext) -> PassResult:
        merged = merged_bytes = hashed = 0
        for graph in graphs(model):
            protected = frozenset(graph.inputs) | frozenset(graph.outputs)
            groups: dict[tuple, list[ir.Value]] = defaultdict(list)
            for value in graph.initializers.values():
                t = value.const_value
                if t is None or value in protected or t.nbytes < self.options.min_bytes:
                    continue
                groups[(t.dtype, tuple(t.shape), t.nbytes)].append(value)
            for values in groups.values():
                if len(values) < 2:
                    continue
                by_sample: dict[bytes, list[ir.Value]] = defaultdict(list)
                for value in values:
                    assert value.const_value is not None
                    by_sample[sample_digest(value.const_value)].append(value)
                by_digest: dict[bytes, list[ir.Value]] = defaultdict(list)
                for candidates in by_sample.values():
                    if len(candidates) < 2:
                        continue
                    for value in candidates:
                        assert value.const_value is not None
                        by_digest[tensor_digest(value.const_value)].append(value)
                        hashed += 1
                for same in by_digest.values():
                    keep = same[0]
                    for dup in same[1:]:
                        assert keep.const_value is not None and dup.const_value is not None
                        if not tensors_equal(keep.const_value, dup.const_value):
                            continue
                        dup.replace_all_uses_with(keep)
                        assert dup.name is not None
                        del graph.initializers[dup.name]
                        merged += 1
                        merged_bytes += keep.const_value.nbytes
        return PassResult(
            modified=merged > 0,
            stats={"merged": merged, "bytes_saved": merged_bytes, "tensors_hashed": hashed},
        )
