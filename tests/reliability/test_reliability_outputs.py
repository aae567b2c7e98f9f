"""Output hygiene found by the session-9 newcomer audit (docs/reliability.md): a pass that runs
out of space while spilling rewritten weights, reports (``--json`` / ``--plot``) on a full disk
or in a folder that can't be written, and ``verify`` of a model whose data file is missing. Each:
one ``memshrink: error:`` line, the documented exit code, inputs untouched, nothing left."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from test_reliability_bad_input import (
    TIMEOUT,
    _cli,
    _fsize_limit,
    _snapshot,
    _without_dac_override,
    assert_clean_failure,
)

from memshrink.errors import EXIT_BAD_INPUT, EXIT_CANNOT_WRITE


def _transposed(path: Path) -> Path:
    """MatMul(x, Transpose(W)), W 256x256 f32 (256 KiB): fold-weight-transforms spills the
    transposed copy (>= 64 KiB) to a file next to the output."""
    w = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    g = helper.make_graph(
        [
            helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
            helper.make_node("MatMul", ["x", "Wt"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 256])],
        [numpy_helper.from_array(w, "W")],
    )
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_pass_spilling_onto_a_full_disk_is_exit_7(tmp_path: Path) -> None:
    src = _transposed(tmp_path / "in.onnx")
    out = tmp_path / "out"
    out.mkdir()
    before = _snapshot(tmp_path)
    proc = _cli("optimize", str(src), str(out / "o.onnx"), "--passes", "fold-weight-transforms",
                "-q", preexec_fn=_fsize_limit(100 << 10))  # fmt: skip
    assert_clean_failure(proc, EXIT_CANNOT_WRITE, "wrote rewritten weights", before, tmp_path)


def test_report_on_a_full_disk_keeps_the_previous_report(tmp_path: Path, mlp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "r.json").write_text('{"previous": true}\n')
    (out / "p.png").write_bytes(b"\x89PNG previous")
    before = _snapshot(tmp_path)
    for flag, name in (("--json", "r.json"), ("--plot", "p.png")):
        proc = _cli("estimate", str(mlp_path), flag, str(out / name),
                    preexec_fn=_fsize_limit(2 << 10))  # fmt: skip
        assert proc.returncode == EXIT_CANNOT_WRITE, proc.stderr[-2000:]
        err = [ln for ln in proc.stderr.splitlines() if ln.startswith("memshrink:")]
        assert err == [f"memshrink: error: out of disk space (or file size limit) while writing "
                       f"{out / name}"], proc.stderr[-2000:]  # fmt: skip
        assert _snapshot(tmp_path) == before  # the old report stays whole, no temp file


def test_report_folder_missing_or_read_only_fails_before_any_run(
    tmp_path: Path, mlp_path: Path
) -> None:
    before = _snapshot(tmp_path)
    proc = _cli("verify", str(mlp_path), str(mlp_path), "--backends", "cpu", "-q",
                "--json", str(tmp_path / "nope" / "r.json"))  # fmt: skip
    assert_clean_failure(proc, EXIT_CANNOT_WRITE, "nope does not exist", before, tmp_path)

    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    before = _snapshot(tmp_path)
    cmd = [*_without_dac_override(), sys.executable, "-m", "memshrink.cli", "estimate",
           str(mlp_path), "--json", str(ro / "r.json")]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    finally:
        ro.chmod(0o755)
    assert_clean_failure(proc, EXIT_CANNOT_WRITE, "permission denied", before, tmp_path)


def test_verify_with_a_missing_data_file_is_exit_6_before_any_run(
    tmp_path: Path, mlp_path: Path
) -> None:
    folder = tmp_path / "ext"
    folder.mkdir()
    ext = folder / "m.onnx"
    onnx.save_model(onnx.load(mlp_path), ext, save_as_external_data=True, location="m.data",
                    size_threshold=0)  # fmt: skip
    (folder / "m.data").unlink()
    before = _snapshot(tmp_path)
    proc = _cli("verify", str(mlp_path), str(ext), "--backends", "cpu", "-q")
    assert_clean_failure(proc, EXIT_BAD_INPUT, "'m.data' is missing", before, tmp_path)


def test_estimate_of_a_folder_says_what_works(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from memshrink.cli import main

    assert main(["estimate", str(tmp_path)]) == EXIT_BAD_INPUT
    assert "is a folder: estimate takes one .onnx file" in capsys.readouterr().err
