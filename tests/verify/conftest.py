"""Tiny real ONNX models for the verifier tests, built in code (no binary blobs).

Tests use them through the ``embed_mlp`` fixture (a builder function) and ``VOCAB``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

VOCAB = 50


def build_embed_mlp(
    path: Path,
    *,
    perturb: float = 0.0,
    external: bool = False,
    hidden: int = 32,
    batch: object = "batch",
) -> Path:
    """ids[batch, 8] int64 -> Gather(E[VOCAB, hidden]) -> MatMul W -> Relu -> y; seeded weights.

    ``perturb`` is added to one weight, W[0, 0] (the planted change the verifier must catch).
    """
    rng = np.random.default_rng(1)
    emb = rng.standard_normal((VOCAB, hidden)).astype(np.float32)
    w = rng.standard_normal((hidden, hidden)).astype(np.float32)
    if perturb:
        w[0, 0] += perturb
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["E", "ids"], ["e"]),
            helper.make_node("MatMul", ["e", "W"], ["h"]),
            helper.make_node("Relu", ["h"], ["y"]),
        ],
        "embed_mlp",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [batch, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8, hidden])],
        [numpy_helper.from_array(emb, "E"), numpy_helper.from_array(w, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save_model(
        model, path, save_as_external_data=external, all_tensors_to_one_file=True,
        location=path.name + ".data", size_threshold=0,
    )  # fmt: skip
    return path


@pytest.fixture
def embed_mlp():  # type: ignore[no-untyped-def]
    """The model builder: ``embed_mlp(path, perturb=..., external=...)``."""
    return build_embed_mlp


@pytest.fixture
def vocab() -> int:
    return VOCAB
