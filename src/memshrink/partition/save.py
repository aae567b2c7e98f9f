"""Write a partitioned model: a folder of standalone parts plus ``manifest.json``.

Why this layout: each part is an ordinary ONNX file that any runtime loads *by path*, with its
weights in its own 64 KiB-aligned ``part_NNN.data`` (memory-mapped, never copied to the heap).
A weight used by several parts (tied embeddings and LM heads) is stored once, in the data file
of the first part that reads it, and later parts reference that file by relative location. The
folder is built under a hidden temp folder next to the target and renamed into place, so a
killed save never leaves a half partition. Weights are copied file-to-file by the writer's
kernel-side copy; the part protos are built from one weight-free serialization.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from memshrink.atomic import (
    SaveInterrupted,
    describe_os_error,
    fsync_file,
    signals_blocked,
    sigterm_as_exception,
)
from memshrink.errors import ModelSaveError, UsageError
from memshrink.model import META_PARTITION, iter_tensor_slots, materialize, source_path
from memshrink.partition.folded import folded_in_parts
from memshrink.partition.manifest import (
    MANIFEST_NAME,
    Manifest,
    PartSpec,
    TensorSpec,
    is_partition_folder,
    write_manifest,
)
from memshrink.partition.plan import GraphFacts, PartitionPlan, graph_facts, plan_partition
from memshrink.writer import (
    DEFAULT_ALIGNMENT,
    DEFAULT_THRESHOLD,
    META_SAVE,
    SaveInfo,
    plan_offsets,
    write_tensor_at,
)

Progress = Callable[[int, int], None]


@dataclass
class PartitionSaveInfo(SaveInfo):
    """``SaveInfo`` of a partition folder (``path`` is the folder, sizes summed over parts)."""

    parts: int = 0
    manifest: str = ""
    part_weight_bytes: list[int] = field(default_factory=list)
    shared_tensors: int = 0


def part_file(index: int) -> str:
    return f"part_{index:03d}.onnx"


def part_data_file(index: int) -> str:
    return f"part_{index:03d}.data"


def part_folded_file(index: int) -> str:
    """The part's weights OpenVINO folds into new Constants (``partition.folded``)."""
    return f"part_{index:03d}.folded.data"


def dtype_name(elem_type: int) -> str:
    """numpy name of an ONNX element type (what feeds and the manifest use)."""
    try:
        return str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)))
    except Exception:  # noqa: BLE001 - exotic types keep their ONNX name
        return onnx.TensorProto.DataType.Name(elem_type).lower()


@dataclass
class _Part:
    index: int
    nodes: list[int]  # top-level node indices (floating Constants included)
    reads: set[ir.Value]
    produced: set[ir.Value]
    tensor_ids: list[int]


def _parts_of(plan: PartitionPlan, facts: GraphFacts) -> list[_Part]:
    const_of: dict[ir.Value, int] = {}
    for i, node in enumerate(facts.nodes):
        if facts.floating[i]:
            for v in node.outputs:
                const_of[v] = i
    parts = []
    for k, (a, b) in enumerate(zip(plan.bounds[:-1], plan.bounds[1:], strict=True)):
        own = [i for i in range(a, b) if not facts.floating[i]]
        reads: set[ir.Value] = set()
        for i in own:
            reads.update(facts.reads[i])
        consts: set[int] = set()
        todo = [const_of[v] for v in reads if v in const_of]
        while todo:  # a floating node's floating inputs come along (Identity of a Cast ...)
            i = todo.pop()
            if i not in consts:
                consts.add(i)
                todo.extend(const_of[v] for v in facts.reads[i] if v in const_of)
        indices = sorted(set(own) | consts)
        produced = {v for i in indices for v in facts.nodes[i].outputs}
        for i in consts:
            reads.update(facts.reads[i])
        tensor_ids: dict[int, None] = {}
        for i in indices:
            tensor_ids.update(dict.fromkeys(facts.tensors[i]))
        parts.append(_Part(k, indices, reads - produced, produced, list(tensor_ids)))
    return parts


Types = dict[str, onnx.TypeProto]


def _dims(tt: Any) -> list[Any] | None:
    if not tt.HasField("shape"):
        return None
    dims: list[Any] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return dims


def _known(tp: onnx.TypeProto) -> bool:
    """True when the type says enough to declare a graph input/output (element type known)."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        return bool(tp.tensor_type.elem_type)
    if kind in ("sequence_type", "optional_type"):
        inner = getattr(tp, kind).elem_type
        return inner.WhichOneof("value") is not None and _known(inner)
    return kind is not None


def _type_map(proto: onnx.ModelProto) -> Types:
    """name -> TypeProto (tensors, sequences, optionals...) from ONNX shape inference on the
    weight-free proto, falling back to what the file declares."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception:  # noqa: BLE001 - fall back to what the file declares
        inferred = proto
    out: Types = {}
    for g in (inferred.graph, proto.graph):
        for vi in list(g.value_info) + list(g.input) + list(g.output):
            if _known(vi.type) and vi.name not in out:
                out[vi.name] = vi.type
    for init in proto.graph.initializer:
        if init.name not in out:
            out[init.name] = onnx.helper.make_tensor_type_proto(init.data_type, list(init.dims))
    return out


def _value_info(name: str, types: Types, where: str) -> onnx.ValueInfoProto:
    tp = types.get(name)
    if tp is None:
        raise ModelSaveError(
            f"cannot partition: the type of {name!r} ({where}) is unknown; "
            "declare it (value_info) or run shape inference first"
        )
    vi = onnx.ValueInfoProto()
    vi.name = name
    vi.type.CopyFrom(tp)
    return vi


def _tensor_spec(name: str, types: Types, **extra: Any) -> TensorSpec:
    tp = types.get(name)
    kind = tp.WhichOneof("value") if tp is not None else None
    if tp is not None and kind == "tensor_type":
        return TensorSpec(
            name, dtype_name(tp.tensor_type.elem_type), _dims(tp.tensor_type), **extra
        )
    if tp is not None and kind == "sequence_type":
        inner = tp.sequence_type.elem_type
        if inner.WhichOneof("value") == "tensor_type":
            return TensorSpec(
                name, f"seq({dtype_name(inner.tensor_type.elem_type)})", None, **extra
            )
    return TensorSpec(name, kind or "unknown", None, **extra)


def _check_target(model: ir.Model, final: Path) -> None:
    if final.exists() and not final.is_dir():
        raise UsageError(
            f"output {final} is a file; a partitioned model is written as a folder "
            "(give a new folder name)"
        )
    if final.is_dir() and any(final.iterdir()) and not is_partition_folder(final):
        raise UsageError(
            f"output folder {final} exists and is not a partition folder; refusing to replace it"
        )
    if not final.parent.exists():
        raise ModelSaveError(f"output folder {final.parent} does not exist")
    root = os.path.realpath(final)
    used = [source_path(model)] + [
        t.path for t, _ in iter_tensor_slots(model) if isinstance(t, ir.ExternalTensor)
    ]
    for p in used:
        if p and os.path.realpath(p).startswith(root + os.sep):
            raise UsageError(
                f"refusing to replace {final}: the model is still reading {p} from it "
                "(choose another output folder)"
            )


def save_partitioned(
    model: ir.Model,
    path: str | os.PathLike,
    *,
    threshold: int | None = None,
    alignment: int | None = None,
    progress: Progress | None = None,
    folded_file: bool | None = None,
) -> PartitionSaveInfo:
    """Write ``model`` (carrying a plan in ``meta['memshrink.partition']``) as a folder of parts.

    The in-memory model is left unchanged. A plan made before later passes changed the graph
    is recomputed with the same options. ``folded_file`` (None: the ``partition`` pass's option,
    default on): a part's weights OpenVINO folds into new Constants go to
    ``part_NNN.folded.data`` (``partition/folded.py``).
    """
    final = Path(path)
    plan = model.meta.get(META_PARTITION)
    if not isinstance(plan, PartitionPlan):
        raise UsageError("save_partitioned: the model carries no partition plan")
    if folded_file is None:
        folded_file = plan.folded_file
    if not plan.is_current(model):
        plan = plan_partition(model, **plan.options)
    threshold = int(DEFAULT_THRESHOLD if threshold is None else threshold)
    alignment = int(DEFAULT_ALIGNMENT if alignment is None else alignment)
    _check_target(model, final)
    facts = graph_facts(model, {})
    parts = _parts_of(plan, facts)
    for v in model.graph.outputs:
        if v.is_initializer():
            raise ModelSaveError(
                f"cannot partition: graph output {v.name!r} is an initializer (not supported)"
            )

    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}-{threading.get_ident() % 100000}")
    # weights ``external-data`` keeps embedded (read inside Loop / Scan bodies: the ORT OpenVINO
    # EP resolves their data file against the working directory) stay in their part's .onnx
    inline = set((model.meta.get(META_SAVE) or {}).get("inline", ()))
    slots = {id(t): (t, s) for t, s in iter_tensor_slots(model)}
    kept = {tid for tid, (t, _) in slots.items() if t.name and t.name in inline}
    folded: set[int] = set()
    if folded_file:
        part_of = {id(facts.nodes[i]): p.index for p in parts for i in p.nodes}
        names = folded_in_parts(model.graph, part_of)
        folded = {tid for tid, (t, _) in slots.items() if t.name and t.name in names}
    originals: list[tuple[ir.TensorProtocol, Callable]] = []
    owner: dict[int, tuple[int, int, int]] = {}  # tensor id -> (part, offset, length)
    files: dict[int, str] = {}  # tensor id -> the data file that holds it
    external_count = external_bytes = inline_count = 0
    total = sum(
        slots[tid][0].nbytes
        for p in parts
        for tid in p.tensor_ids
        if tid in slots and tid not in kept and slots[tid][0].nbytes >= threshold
    )
    try:
        with sigterm_as_exception():
            tmp.mkdir()
            base_dir = str(tmp.resolve())
            for part in parts:
                todo = [
                    tid
                    for tid in part.tensor_ids
                    if tid in slots
                    and tid not in owner
                    and tid not in kept
                    and slots[tid][0].nbytes >= threshold
                ]
                groups = (
                    (part_data_file(part.index), [t for t in todo if t not in folded]),
                    (part_folded_file(part.index), [t for t in todo if t in folded]),
                )
                for fname, tids in groups:
                    if not tids:
                        continue
                    fd = os.open(tmp / fname, os.O_WRONLY | os.O_CREAT, 0o644)
                    try:
                        offsets = plan_offsets([slots[t][0].nbytes for t in tids], alignment)
                        for k in sorted(range(len(tids)), key=offsets.__getitem__):
                            tid, offset = tids[k], offsets[k]
                            tensor = slots[tid][0]
                            length = write_tensor_at(fd, tensor, offset)
                            owner[tid] = (part.index, offset, length)
                            files[tid] = fname
                            external_count += 1
                            external_bytes += length
                            if progress:
                                progress(external_bytes, total)
                        os.fsync(fd)
                    finally:
                        os.close(fd)
            for tid, (tensor, setter) in slots.items():
                originals.append((tensor, setter))
                if tid in owner:
                    _, off, length = owner[tid]
                    setter(
                        ir.ExternalTensor(
                            files[tid],
                            off,
                            length,
                            tensor.dtype,
                            shape=tensor.shape,
                            name=tensor.name or "",
                            doc_string=tensor.doc_string,
                            base_dir=base_dir,
                        )
                    )
                else:
                    inline_count += 1
                    if isinstance(tensor, ir.ExternalTensor):
                        setter(materialize(tensor))
            proto = ir.serde.serialize_model(model)
            for tensor, setter in reversed(originals):
                setter(tensor)
            originals.clear()
            manifest = _write_parts(proto, model, facts, parts, owner, files, tmp, alignment)
            manifest.source = {
                "path": source_path(model),
                "plan": plan.to_dict(),
            }
            write_manifest(manifest, tmp)
            for entry in tmp.iterdir():
                fsync_file(entry)
            _commit(tmp, final)
    except OSError as exc:
        raise describe_os_error(exc, final) from exc
    except KeyboardInterrupt:
        raise SaveInterrupted("interrupted; nothing written") from None
    finally:
        for tensor, setter in reversed(originals):
            setter(tensor)
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    part_files = [final / p.file for p in manifest.parts]
    datas = sorted({final / r[0] for p in manifest.parts for r in p.weight_ranges})
    return PartitionSaveInfo(
        path=str(final),
        data_path=None,
        external_tensors=external_count,
        external_bytes=external_bytes,
        inline_tensors=inline_count,
        model_file_bytes=sum(f.stat().st_size for f in part_files),
        data_file_bytes=sum(f.stat().st_size for f in datas),
        parts=len(manifest.parts),
        manifest=str(final / MANIFEST_NAME),
        part_weight_bytes=[p.weight_bytes for p in manifest.parts],
        shared_tensors=len(manifest.shared_weights),
    )


def _commit(tmp: Path, final: Path) -> None:
    """Swap the new folder in. A signal held back during the swap is raised after it: the
    earlier save's folder is still removed, and the error says the new one is whole."""
    old = None
    swapped = False
    try:
        with signals_blocked():
            if final.exists():
                old = final.with_name(f".{final.name}.old-{os.getpid()}")
                os.replace(final, old)
            os.replace(tmp, final)
            swapped = True
    except (KeyboardInterrupt, SaveInterrupted) as exc:
        if not swapped:
            raise
        signum = exc.exit_code - 128 if isinstance(exc, SaveInterrupted) else signal.SIGINT
        raise SaveInterrupted(
            f"interrupted; {final} was saved whole before the signal took effect", signum
        ) from None
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    fsync_file(final.parent)


def _main_data(
    index: int, tids: list[int], owner: dict[int, tuple[int, int, int]], files: dict[int, str]
) -> str | None:
    """The part's own data file: ``part_NNN.data``, or its folded file when that is all it has."""
    own = {files[t] for t in tids if t in owner and owner[t][0] == index}
    if not own:
        return None
    return part_data_file(index) if part_data_file(index) in own else part_folded_file(index)


def _write_parts(
    proto: onnx.ModelProto,
    model: ir.Model,
    facts: GraphFacts,
    parts: list[_Part],
    owner: dict[int, tuple[int, int, int]],
    files: dict[int, str],
    folder: Path,
    alignment: int,
) -> Manifest:
    graph = model.graph
    types = _type_map(proto)
    g = proto.graph
    init_protos = {t.name: t for t in g.initializer}
    vi_protos = {vi.name: vi for vi in g.value_info}
    graph_inputs = {v for v in graph.inputs if not v.is_initializer()}
    graph_outputs = set(graph.outputs)
    producer_part: dict[ir.Value, int] = {}
    for part in parts:
        for i in part.nodes:
            if not facts.floating[i]:
                producer_part.update(dict.fromkeys(facts.nodes[i].outputs, part.index))
    read_later: list[set[ir.Value]] = [set() for _ in parts]
    acc: set[ir.Value] = set()
    for part in reversed(parts):
        read_later[part.index] = set(acc)
        acc |= part.reads
    tensor_users: dict[int, list[int]] = {}
    for part in parts:
        for tid in part.tensor_ids:
            tensor_users.setdefault(tid, []).append(part.index)
    names = {id(t): (t.name or "") for t, _ in iter_tensor_slots(model)}
    graph_nodes = facts.nodes
    floating = facts.floating

    specs: list[PartSpec] = []
    for part in parts:
        where = f"part {part.index}"
        gp = onnx.GraphProto()
        gp.name = f"{g.name or 'main'}_part{part.index}"
        for i in part.nodes:
            gp.node.append(g.node[i])
        inputs: list[TensorSpec] = []
        for v in sorted(part.reads, key=lambda x: x.name or ""):
            if v.is_initializer():
                gp.initializer.append(init_protos[v.name or ""])
                continue
            name = v.name or ""
            gp.input.append(_value_info(name, types, f"input of {where}"))
            source: int | str = "input" if v in graph_inputs else producer_part[v]
            inputs.append(_tensor_spec(name, types, source=source))
        outputs: list[TensorSpec] = []
        for i in part.nodes:
            if floating[i]:
                continue  # every part reading a Constant has its own copy
            for v in graph_nodes[i].outputs:
                if v in graph_outputs or v in read_later[part.index]:
                    name = v.name or ""
                    gp.output.append(_value_info(name, types, f"output of {where}"))
                    outputs.append(_tensor_spec(name, types, graph_output=v in graph_outputs))
        declared = {vi.name for vi in gp.input} | {vi.name for vi in gp.output}
        for v in part.produced:
            if v.name in vi_protos and v.name not in declared:
                gp.value_info.append(vi_protos[v.name])
        mp = onnx.ModelProto()
        mp.ir_version = proto.ir_version
        mp.producer_name = "memshrink.partition"
        mp.opset_import.extend(proto.opset_import)
        mp.functions.extend(proto.functions)
        mp.graph.CopyFrom(gp)
        onnx.save_model(mp, folder / part_file(part.index))
        ranges = sorted(
            {(files[tid], owner[tid][1], owner[tid][2]) for tid in part.tensor_ids if tid in owner}
        )
        own = sum(owner[t][2] for t in part.tensor_ids if t in owner and owner[t][0] == part.index)
        specs.append(
            PartSpec(
                index=part.index,
                file=part_file(part.index),
                data=_main_data(part.index, part.tensor_ids, owner, files),
                inputs=inputs,
                outputs=outputs,
                nodes=len(part.nodes),
                weight_bytes=sum(r[2] for r in ranges),
                own_weight_bytes=own,
                weight_ranges=ranges,
            )
        )
    shared = [
        {
            "name": names.get(tid, ""),
            "bytes": owner[tid][2],
            "parts": users,
            "file": files[tid],
        }
        for tid, users in tensor_users.items()
        if len(users) > 1 and tid in owner
    ]
    return Manifest(
        inputs=[_tensor_spec(v.name or "", types) for v in graph.inputs if v in graph_inputs],
        outputs=[_tensor_spec(v.name or "", types) for v in graph.outputs],
        parts=specs,
        shared_weights=shared,
        weight_bytes=sum(length for _, _, length in owner.values()),
        alignment=alignment,
    )
