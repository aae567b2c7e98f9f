"""``PartitionedSession``: run a partition folder like one ``onnxruntime.InferenceSession``.

Two modes. ``resident``: every part's session is created up front, so each runtime copy at
creation is bounded by one part, and later runs are as fast as one session. ``streamed``: part
*i* is created, run and released before part *i+1* is created, so the whole run (creation
included) is bounded by the largest part plus the tensors crossing cuts; with ``prefetch`` the
next part's file pages are requested from the kernel (``posix_fadvise(WILLNEED)``: page cache
only, no RSS) while the current part runs. Tensors are dropped as soon as no later part reads
them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from memshrink.errors import ModelLoadError, UsageError
from memshrink.heap import release_memory
from memshrink.partition.manifest import Manifest, is_partition_folder, read_manifest
from memshrink.runtime.backends import (
    BACKENDS,
    BackendUnavailable,
    Runner,
    make_runner,
)
from memshrink.runtime.prepack import prepacking_changes_numerics

MODES = ("resident", "streamed")

#: ONNX Runtime settings used when the caller gives none (``lean=True``): weights stay mapped
#: from the parts' data files instead of being prepacked into heap copies (the copy made while
#: prepacking would make every part's creation spike); idle parts' thread pools don't spin
#: (measured: K spinning pools made resident BERT-base 1.7x slower on 2 cores, 1.04x without);
#: streamed parts also skip the arena, which would be thrown away with the part anyway.
LEAN_ORT_OPTIONS: dict[str, Any] = {
    "session.disable_prepacking": "1",
    "session.intra_op.allow_spinning": "0",
}
LEAN_ORT_STREAMED_OPTIONS: dict[str, Any] = {**LEAN_ORT_OPTIONS, "enable_cpu_mem_arena": False}

_ORT_TYPES = {
    "float32": "float",
    "float64": "double",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "int64": "int64",
    "int32": "int32",
    "int16": "int16",
    "int8": "int8",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "bool": "bool",
    "str": "string",
}


class PartLoadError(ModelLoadError):
    """A part of a partition folder failed to load (the message names it)."""


class PartRunError(RuntimeError):
    """A part failed while running (the message names it)."""


@dataclass
class IOInfo:
    """Shaped like ``onnxruntime.NodeArg``: ``name``, ``shape``, ``type`` ('tensor(float)')."""

    name: str
    shape: list[int | str | None]
    type: str
    dtype: str


@dataclass
class PartTiming:
    index: int
    create_s: float = 0.0
    run_s: float = 0.0


@dataclass
class RunStats:
    """What the last ``run`` did, per part (seconds), for latency reports."""

    parts: list[PartTiming] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 4),
            "create_s": round(sum(p.create_s for p in self.parts), 4),
            "run_s": round(sum(p.run_s for p in self.parts), 4),
            "parts": [vars(p) for p in self.parts],
        }


def _ort_type(dtype: str) -> str:
    """ORT's type string: ``tensor(float)``, ``seq(tensor(int64))``."""
    if dtype.startswith("seq(") and dtype.endswith(")"):
        return f"seq({_ort_type(dtype[4:-1])})"
    return f"tensor({_ORT_TYPES.get(dtype, dtype)})"


def _io(specs: Sequence[Any]) -> list[IOInfo]:
    return [IOInfo(t.name, list(t.shape or []), _ort_type(t.dtype), t.dtype) for t in specs]


def _prefetch(folder: Path, manifest: Manifest, index: int) -> None:
    """Ask the kernel to read part ``index``'s files ahead (page cache only, no RSS)."""
    if not hasattr(os, "posix_fadvise") or index >= len(manifest.parts):
        return
    part = manifest.parts[index]
    ranges: list[tuple[str, int, int]] = [(part.file, 0, 0)] + list(part.weight_ranges)
    for fname, off, length in ranges:
        try:
            fd = os.open(folder / fname, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, off, length, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass
        finally:
            os.close(fd)


class PartitionedSession:
    """Run a partition folder written by the ``partition`` pass.

    ``backend``: ``cpu`` | ``openvino`` | ``ort-openvino`` | ``cuda``. ``mode``: ``streamed``
    (default) or ``resident``. ``session_options``: a dict (ORT: SessionOptions attributes and
    dotted config entries; OpenVINO: compile config) applied to every part; when None and
    ``lean`` is set, ORT parts get ``LEAN_ORT_OPTIONS`` (no prepacked weight copies).
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        backend: str = "cpu",
        mode: str = "streamed",
        *,
        session_options: Any = None,
        provider_options: Mapping[str, Any] | None = None,
        prefetch: bool = True,
        trim: bool = True,
        lean: bool = True,
    ) -> None:
        if mode not in MODES:
            raise UsageError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
        if backend not in BACKENDS:
            raise UsageError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        self.folder = Path(folder)
        self.manifest = read_manifest(self.folder)
        self.backend = backend
        self.mode = mode
        self._lean = session_options is None and lean and backend in ("cpu", "ort-openvino")
        if self._lean:
            session_options = dict(
                LEAN_ORT_STREAMED_OPTIONS if mode == "streamed" else LEAN_ORT_OPTIONS
            )
        self.session_options = session_options
        self.prepacked_parts: dict[int, str] = {}  # part -> why it keeps ORT's prepacking
        self.provider_options = dict(provider_options or {})
        self.prefetch = prefetch
        self.trim = trim
        self.last_run = RunStats()
        self.providers: list[str] = []
        self._runners: dict[int, Runner] = {}
        self._last_use = self.manifest.last_use()
        if mode == "resident":
            for part in self.manifest.parts:
                self._runners[part.index] = self._create(part.index)

    # -------------------------------------------------------------- InferenceSession-like

    def get_inputs(self) -> list[IOInfo]:
        return _io(self.manifest.inputs)

    def get_outputs(self) -> list[IOInfo]:
        return _io(self.manifest.outputs)

    def get_providers(self) -> list[str]:
        return list(self.providers)

    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: Any = None,  # noqa: ARG002 - accepted for InferenceSession compatibility
    ) -> list[np.ndarray]:
        """Run the parts needed for ``output_names`` (None: all outputs) in order."""
        names = list(output_names) if output_names else [t.name for t in self.manifest.outputs]
        known = {t.name for t in self.manifest.outputs}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise UsageError(
                f"unknown output(s) {', '.join(unknown)}; outputs are: {', '.join(sorted(known))}"
            )
        env: dict[str, Any] = {}
        for t in self.manifest.inputs:
            if t.name not in input_feed:
                raise UsageError(
                    f"missing input {t.name!r} (inputs: "
                    f"{', '.join(i.name for i in self.manifest.inputs)})"
                )
            env[t.name] = input_feed[t.name]
        wanted = set(names)
        stats = RunStats()
        t_start = time.perf_counter()
        needed = self.manifest.parts_needed(names)
        for pos, index in enumerate(needed):
            part = self.manifest.parts[index]
            timing = PartTiming(index)
            t0 = time.perf_counter()
            runner = self._runners.get(index)
            if runner is None:
                runner = self._create(index)
            timing.create_s = time.perf_counter() - t0
            if self.mode == "streamed" and self.prefetch and pos + 1 < len(needed):
                _prefetch(self.folder, self.manifest, needed[pos + 1])
            feeds = {t.name: env[t.name] for t in part.inputs}
            out_names = [t.name for t in part.outputs]
            t1 = time.perf_counter()
            try:
                outs = runner.run(out_names, feeds)
            except Exception as exc:
                raise PartRunError(
                    f"part {index} ({part.file}) failed on {self.backend}: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            finally:
                del feeds
                if self.mode == "streamed":
                    runner.close()
                    del runner
                    if self.trim:
                        release_memory()
            timing.run_s = time.perf_counter() - t1
            env.update(zip(out_names, outs, strict=True))
            del outs
            for name in [n for n in env if self._last_use.get(n, -1) <= index]:
                if name not in wanted:
                    del env[name]
            stats.parts.append(timing)
        stats.seconds = time.perf_counter() - t_start
        self.last_run = stats
        return [env[n] for n in names]

    def close(self) -> None:
        for runner in self._runners.values():
            runner.close()
        self._runners.clear()
        if self.trim:
            release_memory()

    def __enter__(self) -> PartitionedSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------------------------- internals

    def _create(self, index: int) -> Runner:
        part = self.manifest.parts[index]
        path = str(self.folder / part.file)
        options = self.session_options
        why = prepacking_changes_numerics(path) if self._lean else None
        if why:  # the lean default would change this part's outputs (runtime/prepack.py)
            self.prepacked_parts[index] = why
            options = {k: v for k, v in options.items() if k != "session.disable_prepacking"}
        try:
            runner = make_runner(path, self.backend, options, self.provider_options)
        except BackendUnavailable:
            raise
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise PartLoadError(
                f"part {index} ({part.file}) of {self.folder} failed to load on {self.backend}: "
                f"{type(exc).__name__}: {first}"
            ) from exc
        self.providers = list(getattr(runner, "providers", []))
        return runner


class ModelSession:
    """A single .onnx file behind the same interface (so callers need not care which it is)."""

    def __init__(
        self,
        path: str | os.PathLike,
        backend: str = "cpu",
        *,
        session_options: Any = None,
        provider_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.path = str(path)
        self.backend = backend
        self.runner = make_runner(self.path, backend, session_options, provider_options)
        self.providers = list(getattr(self.runner, "providers", []))
        self.mode = "single"

    def get_providers(self) -> list[str]:
        return list(self.providers)

    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: Any = None,
    ) -> list[np.ndarray]:
        if not output_names:
            raise UsageError("ModelSession.run needs output names")
        return self.runner.run(list(output_names), input_feed)

    def close(self) -> None:
        self.runner.close()


def open_session(
    path: str | os.PathLike,
    backend: str = "cpu",
    mode: str = "streamed",
    *,
    session_options: Any = None,
    provider_options: Mapping[str, Any] | None = None,
    prefetch: bool = True,
    lean: bool = True,
) -> PartitionedSession | ModelSession:
    """A session for a partition folder (``PartitionedSession``) or a single .onnx file."""
    if is_partition_folder(path):
        return PartitionedSession(
            path,
            backend,
            mode,
            session_options=session_options,
            provider_options=provider_options,
            prefetch=prefetch,
            lean=lean,
        )
    if Path(path).is_dir():
        raise ModelLoadError(f"{path}: a folder without manifest.json is not a partition folder")
    return ModelSession(
        path, backend, session_options=session_options, provider_options=provider_options
    )
