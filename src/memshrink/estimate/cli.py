"""``memshrink estimate MODEL``: predicted memory per stage, before you have a device."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from memshrink.bindings import parse_dim_args, parse_shape_args
from memshrink.errors import UsageError

EPILOG = """examples:
  memshrink estimate model.onnx
  memshrink estimate bert.onnx --shape input_ids=4,512 --shape attention_mask=4,512
  memshrink estimate det.onnx --dim batch=1 --session-option enable_mem_pattern=0
  memshrink estimate model.onnx --backend openvino --json est.json --plot est.png
  memshrink estimate model.onnx --backend ort-openvino
  memshrink estimate model.onnx --schedule ort_priority --json -

All figures are deltas over an empty process (the runtime imported, no model), split into
weights (anon heap vs file-mapped pages), activations and runtime overhead. Unbound symbolic
input dims are an error unless --partial, which lists every tensor of unknown size.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "estimate",
        help="predict per-stage peak memory of a model on a runtime, without running it",
        description="Predict session-creation, first-run and steady-state memory from the "
        "graph: the runtime's execution order, tensor lifetimes and allocator rules.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", help="path to the .onnx model")
    p.add_argument(
        "--backend",
        default="ort",
        choices=["ort", "openvino", "cuda", "ort-openvino", "cpu"],
        help="runtime to predict (verify's names: cpu = ort; ort-openvino = ORT's OpenVINO EP)",
    )
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D1,D2,…")
    p.add_argument("--dim", action="append", default=[], metavar="SYMBOL=N")
    p.add_argument(
        "--dim-bound",
        action="append",
        default=[],
        metavar="TENSOR=N",
        help="size of a data-dependent tensor's unknown dims (a NonZero / NonMaxSuppression / "
        "TopK output); default: its upper bound from the graph, listed in the assumptions",
    )
    p.add_argument(
        "--session-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="ORT setting: execution_order=PRIORITY_BASED, enable_mem_pattern=0, "
        "enable_cpu_mem_arena=0, enable_mem_reuse=0; estimator-only: "
        "memshrink.hold_outputs=0 (the caller drops each run's outputs before the next run; "
        "default: held, as verify does), memshrink.int_range=LO,HI (token ids' range; default: "
        "uniform over the embedding table), memshrink.cuda_weight_orders=N (CUDA: random weight "
        "orders replayed for the per-stage GPU range; default 8, 0 = none), "
        "memshrink.generation=max_length=N,num_beams=K (ORT CPU: BeamSearch / GreedySearch's "
        "step loop, whose length is an input's value)",
    )
    p.add_argument(
        "--schedule", choices=["file", "ort_default", "ort_priority", "openvino"], default=None
    )
    p.add_argument(
        "--embedded",
        choices=["auto", "yes", "no"],
        default="auto",
        help="how the deployed file stores weights (default: as the model is stored now)",
    )
    p.add_argument("--partial", action="store_true", help="allow unbound dims: a partial result")
    p.add_argument("--json", metavar="PATH", help="write the full estimate as JSON ('-' = stdout)")
    p.add_argument("--plot", metavar="PNG", help="plot live memory over the schedule")
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also print every assumption, the textbook planners and each glibc heap mode",
    )
    p.set_defaults(func=handler)


def _session_options(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise UsageError(f"bad --session-option {item!r}: expected KEY=VALUE")
        out[k.strip()] = v.strip()
    return out


def _dim_bounds(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        k, sep, v = item.rpartition("=")
        if not sep or not k or not v.strip().isdigit():
            raise UsageError(f"bad --dim-bound {item!r}: expected TENSOR=N, e.g. boxes_nms=100")
        out[k.strip()] = int(v)
    return out


def handler(args: argparse.Namespace) -> int:
    from memshrink.cli import check_report_path, write_json
    from memshrink.estimate import estimate

    check_report_path(args.json, "--json")
    check_report_path(args.plot, "--plot")
    dims = parse_dim_args(args.dim)
    if dims and Path(args.model).is_file():  # a --dim naming no symbol: exit 2 (QA session 14)
        from memshrink.bindings import check_dim_names
        from memshrink.verify.modelinfo import read_model_io  # the inputs, not the weights

        check_dim_names(dims, [(i.name, i.dims) for i in read_model_io(args.model).inputs])
    est = estimate(
        args.model,
        backend=args.backend,
        shapes=parse_shape_args(args.shape),
        dims=dims,
        session_options=_session_options(args.session_option),
        schedule=args.schedule,
        embedded={"auto": None, "yes": True, "no": False}[args.embedded],
        allow_partial=args.partial,
        dim_bounds=_dim_bounds(args.dim_bound),
    )
    if args.json:
        write_json(est.to_dict(), args.json)
    if args.json != "-":
        print(est.format_table(verbose=args.verbose))
    if args.plot:
        est.plot(args.plot)
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0
