"""Wall time, CPU and peak RSS (VmHWM) of memshrink's own commands on a set of models:
``optimize --passes all``, ``estimate --backend B`` for each backend, and ``verify IN OUT``'s
parent process (its runtime children hold the model; ``tree`` is theirs). Each command runs in a
fresh ``python -m memshrink.cli`` child whose VmHWM is polled (``tool_cost_bench.run_measured``).

    python docs/bench/tool_cost_matrix.py [--models NAME[:ARG,ARG...],...] [--file PATH[:ARGS]]
        [--commands optimize,estimate,verify] [--backends ort,openvino,ort-openvino,cuda]
        [--verify-backends cpu] [--json OUT.json] [--keep DIR] [--tree NAME=SRC_ROOT ...]

A model is a suite name (built into .cache/models) or ``--file PATH``; text after ``:`` is split
on spaces and appended to every command (``--file 'rf.onnx:--shape X=5,10'``). Which code runs is
whatever ``memshrink`` PYTHONPATH selects (run once per tree to compare), or, with ``--tree
NAME=ROOT`` given twice or more, each command runs under each tree in turn (``ROOT/src`` first on
PYTHONPATH), so a tree's row and the next tree's are measured minutes apart at the same load
(rows carry ``tree``; outputs go to ``DIR/TREE/``). ``--keep DIR`` keeps each optimize output
(``DIR/NAME.all.onnx``) for an ``md5sum`` against another tree's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from tool_cost_bench import MIB, run_measured  # noqa: E402

DEFAULT_MODELS = "bert-base,bert-base-ext,resnet50"


def _tree_env(root: str) -> dict[str, str] | None:
    """The environment that runs ``root``'s memshrink (None: this process's own)."""
    if not root:
        return None
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([f"{root}/src", root, env.get("PYTHONPATH", "")])
    return env


def _split(spec: str) -> tuple[str, list[str]]:
    name, _, extra = spec.partition(":")
    return name, extra.split()


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--models", default=DEFAULT_MODELS)
    ap.add_argument("--file", action="append", default=[])
    ap.add_argument("--commands", default="optimize,estimate,verify")
    ap.add_argument("--backends", default="ort,openvino,ort-openvino,cuda")
    ap.add_argument("--verify-backends", default="cpu")
    ap.add_argument("--json")
    ap.add_argument("--keep")
    ap.add_argument("--tree", action="append", default=[], help="NAME=ROOT: alternate trees")
    args = ap.parse_args()
    trees = [t.partition("=")[::2] for t in args.tree] or [("", "")]
    sys.path.insert(0, str(ROOT))
    import models

    specs: list[tuple[str, Path, list[str]]] = []
    for spec in [s for s in args.models.split(",") if s]:
        name, extra = _split(spec)
        specs.append((name, Path(models.build(name)), extra))
    for spec in args.file:
        path, extra = _split(spec)
        specs.append((Path(path).stem, Path(path), extra))
    commands = args.commands.split(",")
    cli = [sys.executable, "-m", "memshrink.cli"]
    rows = []
    print("| model | command | tree | wall (s) | CPU (s) | peak RSS (MiB) | exit |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    for name, src, extra in specs:
        weights = sum(
            p.stat().st_size for p in src.parent.glob(src.name + "*") if p.suffix != ".json"
        )
        with tempfile.TemporaryDirectory(prefix="memshrink-cost-", dir="/tmp") as tmp:
            out = Path(args.keep or tmp) / "{tree}" / f"{name}.all.onnx"
            for tree, _ in trees:
                Path(str(out).replace("{tree}", tree)).parent.mkdir(parents=True, exist_ok=True)
            plan: list[tuple[str, list[str]]] = []
            if "optimize" in commands or "verify" in commands:
                plan.append(
                    ("optimize --passes all", ["optimize", str(src), str(out), "--passes", "all"])
                )
            if "estimate" in commands:
                for b in args.backends.split(","):
                    plan.append((f"estimate --backend {b}", ["estimate", str(src), "--backend", b]))
            if "verify" in commands:
                vb = args.verify_backends
                verify = ["verify", str(src), str(out), "--backends", vb]
                plan.append((f"verify IN OUT --backends {vb} (parent)", verify))
            for label, argv in plan:
                for tree, root in trees:
                    row = {"model": name, "files_mib": round(weights / MIB), "command": label}
                    if tree:
                        row["tree"] = tree
                    env = _tree_env(root)
                    cmd = [a.replace("{tree}", tree) for a in cli + argv + extra]
                    row.update(run_measured(cmd, env=env))
                    rows.append(row)
                    peak = f"{row['own_mib']}"
                    if row["tree_mib"] > row["own_mib"] + 8:
                        peak += f" (children {row['tree_mib']})"
                    print(
                        f"| {name} | {label} | {tree} | {row['wall_s']} | {row['cpu_s']} | {peak}"
                        f" | {row['exit']} |",
                        flush=True,
                    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
