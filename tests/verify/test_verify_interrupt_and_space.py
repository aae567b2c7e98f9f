"""``verify`` stopped by a signal, on a full temp folder, and on a model ORT refuses as malformed.

QA session 15: SIGTERM ended the parent at once and left its measuring child running (it sits in
a session of its own) and the temp folder behind; Ctrl-C removed the folder under a child still
running; a full ``TMPDIR`` was "internal error: OSError" (exit 1), or a failed backend (exit 5)
when the child could not write its outputs; a model with malformed local functions was exit 5
with ORT's message where ``optimize`` and ``estimate`` say 6.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import psutil
import pytest
from onnx import TensorProto, helper, numpy_helper

from memshrink.cli import main

TIMEOUT = 120
F32 = TensorProto.FLOAT


def _cmd(a: Path, b: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "memshrink.cli", "verify", str(a), str(b), "--runs", "1",
            "--quiet", *extra]  # fmt: skip


def _hung_child(parent: psutil.Process) -> psutil.Process | None:
    """The measuring child once it sits in the fault hook (its first stage saved)."""
    for child in parent.children(recursive=True):
        try:
            spec = next((c for c in child.cmdline() if c.endswith(".spec.json")), None)
            if (
                spec
                and json.loads(Path(json.loads(Path(spec).read_text())["result"]).read_text())[
                    "stages"
                ]
            ):
                return child
        except (psutil.Error, OSError, ValueError, KeyError):
            continue
    return None


def _start_hung(mlp_path: Path, tmp: Path) -> tuple[subprocess.Popen, psutil.Process]:
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "MEMSHRINK_TEST_CHILD_FAULT": "hang:cpu:original"}
    proc = subprocess.Popen(
        _cmd(mlp_path, mlp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env,
    )  # fmt: skip
    deadline = time.monotonic() + TIMEOUT
    while (child := _hung_child(psutil.Process(proc.pid))) is None:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "the hung child never appeared"
        time.sleep(0.1)
    return proc, child


def _gone(p: psutil.Process, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_child_and_removes_the_temp_folder(
    sig: signal.Signals, code: int, mlp_path: Path, tmp_path: Path
) -> None:
    proc, child = _start_hung(mlp_path, tmp_path / "t")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=TIMEOUT)
    alive = not _gone(child)
    if alive:
        child.kill()
    assert proc.returncode == code, err[-2000:]
    assert not alive, "the measuring child outlived verify"
    assert not [p.name for p in (tmp_path / "t").iterdir() if p.name.startswith("memshrink-")]
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_a_killed_parent_takes_its_child(mlp_path: Path, tmp_path: Path) -> None:
    proc, child = _start_hung(mlp_path, tmp_path / "t")
    proc.kill()  # no handler runs: the child asked the kernel to kill it with its parent
    proc.communicate(timeout=TIMEOUT)
    alive = not _gone(child)
    if alive:
        child.kill()
    assert not alive, "the measuring child outlived a SIGKILLed verify"


def _identity(path: Path, n: int) -> Path:
    """x[n, 1024] f32 -> y: feeds and outputs of n * 4 KiB."""
    g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", F32, [n, 1024])],
        [helper.make_tensor_value_info("y", F32, [n, 1024])],
    )  # fmt: skip
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _expand(path: Path) -> Path:
    """x[1, 1024] f32 -> Expand to [256, 1024]: 4 KiB of feeds, 1 MiB of outputs."""
    shape = numpy_helper.from_array(np.array([256, 1024], np.int64), "shape")
    g = helper.make_graph(
        [helper.make_node("Expand", ["x", "shape"], ["y"])], "g",
        [helper.make_tensor_value_info("x", F32, [1, 1024])],
        [helper.make_tensor_value_info("y", F32, [256, 1024])], [shape],
    )  # fmt: skip
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _limit_files() -> None:  # in the verify process, inherited by its children
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))


@pytest.mark.parametrize("who", ["parent feeds", "child outputs"])
def test_a_full_temp_folder_is_one_line_exit_7(who: str, tmp_path: Path) -> None:
    """A file-size limit (``ulimit -f``) is what a full disk does to a write: ENOSPC / EFBIG."""
    model = (
        _identity(tmp_path / "m.onnx", 256)
        if who == "parent feeds"
        else _expand(tmp_path / "m.onnx")
    )
    (tmp_path / "t").mkdir()
    proc = subprocess.run(
        _cmd(model, model), capture_output=True, text=True, timeout=TIMEOUT,
        env={**os.environ, "TMPDIR": str(tmp_path / "t")}, preexec_fn=_limit_files,
    )  # fmt: skip
    assert proc.returncode == 7, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("memshrink: error: out of disk space") and str(tmp_path / "t") in last
    assert "TMPDIR" in last and "Traceback" not in proc.stderr
    assert not [p.name for p in (tmp_path / "t").iterdir() if p.name.startswith("memshrink-")]


def _duplicate_functions(path: Path) -> Path:
    """Two model-local functions my.F: ORT refuses the model at load."""
    relu = helper.make_function(
        "my", "F", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
        [helper.make_opsetid("", 18)],
    )  # fmt: skip
    g = helper.make_graph(
        [helper.make_node("F", ["x"], ["y"], domain="my")], "g",
        [helper.make_tensor_value_info("x", F32, [2, 4])],
        [helper.make_tensor_value_info("y", F32, [2, 4])],
    )  # fmt: skip
    ops = [helper.make_opsetid("", 18), helper.make_opsetid("my", 1)]
    m = helper.make_model(g, opset_imports=ops, functions=[relu, relu])
    m.ir_version = 9
    onnx.save(m, path)
    return path


def _unknown_op(path: Path) -> Path:
    """A node calling ``Reluu``, which ai.onnx does not define."""
    g = helper.make_graph(
        [helper.make_node("Reluu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", F32, [2, 4])],
        [helper.make_tensor_value_info("y", F32, [2, 4])],
    )  # fmt: skip
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize(
    ("build", "ort_says", "line"),
    [
        (
            _duplicate_functions,
            "Duplicate model-local function",
            "two model-local functions are my.F",
        ),
        (_unknown_op, "Reluu", "which the ai.onnx domain does not define"),
    ],
)
def test_verify_of_a_malformed_model_is_exit_6(
    build, ort_says: str, line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:  # noqa: ANN001
    import onnxruntime as ort

    bad = build(tmp_path / "bad.onnx")
    with pytest.raises(Exception, match=ort_says):
        ort.InferenceSession(str(bad), providers=["CPUExecutionProvider"])
    assert main(["verify", str(bad), str(bad), "--runs", "1", "-q"]) == 6
    err = capsys.readouterr().err
    assert line in err.strip().splitlines()[-1]


def test_verify_of_a_valid_model_that_fails_to_run_stays_exit_5(tmp_path: Path) -> None:
    """ORT's NCHWc reorder given a rank-2 input: the loader accepts it, the runtime fails."""
    g = helper.make_graph(
        [helper.make_node("ReorderInput", ["x"], ["y"], domain="com.microsoft.nchwc")], "g",
        [helper.make_tensor_value_info("x", F32, [2, 3])],
        [helper.make_tensor_value_info("y", F32, [2, 16])],
    )  # fmt: skip
    onnx.save(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "r.onnx"
    )
    assert main(["verify", str(tmp_path / "r.onnx"), str(tmp_path / "r.onnx"), "-q"]) == 5
