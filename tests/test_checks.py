"""Invariant checks: topological order and onnx.checker without loading weights."""

from __future__ import annotations

from pathlib import Path

import onnx_ir as ir
import pytest

from memshrink.checks import CheckHook, check_model
from memshrink.errors import PassError
from memshrink.manager import PassContext, PassRecord
from memshrink.model import load


def test_valid_model_passes_without_reading_weights(mlp_path: Path) -> None:
    model = load(mlp_path)
    check_model(model)
    # Weights are still lazy file references: the check read none of them.
    w1 = model.graph.initializers["W1"].const_value
    assert isinstance(w1, ir.ExternalTensor) and w1.raw is None


def test_unsorted_graph_is_caught(mlp_path: Path) -> None:
    model = load(mlp_path)
    nodes = list(model.graph)
    relu = next(n for n in nodes if n.op_type == "Relu")
    model.graph.remove(relu)
    model.graph.insert_before(nodes[0], relu)  # Relu now reads h1 before MatMul writes it
    with pytest.raises(PassError, match="not topologically sorted"):
        check_model(model)


def test_checker_errors_are_reported(mlp_path: Path) -> None:
    model = load(mlp_path)
    next(n for n in model.graph if n.op_type == "Relu").op_type = "NoSuchOp"
    with pytest.raises(PassError, match="onnx.checker"):
        check_model(model)


def test_check_hook_names_the_pass(mlp_path: Path) -> None:
    model = load(mlp_path)
    next(n for n in model.graph if n.op_type == "Relu").op_type = "NoSuchOp"
    record = PassRecord("some-pass", True, 0.0, {})
    with pytest.raises(PassError, match="after pass 'some-pass'"):
        CheckHook().after_pass(record, model, PassContext())
    untouched = PassRecord("other", False, 0.0, {})
    CheckHook().after_pass(untouched, model, PassContext())  # not modified: not checked
    assert "checked" not in untouched.stats
