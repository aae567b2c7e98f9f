"""Built-in subcommands: ``optimize``, ``passes`` and ``demo``."""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memshrink.atomic import remove_quietly
from memshrink.errors import ModelSaveError, UsageError
from memshrink.units import format_bytes

OPTIMIZE_EPILOG = """\
examples:
  memshrink optimize bert.onnx bert-small.onnx --passes all
  memshrink optimize net.onnx net-ov.onnx --passes all --backend openvino   # deploying on OpenVINO
  memshrink optimize net.onnx net-cpu.onnx --passes all --backend ort       # ORT CPU only
  memshrink optimize in.onnx out.onnx --passes prune,dedup-weights,external-data
  memshrink optimize in.onnx out.onnx --passes my-pipeline.toml --json report.json
  memshrink optimize in.onnx out.onnx -O external-data.threshold=4KiB --check
  memshrink optimize in.onnx out.onnx --verify cpu,openvino --shape input_ids=1,128

The input is never modified. OUT is written atomically; with external data,
weights go to OUT.data next to it (64 KiB-aligned offsets, 4 KiB under 64 KiB), and those OpenVINO
folds into new constants (Conv + BatchNormalization, scaled FCs) to OUT.folded.data.
OUT reads them by name: copy or move OUT with its data files, into one folder.
"""


def _parse_pass_options(items: list[str] | None) -> dict[str, dict[str, Any]]:
    options: dict[str, dict[str, Any]] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        pass_name, dot, option = key.rpartition(".")
        if not sep or not dot or not pass_name or not option:
            raise UsageError(
                f"bad -O {item!r}: expected PASS.OPTION=VALUE, e.g. external-data.threshold=4KiB"
            )
        options.setdefault(pass_name, {})[option] = value
    return options


def _add_shape_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--shape",
        action="append",
        metavar="NAME=DIMS",
        help="bind an input's shape, e.g. --shape input_ids=1,128 (repeatable; NAME= is a scalar)",
    )
    p.add_argument(
        "--dim",
        action="append",
        metavar="SYMBOL=N",
        help="bind a symbolic dimension, e.g. --dim batch=4",
    )


def cmd_optimize(args: argparse.Namespace) -> int:
    from memshrink.bindings import (
        check_dim_names,
        graph_input_dims,
        parse_dim_args,
        parse_shape_args,
    )
    from memshrink.checks import CheckHook
    from memshrink.cli import check_report_path
    from memshrink.heap import release_memory
    from memshrink.hooks import EstimateHook, VerifyEachHook
    from memshrink.manager import PassContext, PassManager, stderr_progress
    from memshrink.model import load, weight_bytes
    from memshrink.writer import save_model

    check_report_path(args.json, "--json")
    src, dst = Path(args.input), Path(args.output)
    same = os.path.realpath(src) == os.path.realpath(dst)
    if same or (src.exists() and dst.exists() and os.path.samefile(src, dst)):
        raise UsageError("output path is the input path; the input is never overwritten")
    if args.json and args.json != "-":
        outs = (dst, f"{dst}.data", f"{dst}.folded.data", f"{dst}.json")  # .json: the sidecar
        written = {os.path.realpath(p) for p in outs}
        if os.path.realpath(args.json) in written:
            raise UsageError(f"--json {args.json} is where the model goes; choose another path")
    # Fail before any work when the output can't be written.
    if not dst.parent.is_dir():
        raise ModelSaveError(f"output folder {dst.parent} does not exist")
    if not os.access(dst.parent, os.W_OK):
        raise ModelSaveError(f"cannot write to {dst.parent}: permission denied")
    quiet = args.quiet
    progress = None if quiet else stderr_progress
    shapes = parse_shape_args(args.shape)
    dims = parse_dim_args(args.dim)
    backends = [b.strip() for b in args.verify.split(",")] if args.verify else []

    hooks: list[Any] = []
    if args.check:
        hooks.append(CheckHook())
    if args.estimate:
        hooks.append(EstimateHook())
    if args.verify_each and backends:
        hooks.append(VerifyEachHook(str(src), backends, shapes=shapes or None, dims=dims or None))
    manager = PassManager(args.passes, hooks=hooks, options=_parse_pass_options(args.pass_option))

    t0 = time.perf_counter()
    model = load(src)
    check_dim_names(dims, graph_input_dims(model.graph))
    in_bytes = weight_bytes(model)
    if progress:
        progress(
            f"loaded {src} ({len(model.graph)} nodes, {format_bytes(in_bytes)} of weights) "
            f"in {time.perf_counter() - t0:.2f} s"
        )
    context = PassContext(
        shapes=shapes,
        dims=dims,
        backend={None: "ort", "cpu": "ort"}.get(args.backend, args.backend),
        deploy_only=args.backend is not None,
        progress=progress,
    )
    from memshrink.transforms.weight_io import SpillFile

    SpillFile.start_run(str(dst.parent))  # rewritten weights wait next to the output
    # the manager gets the only reference: a pass that returns a new model (simplify) frees
    # the loaded one instead of this frame keeping it to the end (5,000 nodes: ~60 MiB)
    loaded = [model]
    del model
    model, report = manager.run(loaded.pop(), context)

    last = [0.0]

    def save_progress(done: int, total: int) -> None:
        now = time.perf_counter()
        if progress and total >= 256 << 20 and (now - last[0] >= 1.0 or done == total):
            last[0] = now
            progress(f"writing weights {format_bytes(done)} / {format_bytes(total)}")

    # the sidecar is written before the model and renamed after it: a disk that fills on it
    # fails the run with nothing written, not a new model beside no (or the old) sidecar
    staged = _stage_sidecar(src, dst, _declared_inputs(model))
    try:
        info = save_model(model, dst, progress=save_progress, fsync=args.fsync)
        stale_side = _place_sidecar(dst, staged)
    finally:
        remove_quietly(staged)
    if stale_side:
        info.removed_stale.append(stale_side)
    report.seconds = time.perf_counter() - t0
    out_bytes = weight_bytes(model)
    result: dict[str, Any] = {
        "input": str(src),
        "output": str(dst),
        "pipeline": [p.name for p in manager.passes],
        "weights_before": in_bytes,
        "weights_after": out_bytes,
        "save": info.to_dict(),
        **report.to_dict(),
    }
    bindings = [f"--shape={s}" for s in args.shape or ()] + [f"--dim={d}" for d in args.dim or ()]
    recommendations = _add_recommendations(
        result, model, context.backend, shapes, dims, (str(src), str(dst), bindings)
    )
    del model  # saved; the predictions below load the two files themselves
    release_memory()  # its graph is cycles, its freed heap glibc's: not under the loads below
    others = None
    if args.estimate:
        if progress:
            progress("predicting the other runtimes' peaks (original vs output)")
        others = _other_backends(result, src, dst, context.backend, shapes, dims)
    exit_code = 0
    # ``--json -``: stdout is the JSON report alone, as for estimate and verify (the tables
    # came first and broke ``--json - > r.json``, QA session 14); progress stays on stderr
    tables = not quiet and args.json != "-"
    if tables:
        print(_format_optimize(result))
        if recommendations:
            print(recommendations)
        if others:
            print(others)
        stated = result.get("stated_tolerance")
        if stated:
            print(
                f"note: outputs are stated within atol {stated['atol']:g}, rtol {stated['rtol']:g} "
                "of the input (" + ", ".join(p["pass"] for p in stated["passes"]) + ", recorded "
                "in the model); `memshrink verify` compares at that unless given --atol/--rtol/--tol"
            )
    if backends:
        from memshrink.verify import verify

        vreport = verify(
            str(src), str(dst), backends=backends, shapes=shapes or None, dims=dims or None
        )
        result["verify"] = vreport.to_dict()
        if tables:
            print(vreport.format_table())
        exit_code = vreport.exit_code
    if args.json:
        from memshrink.cli import write_json

        # the same keys in every report, null where they do not apply (a script reads
        # ``r["verify"]`` without checking; QA session 14: five keys came and went)
        for key in OPTIONAL_REPORT_KEYS:
            result.setdefault(key, None)
        write_json(result, args.json)
    return exit_code


#: ``optimize --json`` keys that only some runs fill: null in the others.
OPTIONAL_REPORT_KEYS = (
    "estimate_before",
    "custom_ops",
    "stated_tolerance",
    "recommended_session_options",
    "other_backends_predicted_peak",
    "verify",
)


def _add_recommendations(
    result: dict[str, Any],
    model: Any,
    backend: str,
    shapes: dict,
    dims: dict,
    paths: tuple[str, str, list[str]],
) -> str | None:
    """Runtime settings matter as much as the graph: record which ones to use and why;
    return the console text, with the verify / estimate commands that check them
    (``paths``: input, output, the shape and dim arguments)."""
    if backend != "ort":
        return None
    from memshrink.errors import MemshrinkError
    from memshrink.recommend import check_commands, format_recommendations, recommend

    try:
        recs = recommend(model, backend="ort", shapes=shapes or None, dims=dims or None)
    except MemshrinkError as exc:  # e.g. unbound dims: nothing to predict with
        result["recommended_session_options"] = {"error": str(exc)}
        return None
    result["recommended_session_options"] = [r.to_dict() for r in recs]
    return format_recommendations(recs, check_commands(recs, *paths))


OTHER_BACKENDS = ("openvino", "ort-openvino")


def _other_backends(
    result: dict[str, Any],
    src: Path,
    dst: Path,
    target: str,
    shapes: dict,
    dims: dict,
    rise: float = 0.05,
    min_bytes: int = 8 << 20,
) -> str | None:
    """Predicted whole-process peak of the input and the output on the runtimes the pipeline
    did not target; return a warning for each that rises.

    Why: the activation passes decide on ORT CPU (and guard CUDA); some rewrites cost another
    runtime (OpenVINO compiles kernels per node: chunking ResNet-50 b16 measured 347 -> 452 MiB
    there). A user should hear that before deploying, with the flag that avoids it.
    """
    from memshrink.estimate.api import SharedView

    backends = [b for b in OTHER_BACKENDS if b != target]
    # each file loaded and analysed once for all backends, one file at a time
    bind = {"shapes": shapes or None, "dims": dims or None}
    src_peaks = _peaks_each(SharedView(str(src), **bind), backends)
    gc.collect()  # the input's view, before the output's is built
    shared_dst = SharedView(str(dst), **bind)
    dst_peaks = _peaks_each(shared_dst, backends)
    figures: dict[str, Any] = {}
    lines = []
    for b in backends:
        before, after = src_peaks[b], dst_peaks[b]
        if isinstance(before, Exception) or isinstance(after, Exception):
            failed = before if isinstance(before, Exception) else after
            figures[b] = {"error": f"{type(failed).__name__}: {failed}"}
            continue  # a note, never a failure of optimize
        figures[b] = {"before": before, "after": after}
        if after > before * (1 + rise) and after - before > min_bytes:
            lines.append(
                f"note: predicted {b} peak rises {format_bytes(before)} -> "
                f"{format_bytes(after)}; deploying there? re-run with --backend {b}"
            )
            unmapped = _ov_unmapped(shared_dst, b)
            if unmapped is not None and after - unmapped > min_bytes:
                # the external data file's pages, which --backend does not change
                figures[b]["after_enable_mmap_no"] = unmapped
                lines.append(
                    f"note: {format_bytes(after - unmapped)} of it are {dst.name}'s data file "
                    f"pages that OpenVINO keeps mapped; read_model(path, config={{'ENABLE_MMAP': "
                    f"False}}) reads them instead: {format_bytes(unmapped)} predicted"
                )
    result["other_backends_predicted_peak"] = figures
    return "\n".join(lines) or None


def _peaks_each(shared: Any, backends: list[str]) -> dict[str, Any]:
    """Each backend's predicted process peak (highest stage) of a ``SharedView``, or the
    exception its prediction raised."""
    out: dict[str, Any] = {}
    for b in backends:
        try:
            out[b] = max(shared.estimate(b).stage_peaks().values())
        except Exception as exc:  # noqa: BLE001 - reported per backend by the caller
            out[b] = exc
    return out


def _ov_unmapped(shared_dst: Any, backend: str) -> int | None:
    """OpenVINO's predicted peak of the output (its ``SharedView``) with ``ENABLE_MMAP=NO``,
    or None (another backend, or no prediction). Why: compile reads every external weight and
    the data file stays mapped while any Constant points into it, so the pages of weights the
    plugin copied or folded stay resident; read into memory, the folded originals are freed
    (EfficientFormer-L1 after ``safe``: 156 -> 136 MiB measured; docs/optimize.md)."""
    from memshrink.estimate.openvino import ENABLE_MMAP

    if backend != "openvino":
        return None
    try:
        est = shared_dst.estimate(backend, session_options={ENABLE_MMAP: "NO"})
    except Exception:  # noqa: BLE001 - a note, never a failure of optimize
        return None
    return int(max(est.stage_peaks().values()))


def _declared_inputs(model: Any) -> dict[str, tuple[Any, ...] | None]:
    """Each graph input's declared dims (ints, or names for symbolic ones; None: no shape)."""
    return {
        v.name: None
        if v.shape is None
        else tuple(d if isinstance(d, int) else str(d) for d in v.shape)
        for v in model.graph.inputs
    }


def _copy_sidecar(
    src: Path, dst: Path, declared: Mapping[str, tuple[Any, ...] | None]
) -> str | None:
    """Carry ``IN.onnx.json`` to the saved output ``dst`` (``_stage_sidecar`` then
    ``_place_sidecar``); returns the path of a stale ``OUT.onnx.json`` it removed."""
    staged = _stage_sidecar(src, dst, declared)
    try:
        return _place_sidecar(dst, staged)
    finally:
        remove_quietly(staged)


def _stage_sidecar(
    src: Path, dst: Path, declared: Mapping[str, tuple[Any, ...] | None]
) -> Path | None:
    """Write ``IN.onnx.json`` (how to feed the model) for the output into a temp file beside it;
    None when IN has none. Where a pass bound an input's dims (``chunk`` specializes symbolic
    dims to the ``--dim`` bindings), the sidecar takes the output's static shape: a stale one
    would feed the rewritten model a shape it no longer accepts (``verify`` reads the sidecar).
    A sidecar that is not valid JSON is copied as it is (``load_sidecar`` reports it where it is
    used). Why staged before the model is saved: a full disk must fail the run before the model
    is renamed into place, not leave it beside no sidecar or an earlier run's."""
    from memshrink.atomic import describe_os_error, temp_path_for
    from memshrink.bindings import sidecar_path

    side = sidecar_path(src)
    if not side.is_file() or not dst.parent.is_dir():  # no folder: save_model names it
        return None
    raw = side.read_bytes()
    try:
        data = json.loads(raw)
        for spec in data.get("inputs", []):
            dims = declared.get(spec.get("name"))
            if dims and all(isinstance(d, int) for d in dims) and list(dims) != spec.get("shape"):
                spec["shape"] = list(dims)
        raw = (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()
    except (ValueError, AttributeError, TypeError):
        pass
    target = sidecar_path(dst)
    tmp = temp_path_for(target)
    try:
        with open(tmp, "wb") as f:
            f.write(raw)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.remove(tmp)  # a partial file (a full disk); never the cause itself
        raise describe_os_error(exc, target) from exc
    return tmp


def _place_sidecar(dst: Path, staged: Path | None) -> str | None:
    """Rename the staged sidecar to ``OUT.onnx.json`` once the model is saved. When IN has none
    (``staged`` None), an ``OUT.onnx.json`` an earlier run left describes another model
    (``estimate OUT`` would feed it silently): it is removed, and its path returned."""
    from memshrink.bindings import sidecar_path
    from memshrink.writer import remove_stale_siblings

    if not dst.exists():  # a file, or a partition folder
        return None
    target = sidecar_path(dst)
    if staged is None:
        removed = remove_stale_siblings(target)
        return removed[0] if removed else None
    os.replace(staged, target)
    return None


def _stat_text(key: str, value: Any) -> str:
    sized = isinstance(value, (int, float)) and not isinstance(value, bool)
    if sized and any(w in key for w in ("bytes", "peak", "activations", "saved")):
        return f"{key}={format_bytes(value)}"
    return f"{key}={value}"


def _format_optimize(result: dict[str, Any]) -> str:
    """The console table of ``optimize``: per pass what changed and why; the predicted peak after
    each modifying pass; then one summary line of predicted peaks and one of weights and files.

    Zero counts are left out of the console (``--json`` keeps every statistic): a newcomer
    should read what a pass did, not the list of things it did not do.
    """
    width = max([18] + [len(p["name"]) + 1 for p in result["passes"]])
    lines = [f"{'pass':<{width}} {'changed':<8} {'time':>8}  details"]
    said: dict[str, str] = {}  # a reason already printed -> the pass that printed it
    for p in result["passes"]:
        stats = {
            k: v
            for k, v in p["stats"].items()
            if isinstance(v, (int, float, str, bool))
            and not (v == 0 and not isinstance(v, str))
            and v != ""  # an empty ``notes=`` said nothing (QA session 14)
        }
        reason = str(stats.pop("reason", "") or "")
        details = ", ".join(_stat_text(k, v) for k, v in stats.items())
        if reason:
            short = f"same reason as {said[reason]}" if reason in said else reason
            said.setdefault(reason, p["name"])
            details = short + (f" ({details})" if details else "")
        lines.append(
            f"{p['name']:<{width}} {'yes' if p['modified'] else 'no':<8} {p['seconds']:>7.2f}s  {details}"
        )
        est = p.get("estimate") or {}
        if est.get("stage_peaks") and p["modified"]:
            peaks = ", ".join(f"{k} {format_bytes(v)}" for k, v in est["stage_peaks"].items())
            partial = ", partial: some shapes unknown" if est.get("partial") else ""
            lines.append(f"{'':<{width}} predicted ({est.get('backend')}{partial}): {peaks}")
    summary = _predicted_summary(result)
    if summary:
        lines.append(summary)
    idle = [p["name"] for p in result["passes"] if "unbound" in str(p["stats"].get("reason", ""))]
    if idle:
        lines.append(
            f"note: {', '.join(dict.fromkeys(idle))} did nothing because the input dims are "
            "unbound; rerun with --dim / --shape (the sizes you deploy with) to let them work"
        )
    save = result["save"]
    data = [save[k] for k in ("data_path", "folded_path") if save.get(k)]
    where = " + ".join([str(save["path"]), *data])
    lines.append(
        f"weights {format_bytes(result['weights_before'])} -> {format_bytes(result['weights_after'])}; "
        f"wrote {where} in {result['seconds']:.2f} s total"
    )
    if data:
        # the model names its data files relative to itself: copied alone, it cannot load
        names = " and ".join(Path(d).name for d in data)
        lines.append(
            f"note: {Path(save['path']).name} reads its weights from {names}; "
            "copy or move them together, into one folder"
        )
    if save.get("removed_stale"):
        names = ", ".join(Path(f).name for f in save["removed_stale"])
        lines.append(
            f"note: removed {names}: left by an earlier save to this output, not used by this model"
        )
    return "\n".join(lines)


def _predicted_summary(result: dict[str, Any]) -> str | None:
    """``predicted peak on ort, input -> output: session_creation 41.6 MiB -> 25.8 MiB, ...``."""
    before = (result.get("estimate_before") or {}).get("stage_peaks")
    last = next(
        (
            p.get("estimate") or {}
            for p in reversed(result["passes"])
            if (p.get("estimate") or {}).get("stage_peaks")
        ),
        {},
    )
    after = last.get("stage_peaks")
    if not before or not after:
        return None
    backend = (result.get("estimate_before") or {}).get("backend", "ort")
    pairs = ", ".join(
        f"{k} {format_bytes(before[k])} -> {format_bytes(after[k])}" for k in after if k in before
    )
    partial = " (partial: some shapes unknown)" if last.get("partial") else ""
    return f"predicted peak on {backend}{partial}, input -> output: {pairs}"


def cmd_passes(args: argparse.Namespace) -> int:
    from memshrink.pipeline import available_presets, load_pipeline_file
    from memshrink.transforms import available_passes

    passes = available_passes()
    presets = {name: load_pipeline_file(path) for name, path in available_presets().items()}
    if args.json:
        from memshrink.cli import write_json

        write_json(
            {
                "passes": [cls.describe() for cls in passes.values()],
                "presets": {n: {"passes": p[0], "description": p[2]} for n, p in presets.items()},
            },
            args.json,
        )
        return 0
    width = max(len(n) for n in passes) + 1
    print(f"{'pass':<{width}} {'targets':<38} {'exact':<6} summary")
    for name, cls in sorted(passes.items()):
        exact = "yes" if cls.exact is True else "no"
        print(f"{name:<{width}} {', '.join(cls.targets):<38} {exact:<6} {cls.summary}")
        options = cls.describe()["options"]
        if options:
            print(f"{'':<{width}} options: " + ", ".join(f"{k}={v}" for k, v in options.items()))
    print("\npresets:")
    for name, (names, _, description) in presets.items():
        print(f"  {name:<8} {', '.join(names)}")
        if description:
            print(f"  {'':<8} {description}")
    print(
        "\nexact: yes = outputs bit-identical; no = within the tolerance `memshrink verify` checks."
        "\nSet an option with -O PASS.OPTION=VALUE, e.g. -O chunk.max_chunks=4."
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from memshrink.demo import write_demo_model

    out_dir = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="memshrink-demo-"))
    # A folder the demo made itself goes again if the demo fails (a full disk: QA sessions 14,
    # 15 found it left with the 16 MiB demo.onnx, or empty); a folder the user had stays.
    made = not args.out or not out_dir.exists()
    try:
        return _demo_in(out_dir, args, write_demo_model)
    except BaseException:
        if made:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise


def _demo_in(out_dir: Path, args: argparse.Namespace, write_demo_model: Any) -> int:
    src = write_demo_model(out_dir / "demo.onnx")  # makes out_dir
    dst = out_dir / "demo.small.onnx"
    print(
        f"built the bundled demo model: {src} ({format_bytes(src.stat().st_size)}, weights embedded)"
    )
    opt_args = argparse.Namespace(
        input=str(src),
        output=str(dst),
        passes=args.passes,
        pass_option=None,
        json=None,
        check=True,
        estimate=True,
        verify=args.verify,
        fsync=False,
        verify_each=False,
        shape=None,
        dim=None,
        backend="ort",
        quiet=False,
    )
    code = cmd_optimize(opt_args)
    from memshrink.extrefs import read_refs

    # The files written, not stale ones beside them; read from the wire format, no model load.
    named = dict.fromkeys(ref.location for ref in read_refs(dst))
    files = [dst, *(dst.parent / loc for loc in named)]
    size_out = sum(f.stat().st_size for f in files)
    print(
        f"\n{src.name}: {format_bytes(src.stat().st_size)} -> "
        + " + ".join(f"{f.name}: {format_bytes(f.stat().st_size)}" for f in files)
        + f" (total {format_bytes(size_out)})"
    )
    print(f"next: memshrink verify {src} {dst} --backends cpu,openvino")
    if not args.out:
        # QA session 15: 16 runs had left 500 MB of memshrink-demo-* in a shared /tmp
        total = sum(f.stat().st_size for f in out_dir.iterdir() if f.is_file())
        print(
            f"the demo's files stay in {out_dir} ({format_bytes(total)}): "
            f"rm -r {out_dir} when done, or give --out DIR"
        )
    return code


def register_builtin(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "optimize",
        help="rewrite a model to use less memory",
        description="Run a pipeline of memory-reducing passes and write the result atomically.",
        epilog=OPTIMIZE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("input", help="input .onnx (never modified)")
    p.add_argument(
        "output",
        help="output .onnx (weights go to OUTPUT.data and OUTPUT.folded.data when external)",
    )
    p.add_argument(
        "--passes",
        default="all",
        help="'all', 'safe', a comma list of pass names, or a pipeline .toml (default: all)",
    )
    p.add_argument(
        "-O",
        "--pass-option",
        action="append",
        metavar="PASS.OPTION=VALUE",
        help="set a pass option (repeatable)",
    )
    p.add_argument("--json", metavar="PATH", help="write the report as JSON ('-' for stdout)")
    p.add_argument(
        "--check",
        action="store_true",
        help="check invariants (topological order, onnx.checker) after every pass",
    )
    p.add_argument(
        "--no-estimate",
        dest="estimate",
        action="store_false",
        help="skip the predicted peak after each pass",
    )
    p.add_argument(
        "--backend",
        default=None,
        choices=["ort", "cpu", "openvino", "ort-openvino", "cuda"],
        help="the one runtime you deploy on: the per-pass estimate predicts for it, the "
        "activation passes refuse rewrites predicted to raise its peak and stop sparing the "
        "other runtimes, and for openvino tied weights are not folded into a second copy "
        "(ort or cpu = ONNX Runtime CPU; openvino, ort-openvino, cuda). Without it, passes decide "
        "on ORT CPU's prediction but avoid rewrites predicted to raise OpenVINO's, its EP's "
        "or CUDA's peak much",
    )
    p.add_argument(
        "--verify",
        metavar="BACKENDS",
        help="verify the output against the input afterwards, e.g. cpu,openvino",
    )
    p.add_argument(
        "--verify-each",
        action="store_true",
        help="with --verify: also verify after every modifying pass",
    )
    p.add_argument(
        "--fsync",
        action="store_true",
        help="flush the output to disk before committing it (survives power loss)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress or tables")
    _add_shape_args(p)
    p.set_defaults(func=cmd_optimize)

    p = sub.add_parser(
        "passes",
        help="list the passes and presets",
        description="List every pass with what it targets, whether it is bit-exact, and its options.",
        epilog="examples:\n  memshrink passes\n  memshrink passes --json -          # the same as JSON on stdout",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", metavar="PATH", help="write the list as JSON ('-' for stdout)")
    p.set_defaults(func=cmd_passes)

    p = sub.add_parser(
        "demo",
        help="build the bundled example model and optimize it",
        description="Build a small example model (embedded weights, duplicates, dead nodes) and run optimize on it.",
        epilog="example:\n  memshrink demo --out demo/ --verify cpu",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--out", metavar="DIR", help="folder for the demo files (default: a new temp folder)"
    )
    p.add_argument("--passes", default="all", help="pipeline to run (default: all)")
    p.add_argument("--verify", metavar="BACKENDS", help="also verify, e.g. cpu or cpu,openvino")
    p.set_defaults(func=cmd_demo)
