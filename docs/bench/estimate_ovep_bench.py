"""Predicted vs measured memory on ONNX Runtime's OpenVINO EP (``ort-openvino``), per model.

    python docs/bench/estimate_ovep_bench.py [--models NAME ...] [--json out.json]
        [--python .cache/venv-ovep/bin/python] [--profiles DIR]

Ground truth: ``memshrink.verify.profile`` with backend ``ort-openvino`` (one fresh child in
the EP's own interpreter, exact ``VmHWM`` per stage, deltas over the post-import baseline),
exactly what ``memshrink verify`` measures. ``--profiles DIR`` reuses ``DIR/NAME.json`` files
written by ``memshrink profile --json`` instead of measuring again. Errors are
(predicted - measured) / measured of the stage peaks: session, run 1, steady state (run 3).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from memshrink.estimate.backends import VERIFY_STAGES  # noqa: E402

MiB = 1 << 20
SUITE: dict[str, tuple[str, dict[str, int]]] = {
    # name: (file in .cache/models, dims binding; {} = the model's sidecar)
    **{
        n: (f"{n}.onnx", {})
        for n in (
            "bert-base",
            "bert-base-ext",
            "gpt2",
            "gpt2-ext",
            "vit-b16-ext",
            "resnet50",
            "resnet50-b16",
            "mobilenetv2",
            "unet",
            "multibranch",
            "zoo-resnet50",
            "zoo-squeezenet",
            "zoo-densenet121",
        )
    },
    "bert-base-b4s512-ext": ("bert-base-ext.onnx", {"batch": 4, "sequence": 512}),
}
STAGES = tuple(VERIFY_STAGES["ort-openvino"].items())


def measured(
    name: str, path: Path, dims: dict[str, int], python: str, profiles: Path | None
) -> dict[str, float]:
    """Stage peak deltas (MiB) of the ``ort-openvino`` run."""
    if profiles is not None and (profiles / f"{name}.json").is_file():
        runs = json.loads((profiles / f"{name}.json").read_text())["runs"]
        run = next(r for r in runs if r["backend"] == "ort-openvino")
    else:
        from memshrink.verify import profile

        py = {"ort-openvino": python}
        rep = profile(str(path), backends=("ort-openvino",), dims=dims or None, python=py)
        run = rep.runs[0].to_dict()
    if run["status"] != "ok":
        raise RuntimeError(f"{path.name}: {run['status']}: {run['error']}")
    return {s["name"]: s["peak_delta"] / MiB for s in run["stages"]}


def pct(pred: float, meas: float) -> float:
    return 100.0 * (pred - meas) / meas if meas else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(SUITE))
    ap.add_argument("--python", default=str(ROOT / ".cache/venv-ovep/bin/python"))
    ap.add_argument("--profiles", type=Path, default=None)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    from memshrink.estimate import estimate

    cache = ROOT / ".cache" / "models"
    rows: list[dict[str, Any]] = []
    print("| model | session pred/meas | err | run 1 pred/meas | err | steady pred/meas | err |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in a.models:
        fname, dims = SUITE.get(name, (f"{name}.onnx", {}))
        path = cache / fname
        if not path.is_file():
            print(f"| {name} | not built |", flush=True)
            continue
        est = estimate(str(path), backend="ort-openvino", dims=dims or None)
        pred = {k: v / MiB for k, v in est.stage_peaks().items()}
        meas = measured(name, path, dims, a.python, a.profiles)
        row: dict[str, Any] = {"model": name}
        cells = [name]
        for st, ms in STAGES:
            p, m = pred[st], meas[ms]
            row[st] = {"pred": p, "meas": m, "err_pct": pct(p, m)}
            cells += [f"{p:.0f}/{m:.0f}", f"{pct(p, m):+.1f}%"]
        rows.append(row)
        print("| " + " | ".join(cells) + " |", flush=True)
    if rows:
        errs = [abs(r[st]["err_pct"]) for r in rows for st, _ in STAGES]
        ok = sum(e <= 10 for e in errs)
        print(f"\nwithin ±10 %: {ok}/{len(errs)} stage peaks; worst {max(errs):.1f} %")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
