"""The ``memshrink`` command line: optimize, passes, demo, and the estimate/verify commands.

Errors print as one line (``memshrink: error: ...``) with the exit code of their class
(``memshrink.errors``: 2 usage, 6 unusable input, 7 unwritable output, 1 other failures);
``--debug`` shows the traceback. Subcommands of other packages
register themselves through ``register(subparsers)`` in their ``cli`` module.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from memshrink import __version__
from memshrink.errors import EXIT_CANNOT_WRITE, MemshrinkError, ModelSaveError, UsageError

#: Packages contributing subcommands through ``<module>.register(subparsers)``.
PLUGIN_CLI_MODULES = (
    "memshrink.estimate.cli",
    "memshrink.verify.cli",
)

EPILOG = """\
examples:
  memshrink demo --verify cpu                    # try it on a bundled example model
  memshrink optimize model.onnx small.onnx       # every pass (--passes all)
  memshrink verify model.onnx small.onnx --backends cpu,openvino
  memshrink estimate small.onnx --shape input_ids=1,128
  memshrink profile small.onnx --backends cpu
  memshrink passes

Each command has its own --help with examples. optimize, estimate, verify, profile and
passes take --json PATH, or --json - to print JSON instead of the table (keys: docs/README.md).

exit codes: 0 ok, 1 failure, 2 usage error, 3 outputs differ, 4 over a memory
budget, 5 a backend failed (see `memshrink verify --help`), 6 the input model
cannot be used (truncated, not ONNX, broken external data, unknown opset, malformed
functions or domains), 7 the output or the temp folder cannot be written (folder
missing or read-only, out of space), 130/143 interrupted by SIGINT/SIGTERM (nothing
written; verify's measuring processes stopped), 141 stdout closed early (| head).
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message} (examples: {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


#: What a report file of each flag starts with; anything else is not ours to overwrite.
REPORT_MAGIC = {"--json": (b"{", b"["), "--plot": (b"\x89PNG",)}


def check_report_path(dest: str | None, flag: str) -> None:
    """Refuse, before any work, to let a report overwrite a file that is not such a report.

    Why: ``--json model.onnx`` (a slip of the hand, or shell completion) would otherwise
    replace the user's model with a report, after minutes of work. An existing file is
    overwritten only when it already is a JSON report (``--json``) or a PNG (``--plot``).
    """
    if not dest or dest == "-":
        return
    from pathlib import Path

    path = Path(dest)
    if path.is_dir():
        raise UsageError(f"{flag} {dest} is a folder; give a file path")
    folder = path.parent
    if not folder.is_dir():
        raise ModelSaveError(f"{flag} {dest}: output folder {folder} does not exist")
    if not os.access(folder, os.W_OK):  # also EROFS: a read-only mount
        raise ModelSaveError(f"{flag} {dest}: cannot write to {folder}: permission denied")
    model = Path(dest.removesuffix(".json"))
    if flag == "--json" and dest.endswith(".onnx.json") and model.exists():
        # ``MODEL.onnx.json`` is MODEL's sidecar (how to feed it), valid JSON like a report:
        # ``--json in.onnx.json`` replaced the input's (QA session 11)
        raise UsageError(
            f"refusing to write the report to {dest}: it is {model.name}'s sidecar (its input "
            "shapes); choose another --json path"
        )
    try:
        with open(path, "rb") as f:
            head = f.read(8).lstrip()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UsageError(f"{flag} {dest}: {exc.strerror or exc}") from exc
    if head and not head.startswith(REPORT_MAGIC[flag]):
        kind = "JSON" if flag == "--json" else "PNG"
        raise UsageError(
            f"refusing to overwrite {dest}: it exists and is not a {kind} file (a model?); "
            f"choose another {flag} path"
        )


def write_json(data: Any, dest: str) -> None:
    """Write a JSON report to a path, or to stdout for ``-``."""
    text = json.dumps(data, indent=2, default=str)
    if dest == "-":
        print(text)
        return
    check_report_path(dest, "--json")
    from memshrink.atomic import write_atomic

    data = (text + "\n").encode()
    write_atomic(dest, lambda f: f.write(data))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="memshrink",
        description="Make ONNX models use less memory at inference time, and prove it.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"memshrink {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    from memshrink.commands import register_builtin

    register_builtin(sub)
    for module_name in PLUGIN_CLI_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                continue  # that component is not part of this build
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    from memshrink.lazy_modules import defer

    defer()  # sympy (onnx_ir imports it) only when read: -34 MiB for most commands
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        return int(args.func(args) or 0)
    except MemshrinkError as exc:
        if debug:
            traceback.print_exc()
        print(f"memshrink: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("memshrink: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # ``memshrink estimate m.onnx | head``: the reader left; not an internal error (QA
        # session 14). Python would complain again flushing stdout at exit: point it at
        # /dev/null. 141 = 128 + SIGPIPE, what a shell reports for a tool the pipe killed.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except OSError as exc:
        from memshrink.atomic import is_disk_full

        if not is_disk_full(exc):
            return _internal_error(exc, debug)
        # a write no command anticipated (a temp file, a cache): still the disk's fault, exit 7
        if debug:
            traceback.print_exc()
        where = f" while writing {exc.filename}" if exc.filename else ""
        print(f"memshrink: error: out of disk space (or file size limit){where}", file=sys.stderr)
        return EXIT_CANNOT_WRITE
    except Exception as exc:  # an internal bug: still one line unless --debug
        return _internal_error(exc, debug)


def _internal_error(exc: Exception, debug: bool) -> int:
    if debug:
        traceback.print_exc()
    else:
        print(
            f"memshrink: internal error: {type(exc).__name__}: {exc} (rerun with --debug for details)",
            file=sys.stderr,
        )
    return 1


def require(condition: bool, message: str) -> None:
    if not condition:
        raise UsageError(message)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
