"""simplify hands onnxsim the skeleton of a model with large attribute lists (a forest's
``nodes_*``), and the result is the one onnxsim gives on the full lists.

Why: onnxsim holds several parsed copies of the model; on a 24 MiB RandomForest ``optimize
--passes all`` peaked at 554 MiB inside it (no initializers: under simplify's weight cap).
The skeleton is taken only where the lists cannot change what onnxsim does
(``transforms/simplify_lists.py``): else it gets the full model, as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from memshrink.compact_attrs import THRESHOLD
from memshrink.manager import PassContext
from memshrink.model import load
from memshrink.transforms import get_pass, simplify, simplify_lists
from memshrink.writer import save_model

N = THRESHOLD  # list elements: just large enough to be lifted
OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]


def _longest_list(proto: onnx.ModelProto) -> int:
    return max(
        (
            max(len(a.ints), len(a.floats), len(a.strings))
            for n in proto.graph.node
            for a in n.attribute
        ),
        default=0,
    )


class _Recorder:
    """onnxsim, remembering the longest attribute list of each model it was given."""

    def __init__(self, onnxsim: Any) -> None:
        self.onnxsim, self.longest = onnxsim, []

    def simplify(self, proto: onnx.ModelProto, **kw: Any) -> Any:
        self.longest.append(_longest_list(proto))
        return self.onnxsim.simplify(proto, **kw)


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> _Recorder:
    rec = _Recorder(pytest.importorskip("onnxsim") and simplify.simplifier())
    monkeypatch.setattr(simplify, "simplifier", lambda: rec)
    return rec


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save_model(model, path)
    return path


def _forest(tmp_path: Path) -> Path:
    """x * (c1 + c2) into a TreeEnsembleRegressor of N one-leaf trees (its lists: N elements;
    y = the sum of the N leaf weights). The Add is what onnxsim folds."""
    tree = helper.make_node(
        "TreeEnsembleRegressor", ["xs"], ["y"], domain="ai.onnx.ml", n_targets=1,
        nodes_treeids=list(range(N)), nodes_nodeids=[0] * N, nodes_featureids=[0] * N,
        nodes_values=[0.0] * N, nodes_modes=["LEAF"] * N,
        nodes_truenodeids=[0] * N, nodes_falsenodeids=[0] * N,
        target_ids=[0] * N, target_nodeids=[0] * N, target_treeids=list(range(N)),
        target_weights=[0.25] * N,
    )  # fmt: skip
    g = helper.make_graph(
        [
            helper.make_node("Add", ["c1", "c2"], ["c"]),
            helper.make_node("Mul", ["x", "c"], ["xs"]),
            tree,
        ],
        "forest",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1])],
        [
            numpy_helper.from_array(np.full((4,), 1.0, np.float32), "c1"),
            numpy_helper.from_array(np.full((4,), 2.0, np.float32), "c2"),
        ],
    )
    return _save(helper.make_model(g, opset_imports=OPSETS), tmp_path / "forest.onnx")


def _simplified_bytes(path: Path, out: Path) -> bytes:
    result = get_pass("simplify")().run(load(path), PassContext())
    assert result.modified and result.model is not None, result.stats
    save_model(result.model, out)
    return out.read_bytes()


def test_the_skeleton_gives_the_full_runs_bytes(
    tmp_path: Path, recorder: _Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _forest(tmp_path)
    skeleton = _simplified_bytes(src, tmp_path / "a.onnx")
    assert recorder.longest == [0]  # onnxsim never saw a list
    monkeypatch.setattr(simplify_lists, "_list_nodes", lambda model: None)  # the old path
    full = _simplified_bytes(src, tmp_path / "b.onnx")
    assert recorder.longest == [0, N]
    assert skeleton == full
    out = onnx.load(tmp_path / "a.onnx")
    assert [n.op_type for n in out.graph.node] == ["Mul", "TreeEnsembleRegressor"]
    assert _longest_list(out) == N
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(tmp_path / "a.onnx"), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": np.ones((2, 4), np.float32)})
    np.testing.assert_allclose(y, np.full((2, 1), 0.25 * N), rtol=1e-6, atol=0)


def test_a_constants_list_goes_to_onnxsim_whole(tmp_path: Path, recorder: _Recorder) -> None:
    """A ``Constant``'s ``value_ints`` is data onnxsim folds: never left out."""
    g = helper.make_graph(
        [
            helper.make_node("Constant", [], ["k"], value_ints=list(range(N))),
            helper.make_node("Add", ["x", "k"], ["y"]),
        ],
        "c",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [N])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [N])],
    )
    model = load(_save(helper.make_model(g, opset_imports=OPSETS[:1]), tmp_path / "c.onnx"))
    assert simplify_lists._list_nodes(model) is None
    get_pass("simplify")().run(model, PassContext())
    assert recorder.longest == [N]


def test_lists_that_change_a_type_go_to_onnxsim_whole(tmp_path: Path, recorder: _Recorder) -> None:
    """N string class labels: emptied, ONNX's inference fails on the node and leaves its
    label untyped (the declared graph output would hide that: the check leaves it out)."""
    tree = helper.make_node(
        "TreeEnsembleClassifier", ["x"], ["label", "prob"], domain="ai.onnx.ml",
        nodes_treeids=[0], nodes_nodeids=[0], nodes_featureids=[0], nodes_values=[0.0],
        nodes_modes=["LEAF"], nodes_truenodeids=[0], nodes_falsenodeids=[0],
        class_ids=[0], class_nodeids=[0], class_treeids=[0], class_weights=[1.0],
        classlabels_strings=[f"c{i}" for i in range(N)],
    )  # fmt: skip
    g = helper.make_graph(
        [tree],
        "cls",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [
            helper.make_tensor_value_info("label", TensorProto.STRING, [2]),
            helper.make_tensor_value_info("prob", TensorProto.FLOAT, [2, N]),
        ],
    )
    src = _save(helper.make_model(g, opset_imports=OPSETS), tmp_path / "cls.onnx")
    model = load(src)
    assert simplify_lists._list_nodes(model) is not None  # the node itself qualifies
    get_pass("simplify")().run(model, PassContext())
    assert recorder.longest == [N]  # the type check sent it whole
