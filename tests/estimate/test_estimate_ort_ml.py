"""ORT CPU: tree-ensemble kernels' parsed trees count (``estimate/ort_ml.py``).

Why: a forest's parameters are node attributes, not initializers, so no weight rule saw them;
a 24 MiB skl2onnx RandomForest measured +295 MiB at ORT CPU session creation where the
estimate said 10 (docs/estimate.md, "Tree ensembles on ORT CPU").
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.ort_ml import (
    TREE_BYTES_PER_LEAF_ENTRY,
    TREE_BYTES_PER_NODE,
    tree_counts,
)
from memshrink.estimate.ort_openvino import OVEP_CALIBRATION
from memshrink.estimate.text import format_estimate


def _forest_node(trees: int, depth: int, regressor: bool, out: list[str]) -> onnx.NodeProto:
    """``trees`` complete binary trees of ``depth``: trees * (2**(depth+1) - 1) nodes and
    trees * 2**depth leaves, one leaf entry each (regressor) or one per class (3 classes)."""
    per = 2 ** (depth + 1) - 1
    ids = np.arange(per)
    leaf = ids >= 2**depth - 1
    tid = np.repeat(np.arange(trees), per)
    nid = np.tile(ids, trees)
    is_leaf = np.tile(leaf, trees)
    attrs = {
        "nodes_treeids": tid.tolist(),
        "nodes_nodeids": nid.tolist(),
        "nodes_featureids": [0] * len(nid),
        "nodes_values": [0.5] * len(nid),
        "nodes_modes": ["LEAF" if x else "BRANCH_LEQ" for x in is_leaf],
        "nodes_truenodeids": np.where(is_leaf, 0, 2 * nid + 1).tolist(),
        "nodes_falsenodeids": np.where(is_leaf, 0, 2 * nid + 2).tolist(),
    }
    k, pre = (1, "target") if regressor else (3, "class")
    lt, ln = tid[is_leaf], nid[is_leaf]
    attrs[f"{pre}_treeids"] = np.repeat(lt, k).tolist()
    attrs[f"{pre}_nodeids"] = np.repeat(ln, k).tolist()
    attrs[f"{pre}_ids"] = np.tile(np.arange(k), len(lt)).tolist()
    attrs[f"{pre}_weights"] = [0.25] * (len(lt) * k)
    if regressor:
        return helper.make_node(
            "TreeEnsembleRegressor", ["X"], out, domain="ai.onnx.ml", n_targets=1, **attrs
        )
    return helper.make_node(
        "TreeEnsembleClassifier",
        ["X"],
        out,
        domain="ai.onnx.ml",
        classlabels_int64s=[0, 1, 2],
        **attrs,
    )


def _model(nodes: list[onnx.NodeProto], outs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes, "forest", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])], outs
    )
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)]
    )
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _regressor(trees: int) -> onnx.ModelProto:
    return _model(
        [_forest_node(trees, 3, True, ["Y"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 1])],
    )


def test_tree_counts_classifier_and_regressor() -> None:
    cls = _model(
        [_forest_node(2, 3, False, ["label", "probabilities"])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 3]),
        ],
    )
    # 2 trees of depth 3: 2 * 15 nodes, 2 * 8 leaves x 3 classes
    assert tree_counts(build_view(cls, dims={"N": 2}).graph) == (30, 48)
    assert tree_counts(build_view(_regressor(5), dims={"N": 2}).graph) == (75, 40)


def test_tree_counts_inside_an_if_branch() -> None:
    """A forest in a subgraph is built at session creation too (ORT creates every kernel)."""
    then_g = helper.make_graph(
        [_forest_node(2, 3, True, ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, ["N", 1])],
    )
    else_g = helper.make_graph(
        [helper.make_node("ReduceMax", ["X"], ["e"], keepdims=1, axes=[1])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["N", 1])],
    )
    nodes = [
        helper.make_node("ReduceMax", ["X"], ["mx"], keepdims=0),
        helper.make_node("Constant", [], ["zero"], value_float=0.0),
        helper.make_node("Greater", ["mx", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["Y"], then_branch=then_g, else_branch=else_g),
    ]
    m = _model(nodes, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 1])])
    assert tree_counts(build_view(m, dims={"N": 2}).graph) == (30, 16)


def test_ort_cpu_stages_grow_by_the_measured_bytes_per_node_and_leaf_entry() -> None:
    """Forests of 4 and 12 trees, one node each: every ORT CPU stage differs by exactly
    8 trees' bytes (8 * 15 nodes * 405 B + 8 * 8 entries * 138 B); nothing else changes."""
    small = estimate(_regressor(4), backend="ort", dims={"N": 2}).stage_peaks()
    big = estimate(_regressor(12), backend="ort", dims={"N": 2}).stage_peaks()
    want = 8 * 15 * TREE_BYTES_PER_NODE + 8 * 8 * TREE_BYTES_PER_LEAF_ENTRY
    assert set(small) == set(big) == {"session_creation", "run_1", "steady_state"}
    for stage in small:
        np.testing.assert_allclose(big[stage] - small[stage], want, rtol=0, atol=0)


def test_ep_runs_an_ml_only_graph_on_ort_cpu_plus_its_fixed_cost() -> None:
    """OpenVINO has no ai.onnx.ml ops: the EP compiles nothing for a forest (+ an Identity,
    which ORT removes), so its stages are ORT CPU's plus the EP's fixed cost (measured on 4
    skl2onnx / onnxmltools models: EP - ORT CPU = 17.3-17.4 MiB, fixed cost 17.7)."""
    m = _model(
        [_forest_node(3, 3, True, ["y0"]), helper.make_node("Identity", ["y0"], ["Y"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 1])],
    )
    cpu = estimate(m, backend="ort", dims={"N": 2})
    ep = estimate(m, backend="ort-openvino", dims={"N": 2})
    fixed = OVEP_CALIBRATION["ovep_anon"] + OVEP_CALIBRATION["ovep_file"]
    for stage, peak in cpu.stage_peaks().items():
        np.testing.assert_allclose(ep.stage_peaks()[stage] - peak, fixed, rtol=0, atol=1)
    assert ep.prediction.details["ovep_subgraphs"] == 0


def test_ep_with_a_standard_op_between_ml_ops_still_compiles_a_subgraph() -> None:
    """skl2onnx's Scaler -> Cast -> ...: the Cast goes to OpenVINO (measured: EP session 47.8
    MiB with it, 27.1 without), so the OpenVINO path with the forest on ORT CPU is kept."""
    m = _model(
        [
            _forest_node(3, 3, True, ["y0"]),
            helper.make_node("Cast", ["y0"], ["Y"], to=TensorProto.DOUBLE),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, ["N", 1])],
    )
    ep = estimate(m, backend="ort-openvino", dims={"N": 2})
    assert ep.prediction.details["ovep_subgraphs"] == 1


def test_partial_line_names_the_ops_when_every_input_is_bound() -> None:
    """skl2onnx's classifier bound with --shape still has outputs of unknown size (shape
    inference types TreeEnsembleClassifier's outputs but gives no dims, ZipMap's are maps): the
    note must name those ops, not ask for bindings the user already gave."""
    m = _model(
        [_forest_node(2, 2, False, ["label", "probabilities"])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [None, 3]),
        ],
    )
    bound = format_estimate(estimate(m, backend="ort", dims={"N": 2}))
    assert "every input is bound" in bound
    assert "ai.onnx.ml.TreeEnsembleClassifier" in bound
    assert "--dim SYMBOL=N" not in bound
    unbound = format_estimate(estimate(m, backend="ort", allow_partial=True))
    assert "bind the inputs' symbolic dims" in unbound
