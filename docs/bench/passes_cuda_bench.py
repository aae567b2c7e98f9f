"""`--passes all` on the CUDA EP: measured GPU and host peaks per stage, original vs rewritten.

Run on the GPU machine (onnxruntime-gpu, NVML), one model at a time:

    python docs/bench/passes_cuda_bench.py [--models resnet50-b16 unet ...] [--out rows.json]
    python docs/bench/passes_cuda_bench.py --table rows.json     # render stored rows (anywhere)

Per model: ``python -m models build NAME`` (torch export, seeded random weights), then
``memshrink optimize NAME.onnx out.onnx --passes all`` in its own process, then
``memshrink.verify(original, rewritten, backends=(backend,), runs=3)``: each model in a fresh
child, NVML per-process GPU memory polled every 1 ms per stage minus an empty CUDA session
measured in its own process, host RSS per stage over the child's post-import baseline, and the
outputs compared at atol = rtol = 1e-4 (TF32 off, the verifier's default for CUDA). The
prediction beside it is ``memshrink estimate --backend cuda`` of each file.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from memshrink.estimate.backends import VERIFY_STAGES  # noqa: E402

MiB = 1 << 20
MODELS = ["resnet50-b16", "unet", "multibranch", "bert-base-b4s512"]
PRED = {v: k for k, v in VERIFY_STAGES["cuda"].items()}  # verify's stage -> estimate's
STAGES = tuple(PRED)
ATOL = RTOL = 1e-4


def _gpu_stages(run: dict[str, Any]) -> dict[str, int | None]:
    """GPU per stage over the empty session at the same stage, as verify prints it."""
    from memshrink.verify.gpu_delta import matched_baseline

    gpu = run.get("gpu") or {}
    after_run = int(gpu.get("empty_session_baseline") or 0)
    empty = gpu.get("empty_session_stages")
    out: dict[str, int | None] = {}
    for s in run.get("stages") or []:
        g = s.get("gpu") or {}
        base = matched_baseline(str(s["name"]), empty, after_run)
        out[s["name"]] = None if g.get("peak") is None else int(g["peak"]) - base
    return out


def _host_stages(run: dict[str, Any]) -> dict[str, int]:
    base = int((run.get("baseline") or {}).get("rss") or 0)
    return {s["name"]: int(s["peak"]) - base for s in run.get("stages") or []}


def _predict(path: Path) -> dict[str, int] | None:
    from memshrink.estimate import estimate

    try:
        est = estimate(str(path), backend="cuda")
    except Exception as exc:  # noqa: BLE001 - a comparison column, not the benchmark
        print(f"  estimate failed: {exc}", file=sys.stderr)
        return None
    peaks = est.stage_peaks()  # CUDA stages are GPU memory over an empty session
    host = est.prediction.details["host"]  # host RSS over the child's baseline
    return {**peaks, **{f"host_{k}": int(v) for k, v in host.items()}}


def bench(name: str, work: Path, backend: str = "cuda") -> dict[str, Any]:
    import models
    from memshrink.verify import verify

    src = Path(models.build(name))
    out = work / f"{name}.all.onnx"
    t = time.perf_counter()
    rep_path = work / f"{name}.report.json"
    opt = subprocess.run(
        [sys.executable, "-m", "memshrink", "optimize", str(src), str(out), "--passes", "all"]
        + ["--json", str(rep_path)],
        capture_output=True,
        text=True,
    )
    if opt.returncode != 0:
        raise RuntimeError(f"optimize failed: {opt.stderr.strip()[-500:]}")
    opt_s = time.perf_counter() - t
    rep = verify(str(src), str(out), backends=(backend,), runs=3, atol=ATOL, rtol=RTOL).to_dict()
    runs = {r["model"]: r for r in rep.get("runs") or []}
    row: dict[str, Any] = {"model": name, "ok": rep["ok"], "optimize_s": round(opt_s, 1)}
    chunk = [p for p in json.loads(rep_path.read_text()).get("passes", []) if p["name"] == "chunk"]
    if chunk:  # what chunk chose, and its CUDA guard (predicted GPU steady state, host)
        keep = ("modified", "mode", "chunks", "reason", "guard")
        st = {**chunk[-1].get("stats", {}), "modified": chunk[-1].get("modified")}
        row["chunk"] = {k: st[k] for k in keep if k in st}
    for label in ("original", "rewritten"):
        run = runs.get(label) or {}
        row[f"{label}_gpu"] = _gpu_stages(run)
        row[f"{label}_host"] = _host_stages(run)
        row[f"{label}_status"] = run.get("status")
    row["pred_original"] = _predict(src)
    row["pred_rewritten"] = _predict(out)
    row["max_abs"] = max(
        (o.get("max_abs") or 0.0 for c in rep.get("comparisons") or [] for o in c["outputs"]),
        default=None,
    )
    return row


def _fmt(v: int | None) -> str:
    return "-" if v is None else f"{v / MiB:.0f}"


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| model | stage | GPU orig → all (MiB) | ×orig | predicted orig → all | "
        "host orig → all | host predicted | outputs |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    lines = [head]
    for r in rows:
        for st in STAGES:
            go, ga = r["original_gpu"].get(st), r["rewritten_gpu"].get(st)
            ratio = f"{ga / go:.2f}" if go and ga is not None else "-"
            po = (r.get("pred_original") or {}).get(PRED[st])
            pa = (r.get("pred_rewritten") or {}).get(PRED[st])
            ho, ha = r["original_host"].get(st), r["rewritten_host"].get(st)
            hpo = (r.get("pred_original") or {}).get(f"host_{PRED[st]}")
            hpa = (r.get("pred_rewritten") or {}).get(f"host_{PRED[st]}")
            verdict = (
                f"{'match' if r['ok'] else 'MISMATCH'} (max abs {r['max_abs']:.1e})"
                if st == "session" and r.get("max_abs") is not None
                else ""
            )
            lines.append(
                f"| {r['model']} | {st} | {_fmt(go)} → {_fmt(ga)} | {ratio} | "
                f"{_fmt(po)} → {_fmt(pa)} | {_fmt(ho)} → {_fmt(ha)} | "
                f"{_fmt(hpo)} → {_fmt(hpa)} | {verdict} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument("--out", help="write the rows here (JSON)")
    ap.add_argument("--table", help="render rows stored by --out instead of measuring")
    ap.add_argument("--backend", default="cuda", help="verifier backend (cpu: a dry run here)")
    a = ap.parse_args(argv)
    if a.table:
        print(table(json.loads(Path(a.table).read_text())))
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="passes-cuda-") as tmp:
        for name in a.models:
            print(f"== {name}", file=sys.stderr, flush=True)
            try:
                rows.append(bench(name, Path(tmp), a.backend))
            except Exception as exc:  # noqa: BLE001 - report and go on with the next model
                print(f"  {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
            if a.out:
                Path(a.out).write_text(json.dumps(rows, indent=1))
    print(table(rows))
    return 0 if rows and all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
