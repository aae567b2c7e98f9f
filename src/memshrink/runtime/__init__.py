"""Run models the way memshrink wrote them: ``PartitionedSession`` for partition folders.

Imports only the stdlib, numpy and (when a session is created) the runtime, so this package can
run inside measuring children under interpreters that have no ``onnx``.
"""

from __future__ import annotations

from memshrink.runtime.backends import BACKENDS, BackendUnavailable
from memshrink.runtime.session import (
    MODES,
    IOInfo,
    ModelSession,
    PartitionedSession,
    PartLoadError,
    PartRunError,
    RunStats,
    open_session,
)

__all__ = [
    "BACKENDS",
    "MODES",
    "BackendUnavailable",
    "IOInfo",
    "ModelSession",
    "PartLoadError",
    "PartRunError",
    "PartitionedSession",
    "RunStats",
    "open_session",
]
