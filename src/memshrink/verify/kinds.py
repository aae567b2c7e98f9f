"""Model kinds the verifier accepts, in one place.

A *kind* says how to recognise a model argument, how to read its inputs/outputs without its
weights, and which driver the child runs. Today there is one, ``onnx`` (a single ``.onnx`` file,
weights embedded or external). A partition folder (``manifest.json`` plus parts) is added by
registering a new :class:`Kind` here and a matching driver in ``child.main``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memshrink.errors import ModelLoadError, UsageError
from memshrink.verify.modelinfo import ModelIO, read_model_io


@dataclass(frozen=True)
class Kind:
    name: str
    detect: Callable[[Path], bool]
    read_io: Callable[[Path], ModelIO]


@dataclass
class ModelRef:
    """A model the children can load by path."""

    kind: str
    path: Path

    def to_spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.path)}


def _is_partition(path: Path) -> bool:
    from memshrink.partition.manifest import is_partition_folder

    return is_partition_folder(path)


def _partition_io(path: Path) -> ModelIO:
    from memshrink.partition.verify_support import read_partition_io

    return read_partition_io(path)


KINDS: list[Kind] = [
    Kind("onnx", lambda p: p.is_file(), read_model_io),
    # A partition folder (manifest.json + parts); the child runs it with PartitionedSession.
    Kind("partition", _is_partition, _partition_io),
]


def kind_of(ref: ModelRef) -> Kind:
    return next(k for k in KINDS if k.name == ref.kind)


def _check_loadable(path: Path) -> None:
    """Fail before any child runs when the model's external data can't be used (exit 6).

    Why: a missing ``OUT.data`` used to surface as a crashed backend run (exit 5) after the
    original's runs. The references are read from the wire format (``extrefs``) with the
    loader's rules; building the model (``memshrink.load``) for this cost the parent
    +41 MiB on BERT-base and +59 MiB on GPT-2 large (onnx-ir, sympy and the graph)."""
    from memshrink.extrefs import check_file

    check_file(path)


def resolve_model(obj: Any, label: str, tmpdir: str | os.PathLike | None = None) -> ModelRef:
    """A path is used as is; an ``onnx_ir.Model``/``onnx.ModelProto`` is saved to ``tmpdir``."""
    if isinstance(obj, (str, os.PathLike)):
        path = Path(obj)
        if not path.exists():
            raise ModelLoadError(f"{label} model {path}: no such file")
        for kind in KINDS:
            if kind.detect(path):
                if kind.name == "onnx":
                    _check_loadable(path)
                return ModelRef(kind.name, path.resolve())
        raise ModelLoadError(f"{label} model {path}: not a model this verifier can run")
    mod = type(obj).__module__
    if not (mod.startswith("onnx_ir") or mod.startswith("onnx")):
        raise UsageError(
            f"{label}: expected a path, onnx_ir.Model or onnx.ModelProto, got {type(obj).__name__}"
        )
    folder = Path(tmpdir or tempfile.mkdtemp(prefix="memshrink-verify-"))
    path = folder / f"{label}.onnx"
    try:
        from memshrink.model import save

        save(obj, path)
    except ImportError:  # the lead's writer is not there: onnx-ir's own external-data save
        import onnx
        import onnx_ir as ir

        model = obj if isinstance(obj, ir.Model) else ir.serde.deserialize_model(obj)
        if isinstance(obj, onnx.ModelProto):
            model = ir.serde.deserialize_model(obj)
        ir.save(model, path, external_data=f"{label}.onnx.data")
    return ModelRef("onnx", path)


def read_io(ref: ModelRef) -> ModelIO:
    return kind_of(ref).read_io(ref.path)
