"""Every ``memshrink ...`` command line the docs show must parse with the real CLI.

Why: the README and docs/ are where a newcomer copies commands from; a flag renamed in the
parser, a pass renamed or an option dropped must fail here, not in a user's terminal. Scope:
fenced code blocks of README.md and docs/*.md, and the examples in every subcommand's
``--help``. Each line is parsed by ``memshrink.cli.build_parser()`` (argparse, nothing runs);
then the values the commands would parse first (``--passes`` with its ``-O`` options, shapes,
dims) go through the same functions the commands call. Placeholders (``...``, ``…``) and
synopsis lines (``[--flag ...]``) are skipped.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from memshrink.bindings import parse_dim_args, parse_shape_args
from memshrink.cli import EPILOG, build_parser
from memshrink.commands import _parse_pass_options
from memshrink.errors import MemshrinkError
from memshrink.pipeline import resolve_pipeline
from memshrink.verify.runner import parse_backends

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PLACEHOLDERS = {"...", "…"}
COMMAND = re.compile(r"(?:^|&&|;)\s*(?:\$\s+)?(?:[A-Z_]+=\S+\s+)*(?:python -m )?memshrink\s+(.*)")


def _command_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, text after ``memshrink``) of each command line in fenced code blocks;
    backslash continuations are joined."""
    in_block, pending, start = False, "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_block, pending = not in_block, ""
            continue
        if not in_block:
            continue
        if pending:
            line = pending + " " + line.strip()
        else:
            start = number
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1]
            continue
        pending = ""
        yield from ((start, m) for m in _commands_in(line))


def _commands_in(line: str) -> Iterator[str]:
    for part in re.split(r"&&|;|\|", line):
        m = COMMAND.match(part.strip())
        if m and "[--" not in m.group(1) and not m.group(1).startswith("["):
            yield m.group(1)


def _help_examples() -> Iterator[tuple[str, str]]:
    """(subcommand, text after ``memshrink``) for every example in each ``--help`` epilog."""
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    epilogs = {"memshrink": EPILOG}
    epilogs.update({name: p.epilog or "" for name, p in subparsers.choices.items()})
    for name, epilog in epilogs.items():
        joined = re.sub(r"\\\n\s*", " ", epilog)
        for line in joined.splitlines():
            yield from ((name, c) for c in _commands_in(line.strip()))


def _documented() -> list[tuple[str, str]]:
    found = []
    for path in DOC_FILES:
        for number, command in _command_lines(path.read_text()):
            found.append((f"{path.relative_to(ROOT)}:{number}", command))
    found += [(f"--help of {name}", command) for name, command in _help_examples()]
    return found


DOCUMENTED = _documented()
PARSER = build_parser()  # parse_args keeps no state between calls


def test_the_docs_show_commands_of_every_subcommand() -> None:
    """The extraction itself works: README and the help texts show each subcommand."""
    shown = {_argv(c)[0] for _, c in DOCUMENTED}
    assert {"optimize", "estimate", "verify", "profile", "passes", "demo"} <= shown
    assert any(where.startswith("README.md") for where, _ in DOCUMENTED)


def test_every_subcommand_help_shows_an_example_of_itself() -> None:
    """Each ``memshrink CMD --help`` ends with at least one runnable ``memshrink CMD ...``
    line (a new subcommand without examples fails here)."""
    subparsers = next(a for a in PARSER._actions if isinstance(a, argparse._SubParsersAction))
    shown = {name for name, c in _help_examples() if _argv(c)[0] == name}
    assert shown == set(subparsers.choices), set(subparsers.choices) - shown


@pytest.mark.parametrize(("where", "command"), DOCUMENTED, ids=[w for w, _ in DOCUMENTED])
def test_documented_command_parses(where: str, command: str) -> None:
    argv = [a for a in _argv(command) if a not in PLACEHOLDERS]
    try:
        args = PARSER.parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{where}: `memshrink {command}` does not parse (exit {exc.code})")
    try:
        _check_values(args)
    except MemshrinkError as exc:
        pytest.fail(f"{where}: `memshrink {command}`: {exc}")


def _argv(command: str) -> list[str]:
    """The arguments, up to a shell redirection (``> report.json``, ``2>err.txt``)."""
    words = shlex.split(command, comments=True)
    cut = next((i for i, w in enumerate(words) if re.match(r"\d?[<>]", w)), len(words))
    return words[:cut]


def _check_values(args: argparse.Namespace) -> None:
    """What the command would reject before doing any work."""
    parse_shape_args(getattr(args, "shape", None))
    parse_dim_args(getattr(args, "dim", None))
    if args.command in ("verify", "profile"):
        parse_backends(args.backends)
    if args.command != "optimize":
        return
    if args.verify:
        parse_backends(args.verify)
    options = _parse_pass_options(args.pass_option)
    if args.passes.endswith(".toml") and not Path(args.passes).is_file():
        return  # the user's own pipeline file, shown as an example
    resolve_pipeline(args.passes, options)


def test_a_drifted_command_fails() -> None:
    """The check catches what it is for: an unknown flag, pass and pass option."""
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["optimize", "a.onnx", "b.onnx", "--no-such-flag"])
    for passes, option in (("no-such-pass", []), ("chunk", ["chunk.no_such_option=1"])):
        args = parser.parse_args(["optimize", "a.onnx", "b.onnx", "--passes", passes])
        args.pass_option = option
        with pytest.raises(MemshrinkError):
            _check_values(args)


def test_readme_python_names_stay_calls(mlp_path: Path) -> None:
    """README: ``memshrink.estimate(path)`` and ``memshrink.verify(...)`` after the subpackages
    are imported (the pass manager does): the package attribute is then the module itself."""
    import memshrink
    import memshrink.estimate
    import memshrink.verify

    assert callable(memshrink.estimate) and callable(memshrink.verify)
    first, again = memshrink.estimate(str(mlp_path)), memshrink.estimate(str(mlp_path))
    assert first.stage_peaks() == again.stage_peaks()
    assert memshrink.estimate.api.estimate is memshrink.estimate.estimate  # still a module


def _python_blocks() -> list[tuple[str, str]]:
    blocks = []
    for path in DOC_FILES:
        for m in re.finditer(r"```python\n(.*?)```", path.read_text(), re.S):
            line = path.read_text()[: m.start()].count("\n") + 1
            blocks.append((f"{path.relative_to(ROOT)}:{line}", m.group(1)))
    return blocks


@pytest.mark.parametrize(("where", "code"), _python_blocks(), ids=[w for w, _ in _python_blocks()])
def test_documented_python_names_exist(where: str, code: str) -> None:
    """Python blocks parse, and every ``memshrink`` name they import or use exists."""
    import ast
    import importlib

    import memshrink

    tree = ast.parse(code, filename=where)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("memshrink"):
            module = importlib.import_module(node.module or "")
            missing = [a.name for a in node.names if not hasattr(module, a.name)]
            assert not missing, f"{where}: {node.module} has no {missing}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("memshrink"):
                    importlib.import_module(alias.name)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "memshrink"
        ):
            assert hasattr(memshrink, node.attr), f"{where}: memshrink.{node.attr} does not exist"
