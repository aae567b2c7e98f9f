"""Which nodes the ORT OpenVINO EP leaves to ORT's CPU EP, from ORT's verbose node placements.

Creates one EP session per model in a child (the EP interpreter, ``.cache/venv-ovep`` or
MEMSHRINK_PYTHON_ORT_OPENVINO) with verbose logging, and parses
``VerifyEachNodeIsAssignedToAnEp``: the fused ``OpenVINO-EP-subgraph_N`` nodes and the op types
placed on ``CPUExecutionProvider``. Used to find what ``ep-compat`` should rewrite
(docs/activation-passes.md, "ep-compat").

    python docs/bench/ep_placement_scan.py MODEL.onnx [...] [--json rows.json]
    python docs/bench/ep_placement_scan.py --dir /tmp/models   # every .onnx below it
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHILD = (
    "import sys, onnxruntime as ort\n"
    "so = ort.SessionOptions(); so.log_severity_level = 0; so.log_verbosity_level = 1\n"
    "ort.InferenceSession(sys.argv[1], so, providers=['OpenVINOExecutionProvider'])\n"
)
_HEAD = re.compile(r"Node\(s\) placed on \[(\w+)\]\. Number of nodes: (\d+)")
_ALL = re.compile(r"All nodes placed on \[(\w+)\]\. Number of nodes: (\d+)")
_NODE = re.compile(r"VerifyEachNodeIsAssignedToAnEp\]\s{3}(\S+) \(")


def ep_python() -> str:
    return os.environ.get("MEMSHRINK_PYTHON_ORT_OPENVINO") or str(
        REPO / ".cache" / "venv-ovep" / "bin" / "python"
    )


def parse(log: str) -> dict[str, object]:
    """{"subgraphs": n, "cpu": {op: count}} from ORT's verbose placement log."""
    subgraphs, cpu = 0, Counter()
    current = None
    for line in log.splitlines():
        if m := _ALL.search(line):
            # Everything on one EP: the OpenVINO EP fuses it into one node.
            subgraphs = int(m.group(2)) if m.group(1) == "OpenVINOExecutionProvider" else 0
            current = None
        elif m := _HEAD.search(line):
            current = m.group(1)
        elif (m := _NODE.search(line)) and current:
            if current == "OpenVINOExecutionProvider":
                subgraphs += 1
            else:
                cpu[m.group(1)] += 1
        elif "VerifyEachNodeIsAssignedToAnEp" not in line:
            current = None
    return {"subgraphs": subgraphs, "cpu": dict(cpu)}


def scan(path: Path, py: str, timeout: float = 600) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        r = subprocess.run(
            [py, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired:
        return {"model": path.name, "error": "timeout"}
    row: dict[str, object] = {"model": path.name, **parse(r.stderr + r.stdout)}
    if r.returncode:
        err = [ln for ln in r.stderr.splitlines() if "Error" in ln or "FAIL" in ln]
        row["error"] = (err[-1] if err else r.stderr[-300:])[-300:]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--dir", type=Path, help="scan every .onnx below this folder")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    models = list(args.models)
    if args.dir:
        models += sorted(args.dir.rglob("*.onnx"))
    py = ep_python()
    rows = []
    for m in models:
        row = scan(m, py)
        rows.append(row)
        print(json.dumps(row), flush=True)
    total: Counter[str] = Counter()
    for row in rows:
        total.update(row.get("cpu", {}))  # type: ignore[arg-type]
    print("ops left to ORT CPU, over all models:", dict(total.most_common()))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
