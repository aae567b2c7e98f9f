"""``memshrink verify`` and ``memshrink profile``: argument parsing only; the work is in ``api``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from memshrink.errors import UsageError

VERIFY_EPILOG = """\
examples:
  memshrink verify model.onnx small.onnx
  memshrink verify model.onnx small.onnx --backends cpu,openvino --shape input_ids=1,128
  memshrink verify model.onnx small.onnx --backends all --max-peak 500MiB --json report.json
  memshrink verify a.onnx b.onnx --tol logits=1e-4,1e-3 --inputs feeds.npz --plot peaks.png
  memshrink verify a.onnx b.onnx --backends cpu,ort-openvino \\
      --python-for ort-openvino=.cache/venv-ovep/bin/python
  memshrink verify a.onnx b.onnx --session-option enable_mem_pattern=false \\
      --session-option execution_order=PRIORITY_BASED

backends: cpu (ONNX Runtime CPU EP), openvino (OpenVINO native, CPU), ort-openvino
  (ONNX Runtime OpenVINO EP; needs onnxruntime-openvino, usually in its own venv), cuda (ONNX
  Runtime CUDA EP; needs onnxruntime-gpu and nvidia-ml-py), or "all" (unavailable ones are
  reported, not failed). Each (model, backend) runs in its own process with a timeout.
  Interpreter per backend: --python-for, else $MEMSHRINK_PYTHON_<BACKEND> (e.g.
  MEMSHRINK_PYTHON_ORT_OPENVINO), else this Python.

comparison: the original on each backend is the reference for the rewritten model on it; an
  element matches when |out - ref| <= atol + rtol*|ref| (defaults atol 1e-5, rtol 1e-5); NaN
  must meet NaN, Inf must meet the same Inf. A model written by memshrink's non-exact passes
  (chunk, simplify, recompute) records the tolerance they state; without --atol/--rtol/--tol,
  verify compares at that (never below the defaults) and the report says so. On OpenVINO in
  bf16, an output whose original already differs from ORT CPU beyond rounding (NMS/TopK picking
  other boxes), or any mismatching output when ORT CPU gave no reference to widen the bf16
  rounding against, is compared again at INFERENCE_PRECISION_HINT=f32 on the same backend.

exit codes: 0 all outputs match and every budget holds; 3 an output mismatches; 5 a requested
  backend crashed, timed out, failed or is unsupported; 4 over the --max-peak budget (first of
  3, 5, 4 wins); 2 usage error; 6 a model can't be used (also when a runtime refused it and
  memshrink's loader finds it malformed); 7 a report or the temp folder (TMPDIR) can't be
  written (out of disk space); 130 / 143 interrupted by SIGINT / SIGTERM (the measuring
  processes are stopped, temp files removed); 1 other failure.
"""

PROFILE_EPILOG = """\
examples:
  memshrink profile model.onnx
  memshrink profile model.onnx --backends cpu,openvino --shape input_ids=4,512 --json -
  memshrink profile model.onnx --runs 5 --session-option enable_mem_pattern=false

Stages: ONNX Runtime: session, run1..runN; OpenVINO: read, compile, infer1..inferN. Per stage:
RSS before / exact peak (VmHWM reset) / after, anonymous and file-mapped peaks (sampled at
1 ms), seconds; deltas are over the child's baseline (runtime imported, feeds loaded).

exit codes: 0 every backend ran; 5 a backend failed; 2 usage error; 1 other failure.
"""


def _value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return json.loads(text)
    except ValueError:
        return text


def _kv(args: list[str] | None, flag: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arg in args or ():
        key, sep, value = arg.partition("=")
        if not sep or not key:
            raise UsageError(f"bad {flag} {arg!r}: expected KEY=VALUE")
        out[key] = _value(value)
    return out


def _provider_options(args: list[str] | None) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for arg in args or ():
        backend, sep, rest = arg.partition(":")
        key, sep2, value = rest.partition("=")
        if not sep or not sep2 or not key:
            raise UsageError(
                f"bad --provider-option {arg!r}: expected BACKEND:KEY=VALUE, e.g. cuda:gpu_mem_limit=1073741824"
            )
        out.setdefault(backend, {})[key] = value
    return out


def _tolerances(args: list[str] | None) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    for arg in args or ():
        name, sep, vals = arg.rpartition("=")
        try:
            atol, rtol = (float(v) for v in vals.split(","))
        except ValueError:
            name = ""
        if not sep or not name:
            raise UsageError(f"bad --tol {arg!r}: expected OUTPUT=ATOL,RTOL, e.g. logits=1e-4,1e-3")
        out[name] = (atol, rtol)
    return out


def _python(args: argparse.Namespace) -> Any:
    per = {}
    for arg in args.python_for or ():
        backend, sep, path = arg.partition("=")
        if not sep or not backend or not path:
            raise UsageError(f"bad --python-for {arg!r}: expected BACKEND=/path/to/python")
        per[backend] = path
    if args.python and per:
        from memshrink.verify.runner import BACKENDS

        return {b: per.get(b, args.python) for b in BACKENDS}
    return per or args.python


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backends",
        default="cpu",
        help="comma-separated: cpu, openvino, ort-openvino, cuda, or all (default: cpu)",
    )
    p.add_argument(
        "--shape", action="append", metavar="NAME=DIMS", help="input shape, e.g. input_ids=1,128"
    )
    p.add_argument(
        "--dim", action="append", metavar="SYMBOL=N", help="bind a symbolic dim, e.g. batch=4"
    )
    p.add_argument("--inputs", metavar="FEEDS.npz", help="use these feeds instead of random data")
    p.add_argument(
        "--int-range",
        action="append",
        metavar="[NAME=]LO,HI",
        help="range [LO, HI) for random integer inputs (default: sidecar, Gather table size, else 0,2)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for random inputs (default 0)")
    p.add_argument(
        "--runs",
        type=int,
        default=3,
        help="inferences per process (default 3; >= 3 shows steady state)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds per (model, backend) process (default 600)",
    )
    p.add_argument(
        "--session-option",
        action="append",
        metavar="KEY=VALUE",
        help="ONNX Runtime SessionOptions attribute or config entry (dotted key); OpenVINO compile config",
    )
    p.add_argument(
        "--provider-option",
        action="append",
        metavar="BACKEND:KEY=VALUE",
        help="execution provider option, e.g. cuda:gpu_mem_limit=1073741824, openvino:device=CPU",
    )
    p.add_argument("--python", metavar="PATH", help="interpreter for every backend's child")
    p.add_argument(
        "--python-for", action="append", metavar="BACKEND=PATH", help="interpreter for one backend"
    )
    p.add_argument("--json", metavar="PATH", help="write the JSON report here ('-' = stdout)")
    p.add_argument("--plot", metavar="PNG", help="write a bar chart of each stage's peak here")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress messages on stderr")


def _opts(args: argparse.Namespace) -> dict[str, Any]:
    from memshrink.bindings import parse_dim_args, parse_shape_args
    from memshrink.cli import check_report_path

    check_report_path(args.json, "--json")  # before minutes of runs, not after
    check_report_path(args.plot, "--plot")
    from memshrink.verify.inputs import parse_int_range_args

    def progress(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    return dict(
        backends=args.backends,
        shapes=parse_shape_args(args.shape) or None,
        dims=parse_dim_args(args.dim) or None,
        feeds=args.inputs,
        int_ranges=parse_int_range_args(args.int_range) or None,
        seed=args.seed,
        runs=args.runs,
        timeout=args.timeout,
        session_options=_kv(args.session_option, "--session-option") or None,
        provider_options=_provider_options(args.provider_option) or None,
        python=_python(args),
        progress=None if args.quiet else progress,
    )


def _emit(report: Any, args: argparse.Namespace) -> int:
    if args.json != "-":
        print(report.format_table())
    if args.json:
        report.write_json(args.json)
    if args.plot:
        report.save_plot(args.plot)
    return int(report.exit_code)


def _verify(args: argparse.Namespace) -> int:
    from memshrink.verify.api import verify

    report = verify(
        args.original,
        args.rewritten,
        atol=args.atol,
        rtol=args.rtol,
        tolerances=_tolerances(args.tol) or None,
        max_peak=args.max_peak,
        **_opts(args),
    )
    return _emit(report, args)


def _profile(args: argparse.Namespace) -> int:
    from memshrink.verify.api import profile

    return _emit(profile(args.model, **_opts(args)), args)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``verify`` and ``profile`` to the ``memshrink`` command line."""
    from memshrink.verify.compare import DEFAULT_ATOL, DEFAULT_RTOL

    v = subparsers.add_parser(
        "verify",
        help="run original and rewritten models, compare outputs, measure memory per stage",
        description="Run ORIGINAL and REWRITTEN on real runtimes (one process each), check the "
        "outputs agree and measure every stage's memory.",
        epilog=VERIFY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    v.add_argument("original", help="the reference model (.onnx)")
    v.add_argument("rewritten", help="the model to check against it (.onnx)")
    _common(v)
    v.add_argument(
        "--atol",
        type=float,
        default=None,
        help=f"absolute tolerance (default {DEFAULT_ATOL:g}, or the tolerance the rewritten "
        "model's memshrink passes state, recorded in it)",
    )
    v.add_argument(
        "--rtol",
        type=float,
        default=None,
        help=f"relative tolerance (default {DEFAULT_RTOL:g}, or the stated one, as --atol)",
    )
    v.add_argument(
        "--tol", action="append", metavar="OUTPUT=ATOL,RTOL", help="per-output tolerances"
    )
    v.add_argument(
        "--max-peak",
        metavar="SIZE",
        help="fail (exit 4) if the rewritten model's peak RSS on any backend exceeds SIZE, e.g. 500MiB",
    )
    v.set_defaults(func=_verify)

    p = subparsers.add_parser(
        "profile",
        help="measure one model's memory per stage on each backend",
        description="Run MODEL on each backend in its own process and report every stage's memory.",
        epilog=PROFILE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", help="the model (.onnx)")
    _common(p)
    p.set_defaults(func=_profile)
