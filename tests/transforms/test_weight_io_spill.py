"""The spill file of rewritten weights belongs to one run and one existing folder: a later
pass must never write into a spill whose folder was moved away (tensors name it by path)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx_ir as ir

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
