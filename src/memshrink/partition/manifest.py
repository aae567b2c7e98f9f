"""The partition folder's manifest: what each part reads and writes, validated with clear errors.

Why a manifest instead of re-deriving the chain from the parts: a runtime that streams parts
must know, before loading part *i*, which tensors it needs, where they come from and when a
tensor can be dropped — without opening any .onnx. Stdlib only: the manifest is read inside
measuring children that may run under an interpreter without ``onnx``.

Schema (``manifest.json``, version 1)::

    {"format": "memshrink-partition", "version": 1,
     "inputs":  [{"name": "input_ids", "dtype": "int64", "shape": ["batch", 128]}],
     "outputs": [{"name": "logits", "dtype": "float32", "shape": [...]}],
     "parts": [{"index": 0, "file": "part_000.onnx", "data": "part_000.data",
                "inputs":  [{"name": ..., "dtype": ..., "shape": ..., "source": "input" | 0}],
                "outputs": [{"name": ..., "dtype": ..., "shape": ..., "graph_output": bool}],
                "nodes": 123, "weight_bytes": N, "own_weight_bytes": N,
                "weight_ranges": [["part_000.data", offset, length], ...]}],
     "shared_weights": [{"name": ..., "bytes": N, "parts": [0, 11], "file": "part_000.data"}],
     "weight_bytes": N, "alignment": 65536, "source": {...}}

``source`` of a part input is ``"input"`` (an original graph input, fed by the caller) or the
index of the earlier part that produces it. Shapes hold ints and symbolic names (``null`` when
unknown).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memshrink.errors import ModelLoadError

FORMAT = "memshrink-partition"
VERSION = 1
MANIFEST_NAME = "manifest.json"

Dim = int | str | None


class ManifestError(ModelLoadError):
    """A partition folder whose manifest is missing, malformed or inconsistent."""


@dataclass
class TensorSpec:
    """A tensor crossing a part boundary (or a graph input/output)."""

    name: str
    dtype: str
    shape: list[Dim] | None = None
    source: int | str | None = None  # part inputs: "input" or producing part index
    graph_output: bool = False  # part outputs: also an output of the whole model

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "dtype": self.dtype, "shape": self.shape}
        if self.source is not None:
            d["source"] = self.source
        if self.graph_output:
            d["graph_output"] = True
        return d


@dataclass
class PartSpec:
    index: int
    file: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    data: str | None = None
    nodes: int = 0
    weight_bytes: int = 0  # all weights this part maps (shared ones included)
    own_weight_bytes: int = 0  # weights stored in this part's data file
    weight_ranges: list[tuple[str, int, int]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "file": self.file,
            "data": self.data,
            "inputs": [t.to_dict() for t in self.inputs],
            "outputs": [t.to_dict() for t in self.outputs],
            "nodes": self.nodes,
            "weight_bytes": self.weight_bytes,
            "own_weight_bytes": self.own_weight_bytes,
            "weight_ranges": [list(r) for r in self.weight_ranges],
        }


@dataclass
class Manifest:
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    parts: list[PartSpec]
    shared_weights: list[dict[str, Any]] = field(default_factory=list)
    weight_bytes: int = 0
    alignment: int = 65536
    source: dict[str, Any] = field(default_factory=dict)
    folder: Path | None = None  # where it was read from (not serialized)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "inputs": [t.to_dict() for t in self.inputs],
            "outputs": [t.to_dict() for t in self.outputs],
            "parts": [p.to_dict() for p in self.parts],
            "shared_weights": self.shared_weights,
            "weight_bytes": self.weight_bytes,
            "alignment": self.alignment,
            "source": self.source,
        }

    def part_path(self, index: int) -> Path:
        assert self.folder is not None
        return self.folder / self.parts[index].file

    def last_use(self) -> dict[str, int]:
        """Index of the last part that reads each tensor (to drop it as soon as possible)."""
        last: dict[str, int] = {}
        for part in self.parts:
            for t in part.inputs:
                last[t.name] = part.index
        return last

    def parts_needed(self, output_names: list[str]) -> list[int]:
        """Indices of the parts that must run to produce ``output_names`` (in order)."""
        producer = {t.name: p.index for p in self.parts for t in p.outputs}
        need = set()
        stack = [producer[n] for n in output_names if n in producer]
        while stack:
            i = stack.pop()
            if i in need:
                continue
            need.add(i)
            for t in self.parts[i].inputs:
                if isinstance(t.source, int):
                    stack.append(t.source)
        return sorted(need)


def is_partition_folder(path: str | os.PathLike) -> bool:
    """True when ``path`` is a folder holding a manifest (cheap check, no validation)."""
    p = Path(path)
    return p.is_dir() and (p / MANIFEST_NAME).is_file()


def write_manifest(manifest: Manifest, folder: str | os.PathLike) -> Path:
    path = Path(folder) / MANIFEST_NAME
    with open(path, "w") as f:
        json.dump(manifest.to_dict(), f, indent=1)
        f.write("\n")
    return path


# ------------------------------------------------------------------------------ reading


def _fail(where: str, message: str) -> ManifestError:
    return ManifestError(f"{where}: invalid partition manifest: {message}")


def _tensor(obj: Any, where: str, *, part_input: bool = False) -> TensorSpec:
    if not isinstance(obj, dict):
        raise _fail(where, f"expected an object, got {type(obj).__name__}")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise _fail(where, "tensor without a name")
    dtype = obj.get("dtype")
    if not isinstance(dtype, str) or not dtype:
        raise _fail(where, f"tensor {name!r} has no dtype")
    shape = obj.get("shape")
    good_dims = isinstance(shape, list) and all(
        d is None or isinstance(d, str) or (isinstance(d, int) and d >= 0) for d in shape
    )
    if shape is not None and not good_dims:
        raise _fail(where, f"tensor {name!r} has a bad shape {shape!r}")
    source = obj.get("source")
    if part_input and not (source == "input" or (isinstance(source, int) and source >= 0)):
        raise _fail(where, f'input {name!r} has a bad source {source!r} ("input" or a part index)')
    return TensorSpec(name, dtype, shape, source, bool(obj.get("graph_output", False)))


def manifest_from_dict(doc: Any, where: str = "manifest") -> Manifest:
    """Parse and check a manifest dict; raises ManifestError naming the first problem."""
    if not isinstance(doc, dict):
        raise _fail(where, "top level is not an object")
    if doc.get("format") != FORMAT:
        raise _fail(where, f"format is {doc.get('format')!r}, expected {FORMAT!r}")
    if doc.get("version") != VERSION:
        raise _fail(where, f"version {doc.get('version')!r} is not supported (expected {VERSION})")
    for key in ("inputs", "outputs", "parts"):
        if not isinstance(doc.get(key), list):
            raise _fail(where, f"{key!r} must be a list")
    inputs = [_tensor(t, f"{where} inputs[{i}]") for i, t in enumerate(doc["inputs"])]
    outputs = [_tensor(t, f"{where} outputs[{i}]") for i, t in enumerate(doc["outputs"])]
    if not doc["parts"]:
        raise _fail(where, "no parts")
    parts: list[PartSpec] = []
    for i, p in enumerate(doc["parts"]):
        pw = f"{where} part {i}"
        if not isinstance(p, dict):
            raise _fail(pw, "expected an object")
        if p.get("index") != i:
            raise _fail(pw, f"index is {p.get('index')!r}, expected {i} (parts must be in order)")
        file = p.get("file")
        if not isinstance(file, str) or not file:
            raise _fail(pw, "no 'file'")
        ranges = []
        for r in p.get("weight_ranges") or []:
            if not (
                isinstance(r, list)
                and len(r) == 3
                and isinstance(r[0], str)
                and all(isinstance(x, int) and x >= 0 for x in r[1:])
            ):
                raise _fail(pw, f"bad weight range {r!r}")
            ranges.append((r[0], r[1], r[2]))
        parts.append(
            PartSpec(
                index=i,
                file=file,
                inputs=[
                    _tensor(t, f"{pw} ({file}) inputs[{k}]", part_input=True)
                    for k, t in enumerate(p.get("inputs") or [])
                ],
                outputs=[
                    _tensor(t, f"{pw} ({file}) outputs[{k}]")
                    for k, t in enumerate(p.get("outputs") or [])
                ],
                data=p.get("data"),
                nodes=int(p.get("nodes") or 0),
                weight_bytes=int(p.get("weight_bytes") or 0),
                own_weight_bytes=int(p.get("own_weight_bytes") or 0),
                weight_ranges=ranges,
            )
        )
    manifest = Manifest(
        inputs=inputs,
        outputs=outputs,
        parts=parts,
        shared_weights=list(doc.get("shared_weights") or []),
        weight_bytes=int(doc.get("weight_bytes") or 0),
        alignment=int(doc.get("alignment") or 0),
        source=dict(doc.get("source") or {}),
    )
    check_chain(manifest, where)
    return manifest


def check_chain(manifest: Manifest, where: str = "manifest") -> None:
    """Every part input has a producer before it; every graph output is produced; no clashes."""
    graph_inputs = {t.name: t for t in manifest.inputs}
    produced: dict[str, int] = {}
    files: set[str] = set()
    for part in manifest.parts:
        pw = f"{where} part {part.index} ({part.file})"
        if part.file in files:
            raise _fail(pw, f"file {part.file!r} is used by two parts")
        files.add(part.file)
        if os.path.isabs(part.file) or ".." in Path(part.file).parts:
            raise _fail(pw, f"file {part.file!r} escapes the folder")
        for t in part.inputs:
            if t.source == "input":
                if t.name not in graph_inputs:
                    raise _fail(pw, f"input {t.name!r} claims to be a graph input but is not one")
            else:
                assert isinstance(t.source, int)
                if t.source >= part.index:
                    raise _fail(
                        pw,
                        f"input {t.name!r} comes from part {t.source}, which does not run before "
                        "it",
                    )
                if produced.get(t.name) != t.source:
                    raise _fail(pw, f"input {t.name!r}: part {t.source} does not produce it")
        for t in part.outputs:
            if t.name in produced or t.name in graph_inputs:
                raise _fail(pw, f"output {t.name!r} is already produced earlier")
            produced[t.name] = part.index
        if not part.outputs:
            raise _fail(pw, "part has no outputs")
    for t in manifest.outputs:
        if t.name not in produced and t.name not in graph_inputs:
            raise _fail(where, f"graph output {t.name!r} is produced by no part")


def read_manifest(folder: str | os.PathLike, *, check_files: bool = True) -> Manifest:
    """Read and validate ``folder/manifest.json``; with ``check_files`` every part must exist."""
    folder = Path(folder)
    path = folder / MANIFEST_NAME
    if not folder.is_dir():
        raise ManifestError(f"{folder}: not a partition folder (no such folder)")
    if not path.is_file():
        raise ManifestError(f"{folder}: not a partition folder (no {MANIFEST_NAME})")
    try:
        doc = json.loads(path.read_text())
    except ValueError as exc:
        raise ManifestError(f"{path}: invalid partition manifest: not JSON ({exc})") from None
    manifest = manifest_from_dict(doc, str(path))
    manifest.folder = folder.resolve()
    if check_files:
        for part in manifest.parts:
            if not (folder / part.file).is_file():
                raise ManifestError(
                    f"{path}: part {part.index} file {part.file!r} is missing from {folder}"
                )
            for fname, off, length in part.weight_ranges:
                data = folder / fname
                if not data.is_file():
                    raise ManifestError(
                        f"{path}: part {part.index} ({part.file}) needs weights file {fname!r}, "
                        "which is missing"
                    )
                if off + length > data.stat().st_size:
                    raise ManifestError(
                        f"{path}: weights file {fname!r} is shorter than part {part.index} "
                        f"({part.file}) needs (bytes {off}..{off + length})"
                    )
    return manifest
