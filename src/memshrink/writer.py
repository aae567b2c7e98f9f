"""Write a model atomically, streaming weights into aligned external data (64 KiB, small ones 4 KiB).

Why this exists instead of ``onnx_ir.save``: weights that live in a file (external data,
or embedded payloads lifted by ``protoscan``) are copied file-to-file with
``os.copy_file_range``, so saving a multi-GB model never pulls its weights into the
process's RSS; both output files are committed by rename only when complete; and the
output can never overwrite a file the model is still reading from.
"""

from __future__ import annotations

import errno
import os
import signal
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir

from memshrink import compact_attrs, opaque_types
from memshrink.atomic import (
    SaveInterrupted,
    describe_os_error,
    fsync_file,
    remove_quietly,
    signals_blocked,
    sigterm_as_exception,
    temp_path_for,
)
from memshrink.errors import ModelSaveError, UsageError
from memshrink.model import (
    META_PARTITION,
    META_SAVE,
    META_SOURCE,
    iter_tensor_slots,
    materialize,
    source_path,
)

#: Tensors under this many bytes stay embedded. Why 4 KiB and not 1 KiB: a tensor under a page
#: costs a whole page wherever it is mapped (ONNX Runtime maps each tensor on its own: 4 KiB per
#: 1 KiB tensor), and embedded it costs its bytes; 3,000 tensors of 1 KiB: ORT CPU run 3 +39.4
#: MiB external vs +32.1 embedded, OpenVINO infer 3 +87.1 vs +76.1 (docs/optimize.md, "Tensors
#: under a page").
DEFAULT_THRESHOLD = 4096
DEFAULT_ALIGNMENT = 65536
#: Alignment of tensors smaller than the alignment (``tensor_offset``): one page.
SMALL_ALIGNMENT = 4096
_PROTOBUF_LIMIT = 2**31 - 1
_COPY_CHUNK = 16 << 20  # only the pread/pwrite fallback holds a buffer of this size

Progress = Callable[[int, int], None]


@dataclass
class SaveInfo:
    path: str
    data_path: str | None
    external_tensors: int
    external_bytes: int
    inline_tensors: int
    model_file_bytes: int
    data_file_bytes: int
    folded_path: str | None = None  # OpenVINO-folded weights' file (``external-data``)
    folded_file_bytes: int = 0
    removed_stale: list[str] = field(default_factory=list)  # an earlier save's data files for OUT

    def to_dict(self) -> dict:
        return asdict(self)


def _align(offset: int, alignment: int) -> int:
    return (offset + alignment - 1) // alignment * alignment if alignment > 1 else offset


def tensor_offset(offset: int, nbytes: int, alignment: int, small: int = SMALL_ALIGNMENT) -> int:
    """Where a tensor of ``nbytes`` goes at or after ``offset``: a tensor of ``alignment`` bytes
    or more at an ``alignment`` boundary (64 KiB: Windows' mapping granularity, what ONNX Runtime
    needs to map it there), a smaller one at ``small`` (a page: enough to map it on Linux).

    Why not 64 KiB for all: the padding is a hole, and once the file has been read cold (or
    copied) the holes are page-cache pages that OpenVINO's mapping of the whole file holds after
    ``compile_model`` (the kernel maps the 64 KiB around each fault from the page cache). With
    every tensor at 64 KiB, multibranch's ``all`` output (203 tensors, 24.4 MiB) was a 33.0 MiB
    file, all of it resident: OpenVINO infer 3 +131.0 MiB against +124.2 for the embedded
    original; at 4 KiB for small tensors 26.5 MiB (measured: docs/optimize.md, "Alignment of
    small tensors")."""
    return _align(offset, alignment if nbytes >= alignment else min(alignment, small))


def plan_offsets(sizes: Sequence[int], alignment: int, small: int = SMALL_ALIGNMENT) -> list[int]:
    """Offsets for tensors of ``sizes`` (bytes, in file order), each at ``tensor_offset``'s
    boundary; the padding before a big tensor is filled with later small ones that fit (the
    largest first, earliest of a size), so a small tensor may go before a big one written
    earlier.

    Why fill: the hole before each 64 KiB boundary is resident in OpenVINO's mapping too
    (multibranch ``all``: 26.5 MiB file, 24.4 MiB of weights, without filling)."""
    step = min(alignment, small)
    offsets = [-1] * len(sizes)
    if alignment <= step:  # one alignment for all: in order
        end = 0
        for i, n in enumerate(sizes):
            offsets[i] = _align(end, alignment)
            end = offsets[i] + n
        return offsets
    # small tensors by their size in pages (1 .. alignment/step), each bucket in file order
    buckets: dict[int, deque[int]] = {}
    for i, n in enumerate(sizes):
        if n < alignment:
            buckets.setdefault(-(-n // step) if n else 1, deque()).append(i)
    end = 0
    for i, n in enumerate(sizes):
        if offsets[i] >= 0:
            continue  # a small tensor already put into an earlier gap
        if n < alignment:
            buckets[-(-n // step) if n else 1].popleft()  # the earliest unplaced one: i
            offsets[i] = _align(end, step)
            end = offsets[i] + n
            continue
        start = _align(end, alignment)
        while True:
            at = _align(end, step)
            fit = next((p for p in range((start - at) // step, 0, -1) if buckets.get(p)), None)
            if fit is None:
                break
            j = buckets[fit].popleft()
            offsets[j] = at
            end = at + sizes[j]
        offsets[i] = start
        end = start + n
    return offsets


def _files_in_use(model: ir.Model) -> set[str]:
    """Files a save must not replace: what the model reads now, and every file of the input it
    was loaded from. Why the latter: after simplify (every weight in memory) the model reads
    nothing, and ``optimize in.onnx w.onnx`` with in.onnx's weights in ``w.onnx.data`` replaced
    the input's data file (QA session 11)."""
    used = set((model.meta.get(META_SOURCE) or {}).get("input_files") or ())
    src = source_path(model)
    if src:
        used.add(os.path.realpath(src))
    for tensor, _ in iter_tensor_slots(model):
        if isinstance(tensor, ir.ExternalTensor):
            used.add(os.path.realpath(tensor.path))
    return used


def data_files(model: ir.Model) -> list[Path]:
    """The external data files a model reads, in first-use order. Why: a saved model names them
    relative to itself (``OUT.data``, ``OUT.folded.data``); whoever moves it must move these."""
    src = source_path(model)  # ``load`` maps embedded payloads in place: not a data file
    own = os.path.realpath(src) if src else None
    seen: dict[str, None] = {}
    for tensor, _ in iter_tensor_slots(model):
        if isinstance(tensor, ir.ExternalTensor):
            seen.setdefault(os.path.realpath(tensor.path), None)
    return [Path(f) for f in seen if f != own]


def remove_stale_siblings(*paths: Path | None) -> list[str]:
    """Remove data files an earlier save wrote for the same OUT that this save does not.

    Why: re-saving OUT with a pipeline that folds nothing (or embeds everything) would leave the
    old ``OUT.folded.data`` / ``OUT.data`` beside the new model: unused bytes on disk that users
    copy along, and that look like part of the model. Only the names this save would itself write
    for OUT are candidates, never another file; called after the new files are in place, so a
    failed save keeps the old set whole. Returns what was removed."""
    removed = []
    for p in paths:
        if p is not None and (p.is_file() or p.is_symlink()):
            try:
                os.remove(p)
            except OSError:
                continue  # a read-only leftover is harmless: the new model does not name it
            removed.append(str(p))
    return removed


def decide_external(model: ir.Model, external: bool | None = None) -> bool:
    """Whether a save writes external data: explicit, then pass policy, then the input's layout, then size."""
    if external is not None:
        return external
    policy = model.meta.get(META_SAVE) or {}
    if "external" in policy:
        return bool(policy["external"])
    if (model.meta.get(META_SOURCE) or {}).get("external"):
        return True
    total = sum(t.nbytes for t, _ in iter_tensor_slots(model))
    return total > _PROTOBUF_LIMIT * 0.9


def _copy_range(src_path: str, offset: int, length: int, dst_fd: int, dst_offset: int) -> None:
    """Kernel-side copy (no RSS growth); falls back to pread/pwrite across filesystems."""
    with open(src_path, "rb") as src:
        src_fd = src.fileno()
        done = 0
        use_cfr = hasattr(os, "copy_file_range")
        while done < length:
            n = min(_COPY_CHUNK, length - done)
            if use_cfr:
                try:
                    copied = os.copy_file_range(src_fd, dst_fd, n, offset + done, dst_offset + done)
                except OSError as exc:
                    if exc.errno in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                        use_cfr = False
                        continue
                    raise
                if copied == 0:
                    raise ModelSaveError(f"{src_path}: ended early while copying weights")
            else:
                data = os.pread(src_fd, n, offset + done)
                if not data:
                    raise ModelSaveError(f"{src_path}: ended early while copying weights")
                copied = os.pwrite(dst_fd, data, dst_offset + done)
            done += copied


def write_tensor_at(fd: int, tensor: ir.TensorProtocol, offset: int) -> int:
    """Write one tensor's bytes at ``offset`` of ``fd``; returns its length.

    File-backed tensors are copied kernel-side; in-memory ones are written from memory.
    """
    length = tensor.nbytes
    if isinstance(tensor, ir.ExternalTensor):
        _copy_range(tensor.path, tensor.offset or 0, length, fd, offset)
    else:
        data = tensor.tobytes()
        os.pwrite(fd, data, offset)
    return length


def save_model(
    model: ir.Model,
    path: str | os.PathLike,
    *,
    external: bool | None = None,
    threshold: int | None = None,
    alignment: int | None = None,
    data_name: str | None = None,
    progress: Progress | None = None,
    fsync: bool = False,
) -> SaveInfo:
    """Save ``model`` to ``path`` atomically; the in-memory model is left unchanged.

    ``external``: write tensors of ``threshold`` bytes or more to ``<path>.data`` at
    ``alignment``-aligned offsets (smaller tensors than that at 4 KiB, filling the gaps:
    ``plan_offsets``). None decides from the pipeline's policy (the ``external-data`` pass), then from how the input stored its weights, then from size.
    ``fsync``: also flush both files to the disk before the rename (survives power loss;
    the rename alone already guarantees no reader ever sees a partial file).
    """
    final = Path(path)
    if model.meta.get(META_PARTITION):
        # A partitioned model is written as a folder of parts plus a manifest.
        from memshrink.partition.save import save_partitioned

        return save_partitioned(
            model, final, threshold=threshold, alignment=alignment, progress=progress
        )
    if final.is_dir():
        raise UsageError(f"output {final} is a folder; give a file name like {final}/model.onnx")
    policy = model.meta.get(META_SAVE) or {}
    threshold = int(
        threshold if threshold is not None else policy.get("threshold", DEFAULT_THRESHOLD)
    )
    alignment = int(
        alignment if alignment is not None else policy.get("alignment", DEFAULT_ALIGNMENT)
    )
    small = int(policy.get("small_alignment", SMALL_ALIGNMENT))
    use_external = decide_external(model, external)
    data_final = final.with_name(data_name or f"{final.name}.data")
    # weights OpenVINO folds into new Constants go to a file of their own (``external-data``'s
    # ``folded_file``): no Constant of the compiled model points into it, so its mapping goes
    folded = set(policy.get("folded", ())) if use_external else set()
    if folded:  # a later pass may have given one a reader that keeps it (then: the main file)
        from memshrink.transforms.ov_folded import folded_weights

        folded &= folded_weights(model.graph)
    folded_final = data_final.with_name(data_final.name.removesuffix(".data") + ".folded.data")

    in_use = _files_in_use(model)
    for target in (final, data_final, folded_final):
        if os.path.realpath(target) in in_use:
            raise UsageError(
                f"refusing to write {target}: the model is still reading from it "
                "(choose an output path different from the input)"
            )
    if not final.parent.exists():
        raise ModelSaveError(f"output folder {final.parent} does not exist")

    slots = list(iter_tensor_slots(model))
    tmp_model = temp_path_for(final)
    tmp_data = temp_path_for(data_final) if use_external else None
    tmp_folded = temp_path_for(folded_final) if folded else None
    originals: list[tuple[ir.TensorProtocol, Callable]] = []
    external_count = external_bytes = inline_count = 0
    wrote_data = wrote_folded = False
    stale: list[str] = []
    renamed = False  # the new files are in place: an interrupt after this lost nothing
    try:
        with sigterm_as_exception():
            inline = set(policy.get("inline", ()))  # names the external-data pass keeps embedded
            to_external = [
                (t, s)
                for t, s in slots
                if use_external and t.nbytes >= threshold and t.nbytes > 0 and t.name not in inline
            ]
            total = sum(t.nbytes for t, _ in to_external)
            groups = [
                (tmp_data, data_final, [x for x in to_external if x[0].name not in folded]),
                (tmp_folded, folded_final, [x for x in to_external if x[0].name in folded]),
            ]
            for tmp, target, tensors in groups:
                if not tensors:
                    continue
                assert tmp is not None
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    offsets = plan_offsets([t.nbytes for t, _ in tensors], alignment, small)
                    for k in sorted(range(len(tensors)), key=offsets.__getitem__):
                        tensor, setter = tensors[k]
                        offset = offsets[k]
                        length = write_tensor_at(fd, tensor, offset)
                        originals.append((tensor, setter))
                        setter(
                            ir.ExternalTensor(
                                target.name,
                                offset,
                                length,
                                tensor.dtype,
                                shape=tensor.shape,
                                name=tensor.name or "",
                                doc_string=tensor.doc_string,
                                base_dir=str(final.parent.resolve()),
                            )
                        )
                        external_count += 1
                        external_bytes += length
                        if progress:
                            progress(external_bytes, total)
                    if fsync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
                if target == data_final:
                    wrote_data = True
                else:
                    wrote_folded = True
            external_ids = {id(t) for t, _ in to_external}
            for tensor, setter in slots:
                if id(tensor) in external_ids:
                    continue
                inline_count += 1
                if isinstance(tensor, ir.ExternalTensor):
                    originals.append((tensor, setter))
                    setter(materialize(tensor))
            inline_bytes = sum(t.nbytes for t, _ in slots if id(t) not in external_ids)
            if inline_bytes > _PROTOBUF_LIMIT * 0.95:
                raise ModelSaveError(
                    f"{inline_bytes / 2**30:.2f} GiB of weights cannot be embedded in one "
                    "protobuf (2 GiB limit); save with external data (--passes external-data)"
                )
            # a forest's long lists are serialized as markers and their fields spliced into
            # the bytes from their arrays: the same bytes, never a repeated field of Python
            # objects (saving a 24 MiB forest through the full proto cost ~+130 MiB)
            lists: dict[bytes, tuple[Any, str]] = {}
            with compact_attrs.marked(model, lists):
                proto = opaque_types.serialize(model)
            with open(tmp_model, "wb") as f:
                if lists:
                    pieces = compact_attrs.splice_pieces(proto.SerializeToString(), lists)
                    del proto
                    # a list's fields are made a slice at a time as they are written
                    f.writelines(compact_attrs.piece_slices(pieces))
                    del pieces
                else:
                    onnx.save_model(proto, f)
                    del proto
                f.flush()
                if fsync:
                    os.fsync(f.fileno())
            with signals_blocked():
                if wrote_data and tmp_data is not None:
                    os.replace(tmp_data, data_final)
                if wrote_folded and tmp_folded is not None:
                    os.replace(tmp_folded, folded_final)
                os.replace(tmp_model, final)
                stale = remove_stale_siblings(
                    data_final if not wrote_data else None,
                    folded_final if not wrote_folded else None,
                )
                renamed = True
            if fsync:
                fsync_file(final.parent)
    except OSError as exc:
        raise describe_os_error(exc, final) from exc
    except (KeyboardInterrupt, SaveInterrupted) as exc:
        # a signal held back during the renames arrives once they are done: then the save is
        # whole, and saying "nothing written" would send the user to look for a partial model
        signum = exc.exit_code - 128 if isinstance(exc, SaveInterrupted) else signal.SIGINT
        if renamed:
            raise SaveInterrupted(
                f"interrupted; {final} was saved whole before the signal took effect", signum
            ) from None
        if isinstance(exc, SaveInterrupted):
            raise
        raise SaveInterrupted("interrupted; nothing written") from None
    finally:
        for tensor, setter in reversed(originals):
            setter(tensor)
        remove_quietly(tmp_model, tmp_data, tmp_folded)
    return SaveInfo(
        path=str(final),
        data_path=str(data_final) if wrote_data else None,
        external_tensors=external_count,
        external_bytes=external_bytes,
        inline_tensors=inline_count,
        model_file_bytes=final.stat().st_size,
        data_file_bytes=data_final.stat().st_size if wrote_data else 0,
        folded_path=str(folded_final) if wrote_folded else None,
        folded_file_bytes=folded_final.stat().st_size if wrote_folded else 0,
        removed_stale=stale,
    )
