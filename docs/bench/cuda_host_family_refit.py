"""Host prediction of the CUDA EP before/after a model change, against every stored measurement.

    python docs/bench/cuda_host_family_refit.py --before-src /path/to/old/checkout/src \\
        --all-dir DIR [--h200 docs/bench/cuda_host_family_models.json]

Rows: the suite (``estimate_cuda_results.json``), the ``--passes all`` rows
(``passes_cuda_*rows.json``, ``passes_cuda_results.json``: originals from ``.cache/models``,
rewritten files from ``--all-dir/NAME.all.onnx``, made with ``memshrink optimize NAME.onnx
DIR/NAME.all.onnx --passes all``) and the H200 profiles of ``cuda_host_family_models.json``.
A rewritten file whose old-model prediction differs from the one stored with its row by more
than 2 MiB is not the file that was measured (the pipeline changed since) and is skipped.
Printed: measured host MiB per stage, the ``--before-src`` model's and this checkout's
prediction and errors, and how many stages each predicts within 10 %.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

MiB = 1 << 20
KEY = {"session": "session_creation", "run1": "run_1", "run3": "steady_state"}
SUITE = {
    "bert-base-b4s512-ext": ("bert-base-ext", {"batch": 4, "sequence": 512}),
}


def _old_module(src: str) -> Any:
    spec = importlib.util.spec_from_file_location(
        "cuda_before", f"{src}/memshrink/estimate/cuda.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["cuda_before"] = mod
    spec.loader.exec_module(mod)
    return mod


def rows(all_dir: str, h200: str) -> list[tuple[Any, ...]]:
    """(source, label, path, dims, stage, measured MiB, stored old prediction or None)."""
    bench, models = ROOT / "docs" / "bench", ROOT / ".cache" / "models"
    out: list[tuple[Any, ...]] = []
    res = json.loads((bench / "estimate_cuda_results.json").read_text())
    for name, r in res["models"].items():
        prof = r.get("profile") or {}
        if prof.get("status") != "ok":
            continue
        file, dims = SUITE.get(name, (name, {}))
        path = models / f"{file}.onnx"
        if not path.exists():
            path = Path("/tmp/memshrink-cuda-synth") / f"{name}.onnx"
        for st in KEY:
            s = prof["stages"].get(st)
            if s:
                meas = (s["host_peak"] - prof["host_baseline"]) / MiB
                out.append(("suite", name, path, dims, st, meas, None))
    files = sorted(glob.glob(str(bench / "passes_cuda_*rows.json")))
    for f in [*files, str(bench / "passes_cuda_results.json")]:
        tag = Path(f).stem.replace("passes_cuda_", "passes:")
        for r in json.loads(Path(f).read_text()):
            m = r["model"]
            for lab in ("original", "rewritten"):
                path = (
                    models / f"{m}.onnx" if lab == "original" else Path(all_dir) / f"{m}.all.onnx"
                )
                stored = (r.get(f"pred_{lab}") or {}).get("host_run_1")
                label = m + (" all" if lab == "rewritten" else "")
                for st, v in (r.get(f"{lab}_host") or {}).items():
                    if st in KEY:
                        out.append((tag, label, path, {}, st, v / MiB, stored))
    for file, prof in json.loads(Path(h200).read_text())["host"].items():
        host = prof["host"]
        path = Path(all_dir) / file if ".all." in file else models / file
        for st in KEY:
            out.append(("h200", file.replace(".onnx", ""), path, {}, st, host[st], None))
    return out


def main() -> int:
    from memshrink.estimate import cuda
    from memshrink.estimate.graph import build_view

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--before-src", required=True)
    ap.add_argument("--all-dir", required=True)
    ap.add_argument("--h200", default=str(Path(__file__).with_name("cuda_host_family_models.json")))
    args = ap.parse_args()
    old = _old_module(args.before_src)
    views: dict[Any, Any] = {}
    ok_old = ok_new = total = 0
    for src, label, path, dims, st, meas, stored in rows(args.all_dir, args.h200):
        key = (str(path), tuple(sorted(dims.items())))
        if key not in views:
            views[key] = build_view(str(path), dims=dims or None) if Path(path).exists() else None
        v = views[key]
        if v is None:
            print(f"{src:24} {label:24} {st:7} (file missing: {path})")
            continue
        if stored is not None and abs(old.host_stages(v)["run_1"] - stored) > 2 * MiB:
            print(f"{src:24} {label:24} {st:7} (not the measured file: skipped)")
            continue
        o, n = old.host_stages(v)[KEY[st]] / MiB, cuda.host_stages(v)[KEY[st]] / MiB
        eo, en = (o - meas) / meas * 100, (n - meas) / meas * 100
        total += 1
        ok_old += abs(eo) <= 10
        ok_new += abs(en) <= 10
        flag = "  <<" if abs(en) > 10 else ""
        print(
            f"{src:24} {label:24} {st:7} measured {meas:7.1f}  before {o:7.1f} ({eo:+6.1f}%)"
            f"  after {n:7.1f} ({en:+6.1f}%){flag}"
        )
    print(f"within 10 %: before {ok_old} / {total}, after {ok_new} / {total}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
