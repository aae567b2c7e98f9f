"""The built wheel carries the preset pipelines, so `pip install .` users get `--passes all`."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_contains_presets(tmp_path: Path) -> None:
    pytest.importorskip("hatchling")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    wheel = next(tmp_path.glob("memshrink-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    presets = sorted(n for n in names if n.startswith("memshrink/presets/"))
    assert "memshrink/presets/all.toml" in presets and "memshrink/presets/safe.toml" in presets
    assert len(presets) == len(list((ROOT / "passes").glob("*.toml")))
    assert not any(n.startswith(("tests/", "models/")) for n in names)
