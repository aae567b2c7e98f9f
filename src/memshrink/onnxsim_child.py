"""onnxsim run in a child process that exits, so its imports and copies never join ours.

Why: ``simplify`` ran onnxsim in the ``optimize`` process. Its imports (onnxsim's ~150
modules and ONNX Runtime, which it folds constants with: +34 MiB) and the pymalloc arenas its
parsed copies of the model left behind stayed in the process to its end, under the later
passes, the save and the other-runtime predictions: on a 5,000-node graph
``optimize --passes all`` peaked at 188-193 MiB against a 155 MiB target (docs/optimize.md,
"The tool's own cost, session 15"). A fresh interpreter (spawned, not forked: a forked
child copies every page of ours that it touches) gets the serialized model on stdin, runs
the same ``onnxsim.simplify`` call and writes the result back; its memory is the
machine's only while it runs. The result's bytes are the same as in-process onnxsim's
(the same call on the same bytes; ``optimize`` outputs md5-checked against it).

This module imports nothing heavy at load: the child runs ``python -c`` importing only it,
onnx and onnxsim.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

_OK, _CHECK_FAILED, _RAISED = b"\x01", b"\x00", b"\x02"


class OnnxsimError(RuntimeError):
    """onnxsim raised in the child: ``kind`` is its exception's type name."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def import_onnxsim() -> Any:
    """``import onnxsim`` without the PyTorch it imports eagerly and never uses to simplify.

    onnxsim 0.8's package ``__init__`` imports its PPQ bridge, which tries ``import torch``
    inside ``try/except Exception``: with the benchmark suite's PyTorch installed that costs
    ~190 MiB RSS and ~8 s, more than the simplification itself (measured: simplifying
    MobileNetV2 peaked at 404 MiB, 217 MiB with torch kept out). Where torch is not loaded
    yet, it is hidden for the duration of the import only; a later ``import torch`` works.
    """
    if "onnxsim" in sys.modules or "torch" in sys.modules:
        import onnxsim

        return onnxsim
    sys.modules["torch"] = None  # type: ignore[assignment]  # import raises ImportError
    try:
        import onnxsim
    finally:
        if sys.modules.get("torch", False) is None:
            del sys.modules["torch"]
    return onnxsim


class ChildOnnxsim:
    """``onnxsim.simplify(proto, **options)`` in a fresh interpreter (see the module doc)."""

    def simplify(self, proto: Any, **options: Any) -> tuple[Any, bool]:
        """The simplified ModelProto and onnxsim's check flag; ``OnnxsimError`` when onnxsim
        raised, ``RuntimeError`` when the child died (a crash no longer ends ``optimize``)."""
        import onnx

        data = proto.SerializeToString()
        out = _run_child(data, options)
        del data
        status, body = out[:1], memoryview(out)[1:]
        if status == _RAISED:
            kind, _, message = bytes(body).decode("utf-8", "replace").partition("\0")
            raise OnnxsimError(kind, message)
        result = onnx.ModelProto()
        result.ParseFromString(body)
        return result, status == _OK


#: The child's program: the working folder off ``sys.path`` (a file there named like a module
#: onnxsim imports would shadow it); our ``memshrink`` first on it only where the path finds
#: another one (a test or bench that put ``src`` on ``sys.path`` itself: the installed one may
#: be older), never site-packages before the standard library; then ``child_main``.
_CHILD_CODE = """
import importlib.util, os, sys
here = sys.argv[2]
sys.path[:] = [p for p in sys.path if p not in ("", ".")]
spec = importlib.util.find_spec("memshrink")
found = [os.path.realpath(os.path.dirname(p)) for p in (spec and spec.submodule_search_locations) or []]
if here not in found:
    sys.path.insert(0, here)
from memshrink.onnxsim_child import child_main
child_main()
"""


def _run_child(data: bytes, options: dict[str, Any]) -> bytes:
    """The child's stdout for ``data`` on stdin (its stderr is ours: onnxsim's warnings)."""
    here = os.path.realpath(Path(__file__).resolve().parents[1])  # this memshrink's folder
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD_CODE, json.dumps(options), here],
        input=data,
        stdout=subprocess.PIPE,
        check=False,
    )
    if proc.returncode != 0 or proc.stdout[:1] not in (_OK, _CHECK_FAILED, _RAISED):
        raise RuntimeError(f"onnxsim's process exited with {proc.returncode}")
    return proc.stdout


def child_main() -> None:
    """The child: a serialized model on stdin, options as JSON in argv[1]; writes a status
    byte and the simplified model (or the exception's type and message) to stdout."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything onnxsim prints goes to stderr, not into the result
    sys.stdout = sys.stderr
    options = json.loads(sys.argv[1])
    data = sys.stdin.buffer.read()
    from memshrink import lazy_modules

    # onnx-ir (which onnxsim imports) loads sympy at import and onnxsim never reads it here:
    # deferred as in ``cli.main``, the child's imports cost 80 MiB / 0.37 CPU-s, not 114 / 0.66
    lazy_modules.defer()
    try:
        import onnx

        onnxsim = import_onnxsim()
        proto = onnx.ModelProto()
        proto.ParseFromString(data)
        del data
        simplified, ok = onnxsim.simplify(proto, **options)
        del proto
        result = (_OK if ok else _CHECK_FAILED) + simplified.SerializeToString()
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which skips the pass
        result = _RAISED + f"{type(exc).__name__}\0{exc}".encode()
    out.write(result)
    out.flush()


def available() -> bool:
    """Whether onnxsim is installed (found without importing it)."""
    return importlib.util.find_spec("onnxsim") is not None
