"""Activation passes on the activation-heavy suite: predicted vs measured steady-state run peak.

For each model and each pass (``inplace``, ``reorder``, ``recompute``, and all three), runs the
pass, saves the result, and measures original and rewritten in separate processes
(``memshrink.verify``): ORT CPU with default settings, ORT CPU under PRIORITY_BASED, ORT CPU
with the settings ``memshrink.recommend`` recommends, and OpenVINO CPU; with ``--ep-python``
also the ORT OpenVINO EP (it lives in its own venv: that venv's interpreter runs its child).
The steady-state run peak is the growth of process RSS during run 3 over the state after
session creation (OpenVINO: infer 3 over after compile). Prints a markdown table and writes
it into ``docs/activation-passes.md`` between the BENCH markers.

    python docs/bench/activation_bench.py                       # the four suite models
    python docs/bench/activation_bench.py multibranch --no-openvino
    python docs/bench/activation_bench.py --tiny                # CI-sized variants
    python docs/bench/activation_bench.py unet --ep-python .cache/venv-ovep/bin/python
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

MODELS = ["resnet50-b16", "bert-base-b4s512", "unet", "multibranch"]
TINY = ["resnet50-tiny", "bert-tiny", "unet-tiny", "multibranch-tiny"]
PASSES = {
    "inplace": "inplace",
    "reorder": "reorder",
    "recompute": "recompute",
    "all3": "inplace,reorder,recompute",
    "all": "all",  # the full preset: weight passes, these three, chunk, external-data
}
TOL = {"inplace": (0.0, 0.0), "reorder": (0.0, 0.0), "recompute": (1e-4, 1e-4)}
TOL["all3"] = TOL["recompute"]
TOL["all"] = (1e-4, 1e-4)
MiB = 1 << 20
DOC = ROOT / "docs" / "activation-passes.md"


def _steady(run: dict[str, Any]) -> int | None:
    st = {s["name"]: s for s in run.get("stages", [])}
    if "run3" in st and "session" in st:
        return int(st["run3"]["peak"]) - int(st["session"]["after"])
    if "infer3" in st and "compile" in st:
        return int(st["infer3"]["peak"]) - int(st["compile"]["after"])
    return None


def _measure(
    path: Path, backend: str, opts: dict[str, Any] | None, python: str | None = None
) -> int | None:
    from memshrink.verify import profile

    rep = profile(
        str(path), backends=(backend,), runs=3, session_options=opts or None,
        python={backend: python} if python else None,
    )  # fmt: skip
    return _steady(rep.to_dict()["runs"][0])


def _predict(path: Path, opts: dict[str, Any] | None) -> int:
    """Predicted ORT CPU steady-state growth over the post-session state: activations (the
    estimator models the session options, the memory pattern and the held outputs) plus the
    mapped weight pages the runs touch (weights read in place, Gather rows of a mapped table),
    which the measured RSS growth includes."""
    from memshrink.estimate import estimate

    est = estimate(str(path), backend="ort", session_options=opts or {})
    st = next(s for s in est.prediction.stages if s.name == "steady_state")
    return int(st.activations + st.weights_file)


def _predict_ov(path: Path) -> int:
    """Predicted OpenVINO steady-state growth over the compiled state (what ``_steady`` measures)."""
    from memshrink.estimate import estimate

    st = {s.name: s.peak for s in estimate(str(path), backend="openvino").prediction.stages}
    return int(st["steady_state"] - st["compile_model"])


def _mib(v: int | None) -> str:
    return "-" if v is None else f"{v / MiB:.0f}"


def _ratio(a: int | None, b: int | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}"


def run_model(
    name: str, work: Path, openvino: bool, search_seconds: float, ep_python: str | None = None
) -> list[dict]:
    import shutil

    import models
    from memshrink.manager import PassContext, PassManager
    from memshrink.model import load
    from memshrink.recommend import recommend, session_options
    from memshrink.verify import verify
    from memshrink.writer import save_model

    src = Path(models.build(name))
    rec_opts = session_options(recommend(str(src), backend="ort"))
    rows: list[dict] = []
    orig: dict[str, Any] = {"model": name, "variant": "original", "modified": True}
    print(f"[{name}] original", file=sys.stderr, flush=True)
    orig["pred_default"] = _predict(src, None)
    orig["pred_rec"] = _predict(src, rec_opts)
    orig["ort_default"] = _measure(src, "cpu", None)
    orig["ort_priority"] = _measure(src, "cpu", {"execution_order": "PRIORITY_BASED"})
    orig["ort_rec"] = _measure(src, "cpu", rec_opts) if rec_opts else orig["ort_default"]
    orig["openvino"] = _measure(src, "openvino", None) if openvino else None
    orig["pred_ov"] = _predict_ov(src) if openvino else None
    orig["ep"] = _measure(src, "ort-openvino", None, ep_python) if ep_python else None
    orig["rec_opts"] = rec_opts
    rows.append(orig)
    for label, spec in PASSES.items():
        print(f"[{name}] {label}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        opts = (
            {"reorder": {"search_seconds": search_seconds}}
            if "reorder" in spec or spec == "all"
            else {}
        )
        try:
            model, report = PassManager(spec, options=opts).run(load(str(src)), PassContext())
        except Exception as exc:  # noqa: BLE001 - a pass not built yet is a row, not a crash
            rows.append({"model": name, "variant": label, "modified": False, "reason": str(exc)})
            continue
        secs = time.perf_counter() - t0
        row: dict[str, Any] = {"model": name, "variant": label, "seconds": round(secs, 1)}
        row["modified"] = report.modified
        row["stats"] = {
            p.name: {k: v for k, v in p.stats.items() if k != "candidates"} for p in report.passes
        }
        row["extra_flops"] = sum(
            float(p.stats.get("extra_flops_fraction", 0.0)) for p in report.passes
        )
        if not report.modified:
            row["reason"] = "; ".join(
                f"{p.name}: {p.stats.get('reason', '')}" for p in report.passes
            )
            rows.append(row)
            continue
        out = work / f"{name}.{label}.onnx"
        save_model(model, out)
        shutil.copy(str(src) + ".json", str(out) + ".json")
        atol, rtol = TOL[label]
        backends = ("cpu", "openvino") if openvino else ("cpu",)
        vr = verify(str(src), str(out), backends=backends, runs=3, atol=atol, rtol=rtol).to_dict()
        errs = []
        for c in vr["comparisons"]:
            for o in c["outputs"]:
                errs.append((c["backend"], o.get("max_abs"), o.get("ok")))
        row["errors"] = errs
        row["match"] = all(c["status"] == "match" for c in vr["comparisons"])
        for r in vr["runs"]:
            if r["model"] == "rewritten":
                row["ort_default" if r["backend"] == "cpu" else "openvino"] = _steady(r)
        row["pred_default"] = _predict(out, None)
        row["pred_rec"] = _predict(out, rec_opts)
        row["pred_ov"] = _predict_ov(out) if openvino else None
        row["ort_priority"] = _measure(out, "cpu", {"execution_order": "PRIORITY_BASED"})
        row["ort_rec"] = _measure(out, "cpu", rec_opts) if rec_opts else row["ort_default"]
        row["ep"] = _measure(out, "ort-openvino", None, ep_python) if ep_python else None
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    head = (
        "| model | variant | pred. ORT default | pred. ×orig | ORT default | ×orig | ORT PRIORITY "
        "| ×orig | pred. ORT rec. | pred. ×orig default | ORT rec. opts | ×orig default | "
        "pred. OpenVINO | pred. ×orig | OpenVINO | ×orig | extra FLOPs | max abs err (cpu, ov) |\n|"
        + "---|"
        * 18
    )
    lines = [head]
    orig: dict[str, dict] = {}
    for r in rows:
        if r["variant"] == "original":
            orig[r["model"]] = r
        o = orig.get(r["model"], {})
        if not r.get("modified") and r["variant"] != "original":
            lines.append(
                f"| {r['model']} | {r['variant']} | no-op: {r.get('reason', '')[:90]} |" + " |" * 15
            )
            continue
        errs = ", ".join(f"{e[1]:.1e}" if e[1] is not None else "-" for e in r.get("errors", []))
        lines.append(
            f"| {r['model']} | {r['variant']} | {_mib(r.get('pred_default'))} | "
            f"{_ratio(r.get('pred_default'), o.get('pred_default'))} | "
            f"{_mib(r.get('ort_default'))} | {_ratio(r.get('ort_default'), o.get('ort_default'))} | "
            f"{_mib(r.get('ort_priority'))} | "
            f"{_ratio(r.get('ort_priority'), o.get('ort_priority'))} | "
            f"{_mib(r.get('pred_rec'))} | {_ratio(r.get('pred_rec'), o.get('pred_default'))} | "
            f"{_mib(r.get('ort_rec'))} | "
            f"{_ratio(r.get('ort_rec'), o.get('ort_default'))} | {_mib(r.get('pred_ov'))} | "
            f"{_ratio(r.get('pred_ov'), o.get('pred_ov'))} | {_mib(r.get('openvino'))} | "
            f"{_ratio(r.get('openvino'), o.get('openvino'))} | "
            f"{100 * r.get('extra_flops', 0):.1f} % | {errs or '-'} |"
        )
    recs = [f"{r['model']}: {r.get('rec_opts')}" for r in rows if r["variant"] == "original"]
    text = "\n".join(lines) + "\n\nRecommended ORT options: " + "; ".join(recs) + "\n"
    return text + ep_table(rows, orig)


def ep_table(rows: list[dict], orig: dict[str, dict]) -> str:
    """The ORT OpenVINO EP's steady state (run 3 over after session creation), where measured."""
    if not any(r.get("ep") is not None for r in rows):
        return ""
    lines = ["\n| model | variant | ORT OpenVINO EP | ×orig |", "|---|---|---|---|"]
    for r in rows:
        if r.get("ep") is not None:
            o = orig.get(r["model"], {}).get("ep")
            lines.append(
                f"| {r['model']} | {r['variant']} | {_mib(r['ep'])} | {_ratio(r['ep'], o)} |"
            )
    return "\n".join(lines) + "\n"


def write_doc(text: str) -> None:
    if not DOC.exists():
        return
    body = DOC.read_text()
    start, end = "<!-- BENCH:START -->", "<!-- BENCH:END -->"
    if start in body and end in body:
        pre, rest = body.split(start, 1)
        _, post = rest.split(end, 1)
        DOC.write_text(f"{pre}{start}\n{text}{end}{post}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--no-openvino", action="store_true")
    ap.add_argument("--search-seconds", type=float, default=60.0)
    ap.add_argument("--json", help="also write the raw rows here")
    ap.add_argument("--variants", help="comma list of variants (default: all of them)")
    ap.add_argument("--no-doc", action="store_true", help="do not update the docs page")
    ap.add_argument(
        "--ep-python",
        help="interpreter with onnxruntime-openvino: also measure the ORT OpenVINO EP",
    )
    args = ap.parse_args()
    names = args.models or (TINY if args.tiny else MODELS)
    if args.variants:
        keep = set(args.variants.split(","))
        for k in list(PASSES):
            if k not in keep:
                del PASSES[k]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="memshrink-actbench-") as tmp:
        for name in names:
            rows.extend(
                run_model(
                    name, Path(tmp), not args.no_openvino, args.search_seconds, args.ep_python
                )
            )
            if args.json:
                Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    text = (
        "Steady-state run peak, MiB of RSS growth over the post-load state "
        "(ORT: run 3 over after session creation; OpenVINO: infer 3 over after compile).\n\n"
        + table(rows)
    )
    print(text)
    if not args.no_doc:
        write_doc(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
