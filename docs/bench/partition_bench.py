"""Benchmark: session-creation and whole-run memory of partitioned models, before/after.

For each model (BERT-base and GPT-2 small with embedded weights; the >2 GB GPT-2 large with
external data when built) and backend (ORT CPU, OpenVINO, ORT OpenVINO EP via the venv that
has onnxruntime-openvino, CUDA where available) this measures, one child process per row:

* ``original``: one session on the model file as users have it;
* ``resident``: the partition folder with every part's session created up front;
* ``streamed``: parts created, run and released one after another.

Each child reports per-stage exact RSS peaks (VmHWM reset, ``memshrink.verify.measure``) as
deltas over its own baseline (interpreter + runtime imported + feeds loaded). "whole" is the
highest peak over creation and three runs. Outputs are compared with the original's on the
same backend (atol 1e-5, rtol 0) and the max abs difference is printed.

    python docs/bench/partition_bench.py                       # bert-base, gpt2; all backends
    python docs/bench/partition_bench.py --models bert-base --backends cpu --budget 48MiB
    python docs/bench/partition_bench.py --models gpt2-large-ext --backends cpu
    python docs/bench/partition_bench.py --models path/to/model.onnx   # sidecar model.onnx.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

MiB = 1 << 20
ATOL = 1e-5
OVEP_PYTHON = REPO / ".cache" / "venv-ovep" / "bin" / "python"
#: ORT settings for streamed parts: no prepacked weight copies, no arena kept between calls.
PIPELINE = ["dedup-weights", "fold-weight-transforms", "partition"]
STREAM_ORT_OPTIONS = {"session.disable_prepacking": "1", "enable_cpu_mem_arena": False}


# ------------------------------------------------------------------------------ child


def child(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    from memshrink.runtime import open_session
    from memshrink.verify.measure import Meter

    with np.load(spec["feeds"]) as z:
        feeds = {k: z[k] for k in z.files}
    meter = Meter()
    base = meter.baseline["VmRSS"]
    t0 = time.perf_counter()
    with meter.stage("create"):
        sess = open_session(
            spec["model"],
            spec["backend"],
            spec["mode"],
            session_options=spec.get("session_options") or None,
            lean=spec.get("lean", True),
        )
    create_s = time.perf_counter() - t0
    names = spec["outputs"]
    outs: list = []
    run_s = []
    for r in range(spec["runs"]):
        t = time.perf_counter()
        with meter.stage(f"run{r + 1}"):
            outs = sess.run(names, feeds)
        run_s.append(time.perf_counter() - t)
    np.savez(spec["out"], **{f"o{i}": o for i, o in enumerate(outs)})
    stages = {
        s.name: {
            "peak": s.peak - base,
            "after": s.after - base,
            "anon_peak": s.anon_peak - meter.baseline["RssAnon"],
            "file_peak": s.file_peak - meter.baseline["RssFile"],
            "seconds": s.seconds,
        }
        for s in meter.stages
    }
    result = {
        "baseline": base,
        "stages": stages,
        "create_s": create_s,
        "run_s": run_s,
        "providers": sess.get_providers(),
    }
    Path(spec["result"]).write_text(json.dumps(result))
    return 0


# ------------------------------------------------------------------------------ parent


def make_feeds(model: Path) -> dict[str, np.ndarray]:
    side = json.loads(Path(str(model) + ".json").read_text())
    rng = np.random.default_rng(0)
    feeds = {}
    for spec in side["inputs"]:
        shape, dtype = spec["shape"], spec["dtype"]
        if dtype.startswith("int"):
            lo, hi = spec.get("range") or (0, 2)
            feeds[spec["name"]] = rng.integers(lo, hi, size=shape).astype(dtype)
        else:
            feeds[spec["name"]] = rng.standard_normal(shape).astype(dtype)
    return feeds


def partition(model: Path, out: Path, budget: str) -> dict:
    from memshrink.manager import PassContext, PassManager
    from memshrink.model import load
    from memshrink.writer import save_model

    t0 = time.perf_counter()
    m = load(model)
    m, report = PassManager(
        PIPELINE,
        options={"partition": {"part_budget": budget}},
    ).run(m, PassContext())
    info = save_model(m, out)
    plan = report.passes[-1].stats["plan"]
    return {
        "seconds": time.perf_counter() - t0,
        "parts": info.parts,
        "largest_part": max(plan["part_weight_bytes"]),
        "max_crossing": max((len(c["tensors"]) for c in plan["cuts"]), default=0),
    }


def run_child(python: str, spec: dict, work: Path, tag: str) -> dict:
    spec = dict(spec, result=str(work / f"{tag}.json"), out=str(work / f"{tag}.npz"))
    spec_path = work / f"{tag}.spec.json"
    spec_path.write_text(json.dumps(spec))
    path = os.environ.get("PYTHONPATH")
    env = dict(os.environ, PYTHONPATH=str(REPO / "src") + (os.pathsep + path if path else ""))
    proc = subprocess.run(
        [python, __file__, "--child", str(spec_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    if proc.returncode != 0 or not Path(spec["result"]).is_file():
        return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
    res = json.loads(Path(spec["result"]).read_text())
    with np.load(spec["out"]) as z:
        res["outputs"] = [z[f"o{i}"] for i in range(len(z.files))]
    return res


def backend_python(backend: str) -> str | None:
    if backend == "ort-openvino":
        return str(OVEP_PYTHON) if OVEP_PYTHON.exists() else None
    if backend == "cuda":
        try:
            import onnxruntime as ort

            if "CUDAExecutionProvider" not in ort.get_available_providers():
                return None
        except ImportError:
            return None
    return sys.executable


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child")
    ap.add_argument("--models", default="bert-base,gpt2")
    ap.add_argument("--backends", default="cpu,openvino,ort-openvino,cuda")
    ap.add_argument("--modes", default="original,resident,streamed")
    ap.add_argument("--budget", default="64MiB", help="partition.part_budget")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--plain-ort", action="store_true", help="parts use ORT defaults, not the lean options"
    )
    ap.add_argument("--json", help="write all results here")
    args = ap.parse_args()
    if args.child:
        return child(args.child)
    import models

    rows = []
    work = Path(tempfile.mkdtemp(prefix="memshrink-partbench-"))
    for item in args.models.split(","):
        # a suite name (built on demand) or a path to an .onnx with a sidecar next to it
        src = Path(item) if item.endswith(".onnx") else models.build(item)
        name = src.stem
        feeds = make_feeds(src)
        feeds_path = work / f"{name}.feeds.npz"
        np.savez(feeds_path, **feeds)
        folder = work / f"{name}.parts"
        pinfo = partition(src, folder, args.budget)
        print(
            f"{name}: {pinfo['parts']} parts (budget {args.budget}), largest "
            f"{pinfo['largest_part'] / MiB:.0f} MiB, at most {pinfo['max_crossing']} tensors "
            f"cross a cut; partitioned in {pinfo['seconds']:.1f} s",
            flush=True,
        )
        outputs = json.loads(Path(str(src) + ".json").read_text())["outputs"]
        for backend in args.backends.split(","):
            python = backend_python(backend)
            if python is None:
                print(f"  {backend}: not available here, skipped", flush=True)
                continue
            ref = None
            for mode in args.modes.split(","):
                model = str(src) if mode == "original" else str(folder)
                opts: dict = {}
                spec = {
                    "model": model,
                    "backend": backend,
                    "mode": "streamed" if mode == "original" else mode,
                    "feeds": str(feeds_path),
                    "outputs": outputs,
                    "runs": args.runs,
                    "session_options": opts,
                    "lean": not args.plain_ort,
                }
                res = run_child(python, spec, work, f"{name}-{backend}-{mode}")
                if "error" in res:
                    print(f"  {backend:<13} {mode:<9} FAILED: {res['error']}", flush=True)
                    continue
                st = res["stages"]
                whole = max(s["peak"] for s in st.values())
                diff = None
                if mode == "original":
                    ref = res["outputs"]
                elif ref is not None:
                    diff = max(
                        float(np.max(np.abs(a - b)))
                        for a, b in zip(ref, res["outputs"], strict=True)
                    )
                row = {
                    "model": name,
                    "backend": backend,
                    "mode": mode,
                    "create_peak_mib": st["create"]["peak"] / MiB,
                    "create_retained_mib": st["create"]["after"] / MiB,
                    "run1_peak_mib": st["run1"]["peak"] / MiB,
                    "steady_peak_mib": st[f"run{args.runs}"]["peak"] / MiB,
                    "whole_peak_mib": whole / MiB,
                    "whole_anon_peak_mib": max(s["anon_peak"] for s in st.values()) / MiB,
                    "create_s": res["create_s"],
                    "run_s": res["run_s"][-1],
                    "max_abs_diff": diff,
                    "spike_ratio": max(s["peak"] / max(s["after"], MiB) for s in st.values()),
                    "session_options": opts,
                    "lean": not args.plain_ort,
                }
                rows.append(row)
                ok = (
                    ""
                    if diff is None
                    else f"  max|d| {diff:.1e} {'ok' if diff <= ATOL else 'MISMATCH'}"
                )
                print(
                    f"  {backend:<13} {mode:<9} create {row['create_peak_mib']:7.1f} "
                    f"(keeps {row['create_retained_mib']:6.1f})  run1 {row['run1_peak_mib']:7.1f}  "
                    f"steady {row['steady_peak_mib']:7.1f}  whole {row['whole_peak_mib']:7.1f} MiB"
                    f" (peak/kept {row['spike_ratio']:.2f})"
                    f"  | create {row['create_s']:.2f} s, run {row['run_s']:.3f} s{ok}",
                    flush=True,
                )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
