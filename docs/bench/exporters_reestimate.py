"""ORT CPU estimates of the tf2onnx Keras CNNs against exporters_sweep.py's stored verify reports.

    python docs/bench/exporters_reestimate.py --models /tmp/exporters9/models --run /tmp/exporters9/run3

No re-measuring: each model's original and bound ``all`` output are estimated with this
checkout's code at the batch the sweep fed (``cases.json``'s dims) and printed beside the
measured stage peaks of ``<run>/<name>.all.verify.json``, as (predicted - measured) / measured.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from memshrink.estimate import estimate  # noqa: E402

MiB = 1 << 20
STAGES = (("session_creation", "session"), ("run_1", "run1"), ("steady_state", "run3"))
NAMES = ("tf-keras-efficientnetb0", "tf-keras-mobilenetv3small")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=Path, required=True, help="exporters_build.py's folder")
    ap.add_argument("--run", type=Path, required=True, help="exporters_sweep.py's output folder")
    a = ap.parse_args()
    cases = json.loads((a.models / "cases.json").read_text())
    for name in NAMES:
        dims = cases[name].get("dims", {})
        rep = json.loads((a.run / f"{name}.all.verify.json").read_text())
        meas = {
            r["model"]: {s["name"]: s["peak_delta"] / MiB for s in r["stages"]}
            for r in rep["runs"]
            if r["backend"] == "cpu"
        }
        paths = {
            "original": a.models / cases[name]["path"],
            "rewritten": a.run / f"{name}.opt-all-bound.onnx",
        }
        for which, path in paths.items():
            pred = estimate(str(path), backend="ort", dims=dims).stage_peaks()
            cells = []
            for st, ms in STAGES:
                p, m = pred[st] / MiB, meas[which][ms]
                cells.append(f"{st} {p:.1f} / {m:.1f} ({(p - m) / m * 100:+.0f}%)")
            print(f"{name:28s} {which:9s} " + " | ".join(cells))


if __name__ == "__main__":
    main()
