"""Error types with exit codes, so the CLI can map every failure to one clear line.

Exit codes: 0 ok, 1 failure, 2 usage error, 6 the input model cannot be used (unreadable,
truncated, broken external data, unknown opset), 7 the output cannot be written (folder
missing or read-only, out of space); an interrupted save exits 128 + the signal number (130
for SIGINT, 143 for SIGTERM). Verification adds 3, 4 and 5 (see ``memshrink.verify``). All
are documented in the README.
"""

from __future__ import annotations

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_BAD_INPUT = 6
EXIT_CANNOT_WRITE = 7


class MemshrinkError(Exception):
    """Base class: a failure the user can act on; the message is shown as one line."""

    exit_code: int = EXIT_FAILURE


class UsageError(MemshrinkError):
    """Bad command line or API arguments (unknown pass, bad option, bad shape spec)."""

    exit_code = EXIT_USAGE


class ModelLoadError(MemshrinkError):
    """The input model cannot be read: truncated, not ONNX, or its external data is broken."""

    exit_code = EXIT_BAD_INPUT


class ExternalDataError(ModelLoadError):
    """An external-data reference is missing, too short, or escapes the model's folder."""


class ModelSaveError(MemshrinkError):
    """The output could not be written (unwritable folder, out of space, same path as input)."""

    exit_code = EXIT_CANNOT_WRITE


class Interrupted(MemshrinkError):
    """SIGTERM stopped a command that runs child processes (``verify``, ``profile``): they
    were stopped and the temp files removed. Exits 128 + the signal number (143), as a shell
    reports a process that signal ended."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + int(signum)


class PassError(MemshrinkError):
    """A pass failed in a way that leaves no valid model."""


class UnboundDimensionError(UsageError):
    """A symbolic input dimension has no binding; we never guess one."""
