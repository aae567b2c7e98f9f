"""Predicted vs measured effect of a rewrite on ORT CPU's steady-state run peak, for saved pairs.

``activation_bench.py`` runs the passes and measures every setting; this measures pairs that
already exist (``memshrink optimize --passes all`` outputs), so an estimator change can be
checked against the same files without re-running the passes:

    python docs/bench/activation_effect.py ORIGINAL.onnx REWRITTEN.onnx [ORIGINAL2 REWRITTEN2 ...]

Measured: RSS growth during run 3 over the state after session creation, ORT CPU defaults,
through ``memshrink.verify.profile`` (one process per model; the caller holds each run's
outputs, and integer inputs are uniform in the sidecar's range). Predicted: the estimator's
steady-state activations plus the mapped weight pages the runs touch, the same quantity.

A second table splits out the anonymous part (``RssAnon`` growth: the activations and the
runtime's own buffers) from the file-mapped pages the runs fault in (weights read in place,
e.g. Gather rows of an external-data embedding table): an embedded original holds those
weights on the heap since session creation, so only the anonymous growth compares
activations with activations. Both are printed; neither is dropped.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from activation_bench import _steady  # noqa: E402

MiB = 1 << 20


def _measure(path: Path) -> tuple[int, int] | None:
    """(RSS growth, RssAnon growth) of run 3 over after session creation, ORT CPU defaults."""
    from memshrink.verify import profile

    run = profile(str(path), backends=("cpu",), runs=3).to_dict()["runs"][0]
    total = _steady(run)
    st = {s["name"]: s for s in run.get("stages", [])}
    if total is None or "run3" not in st:
        return None
    return total, int(st["run3"]["anon_peak"]) - int(st["session"]["anon_after"])


def _predict(path: Path) -> tuple[int, int]:
    """(growth, anon growth) predicted: activations + mapped weight pages, and activations."""
    from memshrink.estimate import estimate

    est = estimate(str(path), backend="ort")
    st = next(s for s in est.prediction.stages if s.name == "steady_state")
    return int(st.activations + st.weights_file), int(st.activations)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or len(argv) % 2:
        print(__doc__, file=sys.stderr)
        return 2
    rows = []
    for orig, new in zip(argv[::2], argv[1::2], strict=True):
        po, pn = _predict(Path(orig)), _predict(Path(new))
        mo, mn = _measure(Path(orig)), _measure(Path(new))
        rows.append((Path(orig).stem, po, pn, mo, mn))
    for k, title in ((0, "RSS growth"), (1, "anonymous growth (RssAnon)")):
        print(f"\n{title}, MiB\n")
        print(
            "| model | original pred / meas | rewritten pred / meas | effect pred / meas | ratio |"
        )
        print("|---|---|---|---|---|")
        for name, po, pn, mo, mn in rows:
            if not mo or not mn:
                print(f"| {name} | measurement failed | | | |")
                continue
            ep, em = pn[k] / po[k], mn[k] / mo[k]
            print(
                f"| {name} | {po[k] / MiB:.1f} / {mo[k] / MiB:.1f} | {pn[k] / MiB:.1f} / "
                f"{mn[k] / MiB:.1f} | {ep:.2f} / {em:.2f} | {ep / em:.2f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
