"""Error types with exit codes, so the CLI can map every failure to one clear line.

Exit codes: 0 ok, 1 failure, 2 usage error. Verification adds its own distinct codes
(see ``memshrink.verify``), which are documented in the README.
"""

from __future__ import annotations


class MemshrinkError(Exception):
    """Base class: a failure the user can act on; the message is shown as one line."""

    exit_code: int = 1


class UsageError(MemshrinkError):
    """Bad command line or API arguments (unknown pass, bad option, bad shape spec)."""

    exit_code = 2


class ModelLoadError(MemshrinkError):
    """The input model cannot be read: truncated, not ONNX, or its external data is broken."""


class ExternalDataError(ModelLoadError):
    """An external-data reference is missing, too short, or escapes the model's folder."""


class ModelSaveError(MemshrinkError):
    """The output could not be written (unwritable folder, out of space, same path as input)."""


class PassError(MemshrinkError):
    """A pass failed in a way that leaves no valid model."""


class UnboundDimensionError(UsageError):
    """A symbolic input dimension has no binding; we never guess one."""
