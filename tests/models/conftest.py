"""Shared helpers for the model-suite tests: feeding a model exactly as its sidecar says."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # `models/` is a top-level package at the repo root
    sys.path.insert(0, str(REPO))


def feeds_from_sidecar(model_path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    sidecar = json.loads(Path(str(model_path) + ".json").read_text())
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in sidecar["inputs"]:
        dtype = np.dtype(spec["dtype"])
        if np.issubdtype(dtype, np.integer):
            low, high = spec["range"]
            feeds[spec["name"]] = rng.integers(low, high, size=spec["shape"]).astype(dtype)
        else:
            feeds[spec["name"]] = rng.standard_normal(spec["shape"]).astype(dtype)
    return feeds


def check_sidecar_against_graph(path: Path) -> dict:
    """Assert the sidecar describes the graph: inputs, dtypes, dims, outputs, counts."""
    sidecar = json.loads(Path(str(path) + ".json").read_text())
    proto = onnx.load(str(path), load_external_data=False)
    inits = {t.name for t in proto.graph.initializer}
    graph_inputs = [i for i in proto.graph.input if i.name not in inits]
    assert [i["name"] for i in sidecar["inputs"]] == [i.name for i in graph_inputs]
    for side, value in zip(sidecar["inputs"], graph_inputs, strict=True):
        ttype = value.type.tensor_type
        assert side["dtype"] == onnx.helper.tensor_dtype_to_np_dtype(ttype.elem_type).name
        dims = ttype.shape.dim
        assert len(side["shape"]) == len(dims), side["name"]
        for got, dim in zip(side["shape"], dims, strict=True):
            if dim.HasField("dim_value"):
                assert got == dim.dim_value, side["name"]
            else:  # symbolic: the sidecar binds it, consistently across inputs
                assert sidecar["dims"][dim.dim_param] == got, (side["name"], dim.dim_param)
    assert sidecar["outputs"] == [o.name for o in proto.graph.output]
    assert sidecar["node_count"] == len(proto.graph.node)
    assert sidecar["opset"] == next(o.version for o in proto.opset_import if o.domain == "")
    return sidecar


@pytest.fixture
def feeds_for():
    return feeds_from_sidecar


@pytest.fixture
def check_sidecar():
    return check_sidecar_against_graph
