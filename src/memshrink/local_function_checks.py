"""Model-local functions that can't be inlined as they stand, found before anything is inlined.

Why: inlining a malformed function would write a model that means something else, or leave a
call to a function it just removed. ONNX Runtime refuses the malformed cases at load (recursive
functions, a call of a function the model does not define, a function in a standard domain that
names no op of it), so memshrink refuses them too, with one line (exit 6). A function named like
an op of its domain (``ai.onnx`` ``Relu``, ``com.microsoft`` ``Gelu``) is a valid model that
ONNX Runtime runs as the *op*, not the function: its calls are left as they are, so the outputs
stay those ORT computes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache

import onnx
import onnx_ir as ir

from memshrink.errors import ModelLoadError

FunctionId = tuple[str, str, str]
STANDARD = frozenset({"", "ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training"})
# domains whose ops a runtime registers: a name there may be a runtime op, not a missing function
_RUNTIME = frozenset(
    {"com.microsoft", "com.microsoft.nchwc", "com.ms.internal.nhwc", "org.openvinotoolkit"}
)
_ORT_DOMAINS = frozenset({"com.microsoft", "com.microsoft.nchwc", "com.ms.internal.nhwc"})


def dom(domain: str) -> str:
    """``ai.onnx`` and ``""`` are one domain."""
    return "" if domain == "ai.onnx" else domain


@cache
def _ort_ops() -> frozenset[tuple[str, str]]:
    """(domain, op) of every schema ONNX Runtime registers (imported only for its domains)."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as ort_c
    except ImportError:  # pragma: no cover - onnxruntime is a dependency
        return frozenset()
    return frozenset((s.domain, s.name) for s in ort_c.get_all_operator_schema())


def _is_op(domain: str, name: str, version: int) -> bool:
    if domain in STANDARD:
        try:
            onnx.defs.get_schema(name, version, domain)
        except onnx.defs.SchemaError:
            return False
        return True
    return domain in _ORT_DOMAINS and (domain, name) in _ort_ops()


def _label(fid: FunctionId) -> str:
    return f"{fid[0] or 'ai.onnx'}.{fid[1]}"


def check_functions(
    model: ir.Model, nodes: Iterable[ir.Node], cyclic: set[FunctionId]
) -> dict[FunctionId, str]:
    """Raise ``ModelLoadError`` for a malformed function or call; return the functions whose
    calls stay (a reason each). ``nodes``: every node of the model's graphs and function bodies,
    subgraphs included; ``cyclic``: the functions that reach themselves through calls."""
    functions: Mapping[FunctionId, ir.Function] = model.functions
    if cyclic:
        listed = ", ".join(sorted(_label(f) for f in cyclic))
        raise ModelLoadError(
            f"model-local functions call themselves ({listed}): ONNX forbids recursive "
            "functions and ONNX Runtime refuses the model"
        )
    opsets = {dom(d): v for d, v in model.opset_imports.items()}
    stays: dict[FunctionId, str] = {}
    for fid, fn in functions.items():
        d = dom(fid[0])
        version = opsets.get(d, fn.opset_imports.get(fid[0], fn.opset_imports.get(d, 1)))
        if _is_op(d, fid[1], version):
            stays[fid] = f"named like the op {_label(fid)}, which runtimes run instead"
        elif d in STANDARD:
            raise ModelLoadError(
                f"model-local function {_label(fid)} is in a standard ONNX domain but names "
                f"no op of it at version {version}: ONNX Runtime refuses its calls; give the "
                "function a domain of its own"
            )
    defined = {(dom(f[0]), f[1]) for f in functions}
    own = {d for d, _ in defined} - STANDARD - _RUNTIME
    for node in nodes:
        key = (dom(node.domain), node.op_type)
        if key[0] in own and key not in defined:
            names = ", ".join(sorted(name for d, name in defined if d == key[0]))
            raise ModelLoadError(
                f"node {node.name!r} calls {key[0]}.{key[1]}, which the model does not define "
                f"(its functions in {key[0]}: {names}); ONNX Runtime refuses the model"
            )
    return stays
