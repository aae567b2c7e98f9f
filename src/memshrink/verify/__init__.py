"""The verifier: run original and rewritten models on real runtimes, compare, measure memory.

Public API (loaded lazily, so ``python -m memshrink.verify.child`` imports nothing heavy)::

    from memshrink.verify import verify, profile
    report = verify("model.onnx", "model.opt.onnx", backends=("cpu", "openvino"))
    print(report.format_table()); raise SystemExit(report.exit_code)

Exit codes: 0 ok, 3 outputs mismatch, 4 over the ``max_peak`` budget, 5 a backend failed
(crashed / timed out / unsupported when requested); 2 usage error, 1 other failure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "verify",
    "profile",
    "verify_paths",
    "VerifyReport",
    "ProfileReport",
    "Meter",
    "EXIT_OK",
    "EXIT_MISMATCH",
    "EXIT_OVER_BUDGET",
    "EXIT_BACKEND_FAILED",
]

_LAZY = {
    "verify": "memshrink.verify.api",
    "profile": "memshrink.verify.api",
    "verify_paths": "memshrink.verify.api",
    "VerifyReport": "memshrink.verify.report",
    "ProfileReport": "memshrink.verify.report",
    "EXIT_OK": "memshrink.verify.report",
    "EXIT_MISMATCH": "memshrink.verify.report",
    "EXIT_OVER_BUDGET": "memshrink.verify.report",
    "EXIT_BACKEND_FAILED": "memshrink.verify.report",
    "Meter": "memshrink.verify.measure",
}

if TYPE_CHECKING:  # pragma: no cover
    from memshrink.verify.api import profile, verify, verify_paths
    from memshrink.verify.measure import Meter
    from memshrink.verify.report import (
        EXIT_BACKEND_FAILED,
        EXIT_MISMATCH,
        EXIT_OK,
        EXIT_OVER_BUDGET,
        ProfileReport,
        VerifyReport,
    )


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'memshrink.verify' has no attribute {name!r}")


from memshrink.callable_module import make_callable  # noqa: E402

make_callable(__name__, "memshrink.verify.api", "verify")
