"""Session-option recommendations: which runtime settings lower memory, and by how much.

Why: runtime settings count as much as the graph. ONNX Runtime's memory pattern (on by default)
allocates one block of the traced plan *on top of* the arena regions grown in run 1, so steady
state often holds about twice run 1's activations (``MEASURING.md``); the execution order picks
which activations are alive together. Each recommendation is the estimator's predicted effect
of one setting on the steady-state run peak, kept only when it lowers it, and added greedily so
the combined settings are predicted too.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import onnx_ir as ir

from memshrink.units import format_bytes

#: Settings tried for ONNX Runtime (CPU), with why each one can lower memory.
ORT_CANDIDATES: tuple[tuple[str, Any, str], ...] = (
    (
        "enable_mem_pattern",
        False,
        "the memory-pattern block is allocated on top of run 1's arena regions; without it "
        "later runs reuse the warm arena",
    ),
    (
        "execution_order",
        "PRIORITY_BASED",
        "file order (written by `reorder`) keeps fewer activations alive than DEFAULT's "
        "reverse depth-first order",
    ),
)
MIN_GAIN = 1 << 20  # recommend only what saves at least 1 MiB


@dataclass
class Recommendation:
    """One setting and its predicted effect on the steady-state run peak (bytes saved)."""

    backend: str
    key: str
    value: Any
    saving: int  # predicted bytes saved at steady state, given the settings listed before it
    predicted_peak: int  # predicted steady-state peak with this and the previous settings
    baseline_peak: int  # predicted steady-state peak with the runtime's defaults
    why: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _steady(
    model: Any,
    backend: str,
    shapes: Any,
    dims: Any,
    opts: Mapping[str, Any],
    embedded: bool | None = None,
) -> int:
    """Predicted steady-state run peak under ``opts``.

    With ``enable_mem_pattern`` off, measured on ORT 1.32 (docs/activation-passes.md), later
    runs repeat run 1's allocations in the warm arena, so steady state equals run 1 (ResNet-50
    batch 16: +62 MiB in run 1 and +0 after, against +117 then +98 more with the pattern on).
    The estimator's stage for run 1 is used for it until the estimator models this itself.
    """
    from memshrink.estimate import estimate

    est = estimate(
        model, backend=backend, shapes=shapes, dims=dims, session_options=opts, embedded=embedded
    )
    peaks = est.stage_peaks()
    if str(opts.get("enable_mem_pattern", True)).lower() in ("false", "0", "no", "off"):
        return int(min(peaks.get("run_1", peaks["steady_state"]), peaks["steady_state"]))
    return int(peaks.get("steady_state", max(peaks.values())))


def recommend(
    model: Any,
    backend: str = "ort",
    shapes: Mapping[str, Sequence[int]] | None = None,
    dims: Mapping[str, int] | None = None,
) -> list[Recommendation]:
    """Settings predicted to lower ``model``'s steady-state run peak on ``backend``.

    ``backend``: ``ort`` (CPU; the settings are ``SessionOptions`` attributes) or ``openvino``
    (nothing to recommend: its CPU plugin plans activations itself and has no setting the
    estimator models). ``model``: a path, ``ModelProto`` or ``onnx_ir.Model`` (bindings then
    default to its source model's sidecar). Raises ``UnboundDimensionError`` when input dims
    are unbound.
    """
    if backend != "ort":
        return []
    if shapes is None and dims is None and isinstance(model, ir.Model):
        from memshrink.transforms.predicted import sidecar_bindings

        shapes = sidecar_bindings(model) or None  # the source model's sidecar
    embedded = None
    if isinstance(model, ir.Model):
        from memshrink.transforms.saved_layout import saved_embedded

        # an in-memory model is predicted as the file the save writes (external-data's policy):
        # as loaded, BERT b4x512's `all` output was predicted 868 MiB steady instead of 522
        embedded = saved_embedded(model)
    from memshrink.estimate.api import views_shared

    with views_shared():  # one view of the model for every setting tried
        return _search(model, backend, shapes, dims, embedded)


def _search(model: Any, backend: str, shapes: Any, dims: Any,
            embedded: bool | None) -> list[Recommendation]:  # fmt: skip
    """``recommend``'s greedy search: the setting that lowers the steady state most, added
    while one still gains ``MIN_GAIN``."""
    base = _steady(model, backend, shapes, dims, {}, embedded)
    chosen: dict[str, Any] = {}
    current = base
    out: list[Recommendation] = []
    while True:
        best: tuple[int, str, Any, str] | None = None
        for key, value, why in ORT_CANDIDATES:
            if key in chosen:
                continue
            trial = {**chosen, key: value}
            peak = _steady(model, backend, shapes, dims, trial, embedded)
            if current - peak >= MIN_GAIN and (best is None or peak < best[0]):
                best = (peak, key, value, why)
        if best is None:
            break
        peak, key, value, why = best
        out.append(Recommendation(backend, key, value, current - peak, peak, base, why))
        chosen[key] = value
        current = peak
    return out


def session_options(recs: Sequence[Recommendation]) -> dict[str, Any]:
    """The recommended settings as a ``session_options`` mapping (verify/profile/estimate)."""
    return {r.key: r.value for r in recs}


def check_commands(
    recs: Sequence[Recommendation], original: str, output: str, bindings: Sequence[str] = ()
) -> list[str]:
    """The commands that show the recommended settings' effect, measured and predicted.

    Why: a recommendation is a prediction; ``verify`` and ``estimate`` take the same settings
    (``--session-option``), so the user can check it before deploying (multibranch ``all``,
    ``enable_mem_pattern=False``: ORT CPU run 3 +127 MiB measured against +220 with defaults)."""
    if not recs:
        return []
    opts = " ".join(f"--session-option {r.key}={r.value}" for r in recs)
    extra = "".join(f" {shlex.quote(b)}" for b in bindings)
    q = shlex.quote
    return [
        f"  measure it (both models under these settings; run it without them for the defaults):"
        f" memshrink verify {q(original)} {q(output)} --backends cpu {opts}{extra}",
        f"  predict it: memshrink estimate {q(output)} {opts}{extra}",
    ]


def format_recommendations(recs: Sequence[Recommendation], check: Sequence[str] = ()) -> str:
    """Console lines for ``optimize``: each setting, its predicted effect and why, then the
    ``check`` lines (``check_commands``)."""
    if not recs:
        return "recommended session options: none (the runtime's defaults are predicted best)"
    base = recs[0].baseline_peak
    lines = [
        f"recommended session options ({recs[0].backend}; predicted steady-state run peak "
        f"{format_bytes(base)} with defaults):"
    ]
    for r in recs:
        lines.append(
            f"  {r.key}={r.value}: -{format_bytes(r.saving)} -> {format_bytes(r.predicted_peak)}"
            f"  ({r.why})"
        )
    return "\n".join([*lines, *check])
