"""The spill file of rewritten weights belongs to one run and one existing folder: a later
pass must never write into a spill whose folder was moved away (tensors name it by path)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import onnx_ir as ir
import pytest

from memshrink.transforms.weight_io import SPILL_MIN_BYTES, SpillFile


def _big() -> np.ndarray:
    return np.arange(SPILL_MIN_BYTES // 4, dtype=np.float32)


def test_a_run_spills_next_to_its_output_and_a_new_run_gets_a_new_file(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    SpillFile.start_run(str(tmp_path / "a"))
    first = SpillFile.shared()
    assert Path(first.path).parent == tmp_path / "a"
    SpillFile.start_run(str(tmp_path / "b"))
    second = SpillFile.shared()
    assert Path(second.path).parent == tmp_path / "b"
    assert first.fd == -1 and not Path(first.path).exists()  # the old run's file is gone
    SpillFile.start_run(None)


def test_a_moved_spill_folder_is_not_written_again(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    SpillFile.start_run(str(tmp_path / "a"))
    old = SpillFile.shared()
    shutil.move(tmp_path / "a", tmp_path / "moved")

    spill = SpillFile.shared()  # the folder is gone: a fresh file in the temp folder
    assert spill is not old and Path(spill.path).exists()
    tensor = spill.add_array(_big(), ir.DataType.FLOAT, "w")
    np.testing.assert_array_equal(tensor.numpy(), _big())  # exact: the bytes written
    SpillFile.start_run(None)


def test_a_new_run_removes_spills_of_dead_processes_only(tmp_path: Path) -> None:
    """A killed ``optimize`` leaves its spill next to the output; the next run in that folder
    removes it, but never a live process's spill nor a user's file."""
    import subprocess
    import sys

    from memshrink.transforms.weight_io import SPILL_PREFIX

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    orphan = tmp_path / f"{SPILL_PREFIX}{int(dead.stdout)}-abc.data"
    live = tmp_path / f"{SPILL_PREFIX}1-xyz.data"  # pid 1 is always alive
    user = tmp_path / "model.onnx.data"
    for f in (orphan, live, user):
        f.write_bytes(b"x" * 10)

    SpillFile.start_run(str(tmp_path))
    ours = SpillFile.shared()
    assert not orphan.exists() and live.exists() and user.exists()
    assert Path(ours.path).name.startswith(f"{SPILL_PREFIX}{os.getpid()}-")
    SpillFile.start_run(None)


def test_a_full_temp_folder_names_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``PassManager.run`` from Python spills into the temp folder: a full one is exit 7 naming
    the folder and TMPDIR (it said "the temp folder"; QA session 15)."""
    import errno
    import tempfile

    from memshrink.manager import _pass_os_error

    monkeypatch.setattr(SpillFile, "directory", None)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    err = _pass_os_error("fold-weight-transforms", OSError(errno.ENOSPC, "No space left"))
    assert err.exit_code == 7
    assert f"spill file in the temp folder {tmp_path} (TMPDIR)" in str(err)
