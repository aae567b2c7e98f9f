"""Shared pytest fixtures; the builders live in ``fixtures_onnx``."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from fixtures_onnx import build_mlp


@pytest.fixture
def mlp_path(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.onnx"
    onnx.save_model(build_mlp(), path)
    return path


@pytest.fixture
def mlp_external_path(tmp_path: Path) -> Path:
    folder = tmp_path / "ext"
    folder.mkdir()
    path = folder / "mlp_ext.onnx"
    onnx.save_model(
        build_mlp(), path, save_as_external_data=True, location="mlp_ext.weights", size_threshold=0
    )
    return path
