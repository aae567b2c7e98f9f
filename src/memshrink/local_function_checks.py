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
#: Domains a runtime knows without an ``opset_import`` (``model.check_node_domains``).
RUNTIME_DOMAINS = _RUNTIME
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


def _proto_nodes(nodes: Iterable[onnx.NodeProto]) -> Iterable[onnx.NodeProto]:
    """Every node, recursively into the subgraphs of If / Loop / Scan attributes."""
    for node in nodes:
        yield node
        for attr in node.attribute:
            for g in [attr.g] if attr.HasField("g") else attr.graphs:
                yield from _proto_nodes(g.node)


def check_function_protos(proto: onnx.ModelProto, where: str) -> None:
    """Refuse two functions with one (domain, name, overload), and a function call or body
    node whose domain its scope's ``opset_import`` does not list.

    Why: ONNX Runtime refuses both at load ("No opset import for domain 'local'", "No opset
    registered for domain  in function F", "Duplicate model-local function identifier"), but
    the model went through ``optimize`` with exit 0: onnx-ir keeps one of the duplicates and
    writes the missing imports (QA session 14). Checked on the proto, before onnx-ir merges
    them. A graph node of another domain (``com.microsoft``) without its import is left alone
    as before: only what concerns local functions is checked here."""
    if not proto.functions:  # nothing to check: no walk of a large graph
        return
    seen: set[FunctionId] = set()
    for f in proto.functions:
        fid = (dom(f.domain), f.name, f.overload)
        if fid in seen:
            label = _label(fid) + (f" (overload {f.overload!r})" if f.overload else "")
            raise ModelLoadError(
                f"{where}: two model-local functions are {label}: ONNX Runtime refuses the "
                "model; keep one, or give the other an overload or a name of its own"
            )
        seen.add(fid)
    local = {(d, n) for d, n, _ in seen}
    scopes = [("the graph", proto.opset_import, proto.graph.node, True)] + [
        (f"function {_label((dom(f.domain), f.name, f.overload))}", f.opset_import, f.node, False)
        for f in proto.functions
    ]
    for scope, imports, nodes, graph in scopes:
        listed = {dom(o.domain) for o in imports}
        for node in _proto_nodes(nodes):
            d = dom(node.domain)
            # in the graph only calls of local functions: other nodes are as they were
            if d in listed or (graph and (d, node.op_type) not in local):
                continue
            raise ModelLoadError(
                f"{where}: node {node.name or node.op_type!r} in {scope} calls "
                f"{d or 'ai.onnx'}.{node.op_type}, but {scope} has no opset_import for the "
                f"domain {d or 'ai.onnx'!r}: ONNX Runtime refuses the model"
            )
