"""``verify()`` and ``profile()``: feeds once, one child per (model, backend), then compare.

The original on each backend is the reference for the rewritten model on that backend (so a
runtime's own numerics never count against a rewrite); differences of the original across
backends are reported too, for information.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import signal
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memshrink import tolerance as stated_tolerance
from memshrink.atomic import disk_full_in, sigterm_as_exception
from memshrink.errors import Interrupted, MemshrinkError, ModelLoadError, UsageError
from memshrink.verify.compare import DEFAULT_ATOL, DEFAULT_RTOL, compare_outputs
from memshrink.verify.inputs import FeedInfo, load_feeds, make_feeds
from memshrink.verify.kinds import ModelRef, read_io, resolve_model
from memshrink.verify.modelinfo import ModelIO
from memshrink.verify.precision import (
    FULL_PRECISION_OPTIONS,
    reduced_precision,
    unstable_outputs,
    widened_tolerances,
)
from memshrink.verify.report import Budget, Comparison, ProfileReport, VerifyReport
from memshrink.verify.runner import (
    STATUS_OK,
    Progress,
    PythonArg,
    RunResult,
    parse_backends,
    run_child,
)

FeedsArg = str | os.PathLike | Mapping[str, np.ndarray] | None


class InterfaceMismatchError(MemshrinkError):
    """The rewritten model's inputs differ from the original's: its outputs cannot match."""

    exit_code = 3


def _terminated(signum: int) -> Interrupted:
    name = signal.Signals(signum).name
    return Interrupted(
        f"interrupted by {name}; child processes stopped, temp files removed", signum
    )


@contextlib.contextmanager
def _workdir(prefix: str, parent: str | os.PathLike | None) -> Iterator[Path]:
    """The temp folder of one ``verify`` / ``profile``, removed however the command ends.

    Why: SIGTERM ended the parent at once, leaving its child measuring on (in a session of its
    own) and the folder behind; a full ``TMPDIR`` was an internal error (QA session 15). Now
    SIGTERM is an exception (exit 143) that stops the child (``run_child``) and removes the
    folder, as Ctrl-C does (exit 130), and a full disk there is one line (exit 7)."""
    where = parent or tempfile.gettempdir()
    with (
        sigterm_as_exception(_terminated),
        disk_full_in(where, f"{prefix.strip('-').removeprefix('memshrink-')}'s temp files"),
        tempfile.TemporaryDirectory(prefix=prefix, dir=parent) as tmp,
    ):
        yield Path(tmp)


def _feeds(
    io: ModelIO,
    model_path: Path,
    feeds: FeedsArg,
    shapes: Mapping[str, Sequence[int]] | None,
    dims: Mapping[str, int] | None,
    int_ranges: Mapping[str, tuple[int, int]] | None,
    seed: int,
) -> tuple[dict[str, np.ndarray], list[FeedInfo]]:
    if feeds is None:
        return make_feeds(
            io, model_path, shapes=shapes, dims=dims, int_ranges=int_ranges, seed=seed
        )
    if isinstance(feeds, Mapping):
        names = [i.name for i in io.inputs]
        missing = [n for n in names if n not in feeds]
        if missing:
            raise UsageError(f"feeds lack input(s) {', '.join(missing)}")
        arrays = {n: np.asarray(feeds[n]) for n in names}
        infos = [
            FeedInfo(n, tuple(a.shape), str(a.dtype), None, "user arrays")
            for n, a in arrays.items()
        ]
        return arrays, infos
    return load_feeds(feeds, io)


def _write_feeds(workdir: Path, feeds: dict[str, np.ndarray]) -> tuple[Path, list[str]]:
    path = workdir / "feeds.npz"
    names = list(feeds)
    arrays: dict[str, Any] = {f"i{k}": feeds[n] for k, n in enumerate(names)}
    np.savez(path, **arrays)
    return path, names


def _empty_model(workdir: Path) -> Path:
    """A one-Identity model: its CUDA session is the GPU baseline (context + EP)."""
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "empty",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    path = workdir / "empty.onnx"
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # readable by every runtime version we drive
    onnx.save_model(model, path)
    return path


def _cuda_baseline(
    wd: Path, timeout: float, provider_options: Mapping[str, Mapping[str, Any]] | None,
    python: PythonArg, progress: Progress, backends: Sequence[str],
) -> dict[str, int] | None:  # fmt: skip
    """GPU memory of an empty CUDA session (context + EP) in its own process, per stage
    (``session``, ``run1``: ``gpu_delta`` compares each stage with its own), or None."""
    if "cuda" not in backends:
        return None
    feeds = wd / "empty-feeds.npz"
    np.savez(feeds, i0=np.zeros((1,), np.float32))
    r = run_child(
        ModelRef("onnx", _empty_model(wd)), "empty-session", "cuda", workdir=wd, feeds_path=feeds,
        feed_names=["x"], output_names=["y"], runs=1, timeout=timeout,
        provider_options=(provider_options or {}).get("cuda"), python=python, progress=progress,
    )  # fmt: skip
    peaks = {s["name"]: (s.get("gpu") or {}).get("peak") for s in r.stages}
    vals = {k: int(v) for k, v in peaks.items() if v is not None}
    return vals if r.ok and vals else None


def _settings(**kw: Any) -> dict[str, Any]:
    return {k: v for k, v in kw.items()}


def verify(
    original: Any,
    rewritten: Any,
    *,
    backends: Sequence[str] | str = ("cpu",),
    shapes: Mapping[str, Sequence[int]] | None = None,
    dims: Mapping[str, int] | None = None,
    feeds: FeedsArg = None,
    runs: int = 3,
    atol: float | None = None,
    rtol: float | None = None,
    tolerances: Mapping[str, tuple[float, float]] | None = None,
    max_peak: int | str | None = None,
    timeout: float = 600.0,
    session_options: Mapping[str, Any] | None = None,
    seed: int = 0,
    python: PythonArg = None,
    provider_options: Mapping[str, Mapping[str, Any]] | None = None,
    int_ranges: Mapping[str, tuple[int, int]] | None = None,
    progress: Progress = None,
    workdir: str | os.PathLike | None = None,
) -> VerifyReport:
    """Run both models on every backend, compare outputs, check the peak budget.

    ``backends``: names from ``cpu, openvino, ort-openvino, cuda`` or ``"all"`` (then a backend
    that is unavailable is reported as unsupported without failing the verification).
    ``tolerances`` maps output name -> (atol, rtol). ``atol``/``rtol`` default to 1e-5; when
    none of the three is given and the rewritten model records the tolerance its memshrink
    passes state (``memshrink.tolerance``), that is used instead (never below 1e-5) and
    ``settings["tolerance_source"]`` says so. ``max_peak`` (bytes or ``"500MiB"``) bounds
    the rewritten model's absolute peak RSS on every backend. ``provider_options`` maps backend ->
    options (CUDA/OpenVINO EP provider options; OpenVINO native: compile config, ``device``).
    """
    from memshrink.units import parse_bytes

    explicit = not (isinstance(backends, str) and backends.strip() == "all")
    backend_list = parse_backends(backends)
    if runs < 1:
        raise UsageError("runs must be at least 1")
    limit = parse_bytes(max_peak) if max_peak is not None else None
    with _workdir("memshrink-verify-", workdir) as wd:
        ref_o = resolve_model(original, "original", wd)
        ref_r = resolve_model(rewritten, "rewritten", wd)
        io_o, io_r = read_io(ref_o), read_io(ref_r)
        names_o = [i.name for i in io_o.inputs]
        names_r = [i.name for i in io_r.inputs]
        if sorted(names_o) != sorted(names_r):
            raise InterfaceMismatchError(
                f"the rewritten model's inputs ({', '.join(names_r)}) differ from the original's "
                f"({', '.join(names_o)})"
            )
        _check_tolerances(atol, rtol, tolerances, io_o)
        atol, rtol, source, stated = _tolerance(atol, rtol, tolerances, io_r)
        arrays, infos = _feeds(io_o, ref_o.path, feeds, shapes, dims, int_ranges, seed)
        feeds_path, feed_names = _write_feeds(wd, arrays)
        gpu_base = _cuda_baseline(wd, timeout, provider_options, python, progress, backend_list)
        runs_out: list[RunResult] = []
        for backend in backend_list:
            for label, ref, io in (("original", ref_o, io_o), ("rewritten", ref_r, io_r)):
                runs_out.append(
                    _run(
                        ref,
                        label,
                        backend,
                        wd,
                        feeds_path,
                        feed_names,
                        io,
                        runs,
                        timeout,
                        session_options,
                        provider_options,
                        python,
                        gpu_base,
                        progress,
                    )
                )
        out_names = [o.name for o in io_o.outputs]
        comparisons = _compare_pairs(
            runs_out, backend_list, out_names, atol, rtol, tolerances, io_o.reduced_float
        )
        full = _cpu_original_outputs(runs_out)
        for c in comparisons:
            if c.status == "mismatch":
                pair = [r for r in runs_out if r.backend == c.backend]
                _recheck_at_full_precision(
                    c, pair, full, (ref_o, io_o), (ref_r, io_r), wd, feeds_path, feed_names,
                    timeout, session_options, provider_options, python, progress,
                    atol, rtol, tolerances,
                )  # fmt: skip
        for c in comparisons:
            if c.status == "not-compared":
                _against_cpu_original(
                    c, runs_out, full, (ref_r, io_r), wd, feeds_path, feed_names, timeout,
                    session_options, provider_options, python, progress, atol, rtol, tolerances,
                )  # fmt: skip
        cross = _cross_backend(runs_out, backend_list, out_names, atol, rtol, tolerances)
        budgets = _budgets(runs_out, backend_list, limit)
        for r in runs_out:
            r.outputs = None  # arrays are not part of the report; free them
    settings = _settings(
        atol=atol,
        rtol=rtol,
        tolerance_source=source,
        stated_tolerance=stated.to_dict() if stated else None,
        tolerances={k: list(v) for k, v in (tolerances or {}).items()},
        comparison="|out - ref| <= atol + rtol*|ref|; NaN must match NaN; Inf must match exactly",
        runs=runs,
        seed=seed,
        timeout=timeout,
        max_peak=limit,
        session_options=dict(session_options or {}),
        provider_options={k: dict(v) for k, v in (provider_options or {}).items()},
    )
    required = backend_list if explicit else ()
    return VerifyReport(
        original=str(ref_o.path if isinstance(original, (str, os.PathLike)) else "<in-memory>"),
        rewritten=str(ref_r.path if isinstance(rewritten, (str, os.PathLike)) else "<in-memory>"),
        backends=backend_list, settings=settings, inputs=infos, runs=runs_out,
        comparisons=comparisons, cross_backend=cross, budgets=budgets, required=required,
    )  # fmt: skip


def _check_tolerances(
    atol: float | None,
    rtol: float | None,
    tolerances: Mapping[str, tuple[float, float]] | None,
    io: ModelIO,
) -> None:
    """Refuse, before any run, a tolerance that cannot mean what the user wants.

    Why: ``--tol logits=...`` for a model whose output is named otherwise was silently
    unused (every output compared at the defaults, exit 0), and a negative or NaN tolerance
    fails every element (QA session 14)."""
    values = [("--atol", atol), ("--rtol", rtol)]
    values += [(f"--tol {k}", v) for k, pair in (tolerances or {}).items() for v in pair]
    for flag, v in values:
        if v is not None and not (math.isfinite(v) and v >= 0):
            raise UsageError(f"{flag}: a tolerance must be a finite number >= 0, got {v}")
    names = [o.name for o in io.outputs]
    unknown = sorted(set(tolerances or {}) - set(names))
    if unknown:
        raise UsageError(
            f"--tol {unknown[0]}: the model has no output named {unknown[0]!r} "
            f"(its outputs: {', '.join(names)})"
        )


def _tolerance(
    atol: float | None,
    rtol: float | None,
    tolerances: Mapping[str, tuple[float, float]] | None,
    io: ModelIO,
) -> tuple[float, float, str, stated_tolerance.StatedTolerance | None]:
    """(atol, rtol, where they come from, the rewrite's stated record or None).

    Why the stated one: a rewrite is promised within what its passes state, not within
    verify's defaults (docs/verify.md, "Stated tolerance"). A user's value always wins."""
    stated = stated_tolerance.from_metadata(io.metadata)
    if atol is not None or rtol is not None or tolerances:
        a = DEFAULT_ATOL if atol is None else atol
        return a, DEFAULT_RTOL if rtol is None else rtol, "user", stated
    if stated is None:
        return DEFAULT_ATOL, DEFAULT_RTOL, "default", None
    a, r = max(DEFAULT_ATOL, stated.atol), max(DEFAULT_RTOL, stated.rtol)
    return a, r, f"stated by the rewrite: {stated.describe()}", stated


def _recheck_at_full_precision(
    c: Comparison, pair: list[RunResult], full: Mapping[str, np.ndarray] | None,
    original: tuple[ModelRef, ModelIO], rewritten: tuple[ModelRef, ModelIO], wd: Path,
    feeds_path: Path, feed_names: list[str], timeout: float,
    session_options: Mapping[str, Any] | None,
    provider_options: Mapping[str, Mapping[str, Any]] | None, python: PythonArg,
    progress: Progress, atol: float, rtol: float,
    tolerances: Mapping[str, tuple[float, float]] | None,
) -> None:  # fmt: skip
    """Compare again at f32 on the same backend where its reduced precision has no stable answer.

    Why: on OpenVINO in bf16 a detector's NMS/TopK over near-tied scores picks other boxes than
    ORT CPU for the *original* (FCOS: max abs 225, 43 of 100 labels other). Any rewrite that
    moves the rounding moves those picks as well, so comparing rewritten@bf16 to original@bf16
    measures bf16, not the rewrite. When every output that mismatches here, or one of them,
    has such an unstable original (``precision.unstable_outputs``), both models run once more on
    this backend at f32 and that comparison, at the stated tolerance, decides; the bf16 one stays
    in the report (``reduced_precision_outputs``) and the note says so. Backends without an f32
    switch (``FULL_PRECISION_OPTIONS``) and outputs that are mere rounding are left as they are.

    Without the original's cpu outputs (cpu not asked for, or ORT CPU refused both models) no
    atol was widened, so a rewrite that only moves the rounding mismatched at bf16 and verify
    exited 3 for bf16 itself; then every mismatching output is re-checked at f32 the same way.
    """
    o = next((r for r in pair if r.label == "original"), None)
    low = reduced_precision(o.child.get("assumptions")) if o else None
    force = FULL_PRECISION_OPTIONS.get(c.backend)
    if o is None or o.outputs is None or not low or not force or c.backend == "cpu":
        return
    names = [x.name for x in c.outputs]
    bad = [x.name for x in c.outputs if not x.ok]
    if full is None:  # nothing calibrated the rounding: only the same backend at f32 can judge
        unstable = bad
        cause = (
            f"no full-precision reference (the original did not run on cpu) to tell {low} "
            f"rounding from a wrong rewrite in {', '.join(bad)}"
        )
    else:
        unstable = unstable_outputs(names, full, o.outputs)
        if not unstable or not set(bad) & set(unstable):
            return
        cause = (
            f"the original itself gives another answer than on cpu for {', '.join(unstable)} "
            "(beyond rounding)"
        )
    opts = {k: dict(v) for k, v in (provider_options or {}).items()}
    opts[c.backend] = {**opts.get(c.backend, {}), **force}
    reruns = []
    for label, (ref, io) in (("original", original), ("rewritten", rewritten)):
        r = _run(ref, f"{label}-f32", c.backend, wd, feeds_path, feed_names, io, 1, timeout,
                 session_options, opts, python, None, progress)  # fmt: skip
        reruns.append(r)
    ro, rr = reruns
    c.recheck = {
        "why": f"{c.backend} computed in {low}; "
        + (
            f"the original's {', '.join(unstable)} there differ from original@cpu beyond "
            "rounding (another answer, e.g. NMS/TopK picks)"
            if full is not None
            else f"no original@cpu to widen the {low} rounding of {', '.join(unstable)} against"
        ),
        "provider_options": force,
        "runs": [{"model": r.label, "status": r.status, "error": r.error} for r in reruns],
    }
    if ro.outputs is None or rr.outputs is None:
        why = f"f32 re-check did not run: {ro.status}/{rr.status}"
        c.note = f"{c.note}; {why}" if c.note else why
        return
    c.reduced_precision_outputs = c.outputs
    c.outputs = compare_outputs(names, ro.outputs, rr.outputs, atol, rtol, tolerances)
    c.status = "match" if all(x.ok for x in c.outputs) else "mismatch"
    ro.outputs = rr.outputs = None
    c.note = (
        f"compared at f32 on {c.backend} (INFERENCE_PRECISION_HINT=f32): at {low} {cause}, so "
        f"rewritten@{low} vs original@{low} ({', '.join(bad)} differ) does not judge the "
        "rewrite; the memory figures above are the default-precision runs"
    )


def _against_cpu_original(
    c: Comparison, runs: list[RunResult], full: Mapping[str, np.ndarray] | None,
    rewritten: tuple[ModelRef, ModelIO], wd: Path, feeds_path: Path, feed_names: list[str],
    timeout: float, session_options: Mapping[str, Any] | None,
    provider_options: Mapping[str, Mapping[str, Any]] | None, python: PythonArg,
    progress: Progress, atol: float, rtol: float,
    tolerances: Mapping[str, tuple[float, float]] | None,
) -> None:  # fmt: skip
    """Judge a rewrite that runs where its original was refused, against original@cpu.

    Why: a rewrite can make a model run where the original cannot (``inline-functions``:
    native OpenVINO refuses every model-local function, ORT inlines them at load). There is no
    original@backend to compare with, and "backend failed" would fail the gate for the very
    thing the rewrite fixed. ORT CPU's original outputs are the reference instead, at full
    precision: where the backend computes in bf16/f16 the rewritten model runs once more at f32
    (``FULL_PRECISION_OPTIONS``); without that switch nothing is compared. Only a runtime that
    refused the original (status ``failed``) is replaced so: a crash or a time-out stays a failure.
    """
    o = next((r for r in runs if r.label == "original" and r.backend == c.backend), None)
    r = next((r for r in runs if r.label == "rewritten" and r.backend == c.backend), None)
    if c.backend == "cpu" or full is None or o is None or r is None:
        return
    if o.status != "failed" or r.outputs is None:
        return
    names = [x.name for x in rewritten[1].outputs]
    outputs, candidate = r.outputs, f"rewritten@{c.backend}"
    low = reduced_precision(r.child.get("assumptions"))
    if low:
        force = FULL_PRECISION_OPTIONS.get(c.backend)
        if not force:
            c.note = (
                f"{c.note}; no f32 switch on {c.backend} to compare its {low} run with original@cpu"
            )
            return
        opts = {k: dict(v) for k, v in (provider_options or {}).items()}
        opts[c.backend] = {**opts.get(c.backend, {}), **force}
        rr = _run(rewritten[0], "rewritten-f32", c.backend, wd, feeds_path, feed_names,
                  rewritten[1], 1, timeout, session_options, opts, python, None, progress)  # fmt: skip
        if rr.outputs is None:
            c.note = f"{c.note}; the f32 re-run of the rewritten model did not finish ({rr.status})"
            return
        outputs, candidate = rr.outputs, f"rewritten@{c.backend} at f32"
    first = ((o.error or "").strip().splitlines() or [""])[0]
    c.reference, c.candidate = "original@cpu", candidate
    c.outputs = compare_outputs(names, full, outputs, atol, rtol, tolerances)
    c.status = "match" if all(x.ok for x in c.outputs) else "mismatch"
    c.note = (
        f"the original did not run on {c.backend} ({o.status}"
        + (f": {first[:160]}" if first else "")
        + f"); {candidate} compared with original@cpu instead"
    )


def _run(
    ref: ModelRef, label: str, backend: str, wd: Path, feeds_path: Path, feed_names: list[str],
    io: ModelIO, runs: int, timeout: float, session_options: Mapping[str, Any] | None,
    provider_options: Mapping[str, Mapping[str, Any]] | None, python: PythonArg,
    gpu_base: dict[str, int] | None, progress: Progress, keep_outputs: bool = True,
) -> RunResult:  # fmt: skip
    res = run_child(
        ref, label, backend, workdir=wd, feeds_path=feeds_path, feed_names=feed_names,
        output_names=[o.name for o in io.outputs], runs=runs, timeout=timeout,
        session_options=session_options,
        provider_options=(provider_options or {}).get(backend), python=python,
        progress=progress, keep_outputs=keep_outputs,
    )  # fmt: skip
    if res.status == "failed" and ref.kind == "onnx":
        with contextlib.suppress(OSError):  # the key's mtime: a model rewritten in place
            _refuse_malformed(str(ref.path), ref.path.stat().st_mtime_ns)
    if res.child.get("gpu") is not None:
        # after its run (what estimate --backend cuda predicts over), and per stage
        res.child["gpu"]["empty_session_baseline"] = max(gpu_base.values()) if gpu_base else None
        res.child["gpu"]["empty_session_stages"] = gpu_base
    return res


@functools.lru_cache(maxsize=8)
def _refuse_malformed(path: str, mtime_ns: int) -> None:
    """After a runtime refused a model, load it with memshrink's loader: a model the loader
    refuses (malformed local functions, an op its standard domain lacks, a domain missing from
    ``opset_import``) is the input's fault, exit 6 with the loader's line, as ``optimize`` and
    ``estimate`` say, not a failed backend (exit 5, QA session 14/15).

    Why only then: the parent reads only the external-data references up front, by design
    (loading BERT-base costs it +41 MiB and 1.5 s); a failed run is rare and pays it once."""
    from memshrink.model import load

    try:
        load(path)
    except ModelLoadError:
        raise
    except Exception:  # noqa: BLE001 - the backend's failure stays what the report says
        return


def _cpu_original_outputs(runs: list[RunResult]) -> Mapping[str, np.ndarray] | None:
    """The original's outputs on ORT CPU: the full-precision reference for reduced-precision runs."""
    return next((x.outputs for x in runs if x.label == "original" and x.backend == "cpu"), None)


def _compare_pairs(
    runs: list[RunResult], backends: Sequence[str], names: list[str], atol: float, rtol: float,
    tolerances: Mapping[str, tuple[float, float]] | None, model_float: str | None = None,
) -> list[Comparison]:  # fmt: skip
    """Rewritten against original per backend. Off ``cpu``, tolerances are calibrated on the
    runtime's own error against original@cpu (``precision.widened_tolerances``) when the run
    reports a reduced inference precision, or when the model itself computes in float16 /
    bfloat16 (``model_float``): there a runtime rounds to that type wherever its partition or
    kernels put a boundary, so moving a boundary moves the outputs by that type's rounding.
    Measured: an onnxconverter-common fp16 BERT (f32 I/O) on the OpenVINO EP is 1.8e-3 off
    ORT CPU; its ``ep-compat`` rewrite, run as one OpenVINO subgraph, 1.3e-5 (docs/verify.md)."""
    out = []
    for b in backends:
        o = next(r for r in runs if r.label == "original" and r.backend == b)
        r = next(r for r in runs if r.label == "rewritten" and r.backend == b)
        c = Comparison(b, f"original@{b}", f"rewritten@{b}", "not-compared")
        if o.outputs is None or r.outputs is None:
            c.note = "a run did not finish (see its status)"
        else:
            tols, notes = tolerances, []
            low = reduced_precision(o.child.get("assumptions"))
            if (low or model_float) and b != "cpu":
                tols, why = widened_tolerances(
                    names, _cpu_original_outputs(runs), o.outputs, atol, rtol, tolerances
                )
                what = f"{b} computed in {low}" if low else f"the model computes in {model_float}"
                notes.append(f"{what}: {why}")
            c.outputs = compare_outputs(names, o.outputs, r.outputs, atol, rtol, tols)
            extra = sorted(set(r.outputs) - set(names))
            c.status = "match" if all(x.ok for x in c.outputs) else "mismatch"
            if extra:
                notes.append(f"rewritten has extra outputs {', '.join(extra)} (ignored)")
            c.note = "; ".join(notes) or None
        out.append(c)
    return out


def _cross_backend(
    runs: list[RunResult], backends: Sequence[str], names: list[str], atol: float, rtol: float,
    tolerances: Mapping[str, tuple[float, float]] | None,
) -> list[Comparison]:  # fmt: skip
    done = [r for r in runs if r.label == "original" and r.outputs is not None]
    if len(done) < 2:
        return []
    ref = next((r for r in done if r.backend == "cpu"), done[0])
    out = []
    for r in done:
        if r is ref:
            continue
        c = Comparison(r.backend, f"original@{ref.backend}", f"original@{r.backend}", "info")
        assert ref.outputs is not None and r.outputs is not None
        c.outputs = compare_outputs(names, ref.outputs, r.outputs, atol, rtol, tolerances)
        out.append(c)
    return out


def _budgets(runs: list[RunResult], backends: Sequence[str], limit: int | None) -> list[Budget]:
    if limit is None:
        return []
    out = []
    for b in backends:
        r = next(r for r in runs if r.label == "rewritten" and r.backend == b)
        if r.status != STATUS_OK:
            continue
        peak = r.peak()
        stage = max(r.stages, key=lambda s: s["peak"])["name"] if r.stages else None
        out.append(Budget(b, "rewritten", limit, peak, stage, peak is not None and peak <= limit))
    return out


def profile(
    model: Any,
    *,
    backends: Sequence[str] | str = ("cpu",),
    shapes: Mapping[str, Sequence[int]] | None = None,
    dims: Mapping[str, int] | None = None,
    feeds: FeedsArg = None,
    runs: int = 3,
    timeout: float = 600.0,
    session_options: Mapping[str, Any] | None = None,
    seed: int = 0,
    python: PythonArg = None,
    provider_options: Mapping[str, Mapping[str, Any]] | None = None,
    int_ranges: Mapping[str, tuple[int, int]] | None = None,
    progress: Progress = None,
    workdir: str | os.PathLike | None = None,
) -> ProfileReport:
    """Measure one model's stages on each backend (no comparison); one child per backend."""
    backend_list = parse_backends(backends)
    if runs < 1:
        raise UsageError("runs must be at least 1")
    with _workdir("memshrink-profile-", workdir) as wd:
        ref = resolve_model(model, "model", wd)
        io = read_io(ref)
        arrays, infos = _feeds(io, ref.path, feeds, shapes, dims, int_ranges, seed)
        feeds_path, feed_names = _write_feeds(wd, arrays)
        del arrays
        gpu_base = _cuda_baseline(wd, timeout, provider_options, python, progress, backend_list)
        results = []
        for b in backend_list:
            r = _run(ref, "model", b, wd, feeds_path, feed_names, io, runs, timeout,
                     session_options, provider_options, python, gpu_base, progress, False)  # fmt: skip
            r.outputs = None
            results.append(r)
    settings = _settings(
        runs=runs, seed=seed, timeout=timeout, session_options=dict(session_options or {}),
        provider_options={k: dict(v) for k, v in (provider_options or {}).items()},
    )  # fmt: skip
    return ProfileReport(
        model=str(ref.path if isinstance(model, (str, os.PathLike)) else "<in-memory>"),
        backends=backend_list, settings=settings, inputs=infos, runs=results,
    )  # fmt: skip


def verify_paths(
    in_path: str | os.PathLike,
    out_path: str | os.PathLike,
    backends: Sequence[str] | str = ("cpu",),
    **opts: Any,
) -> VerifyReport:  # noqa: E501
    """The hook for ``memshrink optimize --verify BACKENDS``: verify the output against the input."""
    return verify(in_path, out_path, backends=backends, **opts)
