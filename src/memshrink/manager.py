"""Pass API and the pass manager.

One in-memory ``onnx_ir.Model`` flows through the pipeline; nothing is serialized between
passes. Analyses are cached on the ``PassContext`` and dropped whenever a pass reports it
modified the model. Hooks observe the pipeline (timing, estimates, invariant checks,
verification) without the passes knowing about them.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import onnx_ir as ir

from memshrink import tolerance
from memshrink.errors import MemshrinkError, PassError, UsageError
from memshrink.heap import release_memory
from memshrink.units import parse_bytes

TARGETS = ("weights", "activations", "session-creation")


@dataclass
class PassResult:
    """What a pass did. ``model`` is set only by passes that build a new model object."""

    modified: bool
    stats: dict[str, Any] = field(default_factory=dict)
    model: ir.Model | None = None
    #: This run kept outputs bit-identical although the pass may not in general (so its stated
    #: tolerance is not recorded and ``verify`` stays strict).
    exact: bool = False


class PassContext:
    """Shared state for one pipeline run: options, shape bindings, analysis cache, progress."""

    def __init__(
        self,
        *,
        shapes: Mapping[str, Sequence[int]] | None = None,
        dims: Mapping[str, int] | None = None,
        backend: str = "ort",
        deploy_only: bool = False,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.shapes = dict(shapes or {})
        self.dims = dict(dims or {})
        self.backend = backend
        # True when the user named ``backend`` as the one runtime they deploy on
        # (``optimize --backend``): passes need not spare the other runtimes' peaks.
        self.deploy_only = deploy_only
        self._progress = progress
        self._analyses: dict[str, Any] = {}

    def analysis(self, key: str, compute: Callable[[], Any]) -> Any:
        """Return a cached analysis, computing it on first use after the last change."""
        if key not in self._analyses:
            self._analyses[key] = compute()
        return self._analyses[key]

    def invalidate(self) -> None:
        self._analyses.clear()

    def progress(self, message: str) -> None:
        if self._progress:
            self._progress(message)


class Pass:
    """Base class of a memory-reducing rewrite.

    Subclasses declare ``name``, ``summary``, ``targets`` (a subset of TARGETS), ``exact``
    (True when outputs stay bit-identical; otherwise a string stating the tolerance), and
    an ``Options`` dataclass whose fields are the typed options with defaults. A pass whose
    outputs may move by more than ``verify``'s defaults (atol 1e-5, rtol 1e-5) also states that
    bound as ``tolerance = (atol, rtol)``; the manager records it in the model when the pass
    changed it (``memshrink.tolerance``), so ``verify`` checks the promise, not a stricter one.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    targets: ClassVar[tuple[str, ...]]
    exact: ClassVar[bool | str] = True
    tolerance: ClassVar[tuple[float, float] | None] = None

    @dataclass
    class Options:
        pass

    def __init__(self, **options: Any) -> None:
        self.options = self.parse_options(options)

    @classmethod
    def parse_options(cls, options: Mapping[str, Any]) -> Any:
        """Validate and convert options (sizes like ``'1KiB'`` for ``int`` byte fields)."""
        fields = {f.name: f for f in dataclasses.fields(cls.Options)}
        unknown = sorted(set(options) - set(fields))
        if unknown:
            raise UsageError(
                f"pass {cls.name!r} has no option(s) {', '.join(unknown)}; "
                f"its options are: {', '.join(fields) or '(none)'}"
            )
        converted = {}
        for key, value in options.items():
            converted[key] = _convert_option(cls.name, key, fields[key], value, cls.option_choices)
        return cls.Options(**converted)

    #: Values an option may take: for a ``str`` option, each of its comma-listed items
    #: (``chunk.modes``; ``int``: integers); an option named ``*backends`` or
    #: ``channel_guard`` takes runtime names (``BACKEND_NAMES``) without an entry here.
    option_choices: ClassVar[dict[str, Any]] = {}

    def run(self, model: ir.Model, context: PassContext) -> PassResult:  # pragma: no cover
        raise NotImplementedError

    @classmethod
    def describe(cls) -> dict[str, Any]:
        return {
            "name": cls.name,
            "summary": cls.summary,
            "targets": list(cls.targets),
            "exact": cls.exact,
            "tolerance": list(cls.tolerance) if cls.tolerance else None,
            "options": {f.name: _default_of(f) for f in dataclasses.fields(cls.Options)},
        }


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def _convert_option(
    pass_name: str,
    key: str,
    f: dataclasses.Field,
    value: Any,
    choices: Mapping[str, Any] | None = None,
) -> Any:
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    where = f"option {pass_name}.{key}"
    try:
        if kind == "bool":
            if isinstance(value, str):
                if value.lower() in ("1", "true", "yes", "on"):
                    return True
                if value.lower() in ("0", "false", "no", "off"):
                    return False
                raise ValueError(value)
            if isinstance(value, bool) or value in (0, 1):
                return bool(value)
            raise ValueError(value)  # a TOML 2 or [..] read as true
        if kind == "int":
            if isinstance(value, bool) or isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            number = _int_text(value) if isinstance(value, str) else int(value)
            if number < 0:  # a TOML -1 (the command line's "-1" fails parse_bytes)
                raise ValueError(value)
            value = number
        if kind == "float":
            real = float(value)
            # NaN compared false everywhere and switched its check off (QA session 14); a
            # cap, ratio or time below 0 means nothing (a ``min_*`` threshold may be: -1
            # takes any layout)
            if not math.isfinite(real) or (real < 0 and not key.startswith("min_")):
                raise ValueError(value)
            value = real
        if kind == "str":
            value = str(value)
    except (ValueError, TypeError, MemshrinkError):
        what = {
            "int": "int (>= 0; a size may take a unit: 1.5MiB)",
            "float": "a finite float",
        }.get(kind, kind)
        what += " >= 0" if kind == "float" and not key.startswith("min_") else ""
        raise UsageError(f"{where}: expected {what}, got {value!r}") from None
    if kind == "str":
        return _check_choices(where, key, value, choices or {})
    allowed = (choices or {}).get(key)
    if allowed is not None and value not in allowed:
        raise UsageError(f"{where}: expected one of {', '.join(map(str, allowed))}, got {value!r}")
    return value


def _int_text(text: str) -> int:
    """An int option's command-line text: digits, or a size with a unit (``2KiB``, ``1.5MiB``).

    Why: ``external-data.threshold=1.5`` was read as a size of 1 byte without a word (QA
    session 14); a fraction means something only with a unit."""
    plain = text.strip()
    if plain.isdigit():
        return int(plain)
    if not any(c.isalpha() for c in plain):  # 1.5, -1, "": no unit to scale a fraction
        raise ValueError(text)
    return parse_bytes(plain)


#: Runtime names a ``*backends`` option lists (``optimize --backend``'s choices).
BACKEND_NAMES = ("ort", "cpu", "openvino", "ort-openvino", "cuda")


def _check_choices(where: str, key: str, value: str, choices: Mapping[str, Any]) -> str:
    """A comma list whose items must be known: ``prefer_backends=openvno`` guarded nothing
    and ``chunk.modes=bach`` made chunk a no-op, each with exit 0 (QA session 14)."""
    allowed = choices.get(key)
    if allowed is None and (key.endswith("backends") or key == "channel_guard"):
        allowed = BACKEND_NAMES
    if allowed is None:
        return value
    items = [v.strip() for v in value.split(",") if v.strip()]
    if allowed is int:  # a list of integers >= 0 (``chunk.cuts``)
        if all(v.isdigit() for v in items):
            return value
        raise UsageError(f"{where}: expected integers >= 0 (comma-separated), got {value!r}")
    bad = [v for v in items if v not in allowed]
    if bad:
        raise UsageError(f"{where}: unknown {', '.join(map(repr, bad))}; choose from "
                         f"{', '.join(allowed)} (comma-separated)")  # fmt: skip
    return value


@dataclass
class PassRecord:
    """One pass's entry in the pipeline report."""

    name: str
    modified: bool
    seconds: float
    stats: dict[str, Any]
    estimate: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class PipelineReport:
    passes: list[PassRecord] = field(default_factory=list)
    seconds: float = 0.0
    estimate_before: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def modified(self) -> bool:
        return any(p.modified for p in self.passes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 4),
            "modified": self.modified,
            "estimate_before": self.estimate_before,
            "passes": [p.to_dict() for p in self.passes],
            **self.extra,
        }


class PassHook(Protocol):
    """Observer of a pipeline run; every method is optional."""

    def before_pipeline(
        self, model: ir.Model, context: PassContext, report: PipelineReport
    ) -> None: ...

    def after_pass(self, record: PassRecord, model: ir.Model, context: PassContext) -> None: ...

    def after_pipeline(
        self, report: PipelineReport, model: ir.Model, context: PassContext
    ) -> None: ...


class PassManager:
    """Run a pipeline of passes over one model, with hooks after every pass.

    ``pipeline`` is ``'all'``, ``'safe'``, a comma list of pass names, a path to a TOML
    pipeline, or a sequence of pass names / ``Pass`` instances.
    """

    def __init__(
        self,
        pipeline: str | Sequence[str | Pass] = "all",
        *,
        hooks: Iterable[Any] = (),
        options: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        from memshrink.pipeline import resolve_pipeline

        self.passes: list[Pass] = resolve_pipeline(pipeline, options or {})
        self.hooks = list(hooks)

    def _call(self, method: str, *args: Any) -> None:
        for hook in self.hooks:
            fn = getattr(hook, method, None)
            if fn is not None:
                fn(*args)

    def run(
        self, model: Any, context: PassContext | None = None
    ) -> tuple[ir.Model, PipelineReport]:
        """Run every pass in order; returns the (possibly new) model and the report."""
        from memshrink.model import load

        model = load(model)
        context = context or PassContext()
        report = PipelineReport()
        start = time.perf_counter()
        self._call("before_pipeline", model, context, report)
        custom = custom_domain_ops(model)
        if custom:
            report.extra["custom_ops"] = custom
            listed = ", ".join(f"{d}: {', '.join(sorted(ops))}" for d, ops in custom.items())
            context.progress(
                f"note: nodes of custom domains ({listed}) are opaque to memshrink; "
                "passes keep them as they are"
            )
        total = len(self.passes)
        for index, p in enumerate(self.passes, 1):
            context.progress(f"[{index}/{total}] {p.name} ...")
            t0 = time.perf_counter()
            try:
                result = p.run(model, context)
            except MemshrinkError:
                raise
            except OSError as exc:
                raise _pass_os_error(p.name, exc) from exc
            except Exception as exc:  # a bug or an unexpected model: name the pass
                raise PassError(f"pass {p.name!r} failed: {type(exc).__name__}: {exc}") from exc
            seconds = time.perf_counter() - t0
            if result.model is not None:
                result.model.meta.update(
                    {k: v for k, v in model.meta.items() if k not in result.model.meta}
                )
                if tolerance.KEY in model.metadata_props:  # a record from an earlier run
                    result.model.metadata_props.setdefault(
                        tolerance.KEY, model.metadata_props[tolerance.KEY]
                    )
                model = result.model
                # an onnx_ir graph is a web of cycles (nodes <-> values <-> graph): only the
                # cyclic GC frees the replaced model, which can wait passes long; and glibc
                # keeps the freed heap (simplify: onnxsim's protos) unless trimmed
                release_memory()
            if result.modified:
                context.invalidate()
                # recorded at once, so a hook verifying after this pass compares at it too
                pass_tol = None if result.exact else p.tolerance
                tolerance.record(model.metadata_props, [(p.name, pass_tol)])
            record = PassRecord(p.name, result.modified, round(seconds, 4), result.stats)
            report.passes.append(record)
            self._call("after_pass", record, model, context)
            context.progress(
                f"[{index}/{total}] {p.name}: {'modified' if result.modified else 'no change'}"
                f" in {seconds:.2f} s{_stats_summary(result.stats)}"
            )
        stated = tolerance.from_metadata(model.metadata_props)
        if stated is not None:
            report.extra["stated_tolerance"] = stated.to_dict()
        report.seconds = time.perf_counter() - start
        self._call("after_pipeline", report, model, context)
        # the passes' cached analyses (chunk's estimate: a view of every node) belong to this
        # run's models; the caller keeps the context (5,000-node graph: ~20 MiB held to exit)
        context.invalidate()
        return model, report


STANDARD_DOMAINS = frozenset(
    {"", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training"}
)


def _pass_os_error(name: str, exc: OSError) -> MemshrinkError:
    """A pass's ``OSError``: out of space (or over the file-size limit) while it spilled rewritten
    weights next to the output is the output's problem (exit 7, like the writer's), not a bug."""
    import errno

    from memshrink.errors import ModelSaveError

    if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        import tempfile

        from memshrink.transforms.weight_io import SpillFile

        # the API's runs (no output folder yet) spill into the temp folder: name it (QA 15)
        where = SpillFile.directory or f"the temp folder {tempfile.gettempdir()} (TMPDIR)"
        return ModelSaveError(
            f"out of disk space (or file size limit) while pass {name!r} wrote rewritten "
            f"weights to its spill file in {where}; nothing written"
        )
    return PassError(f"pass {name!r} failed: {type(exc).__name__}: {exc}")


def custom_domain_ops(model: ir.Model) -> dict[str, dict[str, int]]:
    """Count nodes of non-standard domains (all subgraphs): ``{domain: {op_type: count}}``.
    Calls of the model's own functions are not opaque (``inline-functions`` expands them)."""
    found: dict[str, dict[str, int]] = {}
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.domain not in STANDARD_DOMAINS and node.op_identifier() not in model.functions:
            ops = found.setdefault(node.domain, {})
            ops[node.op_type] = ops.get(node.op_type, 0) + 1
    return found


def _stats_summary(stats: Mapping[str, Any]) -> str:
    items = [
        f"{k}={v}" for k, v in stats.items() if isinstance(v, (int, float, str)) and k != "reason"
    ]
    if "reason" in stats:
        items.insert(0, str(stats["reason"]))
    return (" — " + ", ".join(items[:6])) if items else ""


def stderr_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
