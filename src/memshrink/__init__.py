"""memshrink: make ONNX models use less memory at inference time, and prove it.

The public API is re-exported here; heavy submodules (estimator, verifier) load lazily so
``import memshrink`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "load",
    "save",
    "Pass",
    "PassContext",
    "PassResult",
    "PassManager",
    "estimate",
    "verify",
    "profile",
]

_LAZY = {
    "load": ("memshrink.model", "load"),
    "save": ("memshrink.model", "save"),
    "Pass": ("memshrink.manager", "Pass"),
    "PassContext": ("memshrink.manager", "PassContext"),
    "PassResult": ("memshrink.manager", "PassResult"),
    "PassManager": ("memshrink.manager", "PassManager"),
    "estimate": ("memshrink.estimate", "estimate"),
    "verify": ("memshrink.verify", "verify"),
    "profile": ("memshrink.verify", "profile"),
}

if TYPE_CHECKING:  # pragma: no cover
    from memshrink.manager import Pass, PassContext, PassManager, PassResult
    from memshrink.model import load, save


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'memshrink' has no attribute {name!r}")
