"""Regression tests for foundation bugs the reliability sweep found (one test per bug)."""

from __future__ import annotations

from pathlib import Path

import onnx
from fixtures_onnx import build_mlp

from memshrink.checks import check_model
from memshrink.model import load


def test_check_model_ir3_initializers_listed_as_inputs(tmp_path: Path) -> None:
    """IR < 4 models list every initializer as a graph input too (ONNX suite: test_Conv3d_*).
    With weights external, ``check_model`` turned them into inputs a second time and
    onnx.checker failed with "not in SSA form" after every pass."""
    model = build_mlp(extras=False)
    model.graph.input.extend(
        onnx.helper.make_tensor_value_info(i.name, i.data_type, list(i.dims))
        for i in model.graph.initializer
    )
    model.ir_version = 3
    model.opset_import[0].version = 8
    path = tmp_path / "ir3.onnx"
    onnx.save_model(model, path, save_as_external_data=True, location="w.bin", size_threshold=0)
    check_model(load(path))  # raised PassError before the fix
