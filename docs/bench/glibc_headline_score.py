"""Score printed-figure rules for embedded-weight ORT CPU models over stored measurements.

    python docs/bench/glibc_headline_score.py --suite A.json [B.json …] [--probe P.jsonl …]
        [--sweep DIR …] [--cache rows.jsonl] [-v]

Why: an embedded model's processes land in one of a few glibc heaps (docs/estimate.md, "Which
glibc mode…"); the estimator prints one figure per stage. Each rule below turns the replay's
modes (``stages[s].modes``, ``details.glibc_band``, ``details.glibc_replays``) into that figure;
no rule looks at the model. Measurements: ``estimate_bench.py`` JSONs (``--suite``: every
version of ``estimate_results_avx512.json``; a row's processes are its ``spread_*``, rows
repeated across versions counted once), ``glibc_coin_probe.py`` lines of the ``verifier``
variant (``--probe``: creation and run 1), and the real-model sweeps' verify reports
(``--sweep``: one process per row, embedded files only, estimated through the sweep's own
``estimate_errors``; ``--cache`` keeps those estimates between calls). Per rule: stages within
10 % against each row's modal figure (``estimate_bench.modal``), sum of |error|, and processes
within 10 %.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "src"))

from estimate_bench import SUITE, modal  # noqa: E402

MiB = 1 << 20
STAGES = ("session_creation", "run_1", "steady_state")
SPREAD = {
    "session_creation": "spread_create",
    "run_1": "spread_run1",
    "steady_state": "spread_steady",
}
PROBE = {"session_creation": "create", "run_1": "run1"}


def minimax(a: float, b: float) -> float:
    """The figure whose larger relative error against ``a`` and ``b`` is smallest: 2ab/(a+b)."""
    return 2 * a * b / (a + b)


def rules(stage: str, est: dict[str, Any]) -> dict[str, float]:
    """Every candidate figure for one stage of one estimate."""
    modes, band, pred = est["modes"][stage], est["band"][stage], est["pred"][stage]
    lo, hi = band
    classes = [r[stage] for r in est["replays"].get("address_classes", [])]
    spread = (hi - lo) / (hi + lo)
    return {
        "headline": pred,
        "minimax_band": minimax(lo, hi),
        "minimax_classes": minimax(min(classes), max(classes)) if classes else pred,
        "minimax_if_covers": minimax(lo, hi) if spread <= 0.10 else pred,
        "mid_band": (lo + hi) / 2,
        "classes_mean": modes.get("address_classes", pred),
        "partly_pinned": modes.get("partly_pinned", pred),
        "pinned": modes["pinned"],
        "consolidated": modes["consolidated"],
    }


def _summary(out: dict[str, Any]) -> dict[str, Any]:
    """What the rules read of an ``estimate --json`` document."""
    st, det = out["stages"], out["details"]
    return {
        "modes": {s: st[s]["modes"] for s in STAGES},
        "pred": {s: st[s]["peak"] for s in STAGES},
        "band": det["glibc_band"],
        "replays": det.get("glibc_replays", {}),
    }


def suite_units(files: list[str], probes: list[str]) -> list[tuple[str, str, dict[str, list[int]]]]:
    seen, units = set(), []
    for f in files:
        for row in json.loads(Path(f).read_text()):
            if not row.get("pred_modes") or row["model"] not in SUITE:
                continue
            key = (row["model"], tuple(row[SPREAD["session_creation"]]))
            if key not in seen:
                seen.add(key)
                units.append((Path(f).name, row["model"], {s: row[SPREAD[s]] for s in STAGES}))
    for f in probes:
        by: dict[str, list[dict[str, Any]]] = {}
        for line in Path(f).read_text().splitlines():
            r = json.loads(line)
            if r["variant"] == "verifier" and not r["aslr_off"] and r["seed"] == "random":
                by.setdefault(r["model"], []).append(r)
        for m, rs in by.items():
            spreads = {s: [int(r[k] * MiB) for r in rs] for s, k in PROBE.items()}
            units.append((Path(f).name, m, spreads))
    return units


def suite_estimate(model: str) -> dict[str, Any]:
    import contextlib
    import io

    from memshrink.cli import main as cli

    name, dims = SUITE[model]
    with tempfile.TemporaryDirectory(prefix="headline-") as tmp:
        js = Path(tmp) / "e.json"
        argv = ["estimate", str(HERE.parents[1] / ".cache/models" / name), "--backend", "ort"]
        argv += [f"--dim={k}={v}" for k, v in dims.items()] + ["--json", str(js)]
        with contextlib.redirect_stdout(io.StringIO()):
            cli(argv)
        return _summary(json.loads(js.read_text()))


def _embedded(path: Path) -> bool:
    import onnx

    if not path.exists() or os.path.getsize(path) < MiB:
        return False
    m = onnx.load(str(path), load_external_data=False)
    return not any(t.data_location == onnx.TensorProto.EXTERNAL for t in m.graph.initializer)


def sweep_rows(dirs: list[str], cache: Path | None) -> list[dict[str, Any]]:
    """Embedded originals / outputs of the sweeps with their ORT CPU measurements and modes."""
    import real_models_reestimate as rr
    import real_models_sweep as sw

    rows = (
        [json.loads(x) for x in cache.read_text().splitlines()] if cache and cache.exists() else []
    )
    done = {(r["dir"], r["row"], r["label"]) for r in rows}
    for d in dirs:
        for js in sorted(Path(d).glob("**/out/*.all.verify.json")):
            name = js.name[: -len(".all.verify.json")]
            rep = json.loads(js.read_text())
            measured = {k: v for k, v in sw._measured(rep).items() if k[1] == "cpu"}
            paths = {k: Path(v) for k, v in rep["models"].items()}
            for label in ("original", "rewritten"):
                key = (str(js.parent.parent), name, label)
                if key in done or (label, "cpu") not in measured or label not in paths:
                    continue
                if not _embedded(paths[label]):
                    continue
                shapes = {i["name"]: tuple(i["shape"]) for i in rep["inputs"]}
                ranges = {
                    i["name"]: tuple(i["range"])
                    for i in rep["inputs"]
                    if i.get("range") and i["name"] == "input_ids"
                }
                case = rr._Case(name, shapes, ranges)
                with tempfile.TemporaryDirectory(prefix="headline-") as tmp:
                    meas = {(label, "cpu"): measured[(label, "cpu")]}
                    errs, _ = sw.estimate_errors(case, Path(tmp), {label: paths[label]}, meas)
                    out = Path(tmp) / f"{name}.{label}.cpu.estimate.json"
                    if not out.exists() or not errs:
                        continue
                    doc = json.loads(out.read_text())
                if not doc["details"].get("glibc_band"):
                    continue
                rec = {"dir": key[0], "row": name, "label": label, **_summary(doc)}
                rec["meas"] = {e["stage"]: e["meas"] for e in errs}
                rows.append(rec)
                if cache:
                    with cache.open("a") as f:
                        f.write(json.dumps(rec) + "\n")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", nargs="*", default=[])
    ap.add_argument("--probe", nargs="*", default=[])
    ap.add_argument("--sweep", nargs="*", default=[])
    ap.add_argument("--cache", type=Path)
    ap.add_argument("-v", action="store_true", help="one line per row and stage")
    a = ap.parse_args(argv)
    units: list[tuple[str, str, str, list[int], dict[str, float]]] = []
    ests: dict[str, dict[str, Any]] = {}
    for src, model, spreads in suite_units(a.suite, a.probe):
        est = ests.get(model) or ests.setdefault(model, suite_estimate(model))
        for s, procs in spreads.items():
            units.append((src, model, s, procs, rules(s, est)))
    for r in sweep_rows(a.sweep, a.cache):
        for s in STAGES:
            if s in r["meas"] and s in r["band"]:
                src = r["dir"].removeprefix("/tmp/")
                units.append((src, f"{r['row']}:{r['label']}", s, [r["meas"][s]], rules(s, r)))
    names = list(units[0][4]) if units else []
    print(
        "| rule | stages within 10 % (row's modal figure) | gained / lost against the "
        "headline | sum of abs error (points) | processes within 10 % |"
    )
    print("| --- | --- | --- | --- | --- |")
    moved: dict[str, list[str]] = {}
    for n in names:
        rows_in = procs_in = procs_n = gained = lost = 0
        total = 0.0
        for src, m, s, procs, fig in units:
            pick = modal(procs)
            meas = statistics.median_low(v for i, v in enumerate(procs) if i in pick)
            e = abs(fig[n] - meas) / meas
            base = abs(fig["headline"] - meas) / meas <= 0.10
            rows_in += e <= 0.10
            gained += e <= 0.10 and not base
            lost += e > 0.10 and base
            if (e <= 0.10) != base:
                moved.setdefault(n, []).append(f"{'+' if e <= 0.10 else '-'}{src}:{m}:{s}")
            total += 100 * e
            procs_in += sum(abs(fig[n] - p) / p <= 0.10 for p in procs)
            procs_n += len(procs)
        print(
            f"| {n} | {rows_in} / {len(units)} | +{gained} / −{lost} | {total:.1f} | "
            f"{procs_in} / {procs_n} |"
        )
    for n, v in moved.items():
        print(f"{n}: {' '.join(v)}")
    if a.v:
        for src, m, s, procs, fig in units:
            pick = modal(procs)
            meas = statistics.median_low(v for i, v in enumerate(procs) if i in pick)
            errs = " ".join(f"{n} {100 * (fig[n] - meas) / meas:+.1f}" for n in names)
            print(f"{src:24s} {m:36s} {s:16s} {meas / MiB:8.1f} ×{len(procs)} {errs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
