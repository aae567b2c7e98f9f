"""Choose how many channel slices the ``chunk`` pass cuts inverted bottlenecks into.

Why a separate step: channel splitting composes with batch/spatial chunking (a batch chunk of
BERT still holds a 4×-wide FFN tensor), so it runs on whatever the row modes left, and is kept
only where the estimator predicts the ORT steady state drops. One slice count for the model
(``COUNTS``), applied to the blocks whose hidden tensor is at least half the largest one,
then the best count applied to every block, each in both file orders of the slices
(``channels.ORDERS``); the choice follows the row modes' rule: the
fewest slices within 3 % of the lowest prediction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx_ir as ir

from memshrink.transforms.chunking.channels import (
    ORDERS,
    SERIAL,
    Shape,
    find_blocks,
    split_channels,
)
from memshrink.transforms.chunking.choice import Chooser, rank
from memshrink.transforms.saved_layout import clone_with_meta

#: Slice counts tried (one per model).
COUNTS = (2, 4, 6, 8)
#: A file order other than SERIAL must be predicted lower by more than this fraction.
ORDER_GAIN = 0.03
#: The largest blocks: a hidden tensor of at least the largest one's / BIG.
BIG = 2


def choose_channels(
    model: ir.Model,
    predict: Callable[[ir.Model], tuple[int, int]],
    shapes: dict[str, Shape | None],
    base: int,
    *,
    base_peak: int = 0,
    budget: int = 0,
    min_gain: float = 0.05,
    min_saving: int = 0,
    max_chunks: int = 16,
    progress: Callable[[str], None] | None = None,
    chooser: Chooser | None = None,
) -> dict[str, Any]:
    """Try the channel splits on clones, apply the chosen one to ``model`` (in place) and
    return its stats (``chunks`` set only when applied, else ``reason``). ``predict`` gives
    (steady-state activations, whole-process peak); a trial that raises the peak over
    ``base_peak`` is refused. ``chooser`` (``chunking.choice``) walks the ranking for the
    guarded and preferred backends; its ``make_trial`` is set here. ``min_saving`` (bytes)
    refuses a split that saves less, as the row modes do: HF MobileViT b2 saved 0.25 MiB
    predicted with channels x2 and its 75 added nodes cost the OpenVINO EP +16 MiB."""
    blocks = find_blocks(model.graph, shapes)
    stats: dict[str, Any] = {"predicted_activations_before": base, "blocks_found": len(blocks)}
    if not blocks:
        stats["reason"] = "no expand -> per-channel ops -> reduce block"
        return stats
    largest = max(b.hidden_bytes for b in blocks)
    candidates: list[dict[str, Any]] = []
    seen: set[tuple] = set()

    def trial(count: int, min_bytes: int, order: str) -> None:
        if progress:
            progress(f"chunk: trying channels x{count} (blocks >= {min_bytes} B, {order})")
        clone = clone_with_meta(model)
        st = split_channels(clone.graph, shapes, count, min_bytes, order=order)
        key = (count, tuple(st.labels), order)
        if not st.blocks or key in seen:
            return
        seen.add(key)
        cand: dict[str, Any] = {"chunks": count, "min_bytes": min_bytes, "blocks": st.blocks}
        if order != SERIAL:
            cand["order"] = order
        try:
            cand["predicted_activations"], peak = predict(clone)
            if base_peak and peak > base_peak:  # slices cost kernels' memory
                cand["refused"] = (
                    f"raises the predicted ORT whole-process peak {base_peak} -> {peak} B"
                )
        except Exception as exc:  # noqa: BLE001 - a candidate that fails is skipped
            cand["refused"] = f"{type(exc).__name__}: {exc}"
        candidates.append(cand)

    # Every count on the largest blocks, then the best count on all blocks: the small ones
    # rarely move the peak and each trial costs an estimate of a graph K times larger.
    # Each in both file orders (``channels.split_block``): which one ORT's DEFAULT order runs
    # slice by slice depends on its fusions, so the estimator decides.
    for count in (c for c in COUNTS if c <= max_chunks):
        for order in ORDERS:
            trial(count, largest // BIG, order)
    scored = [c for c in candidates if "refused" not in c]
    if scored:
        best = min(scored, key=lambda c: c["predicted_activations"])
        trial(best["chunks"], 0, best.get("order", SERIAL))
    stats["candidates"] = candidates
    ok = [c for c in candidates if "refused" not in c]
    if not ok:
        stats["reason"] = "no split was accepted" + (
            f" ({candidates[0]['refused']})" if candidates else ""
        )
        return stats
    # Of one split, only one file order is ranked (the other reads the same weights: same
    # OpenVINO/EP cost, and it would take the guard's few predicted tries): SERIAL unless
    # another is predicted lower by more than ``ORDER_GAIN`` (the estimator's error band,
    # as ``rank``'s 3 %; multibranch: 114.4 vs 113.8 MiB keeps SERIAL, BERT: 216.0 vs 192.0)
    better: dict[tuple[int, int], dict[str, Any]] = {}
    for c in sorted(ok, key=lambda c: c.get("order", SERIAL) != SERIAL):
        k = (c["chunks"], c["min_bytes"])
        if k not in better or c["predicted_activations"] < better[k]["predicted_activations"] * (
            1 - ORDER_GAIN
        ):
            better[k] = c
    ok = [c for c in ok if better[(c["chunks"], c["min_bytes"])] is c]
    fewest = lambda c: (c["chunks"], -c["min_bytes"])  # noqa: E731
    ranking = rank(ok, budget, fewest, fewest)
    pick = ranking[0]
    if pick["predicted_activations"] > base * (1 - min_gain):
        stats["reason"] = (
            f"best candidate (channels x{pick['chunks']}) lowers the predicted activations by "
            f"less than {min_gain:.0%}"
        )
        return stats
    if min_saving and base - pick["predicted_activations"] < min_saving:
        stats["reason"] = (
            f"best candidate (channels x{pick['chunks']}) lowers the predicted activations by "
            f"{base - pick['predicted_activations']} B, under min_saving {min_saving} B"
        )
        return stats
    gain = max(min_saving, min_gain * base)
    ranking = [c for c in ranking if base - c["predicted_activations"] >= gain]
    if chooser is not None:
        chooser.make_trial = lambda c: _split(model, shapes, c)
        chosen = chooser.choose_into(ranking, stats, "every split tried raises the predicted peak")
        if chosen is None:
            return stats
        pick = chosen
    order = pick.get("order", SERIAL)
    st = split_channels(model.graph, shapes, pick["chunks"], pick["min_bytes"], order=order)
    stats.update(
        order=order,
        chunks=pick["chunks"],
        min_bytes=pick["min_bytes"],
        blocks=st.blocks,
        hidden_channels=sorted(set(st.hidden_channels)),
        nodes_added=st.nodes_added,
        predicted_activations_after=pick["predicted_activations"],
        exact="atol 1e-4, rtol 1e-4 (partial sums over channel slices)",
    )
    return stats


def _split(model: ir.Model, shapes: dict[str, Shape | None], c: dict[str, Any]) -> ir.Model:
    clone = clone_with_meta(model)
    split_channels(clone.graph, shapes, c["chunks"], c["min_bytes"], order=c.get("order", SERIAL))
    return clone
