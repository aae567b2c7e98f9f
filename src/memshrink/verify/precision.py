"""Comparison tolerances on a backend that computes below the model's precision.

OpenVINO's CPU plugin picks ``INFERENCE_PRECISION_HINT = bf16`` by itself on CPUs with
AVX512-BF16 / AMX (this development machine: ``<Type: 'bfloat16'>``), so an f32 model runs
its MatMul / Conv in bf16 (8-bit mantissa). Any rewrite that changes a kernel's shape then moves
the rounding: batch chunking of DeiT-tiny moved OpenVINO's outputs by 2.4e-3 where the same
original, on OpenVINO against ONNX Runtime CPU (f32), is already 5.1e-3 off (ORT CPU: 2.6e-7
between the two models; docs/reliability.md, session 7). Held to atol 1e-5, every such rewrite
is "wrong" on that backend only because the runtime is imprecise.

Rule: on a backend whose run reports a reduced inference precision, an output's atol is raised
to twice the runtime's own error on it, measured here: e = max |original@backend -
original@cpu| (ONNX Runtime CPU computes in the model's precision). Why twice: a rewrite that is
exact in f32 gives, on that backend, another reduced-precision result of the same computation;
each of the two lies within about e of the f32 value, possibly on opposite sides, so they may be
up to 2e apart (measured on the test's chunked MLP: 7.4e-3 apart with e = 7.2e-3). The strict
check stays on ``cpu``, so a rewrite that is wrong by less than the runtime's noise is still
caught there. Without a ``cpu`` reference, or where the
two originals differ in shape or hold non-finite values, nothing is widened and the comparison
says why. A user's ``--tol`` for an output always wins.

Rounding, not a different answer: the error calibrates only when it is at most 1/8 of the
output's largest magnitude (``MAX_NOISE_FRACTION``: bf16 keeps 8 bits, this allows 5 bits of
error growth through the network). Measured: DeiT 1.1 %, EfficientFormer 0.55 %, the test's MLP
0.3 %; a Keypoint R-CNN's boxes 62 % (the bf16 scores pick other boxes in NMS/TopK: a discrete
choice, which no tolerance derived from it would make meaningful), so those stay strict.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from memshrink.estimate.host import normalize_precision

MAX_NOISE_FRACTION = 1 / 8


def reduced_precision(assumptions: Mapping[str, object] | None) -> str | None:
    """The reduced inference precision a run reports (``bf16``/``f16``), else None: the
    estimator's reading of the same property (``host.normalize_precision``)."""
    precision = normalize_precision((assumptions or {}).get("inference_precision") or "")
    return None if precision == "f32" else precision


def runtime_noise(ref: np.ndarray | None, out: np.ndarray | None) -> float | None:
    """max |out - ref| of a float output, or None where it cannot calibrate anything: other
    shape or dtype, non-finite values, or an error beyond rounding (``MAX_NOISE_FRACTION``)."""
    if ref is None or out is None or ref.shape != out.shape or ref.size == 0:
        return None
    if not (np.issubdtype(ref.dtype, np.floating) and np.issubdtype(out.dtype, np.floating)):
        return None
    a, b = ref.astype(np.float64), out.astype(np.float64)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return None
    noise = float(np.max(np.abs(a - b)))
    if noise > MAX_NOISE_FRACTION * float(np.max(np.abs(a))):
        return None  # not rounding: the backend chose differently (see the module docstring)
    return noise


def widened_tolerances(
    names: list[str],
    full: Mapping[str, np.ndarray] | None,
    reduced: Mapping[str, np.ndarray],
    atol: float,
    rtol: float,
    tolerances: Mapping[str, tuple[float, float]] | None,
) -> tuple[dict[str, tuple[float, float]], str]:
    """Per-output (atol, rtol) for the rewritten-vs-original comparison on a reduced-precision
    backend, and a note saying what was widened (``full``: the original's outputs on a
    full-precision backend; ``reduced``: on this one)."""
    user = dict(tolerances or {})
    out = dict(user)
    if full is None:
        return out, "no cpu run to calibrate against: tolerances not widened"
    widened, kept = [], []
    for name in names:
        if name in user:
            continue
        noise = runtime_noise(full.get(name), reduced.get(name))
        if noise is None:
            kept.append(name)
        elif 2 * noise > atol:
            out[name] = (2 * noise, rtol)
            widened.append(f"{name} 2 x {noise:.2g}")
    note = (
        "atol raised to twice the runtime's own error against original@cpu: " + ", ".join(widened)
        if widened
        else "no output needed a wider atol"
    )
    if kept:
        note += (
            f"; kept strict (other shape/dtype, non-finite, or beyond rounding): {', '.join(kept)}"
        )
    return out, note


def unstable_outputs(
    names: list[str], full: Mapping[str, np.ndarray] | None, reduced: Mapping[str, np.ndarray]
) -> list[str]:
    """Outputs whose original, on the reduced-precision backend, is another answer than on the
    full-precision one: other shape, or finite values off by more than rounding
    (``MAX_NOISE_FRACTION`` of the largest magnitude). Measured: FCOS's boxes on OpenVINO bf16,
    max abs 225 against ORT CPU, labels 43 of 100 other (NMS/TopK over tied random-weight
    scores). A rewrite that moves the rounding at all (a channel split: sums in another order)
    moves those picks too, so on that backend at that precision there is no stable answer to
    compare against (see ``verify.api._recheck_at_full_precision``)."""
    if full is None:
        return []
    out = []
    for name in names:
        a, b = full.get(name), reduced.get(name)
        if a is None or b is None or a.dtype != b.dtype:
            continue
        if a.shape != b.shape:
            out.append(name)
            continue
        if a.size == 0 or a.dtype.kind not in "biuf":
            continue
        x, y = a.astype(np.float64), b.astype(np.float64)
        if not (np.isfinite(x).all() and np.isfinite(y).all()):
            continue
        if a.dtype.kind in "biu":
            if not np.array_equal(x, y):
                out.append(name)  # labels, indices: a discrete choice changed
        elif float(np.max(np.abs(x - y))) > MAX_NOISE_FRACTION * float(np.max(np.abs(x))):
            out.append(name)
    return out


#: Compile config that makes OpenVINO's CPU plugin compute an f32 model in f32.
FULL_PRECISION_OPTIONS: dict[str, dict[str, str]] = {
    "openvino": {"INFERENCE_PRECISION_HINT": "f32"},
}
