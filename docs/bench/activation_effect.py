"""Predicted vs measured effect of a rewrite on ORT CPU's steady-state run peak, for saved pairs.

``activation_bench.py`` runs the passes and measures every setting; this measures pairs that
already exist (``memshrink optimize --passes all`` outputs), so an estimator change can be
checked against the same files without re-running the passes:

    python docs/bench/activation_effect.py ORIGINAL.onnx REWRITTEN.onnx [ORIGINAL2 REWRITTEN2 ...]

Measured: RSS growth during run 3 over the state after session creation, ORT CPU defaults,
through ``memshrink.verify.profile`` (one process per model; the caller holds each run's
outputs, and integer inputs are uniform in the sidecar's range). Predicted: the estimator's
steady-state activations plus the mapped weight pages the runs touch, the same quantity.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from activation_bench import _measure, _predict  # noqa: E402

MiB = 1 << 20


def main(argv: list[str]) -> int:
    if len(argv) < 2 or len(argv) % 2:
        print(__doc__, file=sys.stderr)
        return 2
    print(
        "| model | original pred / meas (MiB) | rewritten pred / meas | effect pred / meas | ratio |"
    )
    print("|---|---|---|---|---|")
    for orig, new in zip(argv[::2], argv[1::2], strict=True):
        po, pn = _predict(Path(orig), None), _predict(Path(new), None)
        mo, mn = _measure(Path(orig), "cpu", None), _measure(Path(new), "cpu", None)
        if not mo or not mn:
            print(f"| {Path(orig).stem} | measurement failed | | | |")
            continue
        ep, em = pn / po, mn / mo
        print(
            f"| {Path(orig).stem} | {po / MiB:.1f} / {mo / MiB:.1f} | {pn / MiB:.1f} / "
            f"{mn / MiB:.1f} | {ep:.2f} / {em:.2f} | {ep / em:.2f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
