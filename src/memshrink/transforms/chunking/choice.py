"""Which chunk layout to keep, across runtimes: ORT CPU's gain, guarded and preferred backends.

Why: candidates are ranked on ORT CPU's predicted steady state, but the same file is run on
OpenVINO and the ORT OpenVINO EP too, where every copied Conv/FC node costs a compiled primitive
(measured, ResNet-50 b16 batch x2: ORT CPU steady 216 -> 116 MiB, OpenVINO process peak 349 ->
371). So the choice walks the ORT ranking and keeps the first candidate that

* raises no *guarded* backend's predicted steady state (``guard_backends``, default CUDA's
  GPU, plus the pipeline's ``--backend``): a hard rule, no candidate -> no rewrite. When CUDA
  is the one runtime deployed on (``optimize --backend cuda``), its host counts too: the layout
  must not raise the predicted GPU + host total at steady state (``total``). Why: every copied
  Conv keeps its own cuDNN state on the host (0.87 MiB a node), so ResNet-50 b16's batch x16
  measured GPU 522 -> 260 MiB for host 715 -> 1376 (docs/compare.md, "CUDA EP"). Without
  ``--backend`` that total may rise by the preferred backends' cap (5 % or 2 MiB,
  ``total_capped``), not the host alone: U-Net's spatial x4 measured GPU 1044 -> 526 MiB for
  host 637 -> 671 (+5.3 %), a trade a host cap would refuse (docs/chunk.md, "CUDA's host");
* and, preferably, raises no *preferred* backend's predicted process peak by more than 5 %
  and 8 MiB (``prefer_backends``, default OpenVINO and its EP; the threshold ``optimize``'s
  other-runtime note uses). When none of the tried candidates keeps them, the best one on ORT
  CPU whose worst predicted rise over the preferred backends stays within ``cap`` (default
  5 % or 2 MiB, ``chunk``'s ``prefer_cap`` / ``prefer_cap_bytes``; a kept preferred layout is
  held to it too) and that passes the guard is kept; none -> no rewrite, and the reason in the
  report. Why a cap: "ORT CPU wins" let the batch x4 split of BERT b4x512
  raise the ORT OpenVINO EP's process peak +53 % (3632 -> 5546 MiB measured), and ResNet-50
  b16 x16 OpenVINO +33 %; a bounded loss is a trade, an unbounded one a regression. Why so
  tight (session 10): users of the default run every runtime, and at 25 % / 8 MiB it still
  measured OpenVINO +15 to +19 % on ResNet-50 b16 and EfficientFormer-L1.

Predictions are lazy and cached per candidate: most candidates never need another backend's
estimate, and a cheap bound (OpenVINO's per-primitive memory times the Conv/FC nodes a layout
adds, against the activations it could at best remove) skips those that must raise OpenVINO.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx_ir as ir

from memshrink.manager import PassContext
from memshrink.transforms.predicted import guard_figures, process_figures

MiB = 1 << 20
#: A preferred backend's peak "rises" when it grows by more than both of these.
RISE, RISE_BYTES = 0.05, 8 * MiB
#: The hard cap's defaults (``chunk``'s ``prefer_cap`` / ``prefer_cap_bytes``): a layout may
#: raise a preferred backend's predicted saved peak by at most this fraction (divided by
#: ``CAP_MARGIN``) or these bytes, whichever is larger. 5 % / 2 MiB since session 10: with
#: 25 % / 8 MiB the default `all` measured OpenVINO +15 % (ResNet-50 b16), +19 %
#: (EfficientFormer-L1) and +14 % (multibranch); at 5 % / 2 MiB +1 %, +4 % and +6 % (the last
#: from the other passes, not chunk), for less ORT CPU gain (docs/chunk.md, "The default cap").
PREFER_CAP, CAP_BYTES = 0.05, 2 * MiB
#: Runtimes whose predicted peak the per-primitive bound below holds for: OpenVINO's highest
#: stage is its steady state, which carries every compiled primitive (the EP's may be a session
#: stage without them; it is predicted only after OpenVINO passed).
PER_KERNEL = frozenset({"openvino"})
HEADS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})
#: How far a backend's measured rise (peak after / peak before) has been above the predicted one,
#: per backend: the cap is judged on the prediction times (1 + this), so a layout kept at the
#: cap's edge stays within it when measured. OpenVINO: DeiT's batch x2 split, predicted
#: 71.2 -> 86.3 MiB (x1.212), measured 68 -> 87 (x1.279), 5.5 % over; the other rises of
#: session 8's sweep were 0.84-1.023 of the prediction (docs/chunk.md, "The cap's margin").
#: The EP: 0.97-0.98 on its two rises, so none.
CAP_MARGIN = {"openvino": 0.06}


def cap_limit(base: dict[str, int], backend: str, cap: float = PREFER_CAP,
              cap_bytes: int = CAP_BYTES) -> tuple[int, int]:  # fmt: skip
    """``(old, limit)``: ``backend``'s predicted peak before a rewrite (``process_figures``;
    ``saved_peak`` where the save releases a folded file) and the highest peak the cap lets a
    rewrite reach: ``cap`` over it divided by the backend's ``CAP_MARGIN``, or ``cap_bytes``,
    whichever is larger. Shared by every pass that spares the preferred backends (``chunk``,
    ``simplify``), so one policy bounds them all."""
    old = base.get("saved_peak", base["peak"])
    margin = 1 + CAP_MARGIN.get(backend, 0.0)  # a safe bound: rises have measured higher
    return old, int(max(old * (1 + cap) / margin, old + cap_bytes))


def over_cap(model: ir.Model, trial: ir.Model, context: PassContext, backends: Sequence[str],
             cap: float = PREFER_CAP, cap_bytes: int = CAP_BYTES,
             report: dict[str, Any] | None = None) -> str | None:  # fmt: skip
    """Why ``trial`` (one rewrite of ``model``) raises a backend of ``backends`` over the cap
    (``cap_limit``), or None when all stay within; each backend's predicted peaks before and
    after go into ``report``. For a pass with one candidate (``simplify``); ``Chooser`` walks
    many lazily. A backend that cannot be predicted is skipped (reported), as ``Chooser``
    does: no prediction is no evidence of a rise."""
    from memshrink.estimate.api import views_shared

    with views_shared():  # each model's view built once for all the backends
        return _over_cap(model, trial, context, backends, cap, cap_bytes, report)


def _over_cap(model: ir.Model, trial: ir.Model, context: PassContext, backends: Sequence[str],
              cap: float, cap_bytes: int, report: dict[str, Any] | None) -> str | None:  # fmt: skip
    for b in backends:
        try:
            base, fig = process_figures(model, context, b), process_figures(trial, context, b)
        except Exception as exc:  # noqa: BLE001 - no prediction on this backend: no cap
            if report is not None:
                report[b] = {"skipped": f"{type(exc).__name__}: {str(exc)[:200]}"}
            continue
        old, limit = cap_limit(base, b, cap, cap_bytes)
        new = fig.get("saved_peak", fig["peak"])
        if report is not None:
            report[b] = {"before": old, "after": new, "limit": limit}
        if new > limit:
            return (
                f"{b}: predicted peak {old} -> {new} B (+{new / old - 1:.1%}) > the {cap:.0%} / "
                f"{cap_bytes >> 20} MiB cap with the prediction's margin"
            )
    return None


def rank(ok: Sequence[dict[str, Any]], budget: int, keys: Callable[[dict[str, Any]], tuple],
         fit_keys: Callable[[dict[str, Any]], tuple]) -> list[dict[str, Any]]:  # fmt: skip
    """``ok`` in order of preference on ORT CPU: the pick first (under ``budget``: the first
    by ``fit_keys`` that fits; else the first by ``keys`` within 3 % of the lowest
    prediction), then the rest by prediction."""
    if not ok:
        return []
    best = min(c["predicted_activations"] for c in ok)
    fit = [c for c in ok if c["predicted_activations"] <= budget]
    if budget and fit:
        pick = min(fit, key=fit_keys)
    else:
        # Why not the lowest: candidates within a few % are within the estimator's error
        # (U-Net: 338 MiB predicted measured 380-398, 347 predicted measured 353-355).
        pick = min((c for c in ok if c["predicted_activations"] <= best * 1.03), key=keys)
    rest = sorted((c for c in ok if c is not pick),
                  key=lambda c: (c["predicted_activations"], c["chunks"], c.get("extra_flops", 0.0)))  # fmt: skip
    return [pick, *rest]


def kernels(model: ir.Model) -> int:
    """Conv/FC nodes with a constant weight: one compiled primitive each on OpenVINO."""
    g = model.graph
    return sum(
        1
        for n in g
        if n.op_type in HEADS
        and len(n.inputs) > 1
        and n.inputs[1] is not None
        and (n.inputs[1].name in g.initializers or n.inputs[1].const_value is not None)
    )


@dataclass
class Chooser:
    """Walks a ranking with cached, lazy predictions per backend; see the module docstring."""

    model: ir.Model
    context: PassContext
    guard: list[str]
    prefer: list[str]
    make_trial: Callable[[dict[str, Any]], ir.Model]
    tries: int = 3  # candidates predicted on the preferred backends, at most
    walk: int = 32  # candidates looked at for the preference (the bound is cheap)
    guard_tries: int = 4  # fallback: the first candidates predicted on the guard backends
    per_kernel: int = 0  # bytes of OpenVINO memory per added Conv/FC node (0: no bound)
    report: dict[str, Any] = field(default_factory=dict)
    # a guarded backend's figures ({"steady_state": bytes, ...}); the channel split guards the
    # whole-process peak instead (``chunk._peak``)
    figures: Callable[[ir.Model, PassContext, str], dict[str, int]] = guard_figures
    # preferred backends' figures of ``model`` already predicted (the row modes' layout kept,
    # before the channel split): not predicted again
    known: dict[str, dict[str, int]] = field(default_factory=dict)
    # hard cap on a preferred backend's predicted peak rise (fraction, with ``cap_bytes`` as the
    # absolute floor) for the fallback; <= 0: no cap (ORT CPU's pick is kept, as before)
    cap: float = PREFER_CAP
    # the cap's absolute floor: a rise of at most this many bytes is within the cap whatever
    # its fraction
    cap_bytes: int = CAP_BYTES
    # preferred backends' figures of the model the *pass* was given, when this choice is a
    # later step of it (the channel split after a batch split): the cap is judged against
    # these, so the steps together stay within it (DeiT: batch +20.8 % then channels, each
    # inside 25 %, together over it). Empty: against this step's own model (``before``)
    origin: dict[str, dict[str, int]] = field(default_factory=dict)
    # a guarded backend whose figures carry "host" (CUDA) must not raise GPU + host together
    # (``optimize --backend cuda``) ...
    total: bool = False
    # ... or, without ``--backend``, not by more than ``cap`` / ``cap_bytes`` (as OpenVINO's
    # peak): the default spares CUDA's host as it spares OpenVINO, but a GPU drop pays for it
    total_capped: bool = False

    def choose_into(
        self, ranking: Sequence[dict[str, Any]], stats: dict[str, Any], refused: str
    ) -> dict[str, Any] | None:
        """``choose``, with its report and, when nothing is kept, the reason put into a pass's
        ``stats`` (``refused`` names what the guard refused, e.g. "every split tried raises
        the predicted peak")."""
        chosen = self.choose(ranking)
        if self.report:
            stats["guard"] = self.report
        if chosen is None:
            stats["reason"] = self.report.get("refused", f"{refused} on {self.guard}")
        return chosen

    def choose(self, ranking: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
        """The first candidate passing guard and preference, else the first of the first
        ``guard_tries`` passing the guard (None when none does); ``self.report`` says what was
        tried. The guard is predicted only for candidates the preference keeps, and for the
        fallback: most never need it."""
        prefer = [b for b in self.prefer if b not in self.guard]
        if not self.guard and not prefer:
            return ranking[0] if ranking else None
        from memshrink.estimate.api import views_shared

        with views_shared():  # each model's view built once for all the backends judged
            return self._choose(ranking, prefer)

    def _choose(
        self, ranking: Sequence[dict[str, Any]], prefer: list[str]
    ) -> dict[str, Any] | None:
        try:
            before = {b: self.figures(self.model, self.context, b) for b in self.guard}
            before.update(
                {
                    b: self.known.get(b) or process_figures(self.model, self.context, b)
                    for b in prefer
                }
            )
        except Exception as exc:  # noqa: BLE001 - no prediction on a backend: no guard
            self.report = {"skipped": f"{type(exc).__name__}: {exc}"}
            return ranking[0] if ranking else None
        tried: dict[int, dict[str, Any]] = {}
        self.report = {"before": before}
        origin = {b: self.origin[b] for b in prefer if b in self.origin}
        if origin and self.cap > 0:
            self.report["origin"] = origin
        chosen = self._walk(ranking, before, prefer, tried)
        self.report["tried"] = [tried[i] for i in sorted(tried)]
        return chosen

    def _walk(self, ranking: Sequence[dict[str, Any]], before: dict[str, Any],
              prefer: list[str], tried: dict[int, dict[str, Any]]) -> dict[str, Any] | None:  # fmt: skip
        kept: dict[int, ir.Model] = {}  # trials the fallback may need again (the first few)

        def trial_of(i: int) -> ir.Model:
            if i in kept:
                return kept[i]
            trial = self.make_trial(ranking[i])
            if i < self.guard_tries:
                kept[i] = trial
            return trial

        if prefer:
            base_kernels = kernels(self.model)
            estimated = 0
            for i, cand in enumerate(list(ranking)[: self.walk]):
                if estimated >= self.tries:
                    break
                trial = trial_of(i)
                row = tried.setdefault(i, {"candidate": _label(cand)})
                why, cost = self._raises(trial, before, prefer, kernels(trial) - base_kernels, row)
                estimated += cost
                if why is None and self.cap > 0:
                    # within 5 % of this step's model, but maybe over the cap of the pass's
                    # input, or of the saved files (the in-memory 5 % misses a lost folded
                    # file: EfficientFormer spatial x2, +3.9 % in memory, +13.6 % saved)
                    rise = self._worst_rise(trial, before, prefer, row)
                    if rise is not None:
                        why = f"{rise[0]}: {self._over(rise[1])}"
                if why is not None:
                    row["not preferred"] = why
                    continue
                if self._guard_ok(trial, before, row):
                    self._done(cand, before, row, "")
                    return cand
        capped = bool(prefer) and self.cap > 0
        for i, cand in enumerate(list(ranking)[: self.guard_tries]):
            row = tried.setdefault(i, {"candidate": _label(cand)})
            if "refused" in row:
                continue
            if capped:
                rise = self._worst_rise(trial_of(i), before, prefer, row)
                if rise is not None:
                    row["over cap"] = f"{rise[0]}: {self._over(rise[1])}"
                    continue
            if all(b in row for b in self.guard) or self._guard_ok(trial_of(i), before, row):
                note = "no candidate tried keeps " + ", ".join(prefer) if prefer else ""
                if capped and note:
                    note += f"; the best on ORT CPU within the {self.cap:.0%} cap kept"
                self._done(cand, before, row, note)
                return cand
        if capped:
            self.report["refused"] = (
                f"every layout tried raises {', '.join(prefer)}'s predicted peak by more than "
                f"{self.cap:.0%} (prefer_cap, with the prediction's margin) or a guarded backend"
                "; deploying on ONNX Runtime CPU only? --backend ort lets chunk split for it"
            )
        return None

    def _over(self, rise: float) -> str:
        of = " over the pass's input" if self.origin else ""
        return f"predicted peak +{rise:.0%}{of} > {self.cap:.0%} with the prediction's margin"

    def _worst_rise(self, trial: ir.Model, before: dict[str, dict[str, int]],
                    prefer: list[str], row: dict[str, Any]) -> tuple[str, float] | None:  # fmt: skip
        """The first preferred backend whose predicted peak rises over ``cap`` (and ``cap_bytes``)
        of ``origin``'s (else ``before``'s) peak, with its relative rise; None when all stay
        within. A bound already over the cap decides without a prediction; ``row["rise"]``
        records the worst relative rise."""
        worst = 0.0
        for b in prefer:
            # both as their saved files will be predicted (``saved_peak``: the folded weights'
            # file released after compile, which an in-memory estimate does not credit)
            base = self.origin.get(b) or before[b]
            old, limit = cap_limit(base, b, self.cap, self.cap_bytes)
            fig = row.get(b)
            credit = base["peak"] - old  # the bound is on the uncredited peak
            if fig is not None and "bound" in fig and fig["bound"] - credit > limit:
                return b, (fig["bound"] - credit) / old - 1
            if fig is None or "peak" not in fig:
                fig = row[b] = process_figures(trial, self.context, b)
            new = fig.get("saved_peak", fig["peak"])
            worst = max(worst, new / old - 1)
            row["rise"] = round(worst, 4)
            if new > limit:
                return b, new / old - 1
        return None

    def _guard_ok(self, trial: ir.Model, before: dict[str, Any], row: dict[str, Any]) -> bool:
        for b in self.guard:
            row[b] = self.figures(trial, self.context, b)
            if row[b]["steady_state"] > before[b]["steady_state"]:
                row["refused"] = f"raises the predicted {b} steady state"
                return False
            if (self.total or self.total_capped) and "host" in row[b] and "host" in before[b]:
                after = row[b]["steady_state"] + row[b]["host"]
                old = before[b]["steady_state"] + before[b]["host"]
                if self.total and after > old:
                    row["refused"] = f"raises the predicted {b} GPU + host total"
                    return False
                limit = max(old * (1 + self.cap), old + self.cap_bytes)
                if not self.total and self.cap > 0 and after > limit:
                    row["refused"] = (
                        f"raises the predicted {b} GPU + host total +{after / old - 1:.0%} > "
                        f"{self.cap:.0%} (prefer_cap; --backend cuda lets GPU drops pay for host)"
                    )
                    return False
        return True

    def _raises(self, trial: ir.Model, before: dict[str, dict[str, int]], prefer: list[str],
                added: int, row: dict[str, Any]) -> tuple[str | None, int]:  # fmt: skip
        """Why ``trial`` raises a preferred backend's peak (bound or prediction), or None;
        and whether it took a prediction (1) or the bound sufficed (0)."""
        for b in prefer:
            old = before[b]["peak"]
            limit = max(old * (1 + RISE), old + RISE_BYTES)
            if b in PER_KERNEL and self.per_kernel and added > 0:
                # Activations can drop to zero at best; the added primitives stay.
                floor = old - before[b]["activations"] + self.per_kernel * added
                if floor > limit:
                    row[b] = {"bound": floor}
                    return f"{b}: {added} more Conv/FC primitives, peak >= {floor} B", 0
            row[b] = process_figures(trial, self.context, b)
            if row[b]["peak"] > limit:
                return f"{b}: predicted peak {old} -> {row[b]['peak']} B", 1
        return None, 1

    def _done(self, cand: dict[str, Any], before: dict[str, Any], row: dict[str, Any],
              note: str) -> None:  # fmt: skip
        self.report["chosen"] = _label(cand)
        after = {b: row[b] for b in before if b in row and "bound" not in row[b]}
        self.report["after"] = after
        self.report["change"] = {
            b: {k: v - before[b][k] for k, v in after[b].items() if k in before[b]}
            for b in after
            if b in before
        }
        if note:
            self.report["preference"] = note


def _label(c: dict[str, Any]) -> str:
    parts = [f"{c.get('mode', 'channels')} x{c['chunks']}"]
    for k in ("stagger", "distinct", "trim", "cut", "min_bytes", "order"):
        if c.get(k):
            parts.append(f"{k} {c[k]}")
    if c.get("weightless"):
        parts.append("weightless cores" + (" along the heads" if c.get("heads") else ""))
    return " ".join(parts)
