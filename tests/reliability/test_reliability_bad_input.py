"""Bad input never costs a user a file: the matrix of issue 8, end to end through the CLI.

Each row runs ``memshrink`` in a subprocess and checks: one clear ``memshrink: error:`` line (no
traceback), the row's exit code (6 input unusable, 7 output unwritable, 2 usage, 130/143
interrupted), no output file or temp file left behind (a previous output stays as it was), and
the input files byte-for-byte and mtime unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from fixtures_onnx import build_mlp
from onnx import TensorProto, helper, numpy_helper

from memshrink.errors import EXIT_BAD_INPUT, EXIT_CANNOT_WRITE, EXIT_USAGE

TIMEOUT = 240  # a loaded 2-core machine imports onnx + onnxruntime slowly


def _cli(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:  # noqa: ANN003
    return subprocess.run(
        [sys.executable, "-m", "memshrink.cli", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, **(env or {})},
        **kw,
    )


def _snapshot(*folders: Path) -> dict[str, tuple[str, int]]:
    """Every file under the folders: content digest and mtime (ns)."""
    snap = {}
    for folder in folders:
        for p in sorted(folder.rglob("*")):
            if p.is_file() and not p.is_fifo():
                snap[str(p)] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            elif p.is_fifo():
                snap[str(p)] = ("fifo", p.stat().st_mtime_ns)
    return snap


def assert_clean_failure(
    proc: subprocess.CompletedProcess, code: int, message: str, before: dict, *folders: Path
) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]  # -q: the error is the only line
    assert lines[0].startswith("memshrink: error: ") and message in lines[0], lines[0]
    assert "Traceback" not in proc.stderr
    assert _snapshot(*folders) == before  # nothing added (no partial or temp file), nothing touched


@pytest.fixture
def mlp_ext(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    path = folder / "m.onnx"
    onnx.save_model(
        build_mlp(), path, save_as_external_data=True, location="m.weights", size_threshold=0
    )
    return path


def _relocate(model_path: Path, location: str) -> None:
    m = onnx.load(str(model_path), load_external_data=False)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = location
    onnx.save_model(m, str(model_path))


# --------------------------------------------------------------------- unusable input: 6


def test_truncated_onnx(tmp_path: Path, mlp_path: Path) -> None:
    bad = tmp_path / "in" / "trunc.onnx"
    bad.parent.mkdir()
    data = mlp_path.read_bytes()
    bad.write_bytes(data[: len(data) * 2 // 3])
    out = tmp_path / "out"
    out.mkdir()
    before = _snapshot(bad.parent, out)
    proc = _cli("optimize", str(bad), str(out / "o.onnx"), "-q")
    assert_clean_failure(
        proc, EXIT_BAD_INPUT, "truncated or not an ONNX model", before, bad.parent, out
    )


def test_random_bytes(tmp_path: Path) -> None:
    bad = tmp_path / "noise.onnx"
    bad.write_bytes(np.random.default_rng(8).bytes(64 << 10))
    before = _snapshot(tmp_path)
    proc = _cli("optimize", str(bad), str(tmp_path / "o.onnx"), "-q")
    assert_clean_failure(proc, EXIT_BAD_INPUT, "not an ONNX model", before, tmp_path)


def test_external_data_file_missing(tmp_path: Path, mlp_ext: Path) -> None:
    (mlp_ext.parent / "m.weights").unlink()
    before = _snapshot(tmp_path)
    proc = _cli("optimize", str(mlp_ext), str(tmp_path / "o.onnx"), "-q")
    assert_clean_failure(proc, EXIT_BAD_INPUT, "'m.weights' is missing", before, tmp_path)


def test_external_data_file_shorter_than_offsets(tmp_path: Path, mlp_ext: Path) -> None:
    weights = mlp_ext.parent / "m.weights"
    weights.write_bytes(weights.read_bytes()[:-100])
    before = _snapshot(tmp_path)
    proc = _cli("optimize", str(mlp_ext), str(tmp_path / "o.onnx"), "-q")
    assert_clean_failure(proc, EXIT_BAD_INPUT, "is shorter than its reference", before, tmp_path)


@pytest.mark.parametrize("style", ["dotdot", "absolute", "symlink"])
def test_external_data_escaping_the_folder_is_refused_never_read(
    tmp_path: Path, mlp_ext: Path, style: str
) -> None:
    """The escaping target is a FIFO with no writer: any open() for reading would block."""
    outside = tmp_path / "outside"
    outside.mkdir()
    fifo = outside / "secret.bin"
    os.mkfifo(fifo)
    if style == "dotdot":
        _relocate(mlp_ext, "../outside/secret.bin")
    elif style == "absolute":
        _relocate(mlp_ext, str(fifo))
    else:
        (mlp_ext.parent / "link.bin").symlink_to(fifo)
        _relocate(mlp_ext, "link.bin")
    before = _snapshot(tmp_path)
    proc = _cli("optimize", str(mlp_ext), str(tmp_path / "o.onnx"), "-q")
    assert_clean_failure(proc, EXIT_BAD_INPUT, "refused", before, tmp_path)


def test_unknown_opset(tmp_path: Path) -> None:
    model = build_mlp()
    model.opset_import[0].version = 99
    src = tmp_path / "future.onnx"
    onnx.save_model(model, src)
    before = _snapshot(tmp_path)
    proc = _cli("optimize", str(src), str(tmp_path / "o.onnx"), "-q")
    assert_clean_failure(proc, EXIT_BAD_INPUT, "unknown opset ai.onnx 99", before, tmp_path)


# --------------------------------------------------------------------- custom ops: left alone


def _custom_op_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4), "W")
    w_dup = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4), "W_dup")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"]),
        helper.make_node("MyOp", ["h", "W_dup"], ["y"], domain="com.example", alpha=0.5),
        helper.make_node("MyOther", ["x"], ["z"], domain="com.example"),
        helper.make_node("Relu", ["h"], ["dead"]),
    ]
    graph = helper.make_graph(
        nodes,
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4]),
        ],
        [w, w_dup],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    )
    model.ir_version = 8
    return model


def test_custom_domain_ops_are_left_alone_and_reported(tmp_path: Path) -> None:
    src = tmp_path / "custom.onnx"
    onnx.save_model(_custom_op_model(), src)
    before = _snapshot(tmp_path)
    out, report = tmp_path / "o.onnx", tmp_path / "r.json"
    proc = _cli(
        "optimize", str(src), str(out), "--passes", "all", "--json", str(report), "--no-estimate"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "com.example: MyOp, MyOther" in proc.stderr and "opaque" in proc.stderr
    assert json.loads(report.read_text())["custom_ops"] == {
        "com.example": {"MyOp": 1, "MyOther": 1}
    }
    written = onnx.load(str(out))
    custom = [n for n in written.graph.node if n.domain == "com.example"]
    original = [n for n in _custom_op_model().graph.node if n.domain == "com.example"]
    assert [(n.op_type, list(n.output), list(n.attribute)) for n in custom] == [
        (n.op_type, list(n.output), list(n.attribute)) for n in original
    ]
    assert {str(src): before[str(src)]} == {str(src): _snapshot(tmp_path)[str(src)]}


# --------------------------------------------------------------------- usage: 2


def test_output_path_equal_to_input(tmp_path: Path, mlp_ext: Path) -> None:
    before = _snapshot(tmp_path)
    proc = _cli("optimize", str(mlp_ext), str(mlp_ext), "-q")
    assert_clean_failure(proc, EXIT_USAGE, "output path is the input path", before, tmp_path)
    # the same file through another name (a symlink) is caught too
    alias = tmp_path / "alias.onnx"
    alias.symlink_to(mlp_ext)
    before = _snapshot(tmp_path)
    proc = _cli("optimize", str(mlp_ext), str(alias), "-q")
    assert_clean_failure(proc, EXIT_USAGE, "output path is the input path", before, tmp_path)


@pytest.mark.parametrize("passes", ["safe", "all"])
def test_output_data_file_equal_to_input_weights(
    tmp_path: Path, mlp_ext: Path, passes: str
) -> None:
    """OUT.data would overwrite the weights the model is read from: refused. With ``all``
    simplify rebuilds the model in memory, so it reads no file at save time: the input's data
    file was replaced (QA session 11); the input's files are recorded at load now."""
    shutil.move(mlp_ext.parent / "m.weights", mlp_ext.parent / "o.onnx.data")
    _relocate(mlp_ext, "o.onnx.data")
    before = _snapshot(tmp_path)
    proc = _cli("optimize", str(mlp_ext), str(mlp_ext.parent / "o.onnx"), "--passes", passes, "-q")
    assert_clean_failure(proc, EXIT_USAGE, "still reading from it", before, tmp_path)


# --------------------------------------------------------------------- unwritable output: 7


def _without_dac_override() -> list[str]:
    """As root, write permission bits are ignored; drop CAP_DAC_OVERRIDE for the child."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot make a folder read-only")
    caps = "-dac_override,-dac_read_search"
    return [setpriv, "--inh-caps", caps, "--bounding-set", caps]


def test_read_only_output_folder(tmp_path: Path, mlp_ext: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    before = _snapshot(tmp_path)
    cmd = [*_without_dac_override(), sys.executable, "-m", "memshrink.cli", "optimize",
           str(mlp_ext), str(ro / "o.onnx"), "-q"]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    finally:
        ro.chmod(0o755)
    assert_clean_failure(proc, EXIT_CANNOT_WRITE, "permission denied", before, tmp_path)


def _fsize_limit(limit: int):  # noqa: ANN202
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.parametrize("passes", ["safe", "prune"])  # external .data file / embedded output
def test_out_of_space_keeps_the_previous_output(
    tmp_path: Path, mlp_path: Path, passes: str
) -> None:
    """RLIMIT_FSIZE makes writes past 100 KiB fail with EFBIG, like a full disk."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "o.onnx").write_bytes(b"previous output")
    before = _snapshot(tmp_path)
    proc = _cli("optimize", str(mlp_path), str(out / "o.onnx"), "--passes", passes, "-q",
                preexec_fn=_fsize_limit(100 << 10))  # fmt: skip
    assert_clean_failure(proc, EXIT_CANNOT_WRITE, "out of disk space", before, tmp_path)


# --------------------------------------------------------------------- signals during save

_SLOW_SAVE = r"""
import pathlib, sys, time
import onnx
import memshrink.writer as writer
marker, where = sys.argv[1], sys.argv[2]

def stall():
    pathlib.Path(marker).touch()
    time.sleep(120)  # the test signals us here

if where == "data":  # inside the weights copy: OUT.data's temp file is open
    real = writer._copy_range
    def slow_copy(*args, **kw):
        stall()
        return real(*args, **kw)
    writer._copy_range = slow_copy
else:  # inside the .onnx write: half of the temp file is on disk
    def slow_save(proto, f, *args, **kw):
        f.write(b"partial model bytes")
        f.flush()
        stall()
    onnx.save_model = slow_save

from memshrink.cli import main
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.parametrize(
    "sig, where, passes",
    [
        (signal.SIGINT, "data", "safe"),
        (signal.SIGTERM, "data", "safe"),
        (signal.SIGTERM, "model", "prune"),
        (signal.SIGINT, "model", "prune"),
    ],
)
def test_signal_during_save_leaves_nothing(
    tmp_path: Path, mlp_ext: Path, sig: signal.Signals, where: str, passes: str
) -> None:
    """A real signal, delivered while the real writer is inside its save (held there by a
    stalled copy or model write), must remove the temp files and exit 128 + signal."""
    out = tmp_path / "out"
    out.mkdir()
    marker = tmp_path / "saving"
    before = _snapshot(mlp_ext.parent, out)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _SLOW_SAVE,
            str(marker),
            where,
            "optimize",
            str(mlp_ext),
            str(out / "o.onnx"),
            "--passes",
            passes,
            "--no-estimate",
            "-q",
        ],  # fmt: skip
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + TIMEOUT
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "save never started"
        time.sleep(0.05)
    assert any(p.name.startswith(".o.onnx") for p in out.iterdir())  # a temp file exists now
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=TIMEOUT)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, "", stderr)
    assert_clean_failure(done, 128 + sig, "nothing written", before, mlp_ext.parent, out)
