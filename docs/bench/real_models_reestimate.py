"""Re-run the estimator against a real-models sweep's stored verify reports (no re-measuring).

    python docs/bench/real_models_reestimate.py --dir /tmp/realsweep8 --json est.json
    python docs/bench/real_models_reestimate.py --dir /tmp/realsweep8 --backends openvino,ort-openvino \
        --only tv-ssdlite-legacy

For every ``OUT/<row>.all.verify.json`` (and ``<row>.ovep.verify.json``) that
``real_models_sweep.py`` wrote under ``--dir``, the original and the bound ``all`` output are
estimated with this checkout's code, bound to the shapes the verify run fed, through the
sweep's own ``estimate_errors``: per stage (predicted - measured) / measured, as the sweep's
``est_vs_meas``. A rule change is then re-tabled in minutes instead of a 20-minute sweep.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import real_models_sweep as sw  # noqa: E402


@dataclass
class _Case:
    """What ``estimate_errors`` reads of a builder's case, rebuilt from a verify report."""

    name: str
    shapes: dict[str, tuple[int, ...]]
    int_ranges: dict[str, tuple[int, int]] = field(default_factory=dict)
    dims: dict[str, int] = field(default_factory=dict)


def reestimate(folder: Path, backends: list[str], only: list[str]) -> dict[str, Any]:
    work = folder / "out"
    rows: dict[str, Any] = {}
    for js in sorted(work.glob("*.all.verify.json")):
        name = js.name[: -len(".all.verify.json")]
        if only and name not in only:
            continue
        rep = json.loads(js.read_text())
        measured = sw._measured(rep)
        ovep = work / f"{name}.ovep.verify.json"
        if ovep.exists():
            measured.update(sw._measured(json.loads(ovep.read_text())))
        measured = {k: v for k, v in measured.items() if k[1] in backends}
        case = _Case(
            name,
            {i["name"]: tuple(i["shape"]) for i in rep["inputs"]},
            {
                i["name"]: tuple(i["range"])
                for i in rep["inputs"]
                if i.get("range") and i["name"] in ("input_ids", "max_length", "num_beams")
            },
        )
        paths = {k: Path(v) for k, v in rep["models"].items()}
        with tempfile.TemporaryDirectory(prefix="msreest-") as tmp:
            errs, failed = sw.estimate_errors(case, Path(tmp), paths, measured)  # type: ignore[arg-type]
        rows[name] = errs
        print(
            f"{name:30s} "
            + " ".join(
                f"{e['model'][:4]}:{e['backend']}:{e['stage']} "
                f"{e['pred'] / 2**20:.1f}/{e['meas'] / 2**20:.1f} {e['err']:+.0%}"
                for e in errs
            )
            + (f" ({failed})" if failed else ""),
            flush=True,
        )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True, help="the sweep's --dir")
    ap.add_argument("--backends", default="cpu", help="comma-separated, verify's names")
    ap.add_argument("--only", action="append", default=[], help="row name (repeatable)")
    ap.add_argument("--json", help="write {row: est_vs_meas} here")
    args = ap.parse_args()
    rows = reestimate(Path(args.dir), args.backends.split(","), args.only)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
