"""``estimate()``: the estimator's entry point (re-exported lazily by ``memshrink.estimate``).

``estimate(model, backend="ort")`` binds input shapes, emulates the runtime's execution order,
computes tensor lifetimes, plans them with the runtime's own rules (and with generic planners
for comparison), and predicts each stage's peak split into weights, activations and overhead.
It never reads weight values and never mutates the model it is given.
"""

from __future__ import annotations

import contextlib
import gc
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

import onnx_ir as ir

from memshrink.errors import UsageError
from memshrink.estimate.backends import BACKEND_ALIASES, DEFAULT_SCHEDULE, PREDICTORS
from memshrink.estimate.graph import ModelView, build_view
from memshrink.estimate.result import Estimate
from memshrink.estimate.schedule import SCHEDULES
from memshrink.estimate.schedule import schedule as make_schedule
from memshrink.estimate.session_options import check_session_options

__all__ = ["Estimate", "estimate", "SCHEDULES", "BACKENDS"]

BACKENDS = tuple(PREDICTORS)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for one estimate.

    Why: an estimate makes hundreds of thousands of small objects (heap-replay chunks, fusion
    maps), and every third-generation collection walks all of them plus the caller's whole
    ``onnx_ir`` model. On a 5,000-node graph that walk was about half the wall time
    (3.4 s -> 1.8 s with it paused, docs/bench/estimate_speed.py). The estimate makes no
    cycles that must die early; whatever it leaves is collected once the collector resumes.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def bound_assumptions(bounded: Mapping[str, str]) -> list[str]:
    """The assumption lines for tensors sized by a data-dependent op's upper bound."""
    if not bounded:
        return []
    rules = {n: how for n, how in bounded.items() if not how.startswith("follows")}
    shown = "; ".join(f"{n}: {how}" for n, how in sorted(rules.items())[:8])
    more = f" (+{len(rules) - 8} more)" if len(rules) > 8 else ""
    return [
        f"data-dependent sizes at their upper bound: {len(rules)} source tensor(s), "
        f"{len(bounded) - len(rules)} sized from them ({shown}{more}); "
        "the bound is a budget, not a typical size: override with --dim-bound TENSOR=N"
    ]


def estimate(
    model: Any,
    *,
    backend: str = "ort",
    shapes: Mapping[str, Sequence[int]] | None = None,
    dims: Mapping[str, int] | None = None,
    session_options: Mapping[str, Any] | None = None,
    schedule: str | None = None,
    embedded: bool | None = None,
    allow_partial: bool = False,
    dim_bounds: Mapping[str, int] | None = None,
) -> Estimate:
    """Predict per-stage memory of ``model`` on ``backend`` (``ort`` | ``openvino`` | ``cuda`` |
    ``ort-openvino``; the verifier's name ``cpu`` means ``ort``).

    ``model``: a path, ``onnx.ModelProto`` or ``onnx_ir.Model`` (not modified, weights not read).
    ``shapes``/``dims`` bind symbolic input dims (else the model's sidecar; else
    ``UnboundDimensionError``, or with ``allow_partial`` a result with ``partial=True``).
    ``session_options``: ORT settings that change memory (``execution_order``,
    ``enable_mem_pattern``, ``enable_cpu_mem_arena``, ``enable_mem_reuse``).
    ``schedule``: override the runtime's order (``file``, ``ort_default``, ``ort_priority``,
    ``openvino``). ``embedded``: how the *saved* file stores weights (None: as loaded).
    """
    with _collector_paused():
        return _estimate(
            model,
            backend,
            shapes,
            dims,
            session_options,
            schedule,
            embedded,
            allow_partial,
            dim_bounds,
        )


def _estimate(
    model: Any,
    backend: str,
    shapes: Mapping[str, Sequence[int]] | None,
    dims: Mapping[str, int] | None,
    session_options: Mapping[str, Any] | None,
    schedule: str | None,
    embedded: bool | None,
    allow_partial: bool,
    dim_bounds: Mapping[str, int] | None = None,
) -> Estimate:
    backend = _backend_name(backend)
    check_session_options(session_options)  # before the load: a typo fails at once
    views = _SHARED.get()
    key: tuple | None = None
    if views is not None and isinstance(model, ir.Model):
        try:
            key = (id(model), _frozen(shapes), _frozen(dims), embedded, allow_partial,
                   _frozen(dim_bounds))  # fmt: skip
            hash(key)
        except TypeError:  # a binding that is not hashable as given: built, not shared
            key = None
        hit = views.get(key) if key is not None else None
        if key is not None and hit is not None and hit[0] is model:
            views.move_to_end(key)
            return _predict(hit[1], backend, session_options, schedule)
    view = build_view(
        model,
        shapes=shapes,
        dims=dims,
        embedded=embedded,
        allow_partial=allow_partial,
        dim_bounds=dim_bounds,
    )
    if views is not None and key is not None:
        views[key] = (model, view)  # the model kept: its id is not reused while remembered
        while len(views) > SHARED_KEEP:
            views.popitem(last=False)
    return _predict(view, backend, session_options, schedule)


#: views remembered inside :func:`views_shared` (a model and its rewrite, judged in turns)
SHARED_KEEP = 2
_SHARED: ContextVar[OrderedDict[tuple, tuple[Any, ModelView]] | None] = ContextVar(
    "memshrink_shared_views", default=None
)


def _frozen(m: Mapping[str, Any] | None) -> tuple | None:
    """Bindings as a key (a shape list or array as a tuple)."""
    if not m:
        return None
    return tuple(
        sorted((k, v if isinstance(v, int | str) or v is None else tuple(v)) for k, v in m.items())
    )


@contextlib.contextmanager
def views_shared() -> Iterator[None]:
    """Inside, ``estimate`` of the same in-memory ``onnx_ir.Model`` object with the same
    bindings and ``embedded`` builds its view once, whatever the backend, session options or
    schedule (the last ``SHARED_KEEP`` views kept); nested scopes share the outer one.

    Why: a pass judging a rewrite predicts the model and the rewrite on each runtime it
    spares (``simplify``'s cap: 4 predictions of 2 models), and ``recommend`` predicts one
    model under each setting; each ``estimate`` built the view again (5,000-node graph:
    ~0.3 CPU-s a build: a fingerprint, the shape inference cache's lookup, the view's graph).
    A view is backend-independent and the predictors only read it, as :class:`SharedView`
    relies on. The caller must not change a model inside the scope."""
    if _SHARED.get() is not None:
        yield
        return
    token = _SHARED.set(OrderedDict())
    try:
        yield
    finally:
        _SHARED.reset(token)


def _backend_name(backend: str) -> str:
    backend = BACKEND_ALIASES.get(backend, backend)
    if backend not in PREDICTORS:
        names = [*PREDICTORS, *BACKEND_ALIASES]
        raise UsageError(f"unknown backend {backend!r}; choose one of {', '.join(names)}")
    return backend


def _predict(
    view: ModelView,
    backend: str,
    session_options: Mapping[str, Any] | None,
    schedule: str | None,
) -> Estimate:
    """One backend's prediction from a built view (which it reads, never changes)."""
    opts = dict(session_options or {})
    check_session_options(opts)
    sched = schedule
    if sched is None:
        sched = DEFAULT_SCHEDULE[backend]
        if (
            backend in ("ort", "cuda")
            and "PRIORITY" in str(opts.get("execution_order", "")).upper()
        ):
            sched = "ort_priority"
    if sched not in SCHEDULES:
        raise UsageError(f"unknown schedule {sched!r}; choose one of {', '.join(SCHEDULES)}")
    order = make_schedule(view.graph, sched)
    pred = PREDICTORS[backend](view, order, opts, sched)
    assumptions = [
        f"execution order: {sched}",
        f"input bindings: { {k: list(v) for k, v in view.bindings.items()} }",
        "weights stored "
        + (
            "embedded in the .onnx (heap copies)"
            if view.embedded
            else "in an external file (memory-mapped)"
        ),
    ]
    assumptions += bound_assumptions(view.graph.bounded)
    if backend != "ort":  # ORT CPU states its emulated graph optimizations itself
        assumptions.append("graph as written: the runtime's graph optimizations not emulated")
    return Estimate(view=view, prediction=pred, assumptions=assumptions)


class SharedView:
    """One file's view for several backends' predictions: the model is loaded and analysed
    (shape inference, lifetimes' inputs) once instead of once per backend.

    Why: ``optimize`` predicts its input and output on each runtime it did not target; each
    ``estimate(path)`` loaded the file again (the 5,000-node graph: +33 MiB transient and
    ~0.6 CPU-s a load). The view is backend-independent and the predictors only read it, so
    ``estimate(path, backend=b)`` and ``SharedView(path).estimate(b)`` give the same result
    (``test_estimate_shared_view.py``). A failure to build the view is raised by every
    ``estimate`` call, as separate calls would each raise it.
    """

    def __init__(
        self,
        model: Any,
        *,
        shapes: Mapping[str, Sequence[int]] | None = None,
        dims: Mapping[str, int] | None = None,
    ) -> None:
        self._view: ModelView | None = None
        self._error: Exception | None = None
        try:
            with _collector_paused():
                self._view = build_view(model, shapes=shapes, dims=dims)
        except Exception as exc:  # noqa: BLE001 - raised again by each estimate()
            self._error = exc
        gc.collect()  # the loaded model is cycles: freed here, not under the predictions

    def estimate(self, backend: str, session_options: Mapping[str, Any] | None = None) -> Estimate:
        """``estimate(model, backend=backend, session_options=...)`` of the shared view."""
        name = _backend_name(backend)
        if self._error is not None:
            raise self._error
        assert self._view is not None
        with _collector_paused():
            return _predict(self._view, name, session_options, None)
