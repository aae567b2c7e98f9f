"""Parent side: run one (model, backend) in a child process with a timeout, read what it left.

A crash (SIGSEGV, the OOM killer's SIGKILL), a timeout or a missing runtime becomes that run's
``status`` with its error text; it never raises. Each backend may use its own interpreter (a
venv holding ``onnxruntime-openvino`` or ``onnxruntime-gpu``, which conflict with plain
``onnxruntime``): ``python=`` maps backend -> interpreter, else ``MEMSHRINK_PYTHON_<BACKEND>``
(e.g. ``MEMSHRINK_PYTHON_ORT_OPENVINO``), else ``sys.executable``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import memshrink
from memshrink.errors import ModelSaveError, UsageError
from memshrink.verify.child import EXIT_NO_SPACE, EXIT_UNSUPPORTED
from memshrink.verify.kinds import ModelRef

BACKENDS = ("cpu", "openvino", "ort-openvino", "cuda")
STATUS_OK = "ok"
FAILED_STATUSES = ("crashed", "timed-out", "failed", "unsupported")
PythonArg = str | os.PathLike | Mapping[str, str | os.PathLike] | None
Progress = Callable[[str], None] | None


def parse_backends(text: str | Sequence[str]) -> tuple[str, ...]:
    items = text.split(",") if isinstance(text, str) else list(text)
    out = tuple(b.strip() for b in items if b.strip())
    if out == ("all",):
        return BACKENDS
    bad = [b for b in out if b not in BACKENDS]
    if bad or not out:
        raise UsageError(
            f"unknown backend(s) {', '.join(bad) or '(none)'}; choose from {', '.join(BACKENDS)} "
            "or 'all'"
        )
    return out


def interpreter_for(backend: str, python: PythonArg = None) -> str:
    """The Python that runs ``backend``'s child."""
    if isinstance(python, Mapping):
        if backend in python:
            return os.fspath(python[backend])
    elif python is not None:
        return os.fspath(python)
    env = os.environ.get("MEMSHRINK_PYTHON_" + backend.upper().replace("-", "_"))
    return env or sys.executable


@dataclass
class RunResult:
    """One (model, backend) child run."""

    label: str
    model: str
    backend: str
    status: str
    error: str | None = None
    returncode: int | None = None
    seconds: float = 0.0
    python: str = ""
    child: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, np.ndarray] | None = None

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK

    @property
    def stages(self) -> list[dict[str, Any]]:
        return list(self.child.get("stages") or [])

    @property
    def baseline_rss(self) -> int | None:
        b = self.child.get("baseline")
        return int(b["rss"]) if b else None

    def peak(self) -> int | None:
        """Highest exact RSS peak over all stages (absolute bytes)."""
        peaks = [s["peak"] for s in self.stages]
        return max(peaks) if peaks else None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "model": self.label,
            "path": self.model,
            "backend": self.backend,
            "status": self.status,
            "error": self.error,
            "returncode": self.returncode,
            "seconds": round(self.seconds, 3),
            "python": self.python,
        }
        for key in ("runtime", "baseline", "gpu", "assumptions", "environment"):
            d[key] = self.child.get(key)
        base = self.baseline_rss or 0
        peak = self.peak()
        d["peak"] = peak
        d["peak_delta"] = (peak - base) if peak is not None else None
        d["stages"] = [
            {**s, "peak_delta": s["peak"] - base, "after_delta": s["after"] - base}
            for s in self.stages
        ]
        return d


def _signal_text(rc: int) -> str:
    sig = -rc
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    if sig == signal.SIGKILL:
        return f"killed by {name}, likely the OOM killer (out of memory)"
    return f"crashed with {name}"


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    src = str(Path(memshrink.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def run_child(
    ref: ModelRef,
    label: str,
    backend: str,
    *,
    workdir: Path,
    feeds_path: Path,
    feed_names: list[str],
    output_names: list[str],
    runs: int,
    timeout: float,
    session_options: Mapping[str, Any] | None = None,
    provider_options: Mapping[str, Any] | None = None,
    python: PythonArg = None,
    progress: Progress = None,
    keep_outputs: bool = True,
) -> RunResult:
    """Run one child to completion, timeout or crash and return what it measured."""
    tag = f"{label}-{backend}"
    spec: dict[str, Any] = {
        "model": ref.to_spec(),
        "backend": backend,
        "label": label,
        "feeds": str(feeds_path),
        "feed_names": feed_names,
        "output_names": output_names,
        "runs": runs,
        "session_options": dict(session_options or {}),
        "provider_options": dict(provider_options or {}),
        "result": str(workdir / f"{tag}.result.json"),
        "outputs": str(workdir / f"{tag}.outputs.npz"),
        "parent_pid": os.getpid(),
    }
    spec_path = workdir / f"{tag}.spec.json"
    spec_path.write_text(json.dumps(spec))
    py = interpreter_for(backend, python)
    res = RunResult(label=label, model=str(ref.path), backend=backend, status="failed", python=py)
    if progress:
        progress(f"memshrink: running {label} on {backend} ({ref.path.name}) ...")
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(
            [py, "-m", "memshrink.verify.child", str(spec_path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=_child_env(),
            start_new_session=True,  # so a timeout can kill the whole group
        )
    except OSError as exc:
        res.status, res.error = "unsupported", f"cannot start interpreter {py}: {exc}"
        return res
    try:
        log, timed_out = _wait_child(proc, timeout, Path(spec["result"]), f"{label} on {backend}",
                                     progress, t0)  # fmt: skip
    except BaseException:  # Ctrl-C, SIGTERM (made an exception by the caller): stop the child
        stop_group(proc)
        raise
    res.seconds = time.perf_counter() - t0
    res.returncode = proc.returncode
    if proc.returncode == EXIT_NO_SPACE:
        raise ModelSaveError(
            f"out of disk space (or file size limit) in {workdir} while {label} on {backend} "
            "wrote its results; free space there or set TMPDIR to a folder with room"
        )
    text = log.decode(errors="replace")[-4000:].strip()
    result_path = Path(spec["result"])
    if result_path.is_file():
        try:
            res.child = json.loads(result_path.read_text())
        except ValueError:
            res.child = {}
    child_err = res.child.get("error")
    if timed_out:
        res.status = "timed-out"
        res.error = f"no result within {timeout:g} s; killed" + (
            f"; output: {text}" if text else ""
        )
    elif proc.returncode is not None and proc.returncode < 0:
        res.status = "crashed"
        res.error = _signal_text(proc.returncode) + (f"; output: {text}" if text else "")
    elif proc.returncode == 0 and res.child.get("status") == STATUS_OK:
        res.status = STATUS_OK
        if keep_outputs:
            res.outputs = _read_outputs(Path(spec["outputs"]), output_names)
    elif proc.returncode == EXIT_UNSUPPORTED and res.child.get("status") == "unsupported":
        res.status, res.error = "unsupported", child_err
    else:
        res.status = "failed"
        res.error = child_err or f"exit code {proc.returncode}" + (
            f"; output: {text}" if text else ""
        )
    if progress:
        progress(f"memshrink: {label} on {backend}: {res.status} ({res.seconds:.1f} s)")
    return res


def stop_group(proc: subprocess.Popen) -> None:
    """Kill the child's process group and reap it, so no child outlives an interrupted verify
    and none writes into the temp folder while it is removed (QA session 15: SIGTERM left the
    child running and the folder behind)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.communicate(timeout=30)


#: A child running longer than this reports each finished stage (big models take minutes).
PROGRESS_AFTER_S = 5.0


def _wait_child(
    proc: subprocess.Popen, timeout: float, result_path: Path, what: str, progress: Progress,
    t0: float,
) -> tuple[bytes, bool]:  # fmt: skip
    """Wait for the child (killing its group at ``timeout``); returns (its output, timed out).

    While it runs, the stages it has finished (it rewrites ``result_path`` after each one) are
    reported through ``progress`` once it has run for ``PROGRESS_AFTER_S``, so a multi-GB
    model's minutes of session creation and runs are not silent.
    """
    reported = 0
    deadline = t0 + timeout
    while True:
        try:
            log, _ = proc.communicate(timeout=max(0.01, min(1.0, deadline - time.perf_counter())))
        except subprocess.TimeoutExpired:
            pass
        else:
            if progress and time.perf_counter() - t0 >= PROGRESS_AFTER_S:
                _report_stages(result_path, what, progress, reported)  # the last ones
            return log, False
        if time.perf_counter() >= deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            log, _ = proc.communicate()
            return log, True
        if progress and time.perf_counter() - t0 >= PROGRESS_AFTER_S:
            reported = _report_stages(result_path, what, progress, reported)


def _report_stages(path: Path, what: str, progress: Callable[[str], None], done: int) -> int:
    """Report the stages recorded in the child's result file after the first ``done``."""
    try:
        stages = json.loads(path.read_text()).get("stages") or []
    except (OSError, ValueError):
        return done
    for st in stages[done:]:
        progress(
            f"memshrink: {what}: {st.get('name')} done in {float(st.get('seconds', 0)):.1f} s, "
            f"peak RSS {int(st.get('peak', 0)) / 2**20:.0f} MiB"
        )
    return max(done, len(stages))


def _read_outputs(path: Path, names: list[str]) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {name: z[f"o{k}"] for k, name in enumerate(names) if f"o{k}" in z.files}
