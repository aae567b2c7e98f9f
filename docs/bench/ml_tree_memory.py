"""ORT CPU memory of ai.onnx.ml tree ensembles against their size (docs/estimate.md, "Tree ensembles").

    python docs/bench/ml_tree_memory.py [--json out.json]

Builds TreeEnsembleClassifier / TreeEnsembleRegressor micro-graphs (``T`` complete binary trees
of depth ``d``: ``T * (2**(d+1) - 1)`` nodes, ``T * 2**d`` leaves, one leaf entry per leaf and
class/target) with onnx helpers, and measures each with ``memshrink.verify.profile`` on ONNX
Runtime CPU (own process, 3 runs, peaks over the process baseline). Prints per model the stage
peaks and the bytes per tree node and per leaf entry that the estimator's rule uses.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))

from memshrink.verify import profile  # noqa: E402


def tree_ensemble(
    trees: int, depth: int, features: int = 20, classes: int = 3, regressor: bool = False
) -> onnx.ModelProto:
    """A complete-binary-tree forest as skl2onnx writes it (ai.onnx.ml 1, list attributes)."""
    rng = np.random.default_rng(0)
    per_tree = 2 ** (depth + 1) - 1
    ids = np.arange(per_tree)
    leaf = ids >= 2**depth - 1
    tid = np.repeat(np.arange(trees), per_tree)
    nid = np.tile(ids, trees)
    is_leaf = np.tile(leaf, trees)
    true_ids = np.where(is_leaf, 0, 2 * nid + 1)
    false_ids = np.where(is_leaf, 0, 2 * nid + 2)
    n = trees * per_tree
    attrs: dict[str, Any] = {
        "nodes_treeids": tid.tolist(),
        "nodes_nodeids": nid.tolist(),
        "nodes_featureids": np.where(is_leaf, 0, rng.integers(0, features, n)).tolist(),
        "nodes_values": rng.standard_normal(n).astype(np.float32).tolist(),
        "nodes_hitrates": [1.0] * n,
        "nodes_modes": ["LEAF" if x else "BRANCH_LEQ" for x in is_leaf],
        "nodes_truenodeids": true_ids.tolist(),
        "nodes_falsenodeids": false_ids.tolist(),
        "nodes_missing_value_tracks_true": [0] * n,
        "post_transform": "NONE",
    }
    lt, ln = tid[is_leaf], nid[is_leaf]
    k = 1 if regressor else classes
    pre = "target" if regressor else "class"
    attrs[f"{pre}_treeids"] = np.repeat(lt, k).tolist()
    attrs[f"{pre}_nodeids"] = np.repeat(ln, k).tolist()
    attrs[f"{pre}_ids"] = np.tile(np.arange(k), len(lt)).tolist()
    attrs[f"{pre}_weights"] = rng.random(len(lt) * k).astype(np.float32).tolist()
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", features])
    if regressor:
        node = helper.make_node(
            "TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml", n_targets=1, **attrs
        )
        outs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 1])]
    else:
        node = helper.make_node(
            "TreeEnsembleClassifier",
            ["X"],
            ["label", "probabilities"],
            domain="ai.onnx.ml",
            classlabels_int64s=list(range(classes)),
            **attrs,
        )
        outs = [
            helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", classes]),
        ]
    g = helper.make_graph([node], "forest", [x], outs)
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)]
    )
    m.ir_version = 8
    return m


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    args = ap.parse_args()
    grid = [
        (20, 10, False),
        (80, 10, False),
        (160, 11, False),
        (20, 10, True),
        (80, 10, True),
        (160, 11, True),
    ]
    rows = []
    with tempfile.TemporaryDirectory(prefix="mltree-") as tmp:
        for trees, depth, reg in grid:
            m = tree_ensemble(trees, depth, regressor=reg)
            p = Path(tmp) / f"t{trees}_d{depth}_{'reg' if reg else 'cls'}.onnx"
            onnx.save(m, str(p))
            rep = profile(str(p), backends=("cpu",), shapes={"X": (100, 20)}, runs=3).to_dict()
            run = rep["runs"][0]
            st = {s["name"]: int(s["peak_delta"]) for s in run["stages"]}
            nodes = trees * (2 ** (depth + 1) - 1)
            entries = trees * 2**depth * (1 if reg else 3)
            row = {
                "op": "regressor" if reg else "classifier",
                "trees": trees,
                "depth": depth,
                "nodes": nodes,
                "leaf_entries": entries,
                "file_bytes": p.stat().st_size,
                **st,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
