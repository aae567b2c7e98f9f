"""The bad-input matrix's verifier rows: a backend that segfaults, hangs or is OOM-killed.

Through ``memshrink verify`` end to end, with the verifier's test-only fault hook
(``MEMSHRINK_TEST_CHILD_FAULT=segv|hang[:BACKEND[:LABEL]]``): the failing backend is reported
as crashed / timed-out / killed, every other backend is still run, compared and reported, and
the exit code is 5. The OOM killer is played by the test itself: it sends SIGKILL (what the
kernel's OOM killer sends) to the hung child, so the verifier sees exactly what it would see.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from memshrink.verify import EXIT_BACKEND_FAILED

TIMEOUT = 300


def _verify_cmd(a: Path, b: Path, report: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "memshrink.cli", "verify", str(a), str(b),
            "--backends", "cpu,openvino", "--runs", "1", "--json", str(report), "--quiet", *extra]  # fmt: skip


@pytest.fixture
def pair(tmp_path: Path, mlp_path: Path) -> tuple[Path, Path]:
    b = tmp_path / "copy.onnx"
    shutil.copy(mlp_path, b)
    return mlp_path, b


def _runs(report: Path) -> dict[tuple[str, str], dict]:
    data = json.loads(report.read_text())
    return {(r["model"], r["backend"]): r for r in data["runs"]}, data  # type: ignore[return-value]


def _assert_others_reported(runs: dict, data: dict, broken: tuple[str, str]) -> None:
    for key, run in runs.items():
        if key != broken:
            assert run["status"] == "ok", (key, run.get("error"))
    ov = [c for c in data["comparisons"] if c["backend"] == "openvino"]
    assert ov and ov[0]["status"] == "match", data["comparisons"]
    assert data["exit_code"] == EXIT_BACKEND_FAILED


def test_backend_segfault_others_still_reported(tmp_path: Path, pair: tuple[Path, Path]) -> None:
    report = tmp_path / "r.json"
    proc = subprocess.run(
        _verify_cmd(*pair, report),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "MEMSHRINK_TEST_CHILD_FAULT": "segv:cpu:rewritten"},
    )
    assert proc.returncode == EXIT_BACKEND_FAILED, proc.stderr[-2000:]
    runs, data = _runs(report)
    broken = runs[("rewritten", "cpu")]
    assert broken["status"] == "crashed" and "SIGSEGV" in broken["error"]
    _assert_others_reported(runs, data, ("rewritten", "cpu"))


@pytest.mark.slow
def test_backend_hang_times_out_others_still_reported(
    tmp_path: Path, pair: tuple[Path, Path]
) -> None:
    report = tmp_path / "r.json"
    proc = subprocess.run(
        _verify_cmd(*pair, report, "--timeout", "45"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "MEMSHRINK_TEST_CHILD_FAULT": "hang:cpu:rewritten"},
    )
    assert proc.returncode == EXIT_BACKEND_FAILED, proc.stderr[-2000:]
    runs, data = _runs(report)
    broken = runs[("rewritten", "cpu")]
    assert broken["status"] == "timed-out" and "killed" in broken["error"]
    _assert_others_reported(runs, data, ("rewritten", "cpu"))


def _hung_child(parent: psutil.Process, tag: str) -> psutil.Process | None:
    """The measuring child for ``tag`` once it sits in the fault hook (its first stage saved)."""
    for child in parent.children(recursive=True):
        try:
            cmd = child.cmdline()
        except psutil.Error:
            continue
        spec = next((c for c in cmd if c.endswith(f"{tag}.spec.json")), None)
        if spec is None:
            continue
        result = Path(json.loads(Path(spec).read_text())["result"])
        try:
            if json.loads(result.read_text()).get("stages"):
                return child
        except (OSError, ValueError):
            return None
    return None


def test_backend_oom_killed_others_still_reported(tmp_path: Path, pair: tuple[Path, Path]) -> None:
    report = tmp_path / "r.json"
    proc = subprocess.Popen(
        _verify_cmd(*pair, report, "--timeout", str(TIMEOUT)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MEMSHRINK_TEST_CHILD_FAULT": "hang:openvino:rewritten"},
    )
    deadline = time.monotonic() + TIMEOUT
    victim = None
    while victim is None:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "the hung child never appeared"
        victim = _hung_child(psutil.Process(proc.pid), "rewritten-openvino")
        time.sleep(0.1)
    victim.send_signal(signal.SIGKILL)  # what the OOM killer does
    _, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == EXIT_BACKEND_FAILED, stderr[-2000:]
    runs, data = _runs(report)
    broken = runs[("rewritten", "openvino")]
    assert broken["status"] == "crashed" and "OOM" in broken["error"], broken
    for key, run in runs.items():
        if key != ("rewritten", "openvino"):
            assert run["status"] == "ok", (key, run.get("error"))
    cpu = [c for c in data["comparisons"] if c["backend"] == "cpu"]
    assert cpu and cpu[0]["status"] == "match", data["comparisons"]
