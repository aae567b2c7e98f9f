"""The real-models matrix on models from non-torch exporters (tf2onnx, skl2onnx, onnxmltools).

    /tmp/exporters9/venv/bin/python docs/bench/exporters_build.py /tmp/exporters9/models
    python docs/bench/exporters_sweep.py --models /tmp/exporters9/models --json rows.json

The models are built by ``exporters_build.py`` in a venv of their own (TensorFlow, tf2onnx,
skl2onnx, onnxmltools, LightGBM), which writes ``cases.json`` with each model's bindings. This
script runs in memshrink's Python and reuses ``real_models_sweep.py``'s cells and verdicts for
each model (optimize ``all`` / ``safe``, estimate unbound / bound, verify cpu,openvino, the EP,
estimated vs measured), and adds three columns:

* ``opt-stream``: ``optimize IN OUT --passes stream`` (a folder of parts);
* ``verify-stream``: ``verify IN OUT-folder --backends cpu,openvino`` with the bindings;
* ``est-backends``: ``estimate IN --backend B`` with the bindings for B in ort, openvino,
  ort-openvino, cuda (ok when every backend answers; otherwise the first that did not).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import real_models_build as rb  # noqa: E402
import real_models_sweep as rs  # noqa: E402

EXTRA = ["opt-stream", "verify-stream", "est-backends"]
EST_BACKENDS = ("ort", "openvino", "ort-openvino", "cuda")


def load_cases(folder: Path, only: list[str] | None = None) -> list[rb.Case]:
    """``cases.json`` (written by ``exporters_build.py``) as the sweep's cases."""
    raw: dict[str, dict[str, Any]] = json.loads((folder / "cases.json").read_text())
    return [
        rb.Case(
            name,
            folder / c["path"],
            dims={k: int(v) for k, v in c.get("dims", {}).items()},
            shapes={k: tuple(v) for k, v in c.get("shapes", {}).items()},
            int_ranges={k: (int(v[0]), int(v[1])) for k, v in c.get("int_ranges", {}).items()},
            note=c.get("note", ""),
        )
        for name, c in raw.items()
        if not only or name in only
    ]


def extra_cells(case: rb.Case, work: Path, row: dict[str, Any], verify: bool) -> None:
    out = work / f"{case.name}.opt-stream"
    rc, text = rs._cli(["optimize", str(case.path), str(out), "--passes", "stream", "-q"])
    row["cells"]["opt-stream"] = rs._verdict(rc, text)
    row["notes"]["opt-stream"] = rs._last_line(text) if rc else ""
    if verify:
        if rc == 0:
            cell, note = rs._verify(case, out, work, "stream")
        else:
            cell, note = "-", "no output"
        row["cells"]["verify-stream"], row["notes"]["verify-stream"] = cell, note
    bad = []
    for backend in EST_BACKENDS:
        rc, text = rs._cli(["estimate", str(case.path), "--backend", backend, *rs._bind_args(case)])
        if rc:
            bad.append((rs._verdict(rc, text), f"{backend}: {rs._last_line(text)}"))
    crash = [b for b in bad if b[0] == "CRASH"]
    first = (crash or bad or [("ok", "")])[0]
    row["cells"]["est-backends"], row["notes"]["est-backends"] = first


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, required=True, help="exporters_build.py's output")
    ap.add_argument("--work", type=Path, help="outputs and reports (default: MODELS/../out)")
    ap.add_argument("--only", action="append")
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--ovep-python", type=Path, default=rs.OVEP_PYTHON)
    args = ap.parse_args()
    work = args.work or args.models.parent / "out"
    work.mkdir(parents=True, exist_ok=True)
    rs.COLUMNS = rs.COLUMNS[:-2] + EXTRA[:2] + rs.COLUMNS[-2:-1] + EXTRA[2:] + rs.COLUMNS[-1:]
    rows = []
    for case in load_cases(args.models, args.only):
        t0 = time.perf_counter()
        row = rs.run_case(case, work, not args.no_verify, args.ovep_python)
        extra_cells(case, work, row, not args.no_verify)
        rows.append(row)
        print(f"{case.name}: {row['cells']} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
        if args.json:
            Path(args.json).write_text(json.dumps({"rows": rows}, indent=1))
    print(rs.format_matrix(rows, {}))
    if any(r.get("est_vs_meas") for r in rows):
        print("\nEstimated vs measured stage peaks (original and bound `all` output):\n")
        print(rs.estimate_summary(rows))
    bad = [r for r in rows if any(v in ("CRASH", "WRONG", "BROKE") for v in r["cells"].values())]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
