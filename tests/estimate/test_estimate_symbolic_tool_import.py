"""The estimator loads ORT's symbolic shape tool without importing onnxruntime.

Why: ``import onnxruntime`` loads its native library (+18 MiB RSS) though the tool itself
imports only numpy, onnx and sympy; ``estimate`` and ``optimize`` paid it for a file path."""

from __future__ import annotations

import os
import subprocess
import sys


def test_symbolic_tool_loads_without_onnxruntime() -> None:
    code = (
        "import sys\n"
        "from memshrink.estimate.graph import _symbolic_shape_inference\n"
        "tool = _symbolic_shape_inference()\n"
        "print(tool.__name__, 'onnxruntime' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, check=True
    )
    assert out.stdout.split() == ["SymbolicShapeInference", "False"]
