"""Shared pytest fixtures; the builders live in ``fixtures_onnx``."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import onnx
import pytest
from fixtures_onnx import build_mlp

# The largest test writes ~110 MB of models; with the tmp_path retention policy in pyproject
# only a few live at once. Below this the run would fail with ENOSPC half-way, so say so up front.
_FREE_DISK_WANTED = 1 << 30


def pytest_sessionstart(session: pytest.Session) -> None:
    """Say so up front when the disk is low, so a disk-full failure is diagnosed at a glance
    (``-q`` hides the report header, so this writes through the terminal reporter)."""
    free = shutil.disk_usage(tempfile.gettempdir()).free
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if free < _FREE_DISK_WANTED and reporter is not None:
        reporter.write_line(
            f"warning: {free / 2**30:.2f} GiB free in {tempfile.gettempdir()}: tests that write "
            "models may fail with 'No space left on device'",
            yellow=True,
        )


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
