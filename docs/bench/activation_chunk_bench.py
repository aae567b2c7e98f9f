"""The ``chunk`` pass on the activation-heavy suite: predicted vs measured steady-state run peak.

For each model: run ``chunk`` (its own choice of mode and K, from the estimator), save, then
measure original and rewritten in separate processes with ``memshrink.verify`` on ORT CPU
(default session options) and OpenVINO CPU, comparing outputs at atol 1e-4, rtol 1e-4.
The steady-state run peak is the growth of process RSS during run 3 over the state after
session creation (OpenVINO: infer 3 over after compile) — the same definition as
``activation_bench.py``. Prints a markdown table and writes it into ``docs/chunk.md``
between the BENCH markers.

    python docs/bench/activation_chunk_bench.py                     # the four suite models
    python docs/bench/activation_chunk_bench.py unet --no-openvino
    python docs/bench/activation_chunk_bench.py --tiny              # CI-sized variants
    python docs/bench/activation_chunk_bench.py unet -O chunk.max_chunks=4
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

from activation_bench import _steady  # noqa: E402  (steady-state growth from a verify run)

MODELS = ["resnet50-b16", "bert-base-b4s512", "unet", "multibranch"]
TINY = ["resnet50-tiny", "unet-tiny", "multibranch-tiny"]
ATOL = RTOL = 1e-4
MiB = 1 << 20
DOC = ROOT / "docs" / "chunk.md"
BEGIN, END = "<!-- BENCH:chunk -->", "<!-- /BENCH:chunk -->"


def _abs_peak(run: dict[str, Any]) -> int | None:
    """Run 3 (infer 3) peak over the empty process: weights and session state included."""
    st = {s["name"]: s for s in run.get("stages", [])}
    last = st.get("run3") or st.get("infer3")
    return None if last is None else int(last["peak_delta"])


def _last_seconds(run: dict[str, Any]) -> float | None:
    stages = run.get("stages", [])
    return float(stages[-1].get("seconds", 0.0)) if stages else None


def _predict(path: Path, backend: str, shapes: dict[str, list[int]] | None) -> int | None:
    from memshrink.estimate import estimate

    try:
        est = estimate(str(path), backend=backend, shapes=shapes)
    except Exception as exc:  # noqa: BLE001 - a failed prediction is reported, not fatal
        print(f"  estimate {backend} failed: {exc}", file=sys.stderr)
        return None
    stage = next(s for s in est.prediction.stages if s.name == "steady_state")
    return int(stage.activations)


def _recommended(path: Path, shapes: dict[str, list[int]] | None) -> dict[str, Any]:
    from memshrink.recommend import recommend, session_options

    return session_options(recommend(str(path), backend="ort", shapes=shapes))


def _profile_steady(path: Path, shapes: Any, session_options: dict[str, Any]) -> int | None:
    from memshrink.verify import profile

    rep = profile(str(path), backends=("cpu",), shapes=shapes, runs=3,
                  session_options=session_options, timeout=1800)  # fmt: skip
    return _steady(rep.runs[0].to_dict())


def bench(
    name: str, workdir: Path, backends: tuple[str, ...], options: dict, recommended: bool = False
) -> dict[str, Any]:
    import models
    from memshrink.bindings import load_sidecar
    from memshrink.manager import PassContext, PassManager
    from memshrink.model import load
    from memshrink.verify import verify
    from memshrink.writer import save_model

    cached = ROOT / ".cache" / "models" / f"{name}.onnx"  # built once, shared by the benches
    src = cached if cached.exists() else Path(models.build(name))
    side = load_sidecar(str(src))
    shapes = {i.name: list(i.shape) for i in side.inputs} if side and side.inputs else None
    out = workdir / f"{name}.chunk.onnx"
    t0 = time.perf_counter()
    model, report = PassManager(["chunk"], options={"chunk": options}).run(
        load(src), PassContext(shapes=shapes)
    )
    seconds = time.perf_counter() - t0
    stats = report.passes[0].stats
    row: dict[str, Any] = {
        "model": name,
        "modified": report.passes[0].modified,
        "pass_seconds": round(seconds, 2),
        "stats": {k: v for k, v in stats.items() if k != "candidates"},
        "candidates": stats.get("candidates", []),
    }
    if not report.passes[0].modified:
        row["reason"] = stats.get("reason")
        return row
    save_model(model, out)
    del model
    for be, key in (("ort", "cpu"), ("openvino", "openvino")):
        if key in backends:
            row[f"pred_{key}_before"] = _predict(src, be, shapes)
            row[f"pred_{key}_after"] = _predict(out, be, shapes)
    rep = verify(str(src), str(out), backends=backends, shapes=shapes, runs=3, atol=ATOL,
                 rtol=RTOL, timeout=1800)  # fmt: skip
    d = rep.to_dict()
    for r in d["runs"]:
        key = f"{r['backend']}_{r['model']}"
        row[f"meas_{key}"] = _steady(r)
        row[f"abs_{key}"] = _abs_peak(r)
        row[f"secs_{key}"] = _last_seconds(r)
        row[f"status_{key}"] = r["status"]
    for c in d["comparisons"]:
        errs = [o.get("max_abs") for o in c["outputs"] if o.get("max_abs") is not None]
        row[f"err_{c['backend']}"] = max(errs) if errs else None
        row[f"cmp_{c['backend']}"] = c["status"]
    if recommended:  # ORT CPU under the session options the estimator recommends for each
        for label, path in (("original", src), ("rewritten", out)):
            opts = _recommended(path, shapes)
            row[f"rec_opts_{label}"] = opts
            row[f"meas_cpu-rec_{label}"] = _profile_steady(path, shapes, opts)
    return row


def _m(n: int | None) -> str:
    return "-" if n is None else f"{n / MiB:.0f}"


def _ratio(a: int | None, b: int | None) -> str:
    return "-" if not a or b is None else f"{b / a:.2f}"


def table(rows: list[dict[str, Any]], backends: tuple[str, ...]) -> str:
    head = (
        "| model | chunking | extra FLOPs | backend | predicted before → after (MiB) | ratio "
        "| measured before → after (MiB) | ratio | whole-process run-3 peak (MiB) "
        "| run 3 s before → after | max abs err |"
    )
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        if not r.get("modified"):
            lines.append(f"| {r['model']} | not chunked: {r.get('reason')} |" + " |" * 9)
            continue
        st = r["stats"]
        how = f"{st.get('mode')} ×{st.get('chunks')}" + (
            f" (stagger {st['stagger']})" if st.get("stagger") else ""
        )
        keys = list(backends) + (["cpu-rec"] if "meas_cpu-rec_original" in r else [])
        for key in keys:
            pb, pa = r.get(f"pred_{key}_before"), r.get(f"pred_{key}_after")
            mb, ma = r.get(f"meas_{key}_original"), r.get(f"meas_{key}_rewritten")
            sb, sa = r.get(f"secs_{key}_original"), r.get(f"secs_{key}_rewritten")
            err = r.get(f"err_{key}")
            secs = "-" if sb is None or sa is None else f"{sb:.2f} → {sa:.2f}"
            lines.append(
                f"| {r['model']} | {how} | {st.get('extra_flops', 0):.0%} | {key} "
                f"| {_m(pb)} → {_m(pa)} | {_ratio(pb, pa)} | {_m(mb)} → {_m(ma)} "
                f"| {_ratio(mb, ma)} | {_m(r.get(f'abs_{key}_original'))} → "
                f"{_m(r.get(f'abs_{key}_rewritten'))} | {secs} | {'-' if err is None else f'{err:.1e}'} "
                f"({r.get(f'cmp_{key}', '-')}) |"
            )
    return "\n".join(lines)


def write_doc(text: str) -> None:
    if not DOC.exists():
        return
    doc = DOC.read_text()
    if BEGIN in doc and END in doc:
        pre, rest = doc.split(BEGIN, 1)
        _, post = rest.split(END, 1)
        DOC.write_text(f"{pre}{BEGIN}\n{text}\n{END}{post}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--no-openvino", action="store_true")
    ap.add_argument("-O", dest="opts", action="append", default=[], help="chunk.OPT=VALUE")
    ap.add_argument("--json", help="also write the rows as JSON here")
    ap.add_argument("--no-doc", action="store_true", help="do not update docs/chunk.md")
    ap.add_argument(
        "--recommended",
        action="store_true",
        help="also measure ORT CPU under memshrink.recommend's session options",
    )
    ap.add_argument("--from-json", help="only print/write the table of an earlier --json run")
    a = ap.parse_args(argv)
    names = a.models or (TINY if a.tiny else MODELS)
    backends = ("cpu",) if a.no_openvino else ("cpu", "openvino")
    options = {}
    for o in a.opts:
        k, v = o.split("=", 1)
        options[k.removeprefix("chunk.")] = v
    if a.from_json:
        rows = json.loads(Path(a.from_json).read_text())
        keys = ("cpu", "openvino")
        text = table(rows, keys if not a.no_openvino else ("cpu",))
        print(text)
        if not a.no_doc:
            write_doc(text)
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="chunk-bench-", dir=ROOT / ".cache") as tmp:
        for name in names:
            print(f"== {name}", file=sys.stderr, flush=True)
            rows.append(bench(name, Path(tmp), backends, options, a.recommended))
            print(json.dumps(rows[-1], default=str)[:2000], file=sys.stderr, flush=True)
            if a.json:
                Path(a.json).write_text(json.dumps(rows, indent=1, default=str))
    text = table(rows, backends)
    print(text)
    if not a.no_doc and not a.tiny:
        write_doc(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
