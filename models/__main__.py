"""``python -m models list|build|measure``: the benchmark suite's command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import models
from models.build import build_many, cache_dir, is_built

EPILOG = """\
examples:
  python -m models list                      # every model, its tags and whether it is built
  python -m models list --tag tiny           # the fast variants tests use
  python -m models build bert-tiny resnet50  # build two models into .cache/models/
  python -m models build --all               # everything but the >2 GB model (~5 CPU-min)
  python -m models build gpt2-large-ext      # the >2 GB model, only when named (or --big)
  python -m models build --tag ci --out /tmp/suite
  python -m models measure --all --json docs/models-measured.json   # docs/models.md's table
"""


def _cmd_list(args: argparse.Namespace) -> int:
    specs = [s for s in models.all_specs() if args.tag is None or args.tag in s.tags]
    if args.json:
        rows = [
            {
                "name": s.name,
                "description": s.description,
                "family": s.family,
                "tags": list(s.tags),
                "external_data": s.external_data,
                "built": is_built(s.name, args.out),
                "path": str(cache_dir(args.out) / f"{s.name}.onnx"),
            }
            for s in specs
        ]
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(s.name) for s in specs) if specs else 4
    for s in specs:
        mark = "*" if is_built(s.name, args.out) else " "
        print(f"{mark} {s.name:<{width}}  {s.description}  [{', '.join(s.tags)}]")
    print(f"\n{len(specs)} models; * = built in {cache_dir(args.out)}", file=sys.stderr)
    return 0


def _selected(args: argparse.Namespace) -> list[str]:
    chosen = list(args.names)
    if args.all:
        chosen += models.names(include_big=args.big)
    elif args.big:
        chosen += models.names(tag="big")
    if args.tag:
        chosen += models.names(tag=args.tag, include_big=False)
    for name in chosen:
        models.get_spec(name)  # unknown names fail before any build starts
    return list(dict.fromkeys(chosen))


def _cmd_build(args: argparse.Namespace) -> int:
    names = _selected(args)
    if not names:
        print("nothing to build: name models, or use --all / --tag / --big", file=sys.stderr)
        return 2
    results = build_many(names, args.out, force=args.force)
    total = sum(seconds for _, _, seconds, skipped in results if not skipped)
    built = sum(1 for r in results if not r[3])
    print(
        f"[models] {built} built, {len(results) - built} already there, {total:.0f} s",
        file=sys.stderr,
    )
    for _, path, _, _ in results:
        print(path)
    return 0


def _cmd_measure(args: argparse.Namespace) -> int:
    from models import measure

    names = _selected(args)
    if not names:
        print("nothing to measure: name models, or use --all / --tag", file=sys.stderr)
        return 2
    rows = measure.measure_many(names, args.out, runs=args.runs, timeout=args.timeout)
    text = json.dumps(rows, indent=2) + "\n"
    if args.json == "-":
        sys.stdout.write(text)
    elif args.json:
        Path(args.json).write_text(text)
    print(measure.markdown_table(rows))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The suite's command line (``main`` parses with it; tests parse the help's examples)."""
    parser = argparse.ArgumentParser(
        prog="python -m models",
        description="Build memshrink's benchmark model suite (real architectures, seeded weights).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list the suite's models")
    p.add_argument("--tag", help="only models with this tag (tiny, ci, big, zoo, transformer, ...)")
    p.add_argument("--out", help="cache folder to check (default .cache/models)")
    p.add_argument("--json", action="store_true", help="machine-readable list on stdout")
    p.set_defaults(func=_cmd_list)

    for cmd, helptext, func in (
        ("build", "build models (skips those already built)", _cmd_build),
        ("measure", "ORT CPU session/run peak RSS, one fresh process per model", _cmd_measure),
    ):
        p = sub.add_parser(cmd, help=helptext)
        p.add_argument("names", nargs="*", help="model names (see `list`)")
        p.add_argument("--all", action="store_true", help="every model except the >2 GB ones")
        p.add_argument("--big", action="store_true", help="include the >2 GB model(s)")
        p.add_argument("--tag", help="every model with this tag (big ones only with --big)")
        p.add_argument("--out", help="output/cache folder (default .cache/models)")
        if cmd == "build":
            p.add_argument("--force", action="store_true", help="rebuild even if present")
        else:
            p.add_argument("--runs", type=int, default=3, help="inference runs (default 3)")
            p.add_argument("--timeout", type=float, default=600, help="seconds per model")
            p.add_argument("--json", metavar="PATH", help="write results as JSON (- = stdout)")
        p.set_defaults(func=func)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    out = getattr(args, "out", None)
    if out and (Path(out).suffix in (".json", ".onnx") or Path(out).is_file()):
        # QA session 15: the help's own example gave `measure --out docs/models-measured.json`,
        # which would have built every model into a folder of that name
        parser.error(f"--out {out}: --out is the models folder; write results with --json PATH")
    try:
        return int(args.func(args))
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
