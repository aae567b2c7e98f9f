"""Which Python runs an optional backend, for the tests that skip cleanly without one.

The ORT OpenVINO EP lives in its own venv (``onnxruntime-openvino`` replaces plain
``onnxruntime``, so it cannot share this one); the CUDA EP needs ``onnxruntime-gpu``, NVML and a
GPU. Each lookup asks the interpreter itself whether the execution provider is there (a venv
that exists but lacks it is a skip, not a failure), once per test session.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
NO_OVEP = "no interpreter with onnxruntime-openvino (set MEMSHRINK_PYTHON_ORT_OPENVINO)"
NO_CUDA = "no onnxruntime-gpu with CUDAExecutionProvider and nvidia-ml-py (no GPU here)"


@functools.cache
def _answers(python: str, code: str) -> bool:
    try:
        return subprocess.run([python, "-c", code], capture_output=True).returncode == 0
    except OSError:  # no such interpreter
        return False


def ovep_python() -> str | None:
    """``MEMSHRINK_PYTHON_ORT_OPENVINO``, else ``.cache/venv-ovep``'s Python, if its
    onnxruntime offers the OpenVINO EP; otherwise None."""
    py = os.environ.get("MEMSHRINK_PYTHON_ORT_OPENVINO") or str(
        REPO / ".cache" / "venv-ovep" / "bin" / "python"
    )
    code = (
        "import onnxruntime as o; assert 'OpenVINOExecutionProvider' in o.get_available_providers()"
    )
    return py if _answers(py, code) else None


def cuda_python() -> str | None:
    """``MEMSHRINK_PYTHON_CUDA``, else this Python, if it has the CUDA EP and NVML; else None."""
    py = os.environ.get("MEMSHRINK_PYTHON_CUDA", sys.executable)
    code = (
        "import onnxruntime as o, pynvml; pynvml.nvmlInit(); "
        "assert 'CUDAExecutionProvider' in o.get_available_providers()"
    )
    return py if _answers(py, code) else None


def measured_ep_stages(path: Path, python: str, **kw: Any) -> dict[str, float]:
    """One ``profile`` process of ``path`` on the EP (``python``: ``ovep_python()``'s answer):
    each stage's peak over the baseline, by the profiler's stage name (``session``, ``run1``)."""
    from memshrink.verify import profile

    rep = profile(str(path), backends=("ort-openvino",), runs=1, python={"ort-openvino": python},
                  **kw)  # fmt: skip
    run = rep.runs[0].to_dict()
    assert run["status"] == "ok", run["error"]
    return {s["name"]: s["peak_delta"] for s in run["stages"]}
