"""One model's chunk layouts, predicted and measured on every CPU runtime (issue #6, chunk-ov).

    nice python docs/bench/chunk_runtimes_bench.py [--json OUT.json] [--no-measure] \
        LABEL=PATH [LABEL=PATH ...]

Why: ``chunk`` picks a layout on ORT CPU's prediction, but users are judged on ORT CPU, OpenVINO
and the ORT OpenVINO EP at once. For each file (the original, ``--passes all`` under several
``chunk`` settings) this prints, side by side:

* ORT CPU steady state: RSS growth during run 3 over after session creation (the #6 quantity,
  as ``activation_effect.py``), predicted = steady-state activations + mapped weight pages;
* each runtime's process peak: the highest stage peak over the child's post-import baseline
  (``memshrink.verify.profile``, one fresh child per backend, 3 runs), predicted = the
  estimator's highest stage (``ort``, ``openvino``, ``ort-openvino``).

The ORT OpenVINO EP runs in ``.cache/venv-ovep`` when it exists, else that column is skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from activation_bench import _steady  # noqa: E402

MiB = 1 << 20
BACKENDS = ("cpu", "openvino", "ort-openvino")  # verify's names; ``estimate`` takes them too


def predict(path: Path) -> dict[str, float]:
    """Predicted ORT steady growth and each runtime's highest stage peak, MiB."""
    from memshrink.estimate import estimate

    out: dict[str, float] = {}
    for b in BACKENDS:
        est = estimate(str(path), backend=b)
        out[f"{b} peak"] = max(est.stage_peaks().values()) / MiB
        if b == "cpu":
            st = next(s for s in est.prediction.stages if s.name == "steady_state")
            out["cpu steady"] = (st.activations + st.weights_file) / MiB
    return out


def measure(path: Path, backends: list[str]) -> dict[str, float | None]:
    """Measured ORT steady growth and each runtime's process peak (highest stage), MiB."""
    from memshrink.verify import profile

    ovep = ROOT / ".cache/venv-ovep/bin/python"
    out: dict[str, float | None] = {}
    for b in backends:
        if b == "ort-openvino" and not ovep.exists():
            continue
        py = {"ort-openvino": str(ovep)} if b == "ort-openvino" else None
        run = profile(str(path), backends=(b,), runs=3, python=py).to_dict()["runs"][0]
        stages = run.get("stages", [])
        out[f"{b} peak"] = (
            max(s["peak_delta"] for s in stages) / MiB if stages and run["status"] == "ok" else None
        )
        if b == "cpu":
            s = _steady(run)
            out["cpu steady"] = None if s is None else s / MiB
        print(f"  {path.name} {b}: {out.get(f'{b} peak')}", file=sys.stderr, flush=True)
    return out


def table(rows: list[dict[str, Any]]) -> str:
    cols = ("cpu steady", "cpu peak", "openvino peak", "ort-openvino peak")
    head = "| variant | " + " | ".join(f"{c} pred / meas" for c in cols) + " |"
    lines = [head, "|---" * (len(cols) + 1) + "|"]
    for r in rows:
        cells = []
        for c in cols:
            p, m = r["pred"].get(c), r["meas"].get(c)
            cells.append(f"{'-' if p is None else f'{p:.0f}'} / {'-' if m is None else f'{m:.0f}'}")
        lines.append(f"| {r['label']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+", help="LABEL=PATH")
    ap.add_argument("--json", help="append rows to this JSON file")
    ap.add_argument("--no-measure", action="store_true", help="predictions only")
    ap.add_argument("--backends", default="cpu,openvino,ort-openvino")
    a = ap.parse_args(argv)
    rows = []
    for v in a.variants:
        label, path = v.split("=", 1)
        r = {"label": label, "path": path, "pred": predict(Path(path)), "meas": {}}
        if not a.no_measure:
            r["meas"] = measure(Path(path), a.backends.split(","))
        rows.append(r)
        print(table([r]).splitlines()[-1], flush=True)
        if a.json:
            p = Path(a.json)
            old = json.loads(p.read_text()) if p.exists() else []
            p.write_text(json.dumps(old + [r], indent=1))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
