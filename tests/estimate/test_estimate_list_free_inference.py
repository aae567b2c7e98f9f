"""A tree ensemble's large lists are never parsed by ONNX's C++ inference (``graph._infer``).

Why: ONNX's TreeEnsembleClassifier / Regressor inference reads only ``classlabels_*`` and
``n_targets`` (and whether attributes are present); splicing a 24 MiB RandomForest's
``nodes_*`` / ``class_*`` lists in cost +150 MiB RSS and 3.7 CPU-s of list dropping per
inference. The light inference must give the bytes the spliced one gave.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import memshrink.estimate.graph as graph_mod
from memshrink import compact_attrs
from memshrink.compact_attrs import THRESHOLD
from memshrink.model import load

N = 2 * THRESHOLD  # tree nodes: every nodes_* / class_* list is "large"


def _classifier(labels: list[str] | None = None) -> onnx.ModelProto:
    """One tree of N nodes, each a leaf of class 0 or 1 (valid enough for inference)."""
    rng = np.random.default_rng(0)
    kw: dict = {"classlabels_strings": labels} if labels else {"classlabels_int64s": [0, 1]}
    node = helper.make_node(
        "TreeEnsembleClassifier",
        ["x"],
        ["label", "prob"],
        domain="ai.onnx.ml",
        nodes_treeids=[0] * N,
        nodes_nodeids=list(range(N)),
        nodes_featureids=rng.integers(0, 4, N).tolist(),
        nodes_values=rng.standard_normal(N).astype(np.float32).tolist(),
        nodes_modes=["LEAF"] * N,
        nodes_truenodeids=[0] * N,
        nodes_falsenodeids=[0] * N,
        class_treeids=[0] * N,
        class_nodeids=list(range(N)),
        class_ids=(np.arange(N) % 2).tolist(),
        class_weights=[1.0] * N,
        **kw,
    )
    g = helper.make_graph(
        [node],
        "forest",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [
            helper.make_tensor_value_info("label", TensorProto.UNDEFINED, None),
            helper.make_tensor_value_info("prob", TensorProto.UNDEFINED, None),
        ],
    )
    return helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    )


def _both(
    tmp_path: Path, model: onnx.ModelProto, monkeypatch: pytest.MonkeyPatch
) -> tuple[onnx.ModelProto, onnx.ModelProto, int]:
    """The inferred weight-free proto with the light path and with the lists spliced in."""
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    table: dict = {}
    proto = graph_mod._weight_free_proto(load(path), {"x": (3, 4)}, table)
    light = graph_mod._infer(proto, table)
    monkeypatch.setattr(compact_attrs, "INFERENCE_IGNORES", {})
    assert graph_mod._listless(proto, table) is None
    return light, graph_mod._infer(proto, table), len(table)


@pytest.mark.parametrize("labels", [None, ["a", "b"]])
def test_light_inference_equals_the_spliced_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, labels: list[str] | None
) -> None:
    light, spliced, marked = _both(tmp_path, _classifier(labels), monkeypatch)
    assert marked == 11  # the 7 nodes_* and 4 class_* lists
    assert light.SerializeToString() == spliced.SerializeToString()
    out = {o.name: o.type.tensor_type.elem_type for o in light.graph.output}
    want = TensorProto.STRING if labels else TensorProto.INT64
    assert out == {"label": want, "prob": TensorProto.FLOAT}
    # the lists' lengths stay noted for ORT's tree rule
    notes = {a.name: a.doc_string for a in light.graph.node[0].attribute}
    assert notes["nodes_nodeids"].endswith(f"={N}") and notes["class_ids"].endswith(f"={N}")


def test_a_list_inference_reads_is_still_spliced(tmp_path: Path) -> None:
    """``classlabels_strings`` types the label: a large one keeps the spliced path."""
    path = tmp_path / "m.onnx"
    onnx.save(_classifier([f"c{i}" for i in range(THRESHOLD)]), str(path))
    table: dict = {}
    proto = graph_mod._weight_free_proto(load(path), {"x": (3, 4)}, table)
    assert graph_mod._listless(proto, table) is None
    assert not compact_attrs.inference_ignores(proto, table)
    out = {
        o.name: o.type.tensor_type.elem_type for o in graph_mod._infer(proto, table).graph.output
    }
    assert out["label"] == TensorProto.STRING
