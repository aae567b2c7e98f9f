"""Real exports on the CUDA EP: ``verify --backends cuda`` against ``estimate --backend cuda``.

    python docs/bench/cuda_real14.py prep --dir /tmp/c14          # GPU machine, no ORT-GPU needed
    python docs/bench/cuda_real14.py measure --dir /tmp/c14 --out $OUT --budget 420
    python docs/bench/cuda_real14.py table --rows rows.json       # anywhere

``prep`` builds ``CASES`` with ``real_models_build.py``'s builders (random weights, tiny configs)
and binds their symbolic dims large enough that activations, not the fixed costs, make the GPU
figure; then ``optimize IN IN.cuda.onnx --passes all --backend cuda`` and ``estimate --backend
cuda --json`` on both files. ``measure`` runs ``verify IN IN.cuda.onnx --backends cuda --json``
(a few cases at a time: NVML per-process and VmHWM figures are per process) and writes one row
per (case, file, stage): GPU MiB over the empty session at the same stage (verify's
``gpu_delta``) and host MiB over the child's baseline, predicted and measured. It also packs
the model files (``models.tar.gz.N``, 15 MiB parts) so that the estimator can be re-run on the
exact files elsewhere (``reestimate``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

MiB = 1 << 20
#: builder -> dims that override the builder's own (None: the builder's)
CASES: dict[str, dict[str, int] | None] = {
    "hf-gpt2-past-legacy": {"batch": 8, "seq": 128, "past": 128, "total": 256},
    "hf-vit-dynamo": {"batch": 512},
    "hf-whisper-encoder-legacy": {"batch": 4},
    "hf-llama-gqa-dynamo": {"batch": 4, "seq": 512},
    "hf-distilbert-legacy": {"batch": 16, "seq": 128},
    "hf-resnet-legacy": {"batch": 16, "h": 224, "w": 224},
    "tv-fcos-legacy": None,
    "fp16-converted-cnn": {"batch": 16, "h": 256, "w": 256},
    "ort-optimizer-gpt2-fp16": {"batch": 8, "seq": 128, "past": 128, "total": 256},
    "hf-llama-bf16-dynamo": {"batch": 4, "seq": 512},
    "script-loop-if": {"batch": 65536},
    "dynamo-torch-cond": {"batch": 65536},
}
#: hand-made control-flow checks (``micro_cf``): how the device cost outside the arena counts
MICRO = ("cf-two-ifs", "cf-loop-alone", "cf-if-both-branches")
VSTAGE = {"session_creation": "session", "run_1": "run1", "steady_state": "run3"}


def _cli(args: list[str], timeout: int = 900) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "memshrink", *args]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -9, "timed out"
    return p.returncode, (p.stderr + p.stdout)[-2000:]


def _bind(c: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for k, v in c["dims"].items():
        out += ["--dim", f"{k}={v}"]
    for k, s in c.get("shapes", {}).items():
        out += ["--shape", f"{k}={','.join(map(str, s))}"]
    return out


def _est_opts(c: dict[str, Any]) -> list[str]:
    r = c.get("int_ranges", {})
    if "input_ids" in r:
        lo, hi = r["input_ids"]
        return ["--session-option", f"memshrink.int_range={lo},{hi}"]
    return []


def micro_cf(d: Path, name: str) -> dict[str, Any]:
    """Control-flow graphs over x [65536, 64] f32 (16 MiB): two Ifs one after the other; a
    Loop of 3 iterations without an If; one If run with a condition that alternates between
    runs is not possible in one session, so the third has both branches in a Loop (i % 2)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    F = TensorProto.FLOAT
    x = helper.make_tensor_value_info("x", F, ["batch", 64])

    def branch(op: str, tag: str, src: str) -> Any:
        return helper.make_graph(
            [helper.make_node(op, [src, src], [f"{tag}_o"])], tag, [],
            [helper.make_tensor_value_info(f"{tag}_o", F, None)],
        )  # fmt: skip

    zero = numpy_helper.from_array(np.zeros((), np.float32), "zero")
    nodes: list[Any] = []
    inits = [zero]
    if name == "cf-two-ifs":
        for k, src in enumerate(("x", "y0")):
            nodes += [
                helper.make_node("ReduceSum", [src], [f"s{k}"], keepdims=0),
                helper.make_node("Greater", [f"s{k}", "zero"], [f"c{k}"]),
                helper.make_node("If", [f"c{k}"], [f"y{k}"],
                                 then_branch=branch("Add", f"t{k}", src),
                                 else_branch=branch("Sub", f"e{k}", src)),
            ]  # fmt: skip
        out = "y1"
    else:
        two = numpy_helper.from_array(np.array(2, np.int64), "two")
        body_nodes = [
            helper.make_node("Identity", ["cin"], ["cout"]),
            helper.make_node("Tanh", ["h"], ["h1"]),
            helper.make_node("Add", ["h1", "h"], ["hout"]),
        ]
        if name == "cf-if-both-branches":
            body_nodes = [
                helper.make_node("Identity", ["cin"], ["cout"]),
                helper.make_node("Mod", ["i", "two"], ["m"]),
                helper.make_node("Cast", ["m"], ["odd"], to=TensorProto.BOOL),
                helper.make_node("If", ["odd"], ["hout"], then_branch=branch("Add", "t", "h"),
                                 else_branch=branch("Mul", "e", "h")),
            ]  # fmt: skip
            inits.append(two)
        body = helper.make_graph(
            body_nodes, "body",
            [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("cin", TensorProto.BOOL, []),
             helper.make_tensor_value_info("h", F, None)],
            [helper.make_tensor_value_info("cout", TensorProto.BOOL, []),
             helper.make_tensor_value_info("hout", F, None)],
        )  # fmt: skip
        inits += [numpy_helper.from_array(np.array(3, np.int64), "n"),
                  numpy_helper.from_array(np.array(True), "t")]  # fmt: skip
        nodes = [helper.make_node("Loop", ["n", "t", "x"], ["y1"], body=body)]
        out = "y1"
    g = helper.make_graph(nodes, name, [x], [helper.make_tensor_value_info(out, F, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    p = d / "models" / f"{name}.onnx"
    onnx.save(m, p)
    return {"name": name, "path": str(p), "dims": {"batch": 65536}, "micro": True}


def prep(d: Path, only: list[str]) -> None:
    import real_models_build as rb

    mdir = d / "models"
    mdir.mkdir(parents=True, exist_ok=True)
    cases = []
    old = {}
    if (d / "cases.json").exists():  # built before: reuse (only optimize / estimate again)
        old = {c["name"]: c for c in json.loads((d / "cases.json").read_text())}
    for name, dims in CASES.items():
        if only and name not in only:
            continue
        if name in old and "path" in old[name] and Path(old[name]["path"]).exists():
            cases.append({k: v for k, v in old[name].items() if k not in ("optimize", "out")})
            continue
        t0 = time.time()
        built, failed = rb.build_all(mdir, [name])
        if failed or not built:
            cases.append({"name": name, "error": failed.get(name, "no case")})
            continue
        case = built[0]
        cases.append(
            {
                "name": name,
                "path": str(case.path),
                "dims": dims if dims is not None else case.dims,
                "shapes": {k: list(v) for k, v in case.shapes.items()},
                "int_ranges": {k: list(v) for k, v in case.int_ranges.items()},
                "build_s": round(time.time() - t0, 1),
            }
        )
        (d / "cases.json").write_text(json.dumps(cases, indent=1))

    for name in MICRO:
        if not only or name in only:
            cases.append(micro_cf(d, name))

    def opt(c: dict[str, Any]) -> None:
        if "error" in c:
            return
        if c.get("micro"):  # measured against itself: no rewrite
            c["out"] = c["path"]
            js = Path(c["path"]).with_name(Path(c["path"]).stem + ".est.json")
            rc, text = _cli(["estimate", c["path"], "--backend", "cuda", "--json", str(js),
                             *_bind(c)])  # fmt: skip
            c["estimate"] = {"original": str(js) if rc == 0 else f"rc {rc}: {text[-300:]}"}
            return
        src = Path(c["path"])
        out = src.with_name(src.stem + ".cuda.onnx")
        t0 = time.time()
        rc, text = _cli(
            ["optimize", str(src), str(out), "--passes", "all", "--backend", "cuda", "-q",
             "--json", str(src.with_name(src.stem + ".opt.json")), *_bind(c)]
        )  # fmt: skip
        c["optimize"] = {"rc": rc, "s": round(time.time() - t0, 1), "text": text[-400:]}
        files = {"original": src}
        if rc == 0:
            files["rewritten"] = out
            c["out"] = str(out)
        c["estimate"] = {}
        for label, f in files.items():
            js = f.with_name(f.stem + ".est.json")
            rc, text = _cli(
                ["estimate", str(f), "--backend", "cuda", "--json", str(js), *_bind(c),
                 *_est_opts(c)]
            )  # fmt: skip
            c["estimate"][label] = str(js) if rc == 0 else f"rc {rc}: {text[-300:]}"

    with ThreadPoolExecutor(4) as ex:
        list(ex.map(opt, cases))
    (d / "cases.json").write_text(json.dumps(cases, indent=1))
    (d / "prep.done").write_text("ok")


def _measured(rep: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    from memshrink.verify.gpu_delta import gpu_deltas

    out: dict[str, dict[str, dict[str, float]]] = {}
    for r in rep.get("runs", []):
        if r.get("status") != "ok":
            continue
        gpu = r.get("gpu") or {}
        base = gpu.get("empty_session_baseline") or 0
        deltas = {
            g.stage: g.raw / MiB
            for g in gpu_deltas(r["stages"], base, gpu.get("empty_session_stages"))
        }
        out[r["model"]] = {
            s["name"]: {"gpu": deltas.get(s["name"]), "host": s["peak_delta"] / MiB}
            for s in r["stages"]
        }
    return out


def _rows(c: dict[str, Any], rep: dict[str, Any]) -> list[dict[str, Any]]:
    meas = _measured(rep)
    rows = []
    for label, js in c.get("estimate", {}).items():
        if not str(js).endswith(".json") or label not in meas:
            continue
        est = json.loads(Path(js).read_text())
        det = est["details"]
        for st, vst in VSTAGE.items():
            m = meas[label].get(vst)
            if not m:
                continue
            rows.append(
                {
                    "case": c["name"], "file": label, "stage": st,
                    "gpu_pred": det["device"][st] / MiB, "gpu_meas": m["gpu"],
                    "gpu_range": [x / MiB for x in det["device_range"].get(st, [])],
                    "host_pred": det["host"][st] / MiB, "host_meas": m["host"],
                }
            )  # fmt: skip
    return rows


def measure(d: Path, out: Path, budget: float, workers: int) -> None:
    t_end = time.time() + budget
    while not (d / "prep.done").exists() and time.time() < t_end - 60:
        time.sleep(2)
    cases = json.loads((d / "cases.json").read_text())
    results: dict[str, Any] = {}

    def one(c: dict[str, Any]) -> None:
        if "out" not in c:
            results[c["name"]] = {"skipped": c.get("error") or c.get("optimize")}
            return
        if time.time() > t_end - 45:
            results[c["name"]] = {"skipped": "time budget"}
            return
        js = Path(c["path"]).with_name(Path(c["path"]).stem + ".verify.json")
        args = ["verify", c["path"], c["out"], "--backends", "cuda", "--quiet", "--json", str(js)]
        for k, (lo, hi) in c.get("int_ranges", {}).items():
            args += ["--int-range", f"{k}={lo},{hi}"]
        t0 = time.time()
        rc, text = _cli([*args, *_bind(c)], timeout=max(30, int(t_end - time.time() - 20)))
        res: dict[str, Any] = {"rc": rc, "s": round(time.time() - t0, 1)}
        if js.exists():
            rep = json.loads(js.read_text())
            res["rows"] = _rows(c, rep)
            res["comparisons"] = [
                {k: o.get(k) for k in ("name", "ok", "max_abs", "max_rel", "atol", "rtol")}
                for cmp in rep.get("comparisons", [])
                for o in cmp.get("outputs", [])
            ]
            res["runs"] = [
                {"model": r["model"], "status": r["status"], "error": (r.get("error") or "")[:300],
                 "gpu": r.get("gpu"), "stages": r.get("stages")}
                for r in rep.get("runs", [])
            ]  # fmt: skip
        else:
            res["text"] = text[-600:]
        results[c["name"]] = res
        _dump(out, cases, results)

    with ThreadPoolExecutor(workers) as ex:
        list(ex.map(one, cases))
    _dump(out, cases, results)
    if os.environ.get("CUDA14_PACK", "1") == "1":
        _pack(d, out)


def traces(d: Path, out: Path, names: list[str], workers: int) -> None:
    """``cuda_alloc_trace.py`` arena + trace on each case's files (``names``: case names)."""
    cases = {c["name"]: c for c in json.loads((d / "cases.json").read_text())}
    jobs = []
    for n in names:
        c = cases.get(n)
        if not c or "path" not in c:
            continue
        for label, f in (("original", c["path"]), ("rewritten", c.get("out"))):
            if f:
                for kind in ("arena", "trace"):
                    jobs.append((n, label, kind, f, c))
    res: dict[str, Any] = {}

    def one(j: tuple[str, str, str, str, dict[str, Any]]) -> None:
        n, label, kind, f, c = j
        js = d / f"{Path(f).stem}.{kind}.json"
        env = dict(os.environ, MEMSHRINK_TRACE_BIND=json.dumps(
            {"dims": c["dims"], "int_ranges": c.get("int_ranges", {})}))  # fmt: skip
        p = subprocess.run(
            [sys.executable, str(HERE / "cuda_alloc_trace.py"), kind, f, "--out", str(js)],
            capture_output=True, text=True, timeout=300, env=env,
        )  # fmt: skip
        r = json.loads(js.read_text()) if js.exists() else {"out": (p.stdout + p.stderr)[-800:]}
        res[f"{n}|{label}|{kind}"] = r

    with ThreadPoolExecutor(workers) as ex:
        list(ex.map(one, jobs))
    (out / "traces.json").write_text(json.dumps(res))


def _dump(out: Path, cases: list[dict[str, Any]], results: dict[str, Any]) -> None:
    opt = {}
    for c in cases:
        js = Path(c.get("path", "/nonexistent")).with_name(
            Path(c.get("path", "x")).stem + ".opt.json"
        )
        if js.exists():
            rep = json.loads(js.read_text())
            opt[c["name"]] = [
                {"name": p["name"], "modified": p["modified"],
                 "stats": json.dumps(p.get("stats"))[:1500]}
                for p in rep.get("passes", [])
            ]  # fmt: skip
    rows = [r for v in results.values() for r in v.get("rows", [])]
    tmp = out / "rows.json.tmp"
    tmp.write_text(json.dumps({"cases": cases, "rows": rows, "results": results, "optimize": opt}))
    tmp.rename(out / "rows.json")


def _pack(d: Path, out: Path) -> None:
    """The model files in 15 MiB parts (``models.tar.gz.N``); embedded files over 16 MiB apart
    (``big.tar.gz.N``, originals only), so one large model does not crowd out the others."""
    big = [p.name for p in (d / "models").glob("*.onnx") if p.stat().st_size > 16 * MiB]
    excl = [f"--exclude=models/{n}" for n in big] + ["--exclude=*.est.json"]
    subprocess.run(["tar", "czf", str(d / "models.tar.gz"), *excl, "-C", str(d), "models",
                    "cases.json"], check=False)  # fmt: skip
    subprocess.run(["split", "-b", "15M", "-d", "-a", "1", str(d / "models.tar.gz"),
                    str(out / "models.tar.gz.")])  # fmt: skip
    keep = [f"models/{n}" for n in big if ".cuda." not in n]
    if keep:
        subprocess.run(["tar", "czf", str(d / "big.tar.gz"), "-C", str(d), *keep], check=False)
        subprocess.run(["split", "-b", "15M", "-d", "-a", "1", str(d / "big.tar.gz"),
                        str(out / "big.tar.gz.")])  # fmt: skip


def table(rows: list[dict[str, Any]], key: str = "pred") -> str:
    lines = ["| case | file | stage | GPU pred/meas MiB | err | host pred/meas MiB | err |",
             "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    ok = {"gpu": 0, "host": 0}
    n = {"gpu": 0, "host": 0}
    for r in rows:
        cells = []
        for side in ("gpu", "host"):
            p, m = r[f"{side}_{key}"], r[f"{side}_meas"]
            if m is None:
                cells += ["–", ""]
                continue
            within = abs(p - m) <= 0.10 * abs(m) or abs(p - m) <= 2.0
            n[side] += 1
            ok[side] += within
            err = f"{(p - m) / m:+.1%}" if m > 2 else f"{p - m:+.0f} MiB"
            cells += [f"{p:.0f}/{m:.0f}", err + ("" if within else " ✗")]
        lines.append(f"| {r['case']} | {r['file']} | {r['stage']} | " + " | ".join(cells) + " |")
    lines.append(
        f"within 10 % (or 2 MiB): GPU {ok['gpu']}/{n['gpu']}, host {ok['host']}/{n['host']}"
    )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cmd", choices=["prep", "measure", "table", "traces"])
    ap.add_argument("--dir", default="/tmp/c14")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/c14/out"))
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--budget", type=float, default=420)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--rows")
    a = ap.parse_args()
    if a.cmd == "prep":
        prep(Path(a.dir), a.only)
    elif a.cmd == "measure":
        Path(a.out).mkdir(parents=True, exist_ok=True)
        measure(Path(a.dir), Path(a.out), a.budget, a.workers)
    elif a.cmd == "traces":
        Path(a.out).mkdir(parents=True, exist_ok=True)
        traces(Path(a.dir), Path(a.out), a.only, a.workers)
    else:
        print(table(json.loads(Path(a.rows).read_text())["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
