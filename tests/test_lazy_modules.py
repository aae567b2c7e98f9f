"""sympy waits until read: a static graph's CLI commands never import it (-34 MiB RSS),
and every use of it still works once something reads it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
from fixtures_onnx import weight_chain

_PROBE = r"""
import json, sys
from memshrink.lazy_modules import defer
deferred = defer()
import onnx_ir as ir
out = {"deferred": deferred, "after_import": "sympy.core" in sys.modules}
d = ir.SymbolicDim("N")
out["eq"] = d == "N"
out["still_deferred"] = "sympy.core" in sys.modules
out["sum"] = str(d + 1)  # SymbolicDim arithmetic reads onnx_ir._symbolic_shapes, then sympy
import sympy
import sympy.core.numbers
out["loaded"] = "sympy.core" in sys.modules
out["same"] = sys.modules["sympy"] is sympy or sympy.Integer is sys.modules["sympy"].Integer
out["expr"] = str(ir.SymbolicDim(sympy.Symbol("y") * 2))
out["again"] = defer()
print(json.dumps(out))
"""


def _run(code: str, *args: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    ).stdout


def test_sympy_loads_only_when_read_and_then_works() -> None:
    out = json.loads(_run(_PROBE))
    assert out["deferred"] == ["sympy", "onnx_ir._symbolic_shapes"]
    assert out["after_import"] is False and out["eq"] is True and out["still_deferred"] is False
    assert out["sum"] == "N + 1" and out["loaded"] is True and out["same"] is True
    assert out["expr"] == "2*y"
    assert out["again"] == []  # loaded modules are never replaced


def test_estimate_of_a_static_graph_never_imports_sympy(tmp_path: Path) -> None:
    path = tmp_path / "chain.onnx"
    onnx.save_model(weight_chain("MatMul", 3, (8, 8), [4, 8], [4, 8]), path)
    code = (
        "import sys, io, contextlib\nfrom memshrink.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    rc = main(['estimate', sys.argv[1], '--backend', 'ort'])\n"
        "print(rc, 'sympy.core' in sys.modules)"
    )
    assert _run(code, str(path)).split() == ["0", "False"]
