"""Re-predict session 14's CUDA measurements (``cuda_real14.json``) with the estimator on
``PYTHONPATH`` and compare with another run's predictions.

    python docs/bench/cuda_real15.py predict --files FILES.json --out pred.json
    python docs/bench/cuda_real15.py compare --before main.json --after branch.json \\
        [--device device15.json] --out docs/bench/cuda_real15.json

``FILES.json`` maps ``"case|original"`` / ``"case|rewritten"`` to the model file that was
measured (session 14 kept them on its GPU run's scratch: ``models.tar.gz.N``), plus
``"_cases"``: the case list of ``cuda_real14.py`` (dims, integer ranges). Within = |pred - meas|
<= max(10 %, 2 MiB) against the last measurement of each stage.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))

MiB = 1 << 20
STAGES = ("session_creation", "run_1", "steady_state")


def predict(files: dict[str, Any]) -> dict[str, Any]:
    from memshrink.estimate import estimate

    cases = {c["name"]: c for c in files["_cases"]}
    out: dict[str, Any] = {}
    for key, path in files.items():
        if key.startswith("_"):
            continue
        c = cases[key.split("|")[0]]
        opts = {}
        if "input_ids" in c.get("int_ranges", {}):
            lo, hi = c["int_ranges"]["input_ids"]
            opts["memshrink.int_range"] = f"{lo},{hi}"
        det = estimate(path, backend="cuda", dims=c["dims"], session_options=opts).prediction
        for st in STAGES:
            out[f"{key}|{st}"] = {
                "gpu": det.details["device"][st] / MiB,
                "host": det.details["host"][st] / MiB,
                "range": [x / MiB for x in det.details["device_range"].get(st, [])],
            }
    return out


def _within(p: float, m: float) -> bool:
    return abs(p - m) <= max(0.10 * abs(m), 2.0)


def compare(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    d = json.loads((HERE / "cuda_real14.json").read_text())
    last = {(r["case"], r["file"], r["stage"]): r for r in d["final_branch_run"]["rows"]}
    cnt = dict(gpu_main=0, gpu_branch=0, host_main=0, host_branch=0, n=0)
    rows = []
    for r in d["rows"]:
        k = (r["case"], r["file"], r["stage"])
        meas, host = list(r["gpu_meas"]), r["host_meas"]
        if k[:2] == ("ort-optimizer-gpt2-fp16", "rewritten"):  # main's own `all`: device run 4
            meas, host = [last[k]["gpu_meas"]], last[k]["host_meas"]
        a, b = before["|".join(k)], after["|".join(k)]
        cnt["n"] += 1
        cnt["gpu_main"] += _within(a["gpu"], meas[-1])
        cnt["gpu_branch"] += _within(b["gpu"], meas[-1])
        cnt["host_main"] += _within(a["host"], host)
        cnt["host_branch"] += _within(b["host"], host)
        rows.append(
            dict(case=k[0], file=k[1], stage=k[2], gpu_meas=meas, gpu_main=round(a["gpu"], 1),
                 gpu_branch=round(b["gpu"], 1), gpu_range_branch=[round(x, 1) for x in b["range"]],
                 host_meas=round(host, 1), host_main=round(a["host"], 1),
                 host_branch=round(b["host"], 1))
        )  # fmt: skip
    return {"counts_within_10pct_or_2MiB": cnt, "rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("predict")
    p.add_argument("--files", required=True)
    p.add_argument("--out", required=True)
    c = sub.add_parser("compare")
    c.add_argument("--before", required=True)
    c.add_argument("--after", required=True)
    c.add_argument("--device")
    c.add_argument("--what", default="")
    c.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd == "predict":
        res = predict(json.loads(Path(a.files).read_text()))
    else:
        res = {"what": a.what}
        res.update(
            compare(json.loads(Path(a.before).read_text()), json.loads(Path(a.after).read_text()))
        )
        if a.device:
            res["device15"] = json.loads(Path(a.device).read_text())
        print(res["counts_within_10pct_or_2MiB"])
    Path(a.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
