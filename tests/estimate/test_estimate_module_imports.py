"""The estimator's backend modules import on their own, first, in a fresh interpreter.

``openvino.py`` and ``backends.py`` once imported each other, so ``import
memshrink.estimate.openvino`` failed unless ``backends`` had loaded first: a bench script or a
user importing the OpenVINO rules directly got an ImportError.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

# every module that builds a prediction, or that one of them imports from the package
FIRST_IMPORTS = [
    "backends",
    "openvino",
    "ort_openvino",
    "cuda",
    "stages",
    "result",
    "api",
    "ov_order",
    "schedule",
]


@pytest.mark.parametrize("name", FIRST_IMPORTS)
def test_module_imports_first_in_a_fresh_interpreter(name: str) -> None:
    r = subprocess.run(
        [sys.executable, "-c", f"import memshrink.estimate.{name}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
