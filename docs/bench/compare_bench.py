"""memshrink side by side with what users would use instead, on every CPU backend.

    nice python docs/bench/compare_bench.py --models bert-base multibranch \
        [--backends cpu,openvino,ort-openvino] [--json docs/bench/compare_results.json]
    python docs/bench/compare_bench.py --table docs/bench/compare_results.json   # markdown only

Why: users judge memshrink by the measured peak of each stage (session creation, run 1, steady
state) against the tools they would otherwise run (onnxsim, onnxslim, Polygraphy's
``surgeon sanitize --fold-constants``) and against the runtimes' own memory settings. Per model:

* every tool runs once in a child whose wall time and peak RSS (``wait4`` rusage, children
  included) are recorded; ``memshrink optimize --passes all --json`` also gives the recommended
  ORT session options (``memshrink.recommend``);
* every (variant, backend) is measured in a fresh ``memshrink.verify.child`` process
  (``runner.run_child``: exact ``VmHWM`` per stage, deltas over the child's post-import
  baseline), all with the same feeds (``verify.inputs.make_feeds`` from the original's
  sidecar), and each variant's outputs are compared with the original's on the same backend
  (``verify.compare.compare_outputs``, atol 1e-5, rtol 1e-5 unless ``--atol/--rtol``);
* ``memshrink.estimate`` predicts memshrink's output on every backend (with the recommended
  options on ``cpu``), set beside the measured stages.

Findings (``regressions``): memshrink's output measured worse than the original, than the
best of onnxsim/onnxslim/Polygraphy, or than the original with a runtime memory setting (also
with the recommended options, ORT CPU), at some stage by more than 2 % and 2 MiB (stage peak
over baseline);
outputs that do not match; estimates more than 10 % off. Resumable: ``--work`` keeps the
tools' outputs and ``--json`` the models already done (``--redo`` measures them again).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from memshrink.estimate.backends import VERIFY_STAGES  # noqa: E402

MiB = 1 << 20
MODELS = (
    "bert-base",
    "gpt2",
    "resnet50-b16",
    "unet",
    "multibranch",
    "mobilenetv2",
    "zoo-resnet50",
)
WORSE_REL, WORSE_ABS, EST_TOL = 0.02, 2 * MiB, 0.10
OTHER_TOOLS = ("onnxsim", "onnxslim", "polygraphy")
RUNTIME_SETTINGS = (
    "original+no-mem-pattern",
    "original+no-pattern-no-arena",
    "original+ov-lowmem",
)
ORT_OFF_PATTERN = {"enable_mem_pattern": False}
ORT_OFF_ARENA = {"enable_mem_pattern": False, "enable_cpu_mem_arena": False}
# OpenVINO CPU: the plugin's defaults on this 2-core box are already LATENCY / 1 stream; the
# remaining memory knobs are the primitive cache (dynamic shapes) and per-thread scratch.
OV_LOWMEM = {"CPU_RUNTIME_CACHE_CAPACITY": "0", "INFERENCE_NUM_THREADS": "1"}
# variant -> (file made by which tool, session/compile options per backend; a backend missing
# from the mapping does not run that variant)
ALL_BACKENDS = ("cpu", "openvino", "ort-openvino")
VARIANTS: dict[str, tuple[str, dict[str, dict[str, Any] | None]]] = {
    "original": ("original", {b: {} for b in ALL_BACKENDS}),
    "memshrink-all": ("memshrink", {b: {} for b in ALL_BACKENDS}),
    "memshrink-all+rec": ("memshrink", {"cpu": None}),  # None: the recommended options
    "onnxsim": ("onnxsim", {b: {} for b in ALL_BACKENDS}),
    "onnxslim": ("onnxslim", {b: {} for b in ALL_BACKENDS}),
    "polygraphy": ("polygraphy", {b: {} for b in ALL_BACKENDS}),
    "original+no-mem-pattern": ("original", {"cpu": ORT_OFF_PATTERN}),
    "original+no-pattern-no-arena": (
        "original",
        {"cpu": ORT_OFF_ARENA, "ort-openvino": ORT_OFF_ARENA},
    ),
    "original+ov-lowmem": ("original", {"openvino": OV_LOWMEM}),
}


def run_tool(cmd: list[str], timeout: float) -> dict[str, Any]:
    """Run ``cmd`` niced in a child; wall seconds, peak RSS (bytes, rusage), exit code."""
    # a side folder of tools (pip install --no-deps --target DIR onnxslim polygraphy) stays on
    # the path after this checkout's sources
    extra = os.environ.get("PYTHONPATH", "")
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}:{ROOT}" + (f":{extra}" if extra else ""))
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True
        )
    except OSError as exc:  # e.g. polygraphy not installed (pip install polygraphy)
        return {"cmd": cmd[0], "seconds": 0.0, "peak_rss": 0, "returncode": 127, "error": str(exc)}
    deadline = t0 + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            os.killpg(proc.pid, 9)
            _, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    return {
        "cmd": " ".join(Path(c).name if c.startswith("/") else c for c in cmd),
        "seconds": round(wall, 2),
        "peak_rss": usage.ru_maxrss * 1024,
        "returncode": code,
        "error": err.strip().splitlines()[-1][:300] if code != 0 and err.strip() else None,
    }


def tool_commands(src: Path, work: Path) -> dict[str, tuple[list[str], Path]]:
    py = sys.executable
    out = {k: work / f"{k}.onnx" for k in ("memshrink", "onnxsim", "onnxslim", "polygraphy")}
    poly = shutil.which("polygraphy") or "polygraphy"
    return {
        "memshrink": (
            [py, "-m", "memshrink.cli", "optimize", str(src), str(out["memshrink"]),
             "--passes", "all", "-q", "--json", str(work / "memshrink.json")],
            out["memshrink"],
        ),
        "onnxsim": ([py, "-m", "onnxsim", str(src), str(out["onnxsim"])], out["onnxsim"]),
        "onnxslim": ([py, "-m", "onnxslim", str(src), str(out["onnxslim"])], out["onnxslim"]),
        "polygraphy": (
            [poly, "surgeon", "sanitize", str(src), "--fold-constants", "-o", str(out["polygraphy"])],
            out["polygraphy"],
        ),
    }  # fmt: skip


def make_tools(
    src: Path, work: Path, done: Mapping[str, Any], timeout: float, only: set[str] | None = None
) -> dict[str, Any]:
    """Run each tool (skipping those whose output and record exist); their records.

    ``only``: run just these tools; the others keep their records in ``done`` (re-measuring a
    few variants after a memshrink change need not re-time onnxsim and the rest).
    """
    tools: dict[str, Any] = dict(done)
    for name, (cmd, out) in tool_commands(src, work).items():
        if only is not None and name not in only:
            continue
        if name in tools and (out.exists() or tools[name]["returncode"] != 0):
            continue
        print(f"  tool {name} ...", file=sys.stderr, flush=True)
        rec = run_tool(cmd, timeout)
        rec["ok"] = rec["returncode"] == 0 and out.exists()
        if name == "memshrink" and (work / "memshrink.json").is_file():
            rep = json.loads((work / "memshrink.json").read_text())
            rec["recommended"] = rep.get("recommended_session_options")
        tools[name] = rec
        print(
            f"  tool {name}: rc {rec['returncode']}, {rec['seconds']} s, "
            f"{rec['peak_rss'] / MiB:.0f} MiB",
            file=sys.stderr,
            flush=True,
        )
    order = list(tool_commands(src, work))  # the table lists the tools in one order
    return {k: tools[k] for k in sorted(tools, key=lambda k: order.index(k) if k in order else 9)}


def recommended_options(tools: Mapping[str, Any]) -> dict[str, Any]:
    recs = (tools.get("memshrink") or {}).get("recommended")
    if not isinstance(recs, list):
        return {}
    return {r["key"]: r["value"] for r in recs}


def measure_model(name: str, args: argparse.Namespace, prior: dict[str, Any]) -> dict[str, Any]:
    """Tools, then every (variant, backend) in a fresh child, outputs compared, estimates."""
    import numpy as np

    from memshrink.verify.compare import compare_outputs
    from memshrink.verify.inputs import make_feeds
    from memshrink.verify.kinds import read_io, resolve_model
    from memshrink.verify.runner import run_child

    src = ROOT / ".cache" / "models" / f"{name}.onnx"
    if not src.is_file():
        import models

        src = Path(models.build(name))
    work = Path(args.work) / name
    work.mkdir(parents=True, exist_ok=True)
    row: dict[str, Any] = {"model": name, "file_mib": round(src.stat().st_size / MiB, 1)}
    wanted = set(args.variants) if args.variants else set(VARIANTS)
    needed = {VARIANTS[v][0] for v in wanted} - {"original"}
    kept_tools = prior.get("tools", {}) if args.variants else {}
    if args.variants:  # the listed tools run again in this --work; the rest keep their records
        kept_tools = {k: v for k, v in kept_tools.items() if k not in needed}
    tools = make_tools(src, work, kept_tools, args.tool_timeout, needed if args.variants else None)
    row["tools"] = tools
    rec = recommended_options(tools)
    row["recommended_options"] = rec
    files = {"original": src, **{k: v[1] for k, v in tool_commands(src, work).items()}}

    ref = resolve_model(str(src), "original", work)
    io = read_io(ref)
    arrays, infos = make_feeds(io, src, seed=0)
    feeds_path = work / "feeds.npz"
    names = list(arrays)
    np.savez(feeds_path, **{f"i{k}": arrays[n] for k, n in enumerate(names)})
    row["inputs"] = [f"{i.name}{list(i.shape)}:{i.dtype}" for i in infos]
    out_names = [o.name for o in io.outputs]
    python = {"ort-openvino": args.python_ovep} if args.python_ovep else None
    runs: dict[str, dict[str, Any]] = {}
    for backend in args.backends:
        ref_out = None
        for variant, (tool, per_backend) in VARIANTS.items():
            if backend not in per_backend:
                continue
            if variant not in wanted:  # kept from the earlier measurement (--variants)
                old = prior.get("runs", {}).get(f"{variant}@{backend}")
                if old is not None:
                    runs[f"{variant}@{backend}"] = {**old, "kept": True}
                continue
            opts = per_backend[backend]
            opts = dict(rec) if opts is None else opts
            if variant == "memshrink-all+rec" and not rec:
                continue
            path = files[tool]
            key = f"{variant}@{backend}"
            if tool != "original" and not tools.get(tool, {}).get("ok"):
                runs[key] = {"status": "no-output", "error": tools.get(tool, {}).get("error")}
                continue
            mref = resolve_model(str(path), variant, work)
            r = run_child(
                mref, variant.replace("+", "_"), backend, workdir=work, feeds_path=feeds_path,
                feed_names=names, output_names=out_names, runs=3, timeout=args.timeout,
                session_options=opts, python=python,
            )  # fmt: skip
            d = r.to_dict()
            ent: dict[str, Any] = {
                "status": r.status,
                "error": r.error,
                "options": opts,
                "baseline": r.baseline_rss,
                "stages": {
                    s["name"]: {
                        "peak_delta": s["peak_delta"],
                        "peak": s["peak"],
                        "anon_peak": s.get("anon_peak"),
                        "file_peak": s.get("file_peak"),
                        "seconds": round(s.get("seconds", 0.0), 3),
                    }
                    for s in d["stages"]
                },
            }
            if variant == "original":
                ref_out = r.outputs
            elif r.outputs is not None and ref_out is not None:
                cmp = compare_outputs(out_names, ref_out, r.outputs, args.atol, args.rtol)
                ent["match"] = all(c.ok for c in cmp)
                ent["max_abs"] = max((float(c.max_abs or 0.0) for c in cmp), default=0.0)
            runs[key] = ent
            peak = max((v["peak_delta"] for v in ent["stages"].values()), default=0)
            print(
                f"  {key}: {r.status} peak +{peak / MiB:.0f} MiB"
                + (f" match={ent.get('match')}" if "match" in ent else ""),
                file=sys.stderr,
                flush=True,
            )
    row["runs"] = runs
    recheck_f32(row, work, args)
    row["estimates"] = estimates(files["memshrink"], rec, args.backends, tools)
    return row


def stated_tolerance(work: Path) -> tuple[float, float] | None:
    """The (atol, rtol) memshrink's output states for itself (``optimize --json``), if any."""
    rep = work / "memshrink.json"
    if not rep.is_file():
        return None
    tol = json.loads(rep.read_text()).get("stated_tolerance") or {}
    return (float(tol["atol"]), float(tol["rtol"])) if "atol" in tol else None


def recheck_f32(row: dict[str, Any], work: Path, args: argparse.Namespace) -> None:
    """Variants whose outputs differ on OpenVINO, compared again with both models run at f32.

    Why: OpenVINO's CPU plugin computes f32 models in bf16 on this host, and a rewrite that
    moves the rounding (a channel split's partial sums) gives another bf16 answer; ``verify``
    then decides at f32 (``verify/api.py``) and at the rewrite's stated tolerance, so the
    bench does the same (``match_f32``; memshrink's variants at the tolerance they state).
    """
    from memshrink.verify.compare import compare_outputs
    from memshrink.verify.kinds import read_io, resolve_model
    from memshrink.verify.precision import FULL_PRECISION_OPTIONS
    from memshrink.verify.runner import run_child

    runs = row["runs"]
    bad = [
        k
        for k, e in runs.items()
        if e.get("match") is False and k.endswith("@openvino") and not e.get("kept")
    ]
    if not bad:
        return
    src = ROOT / ".cache" / "models" / f"{row['model']}.onnx"
    files = {"original": src, **{k: v[1] for k, v in tool_commands(src, work).items()}}
    feeds_path = work / "feeds.npz"
    io = read_io(resolve_model(str(src), "original", work))
    out_names = [o.name for o in io.outputs]
    names = [x.split("[")[0] for x in row["inputs"]]  # the order feeds.npz was saved in
    force = FULL_PRECISION_OPTIONS["openvino"]

    def outputs(tool: str) -> Any:
        r = run_child(
            resolve_model(str(files[tool]), tool, work), f"{tool}-f32", "openvino",
            workdir=work, feeds_path=feeds_path, feed_names=names, output_names=out_names,
            runs=1, timeout=args.timeout, provider_options=force,
        )  # fmt: skip
        return r.outputs

    ref = outputs("original")
    stated = stated_tolerance(work)
    for key in bad:
        variant = key.split("@")[0]
        tool = VARIANTS[variant][0]
        got = outputs(tool)
        if ref is None or got is None:
            runs[key]["match_f32"] = None
            continue
        atol, rtol = (args.atol, args.rtol)
        if tool == "memshrink" and stated:
            atol, rtol = max(atol, stated[0]), max(rtol, stated[1])
        cmp = compare_outputs(out_names, ref, got, atol, rtol)
        runs[key]["match_f32"] = all(c.ok for c in cmp)
        runs[key]["max_abs_f32"] = max((float(c.max_abs or 0.0) for c in cmp), default=0.0)
        runs[key]["tolerance_f32"] = [atol, rtol]
        print(f"  {key} at f32: match={runs[key]['match_f32']}", file=sys.stderr, flush=True)


def estimates(
    path: Path, rec: Mapping[str, Any], backends: list[str], tools: Mapping[str, Any]
) -> dict[str, Any]:
    """memshrink's predicted stage peaks (bytes) of its own output, per backend."""
    from memshrink.estimate import estimate

    out: dict[str, Any] = {}
    if not tools.get("memshrink", {}).get("ok"):
        return out
    for backend in backends:
        todo = [("memshrink-all", {})]
        if backend == "cpu" and rec:
            todo.append(("memshrink-all+rec", dict(rec)))
        for variant, opts in todo:
            try:
                est = estimate(str(path), backend=backend, session_options=opts)
                out[f"{variant}@{backend}"] = est.stage_peaks()
            except Exception as exc:  # noqa: BLE001 - recorded as a finding
                out[f"{variant}@{backend}"] = {"error": str(exc)[:300]}
    return out


# ---------------------------------------------------------------- findings and tables
def _worse(v: float, o: float) -> bool:
    return v - o > WORSE_ABS and v > o * (1 + WORSE_REL)


def _stage(runs: Mapping[str, Any], key: str, stage: str) -> float | None:
    ent = runs.get(key)
    if not ent or ent.get("status") != "ok":
        return None
    s = ent["stages"].get(stage)
    return None if s is None else float(s["peak_delta"])


def findings(row: Mapping[str, Any]) -> list[str]:
    """Regressions of memshrink's output, mismatches and estimate misses, as one-line texts."""
    out: list[str] = []
    runs = row["runs"]
    for key, ent in runs.items():
        if ent.get("status") not in ("ok", "no-output"):
            out.append(f"{key}: {ent['status']}: {str(ent.get('error'))[:160]}")
        if ent.get("match") is False:
            at32 = ent.get("match_f32")
            out.append(
                f"{key}: outputs differ (max abs {ent.get('max_abs'):.3g})"
                + (
                    ""
                    if at32 is None
                    else f"; at f32: {'match' if at32 else 'DIFFER'} (max abs "
                    f"{ent.get('max_abs_f32'):.3g}, atol/rtol {ent.get('tolerance_f32')})"
                )
            )
    for backend in {k.split("@")[1] for k in runs}:
        for stage, _ in (runs.get(f"original@{backend}") or {}).get("stages", {}).items():
            o = _stage(runs, f"original@{backend}", stage)
            m = _stage(runs, f"memshrink-all@{backend}", stage)
            if o is None or m is None:
                continue
            if _worse(m, o):
                out.append(
                    f"WORSE than original: {backend}:{stage} {o / MiB:.0f} -> {m / MiB:.0f} MiB"
                )
            others = [
                (t, v)
                for t in OTHER_TOOLS
                if (v := _stage(runs, f"{t}@{backend}", stage)) is not None
            ]
            if others:
                t, best = min(others, key=lambda x: x[1])
                if _worse(m, best):
                    out.append(
                        f"WORSE than {t}: {backend}:{stage} {t} {best / MiB:.0f}, "
                        f"memshrink {m / MiB:.0f} MiB"
                    )
            # the original with a runtime memory setting: memshrink's output with the defaults,
            # and (ORT CPU) with the options `optimize` recommends, the like-for-like pair
            for setting in RUNTIME_SETTINGS:
                v = _stage(runs, f"{setting}@{backend}", stage)
                if v is None:
                    continue
                for ms in ("memshrink-all", "memshrink-all+rec"):
                    mv = _stage(runs, f"{ms}@{backend}", stage)
                    if mv is not None and _worse(mv, v):
                        out.append(
                            f"WORSE than {setting}: {backend}:{stage} {v / MiB:.0f}, "
                            f"{ms} {mv / MiB:.0f} MiB"
                        )
    for key, pred in row.get("estimates", {}).items():
        backend = key.split("@")[1]
        if "error" in pred:
            out.append(f"estimate {key}: {pred['error']}")
            continue
        for est_stage, meas_stage in VERIFY_STAGES[backend].items():
            m = _stage(runs, key, meas_stage)
            p = pred.get(est_stage)
            if m is None or p is None or m <= 0:
                continue
            err = (p - m) / m
            if abs(err) > EST_TOL:
                out.append(
                    f"estimate {key}:{meas_stage} predicted {p / MiB:.0f}, "
                    f"measured {m / MiB:.0f} MiB ({100 * err:+.0f} %)"
                )
    return out


def _cell(runs: Mapping[str, Any], key: str, stage: str) -> str:
    ent = runs.get(key)
    if ent is None:
        return "–"
    if ent.get("status") != "ok":
        return str(ent.get("status"))
    v = _stage(runs, key, stage)
    return "–" if v is None else f"{v / MiB:.0f}"


def _process_peak(runs: Mapping[str, Any], key: str) -> str:
    ent = runs.get(key)
    if ent is None:
        return "–"
    if ent.get("status") != "ok":
        return str(ent.get("status"))
    vals = [v["peak_delta"] for v in ent["stages"].values()]
    cell = f"{max(vals) / MiB:.0f}" if vals else "–"
    if ent.get("match", True):
        return cell
    return f"{cell} (bf16≠, f32 =)" if ent.get("match_f32") else f"{cell} DIFFER"


def format_summary(rows: list[dict[str, Any]]) -> str:
    """One line per (model, backend): each variant's process peak (max stage), MiB."""
    variants = list(VARIANTS)
    short = {"memshrink-all": "ms all", "memshrink-all+rec": "ms all+rec"}
    head = "| model | backend | " + " | ".join(short.get(v, v) for v in variants) + " |"
    lines = [head, "| --- | --- |" + " ---: |" * len(variants)]
    for row in rows:
        for backend in ALL_BACKENDS:
            if f"original@{backend}" not in row["runs"]:
                continue
            cells = [_process_peak(row["runs"], f"{v}@{backend}") for v in variants]
            lines.append(f"| {row['model']} | {backend} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_tables(rows: list[dict[str, Any]]) -> str:
    lines: list[str] = [format_summary(rows), ""]
    for row in rows:
        runs = row["runs"]
        lines.append(
            f"### {row['model']} ({row['file_mib']:.0f} MiB file; {', '.join(row['inputs'])})\n"
        )
        tools = row["tools"]
        lines.append("| tool | wall (s) | peak RSS (MiB) | result |")
        lines.append("| --- | ---: | ---: | --- |")
        for t, rec in tools.items():
            res = "ok" if rec.get("ok") else f"failed: {rec.get('error')}"
            wall, rss = f"{rec['seconds']:.1f}", f"{rec['peak_rss'] / MiB:.0f}"
            prev = rec.get("previous")
            if prev:  # re-timed after a change on this branch: main's figure first
                wall = f"{prev['seconds']:.1f} → {wall}"
                rss = f"{prev['peak_rss'] / MiB:.0f} → {rss}"
            lines.append(f"| {t} | {wall} | {rss} | {res} |")
        if row.get("recommended_options"):
            lines.append(f"\nrecommended (memshrink): `{row['recommended_options']}`")
        lines.append("")
        for backend in ALL_BACKENDS:
            keys = [k for k in runs if k.endswith(f"@{backend}")]
            if not keys:
                continue
            stages = list((runs.get(f"original@{backend}") or {}).get("stages", {})) or list(
                VERIFY_STAGES[backend].values()
            )
            lines.append(f"{backend}: stage peak over the post-import baseline, MiB")
            lines.append("")
            lines.append("| variant | " + " | ".join(stages) + " | outputs |")
            lines.append("| --- |" + " ---: |" * len(stages) + " --- |")
            for k in keys:
                ent = runs[k]
                match = ent.get("match")
                verdict = (
                    "ref" if k.startswith("original@")
                    else "–" if match is None
                    else "match" if match
                    else f"bf16 differs ({ent.get('max_abs'):.2g}); f32 match"
                    if ent.get("match_f32")
                    else f"DIFFER ({ent.get('max_abs'):.2g})"
                )  # fmt: skip
                cells = [_cell(runs, k, s) for s in stages]
                lines.append(f"| {k.split('@')[0]} | " + " | ".join(cells) + f" | {verdict} |")
                est = row.get("estimates", {}).get(k)
                if est and "error" not in est:
                    pm = {m: e for e, m in VERIFY_STAGES[backend].items()}
                    pc = [
                        f"{est[pm[s]] / MiB:.0f}" if s in pm and pm[s] in est else "–"
                        for s in stages
                    ]
                    lines.append("| ↳ estimate | " + " | ".join(pc) + " | |")
            lines.append("")
        f = findings(row)
        if f:
            lines.append("Findings:\n")
            lines += [f"- {x}" for x in f]
            lines.append("")
    return "\n".join(lines)


def retool(a: argparse.Namespace) -> int:
    """Re-time one tool per model into a side file; the record keeps the old one."""
    out = Path(a.json)
    data = json.loads(out.read_text())
    for row in data["rows"]:
        if row["model"] not in a.models:
            continue
        src = ROOT / ".cache" / "models" / f"{row['model']}.onnx"
        side = Path(a.work) / row["model"] / "retool"
        side.mkdir(parents=True, exist_ok=True)
        cmd, made = tool_commands(src, side)[a.retool]
        rec = run_tool(cmd, a.tool_timeout)
        rec["ok"] = rec["returncode"] == 0 and made.exists()
        old = dict(row["tools"].get(a.retool, {}))
        old.pop("previous", None)
        rec["previous"] = old
        rec["recommended"] = old.get("recommended")
        row["tools"][a.retool] = rec
        print(
            f"{row['model']}: {old.get('seconds')} s / {old.get('peak_rss', 0) / MiB:.0f} MiB"
            f" -> {rec['seconds']} s / {rec['peak_rss'] / MiB:.0f} MiB",
            file=sys.stderr,
        )
        out.write_text(json.dumps(data, indent=1) + "\n")
    return 0


def _commit() -> str | None:
    """The checkout's commit (a row says what it measured)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--backends", default="cpu,openvino,ort-openvino")
    ap.add_argument("--json", default=str(ROOT / "docs/bench/compare_results.json"))
    ap.add_argument("--work", default=str(ROOT / ".cache/compare"))
    ap.add_argument("--python-ovep", default=str(ROOT / ".cache/venv-ovep/bin/python"))
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--tool-timeout", type=float, default=900.0)
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--redo", action="store_true", help="measure models already in --json again")
    ap.add_argument(
        "--variants",
        nargs="*",
        help="with --redo: measure only these variants (the original always) and keep the "
        "others' runs and tool records from --json, marked 'kept'",
    )
    ap.add_argument("--table", help="only print the markdown tables of this results JSON")
    ap.add_argument("--reestimate", action="store_true", help="only redo the estimates")
    ap.add_argument(
        "--recheck-f32",
        action="store_true",
        help="only compare again at f32 the OpenVINO variants whose outputs differ",
    )
    ap.add_argument(
        "--retool",
        help="only time this tool again on the models in --json (after a change to it); the "
        "measured variant files are kept, the old record goes under 'previous'",
    )
    a = ap.parse_args(argv)
    if a.table:
        print(format_tables(json.loads(Path(a.table).read_text())["rows"]))
        return 0
    if a.retool:
        return retool(a)
    if a.recheck_f32:
        out = Path(a.json)
        data = json.loads(out.read_text())
        for row in data["rows"]:
            if row["model"] in a.models:
                recheck_f32(row, Path(a.work) / row["model"], a)
                row["findings"] = findings(row)
                out.write_text(json.dumps(data, indent=1) + "\n")
        return 0
    if a.reestimate:  # the estimator changed: predict the measured memshrink outputs again
        out = Path(a.json)
        data = json.loads(out.read_text())
        for row in data["rows"]:
            path = Path(a.work) / row["model"] / "memshrink.onnx"
            backends = sorted({k.split("@")[1] for k in row["runs"]})
            row["estimates"] = estimates(path, row["recommended_options"], backends, row["tools"])
            row["findings"] = findings(row)
        out.write_text(json.dumps(data, indent=1) + "\n")
        return 0
    a.backends = [b.strip() for b in a.backends.split(",") if b.strip()]
    if a.variants:
        unknown = set(a.variants) - set(VARIANTS)
        if unknown:
            ap.error(f"unknown variants {sorted(unknown)}; known: {list(VARIANTS)}")
        a.variants = ["original", *[v for v in a.variants if v != "original"]]
    if not Path(a.python_ovep).exists():
        a.python_ovep = None
    out = Path(a.json)
    data = json.loads(out.read_text()) if out.is_file() else {"rows": []}
    by_name = {r["model"]: r for r in data["rows"]}
    for name in a.models:
        if name in by_name and not a.redo:
            continue
        t0 = time.perf_counter()
        print(f"{name} ...", file=sys.stderr, flush=True)
        row = measure_model(name, a, by_name.get(name, {}))
        row["findings"] = findings(row)
        row["seconds"] = round(time.perf_counter() - t0, 1)
        row["commit"] = _commit()
        if a.variants:
            row["remeasured"] = a.variants
        by_name[name] = row
        data["rows"] = [by_name[n] for n in by_name]
        data["settings"] = {
            "atol": a.atol,
            "rtol": a.rtol,
            "worse_rule": f"> {WORSE_REL:.0%} and > {WORSE_ABS // MiB} MiB (stage peak over baseline)",
            "estimate_tolerance": EST_TOL,
            "runs": 3,
            "environment": {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")},
        }
        out.write_text(json.dumps(data, indent=1) + "\n")
        print(f"{name}: {row['seconds']} s; findings: {len(row['findings'])}", file=sys.stderr)
    print(format_tables(data["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
