"""The tolerance a rewrite's passes state travels in the model, and verify checks that promise.

Regression for session 8's sweep: FCOS after ``--passes all`` (chunk's channel split, stated
atol 1e-4 / rtol 1e-4) differed by 6.1e-5 on the OpenVINO EP and failed ``verify`` at its
default 1e-5, although the rewrite was inside what ``chunk`` states."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from memshrink import tolerance
from memshrink.manager import Pass, PassContext, PassManager, PassResult
from memshrink.verify import EXIT_MISMATCH, EXIT_OK, verify
from memshrink.verify.modelinfo import read_model_io


class _Nudge(Pass):
    """Multiplies the weight by (1 + 3e-5): a stand-in for a pass that reorders sums."""

    name = "nudge"
    summary = "test"
    targets = ("activations",)
    exact = "atol 1e-4, rtol 1e-4"
    tolerance = (1e-4, 1e-4)

    @dataclass
    class Options:
        pass

    def run(self, model: ir.Model, context: PassContext) -> PassResult:
        w = model.graph.initializers["W"]
        arr = w.const_value.numpy() * np.float32(1 + 3e-5)
        w.const_value = ir.tensor(arr, name="W")
        return PassResult(True)


class _Exact(_Nudge):
    name = "exact-noop"
    exact = True
    tolerance = None

    def run(self, model: ir.Model, context: PassContext) -> PassResult:
        return PassResult(True)


class _Untouched(_Nudge):
    name = "untouched"

    def run(self, model: ir.Model, context: PassContext) -> PassResult:
        return PassResult(False)


def _matmul(path: Path) -> Path:
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "W")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])],
        [w],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    onnx.save(m, str(path))
    return path


def _optimize(src: Path, dst: Path, passes: list[Pass]) -> dict:
    from memshrink.model import load, save

    model, report = PassManager(passes).run(load(src))
    save(model, dst)
    return report.to_dict()


def test_record_adds_only_non_exact_passes_and_sums_runs() -> None:
    meta: dict[str, str] = {}
    assert tolerance.record(meta, [("prune", None), ("inplace", None)]) is None
    assert meta == {}  # an exact pipeline writes nothing
    first = tolerance.record(meta, [("simplify", (1e-5, 1e-4)), ("chunk", (1e-4, 1e-4))])
    assert first is not None
    assert (first.atol, first.rtol) == pytest.approx((1.1e-4, 2e-4), rel=1e-12, abs=0)
    again = tolerance.record(meta, [("chunk", (1e-4, 1e-4))])  # optimized a second time
    assert again is not None and [p[0] for p in again.passes] == ["simplify", "chunk", "chunk"]
    assert (again.atol, again.rtol) == pytest.approx((2.1e-4, 3e-4), rel=1e-12, abs=0)
    assert tolerance.parse("not json") is None and tolerance.parse('{"passes": []}') is None


def test_the_manager_records_what_changed_the_model(tmp_path: Path) -> None:
    src = _matmul(tmp_path / "in.onnx")
    rep = _optimize(src, tmp_path / "a.onnx", [_Exact(), _Untouched(), _Nudge()])
    assert rep["stated_tolerance"]["passes"] == [{"pass": "nudge", "atol": 1e-4, "rtol": 1e-4}]
    meta = read_model_io(tmp_path / "a.onnx").metadata  # read from the wire, weights skipped
    stated = tolerance.from_metadata(meta)
    assert stated is not None and (stated.atol, stated.rtol) == (1e-4, 1e-4)
    rep = _optimize(src, tmp_path / "b.onnx", [_Exact(), _Untouched()])
    assert "stated_tolerance" not in rep  # exact or unchanged: nothing recorded
    assert tolerance.KEY not in read_model_io(tmp_path / "b.onnx").metadata


def test_verify_compares_at_the_stated_tolerance_unless_told_otherwise(tmp_path: Path) -> None:
    src = _matmul(tmp_path / "in.onnx")
    nudged = tmp_path / "n.onnx"
    _optimize(src, nudged, [_Nudge()])
    rep = verify(src, nudged, backends=("cpu",), runs=1)
    assert rep.exit_code == EXIT_OK, rep.format_table()
    assert rep.settings["tolerance_source"].startswith("stated by the rewrite: nudge")
    assert (rep.settings["atol"], rep.settings["rtol"]) == (1e-4, 1e-4)
    assert "TOLERANCE atol 0.0001, rtol 0.0001" in rep.format_table()
    out = rep.comparisons[0].outputs[0]
    assert out.max_abs is not None and out.max_abs > 1e-5  # it did move past the defaults
    # the user's tolerance wins: the same pair fails at the defaults given explicitly
    strict = verify(src, nudged, backends=("cpu",), runs=1, atol=1e-5, rtol=1e-5)
    assert strict.exit_code == EXIT_MISMATCH and strict.settings["tolerance_source"] == "user"
    assert strict.settings["stated_tolerance"]["atol"] == 1e-4  # still reported
    # the same change without the record (not memshrink's promise) stays strict
    plain = tmp_path / "p.onnx"
    m = onnx.load(str(nudged))
    del m.metadata_props[:]
    onnx.save(m, str(plain))
    bare = verify(src, plain, backends=("cpu",), runs=1)
    assert bare.exit_code == EXIT_MISMATCH and bare.settings["tolerance_source"] == "default"


def test_the_safe_preset_states_no_tolerance_and_all_states_chunks() -> None:
    """``safe`` must keep verify strict: none of its passes records a tolerance; every pass
    that states one is not bit-exact (``exact`` is a string)."""
    from memshrink.pipeline import resolve_pipeline

    assert all(p.tolerance is None for p in resolve_pipeline("safe", {}))
    stated = {p.name: p.tolerance for p in resolve_pipeline("all", {}) if p.tolerance}
    assert stated == {"simplify": (1e-5, 1e-4), "chunk": (1e-4, 1e-4), "recompute": (1e-4, 1e-4),
                      "fc-weight-first": (1e-4, 1e-4)}  # fmt: skip
    assert all(p.exact is not True for p in resolve_pipeline("all", {}) if p.tolerance)
