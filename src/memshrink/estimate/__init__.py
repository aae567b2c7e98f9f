"""The lifetime estimator: predict a model's memory on a runtime without running it.

``estimate(model, backend="ort")`` binds input shapes, emulates the runtime's execution order,
computes tensor lifetimes, plans them with the runtime's own rules (and with generic planners
for comparison), and predicts each stage's peak split into weights, activations and overhead.
It never reads weight values and never mutates the model it is given.

Names load lazily so that importing ``memshrink.estimate.cli`` (every CLI start) stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["Estimate", "estimate", "SCHEDULES", "BACKENDS"]

if TYPE_CHECKING:  # pragma: no cover
    from memshrink.estimate.api import BACKENDS, SCHEDULES, Estimate, estimate


def __getattr__(name: str) -> Any:
    if name in __all__:
        from memshrink.estimate import api

        return getattr(api, name)
    raise AttributeError(f"module 'memshrink.estimate' has no attribute {name!r}")


from memshrink.callable_module import make_callable  # noqa: E402

make_callable(__name__, "memshrink.estimate.api", "estimate")
