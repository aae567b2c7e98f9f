"""The pass manager: order, stats, timing, analysis invalidation, hooks, replacement models."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx_ir as ir
import pytest

from memshrink.errors import PassError, UsageError
from memshrink.manager import Pass, PassContext, PassManager, PassResult


class _Recorder(Pass):
    name = "recorder"
    summary = "test pass that records the order it ran in"
    targets = ("weights",)

    @dataclass
    class Options:
        tag: str = "x"
        modify: bool = False
        limit: int = 0

    def __init__(self, log: list[str], **options: object) -> None:
        super().__init__(**options)
        self.log = log

    def run(self, model: ir.Model, context: PassContext) -> PassResult:
        seen = context.analysis("count", lambda: len(self.log))
        self.log.append(f"{self.options.tag}:{seen}")
        return PassResult(modified=self.options.modify, stats={"tag": self.options.tag})


class _Hook:
    def __init__(self) -> None:
        self.events: list[str] = []

    def before_pipeline(self, model, context, report) -> None:  # noqa: ANN001
        self.events.append("before")

    def after_pass(self, record, model, context) -> None:  # noqa: ANN001
        self.events.append(f"after:{record.stats['tag']}:{record.modified}")

    def after_pipeline(self, report, model, context) -> None:  # noqa: ANN001
        self.events.append(f"end:{len(report.passes)}")


def test_order_stats_and_hooks(mlp_path: Path) -> None:
    log: list[str] = []
    hook = _Hook()
    passes = [
        _Recorder(log, tag="a"),
        _Recorder(log, tag="b", modify=True),
        _Recorder(log, tag="c"),
    ]
    model, report = PassManager(passes, hooks=[hook]).run(mlp_path)
    assert isinstance(model, ir.Model)
    assert [p.stats["tag"] for p in report.passes] == ["a", "b", "c"]
    assert hook.events == ["before", "after:a:False", "after:b:True", "after:c:False", "end:3"]
    assert all(p.seconds >= 0 for p in report.passes) and report.modified
    # The cached analysis survives a non-modifying pass and is dropped after a modifying one.
    assert log == ["a:0", "b:0", "c:2"]
    assert report.to_dict()["passes"][1]["modified"] is True


def test_typed_options_are_converted_and_checked() -> None:
    p = _Recorder([], limit="2KiB", modify="yes")
    assert p.options.limit == 2048 and p.options.modify is True
    assert _Recorder([], limit="1.5KiB").options.limit == 1536  # a fraction with a unit
    assert _Recorder([], limit=" 12 ").options.limit == 12
    with pytest.raises(UsageError, match="no option"):
        _Recorder([], nope=1)
    with pytest.raises(UsageError, match="expected int"):
        _Recorder([], limit="lots")
    with pytest.raises(UsageError, match="expected bool"):
        _Recorder([], modify="maybe")


def test_pass_exception_names_the_pass(mlp_path: Path) -> None:
    class Broken(_Recorder):
        name = "broken"

        def run(self, model: ir.Model, context: PassContext) -> PassResult:
            raise ValueError("boom")

    with pytest.raises(PassError, match="pass 'broken' failed: ValueError: boom"):
        PassManager([Broken([])]).run(mlp_path)


def test_replacement_model_flows_on(mlp_path: Path) -> None:
    seen: list[ir.Model] = []

    class Replace(_Recorder):
        name = "replace"

        def run(self, model: ir.Model, context: PassContext) -> PassResult:
            new = ir.from_proto(ir.to_proto(model))
            return PassResult(modified=True, stats={"tag": "r"}, model=new)

    class Observe(_Recorder):
        name = "observe"

        def run(self, model: ir.Model, context: PassContext) -> PassResult:
            seen.append(model)
            return PassResult(modified=False, stats={"tag": "o"})

    model, _ = PassManager([Replace([]), Observe([])]).run(mlp_path)
    assert seen == [model]
    assert "memshrink.source" in model.meta  # metadata carried over to the new model


def test_a_replaced_model_is_freed_before_the_next_pass(mlp_path: Path) -> None:
    """onnx_ir graphs are cycles: without a collect the replaced model (simplify's input)
    stays in memory until the GC happens to run; the caller hands over its only reference."""
    import gc
    import weakref

    from memshrink.model import load

    refs: list[weakref.ref] = []
    alive: list[bool] = []

    class Replace(_Recorder):
        name = "replace"

        def run(self, model: ir.Model, context: PassContext) -> PassResult:
            refs.append(weakref.ref(model.graph))  # the model object goes by refcount
            return PassResult(modified=True, model=ir.from_proto(ir.to_proto(model)))

    class Observe(_Recorder):
        name = "observe"

        def run(self, model: ir.Model, context: PassContext) -> PassResult:
            alive.append(refs[0]() is not None)
            return PassResult(modified=False)

    gc.disable()  # only the manager's own collect may free it
    try:
        loaded = [load(mlp_path)]
        PassManager([Replace([]), Observe([])]).run(loaded.pop())
    finally:
        gc.enable()
    assert alive == [False]


def test_progress_messages(mlp_path: Path) -> None:
    messages: list[str] = []
    PassManager("prune").run(mlp_path, PassContext(progress=messages.append))
    assert messages[0] == "[1/1] prune ..." and "prune: modified" in messages[1]


def test_estimate_hook_reuses_the_prediction_after_an_unchanged_pass(
    mlp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import memshrink.hooks as hooks

    calls: list[int] = []
    real = hooks._estimate_summary

    def counted(model: ir.Model, context: PassContext) -> dict:
        calls.append(1)
        return real(model, context)

    monkeypatch.setattr(hooks, "_estimate_summary", counted)
    log: list[str] = []
    passes = [
        _Recorder(log, tag="a"),
        _Recorder(log, tag="b", modify=True),
        _Recorder(log, tag="c"),
    ]
    _, report = PassManager(passes, hooks=[hooks.EstimateHook()]).run(mlp_path)
    assert len(calls) == 2  # before the pipeline, and after "b" (the only change)
    a, b, c = (p.estimate for p in report.passes)
    assert a == report.estimate_before and c == b and "stage_peaks" in a


def test_a_replacement_returns_the_freed_heap(
    mlp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """glibc keeps freed heap (onnxsim's protos, the replaced IR) in the RSS unless trimmed:
    the manager calls ``heap.release_memory`` once per replacement, not after other passes."""
    import memshrink.manager as manager
    from memshrink.heap import release_memory
    from memshrink.model import load

    calls: list[int] = []

    def counted() -> None:
        calls.append(1)
        release_memory()

    monkeypatch.setattr(manager, "release_memory", counted)

    class Replace(_Recorder):
        name = "replace"

        def run(self, model: ir.Model, context: PassContext) -> PassResult:
            return PassResult(modified=True, model=ir.from_proto(ir.to_proto(model)))

    class Keep(_Recorder):
        name = "keep"

        def run(self, model: ir.Model, context: PassContext) -> PassResult:
            return PassResult(modified=False)

    PassManager([Keep([]), Replace([]), Keep([])]).run(load(mlp_path))
    assert calls == [1]


class _Ranged(Pass):
    name = "ranged"
    summary = "test pass with every kind of option"
    option_choices = {"modes": ("a", "b"), "cuts": int, "axis": (2, 3)}

    @dataclass
    class Options:
        ratio: float = 0.5
        min_gain: float = 0.0
        limit: int = 0
        flag: bool = False
        modes: str = "a"
        cuts: str = "0"
        axis: int = 2
        guard_backends: str = "cuda"

    def run(self, model: ir.Model, context: PassContext) -> PassResult:  # pragma: no cover
        return PassResult(modified=False)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"ratio": "nan"}, "option ranged.ratio: expected a finite float >= 0, got 'nan'"),
        ({"ratio": "-1"}, "option ranged.ratio: expected a finite float >= 0, got '-1'"),
        ({"ratio": float("inf")}, "expected a finite float >= 0, got inf"),
        ({"min_gain": "nan"}, "option ranged.min_gain: expected a finite float, got 'nan'"),
        (
            {"limit": -1},
            "option ranged.limit: expected int (>= 0; a size may take a unit: 1.5MiB), got -1",
        ),  # TOML's -1
        ({"limit": 1.5}, "option ranged.limit: expected int (>= 0; a size may take a unit"),
        ({"limit": "1.5"}, "option ranged.limit: expected int (>= 0; a size may take a unit"),
        ({"limit": " 0.5 "}, "got ' 0.5 '"),  # was read as a size: 1 and 0 bytes
        ({"limit": "-1"}, "got '-1'"),
        ({"flag": 2}, "option ranged.flag: expected bool, got 2"),
        ({"modes": "a,c"}, "option ranged.modes: unknown 'c'; choose from a, b"),
        ({"cuts": "1,x"}, "option ranged.cuts: expected integers >= 0 (comma-separated)"),
        ({"axis": "7"}, "option ranged.axis: expected one of 2, 3, got 7"),
        ({"guard_backends": "openvno"}, "unknown 'openvno'; choose from ort, cpu, openvino"),
    ],
)
def test_option_values_out_of_range_are_usage_errors(options: dict, says: str) -> None:
    """QA session 14: each of these was accepted and changed what the pass did without a
    word (NaN and negative caps switched checks off, ``modes=bach`` made chunk a no-op,
    ``prefer_backends=openvno`` guarded nothing) or failed inside the pass (exit 1)."""
    with pytest.raises(UsageError) as info:
        _Ranged(**options)
    assert says in str(info.value)


def test_option_values_in_range_pass() -> None:
    p = _Ranged(ratio="0", min_gain=-1, limit=2.0, flag=1, modes="b,a", cuts="0, 3", axis=3,
                guard_backends="cuda,openvino, ort-openvino")  # fmt: skip
    assert (p.options.ratio, p.options.limit, p.options.flag, p.options.axis) == (0.0, 2, True, 3)
