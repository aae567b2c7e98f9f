"""Comparison: tolerance rule, NaN/Inf handling, shape/dtype changes, statistics."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memshrink.verify.compare as compare
from memshrink.verify.compare import compare_arrays, compare_outputs


def test_identical_arrays_match_with_zero_error() -> None:
    a = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    r = compare_arrays("y", a, a.copy(), atol=0.0, rtol=0.0)
    assert r.ok and r.mismatches == 0 and r.max_abs == 0.0 and r.max_rel == 0.0


def test_tolerance_rule_is_atol_plus_rtol_times_ref() -> None:
    ref = np.array([1.0, 100.0], np.float64)
    out = ref + np.array([0.015, 0.015])
    # 0.015 <= 0.01 + 0.001*100 = 0.11 passes; 0.015 > 0.01 + 0.001*1 = 0.011 fails.
    r = compare_arrays("y", ref, out, atol=0.01, rtol=0.001)
    assert r.mismatches == 1 and not r.ok
    assert r.worst_index == [0]
    assert abs(r.max_abs - 0.015) <= 1e-12  # atol 1e-12 on float64 arithmetic
    assert abs(r.max_rel - 0.015) <= 1e-12


def test_nan_and_inf_positions_must_agree() -> None:
    ref = np.array([np.nan, np.inf, 1.0], np.float32)
    assert compare_arrays("y", ref, ref.copy()).ok
    r = compare_arrays("y", ref, np.array([np.nan, -np.inf, 1.0], np.float32))
    assert not r.ok and r.mismatches == 1 and r.inf_out == 1 and r.inf_ref == 1
    r = compare_arrays("y", ref, np.array([0.0, np.inf, 1.0], np.float32))
    assert not r.ok and r.nan_ref == 1 and r.nan_out == 0
    r = compare_arrays("y", ref, ref.copy(), equal_nan=False)
    assert not r.ok


def test_shape_dtype_and_missing_outputs_fail() -> None:
    a = np.zeros((2, 3), np.float32)
    assert compare_arrays("y", a, np.zeros((3, 2), np.float32)).note == "shape differs"
    assert compare_arrays("y", a, a.astype(np.float64)).note == "dtype differs"
    res = compare_outputs(["y", "z"], {"y": a, "z": a}, {"y": a})
    assert res[0].ok and not res[1].ok and res[1].note == "missing in the candidate"


def test_per_output_tolerances_override_defaults() -> None:
    a = np.zeros(3, np.float32)
    b = a + np.float32(1e-3)
    res = compare_outputs(
        ["y", "z"], {"y": a, "z": a}, {"y": b, "z": b}, tolerances={"z": (1e-2, 0.0)}
    )
    assert not res[0].ok and res[1].ok and res[1].atol == 1e-2


def test_integer_outputs_compare_exactly() -> None:
    a = np.array([1, 2, 3], np.int64)
    assert compare_arrays("i", a, a.copy()).ok
    assert compare_arrays("i", a, np.array([1, 2, 4], np.int64)).mismatches == 1


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=32), min_size=1, max_size=20),
    st.floats(0, 1e-2),
    st.floats(0, 1e-2),
)
def test_agrees_with_numpy_isclose(values: list[float], atol: float, rtol: float) -> None:
    ref = np.array(values, np.float32)
    out = (ref * np.float32(1.001) + np.float32(1e-3)).astype(np.float32)
    r = compare_arrays("y", ref, out, atol=atol, rtol=rtol)
    expected = int(
        (~np.isclose(out.astype(np.float64), ref.astype(np.float64), atol=atol, rtol=rtol)).sum()
    )
    assert r.mismatches == expected


def test_chunked_comparison_matches_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outputs are compared in chunks (bounded parent memory): same verdicts, counts, maxima
    and worst element whatever the chunk size; the means agree to rtol 1e-12."""
    rng = np.random.default_rng(3)
    ref = rng.standard_normal((3, 5, 7)).astype(np.float32)
    out = ref + (rng.standard_normal(ref.shape) * 1e-3).astype(np.float32)
    ref[0, 1, 2] = out[0, 1, 2] = np.nan  # matches (equal_nan)
    out[2, 4, 6], out[1, 0, 0] = np.inf, np.float32(5.0)
    whole = compare_arrays("y", ref, out, atol=1e-4, rtol=1e-4).to_dict()
    monkeypatch.setattr(compare, "CHUNK", 4)
    parts = compare_arrays("y", ref, out, atol=1e-4, rtol=1e-4).to_dict()
    for key in ("mean_abs", "mean_rel"):
        assert parts.pop(key) == pytest.approx(whole.pop(key), rel=1e-12, abs=0)
    assert parts == whole
    assert whole["worst_index"] == [2, 4, 6]  # Inf first
