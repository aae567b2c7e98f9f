"""CI sample of the equivalence oracle: ONNX's backend suite through every pass and ``all``.

A seeded random sample (``MEMSHRINK_RELIABILITY_SEED``, ``MEMSHRINK_RELIABILITY_SAMPLE``) of
the operator cases plus a few model cases; the full sweep is
``docs/bench/reliability_sweep.py``. Also shows that the oracle can fail: a pass that nudges
one weight by one ulp, and one that claims a tolerance it does not keep, are caught.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
import pytest
import reliability_harness as h
from fixtures_onnx import build_mlp, mlp_feeds

from memshrink.manager import Pass, PassContext, PassResult

SEED = int(os.environ.get("MEMSHRINK_RELIABILITY_SEED", "20261126"))
NODE_SAMPLE = int(os.environ.get("MEMSHRINK_RELIABILITY_SAMPLE", "30"))
MODEL_SAMPLE = 4


@pytest.fixture(scope="module")
def node_cases() -> list[h.Case]:
    return h.node_cases()


def _report(outcomes: list[h.Outcome]) -> str:
    bad = [o for o in outcomes if o.status == "fail"]  # "known-bug": see h.KNOWN_BUGS
    return "\n".join(f"{o.case} x {o.pass_name}: {o.reason}" for o in bad[:30])


def _assert_sweep(outcomes: list[h.Outcome], cases: int) -> None:
    assert not [o for o in outcomes if o.status == "fail"], _report(outcomes)
    passes = {o.pass_name for o in outcomes}
    assert passes == set(h.pass_names())
    for p in passes:
        verdicts = [o for o in outcomes if o.pass_name == p]
        # not vacuous: most sampled cases run on ORT and were really compared
        assert sum(o.status == "pass" for o in verdicts) >= cases // 2, p


def test_node_suite_sample_every_pass(node_cases: list[h.Case]) -> None:
    assert len(node_cases) > 1000  # the generator still produces the whole suite
    sample = h.sample(node_cases, NODE_SAMPLE, SEED)
    outcomes = [o for case in sample for o in h.run_case(case)]
    _assert_sweep(outcomes, len(sample))
    # the external-data pass rewrites every model it sees: the comparison was not of a no-op
    assert any(o.modified for o in outcomes if o.pass_name == "external-data")


def test_model_suite_sample_every_pass() -> None:
    cases = h.model_cases(["simple", "pytorch-converted", "pytorch-operator"])
    assert len(cases) > 100
    sample = h.sample(cases, MODEL_SAMPLE, SEED)
    outcomes = [o for case in sample for o in h.run_case(case)]
    _assert_sweep(outcomes, len(sample))


def test_light_model_case_every_pass() -> None:
    """One real CNN of the suite (SqueezeNet, opset 9, weights generated in-graph)."""
    (case,) = [c for c in h.model_cases(["light"]) if c.name == "light_squeezenet"]
    outcomes = h.run_case(case)
    assert not [o for o in outcomes if o.status == "fail"], _report(outcomes)
    assert sum(o.status == "pass" for o in outcomes) >= len(outcomes) // 2


# ------------------------------------------------------------- the oracle can fail


@dataclass
class _NoOptions:
    pass


class _NudgeWeight(Pass):
    """Broken on purpose: claims bit-exactness, adds 1e-3 to one element of the last weight.

    Small enough that the outputs stay within the suite's rtol 1e-3, so only the bit-exact
    comparison against the original can catch it. (One ulp is not always enough: it can
    vanish in the rounding of a long dot product and leave the outputs bit-identical.)
    """

    name = "test-nudge-weight"
    summary = "test only"
    targets = ("weights",)
    exact = True
    Options = _NoOptions

    def run(self, model: ir.Model, context: PassContext) -> PassResult:
        for value in reversed(list(model.graph.initializers.values())):
            t = value.const_value
            if t is not None and t.dtype == ir.DataType.FLOAT and t.size:
                arr = t.numpy().copy()
                arr.flat[0] += np.float32(1e-3)
                value.const_value = ir.Tensor(arr, name=value.name)
                return PassResult(True)
        return PassResult(False, {"reason": "no float weight"})


class _LooseClaim(_NudgeWeight):
    """Claims a tolerance (rtol 1e-4) and breaks it: scales one weight by 1.01."""

    name = "test-loose-claim"
    exact = "rtol 1e-4, atol 1e-6"

    def run(self, model: ir.Model, context: PassContext) -> PassResult:
        for value in model.graph.initializers.values():
            t = value.const_value
            if t is not None and t.dtype == ir.DataType.FLOAT and t.size:
                value.const_value = ir.Tensor(t.numpy() * np.float32(1.01), name=value.name)
                return PassResult(True)
        return PassResult(False, {"reason": "no float weight"})


def test_oracle_catches_a_change_within_the_suite_tolerance() -> None:
    # not a suite case: IR < 4 suite models feed their weights as inputs, which would hide it
    model = build_mlp(extras=False)
    feeds = [mlp_feeds()["x"]]
    case = h.Case("mlp", "fixture", 1e-3, 1e-7, model=model, data_sets=[(feeds, [])])
    case.data_sets = [(feeds, h.run_ort_proto(model, case.data_sets)[0])]
    good, nudged, loose = h.run_case(case, ["prune", _NudgeWeight(), _LooseClaim()])
    assert good.status == "pass", good.reason
    assert nudged.status == "fail" and "bit-identical" in nudged.reason, nudged.reason
    assert loose.status == "fail" and "rtol=0.0001" in loose.reason


def test_compare_rules() -> None:
    f = np.array([0.0, 1.0, np.nan, np.inf], np.float32)
    assert h.compare(f, f.copy(), rtol=0, atol=0, exact=True) is None
    neg_zero = f.copy()
    neg_zero[0] = -0.0
    assert h.compare(f, neg_zero, rtol=0, atol=0, exact=True)  # bit-exact sees the sign
    assert h.compare(f, neg_zero, rtol=1e-3, atol=1e-7) is None
    near = f * np.float32(1 + 5e-4)
    assert h.compare(f, near, rtol=1e-3, atol=1e-7) is None
    assert h.compare(f, near, rtol=1e-4, atol=1e-7)
    assert h.compare(f, f.astype(np.float64), rtol=1, atol=1)  # dtype must match
    assert h.compare(np.array([1, 2]), np.array([1, 3]), rtol=1, atol=1)  # ints exact
    assert h.compare([f, f], [f], rtol=1e-3, atol=0)  # sequence length
    assert h.stated_tolerance("within onnxsim's check (rtol 1e-4, atol 1e-5)") == (1e-4, 1e-5)
    assert h.stated_tolerance(True) is None
    assert h.stated_tolerance("weights |x| < 1.18e-38 become 0", (1e-3, 1e-7)) == (1e-3, 1e-7)
