"""Load and save models: one boundary where every accepted input becomes an ``onnx_ir.Model``.

Loading never reads weights: an embedded model is scanned (``protoscan``) so its
``raw_data`` payloads become lazy references into the .onnx file; external data is
memory-mapped by onnx-ir on first use. External-data references are validated at load
(folder containment, file present, offsets within the file) so a broken model fails here
with a clear message, not halfway through a pass.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx
import onnx_ir as ir

from memshrink import compact_attrs, opaque_types
from memshrink.errors import ExternalDataError, ModelLoadError, UsageError
from memshrink.local_function_checks import check_function_protos
from memshrink.protoscan import scan_model_file

if TYPE_CHECKING:  # pragma: no cover
    pass

ModelLike = "str | os.PathLike | onnx.ModelProto | ir.Model | gs.Graph"

#: Keys in ``ir.Model.meta`` (in-memory only, never serialized).
META_SOURCE = "memshrink.source"
META_SAVE = "memshrink.save"
#: Set by the ``partition`` pass: the plan the writer uses to emit a folder of parts.
META_PARTITION = "memshrink.partition"

#: Tensors with fewer payload bytes than this stay inline in the skeleton.
LIFT_THRESHOLD = 1024


def load(src: Any) -> ir.Model:
    """Return an ``onnx_ir.Model`` for a path, ``ModelProto``, ``ir.Model`` or graphsurgeon Graph.

    A path is read lazily (weights stay on disk). An ``ir.Model`` is returned as is;
    the other in-memory forms are converted once.
    """
    if isinstance(src, ir.Model):
        return src
    if isinstance(src, onnx.ModelProto):
        model = opaque_types.deserialize(src, copy=True)
        sort_if_needed(model)
        model.meta[META_SOURCE] = {"path": None, "external": False}
        return model
    if isinstance(src, (str, os.PathLike)):
        return _load_path(Path(src))
    if type(src).__module__.startswith("onnx_graphsurgeon"):
        import onnx_graphsurgeon as gs

        model = ir.serde.deserialize_model(gs.export_onnx(src))
        model.meta[META_SOURCE] = {"path": None, "external": False}
        return model
    raise UsageError(
        f"cannot load a model from {type(src).__name__}: pass a path, onnx.ModelProto, "
        "onnx_ir.Model or onnx_graphsurgeon.Graph"
    )


def _load_path(path: Path) -> ir.Model:
    if path.is_dir():
        raise ModelLoadError(f"{path}: is a folder, expected an .onnx file")
    if not path.is_file():
        raise ModelLoadError(f"{path}: no such file")
    try:
        scan = scan_model_file(
            str(path), location=path.name, threshold=LIFT_THRESHOLD, lift_lists=compact_attrs.lift
        )
    except OSError as exc:
        raise ModelLoadError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        proto = onnx.load_from_string(scan.skeleton)
    except Exception as exc:  # protobuf raises DecodeError and friends
        raise ModelLoadError(f"{path}: not a valid ONNX model ({exc})") from None
    del scan.skeleton
    if not proto.HasField("graph") or proto.ir_version <= 0:
        raise ModelLoadError(f"{path}: not an ONNX model (no graph or ir_version)")
    _check_external_entries(proto)
    check_function_protos(proto, str(path))
    try:
        model = opaque_types.deserialize(proto, base_dir=str(path.parent), lists=scan.lists)
    except Exception as exc:
        raise ModelLoadError(f"{path}: cannot be parsed as ONNX: {_why(exc)}") from None
    del proto
    check_opsets(model, str(path))
    check_standard_ops(model, str(path))
    check_node_domains(model, str(path))
    sort_if_needed(model)
    base_dir = str(path.parent.resolve())
    ir.external_data.set_base_dir(model.graph, base_dir)
    _set_attribute_tensor_base_dir(model, base_dir)
    own_file = str(path.resolve())
    validate_external_data(model, base_dir)
    read = {
        os.path.realpath(t.path)
        for t, _ in iter_tensor_slots(model)
        if isinstance(t, ir.ExternalTensor)
    }
    model.meta[META_SOURCE] = {
        "path": own_file,
        # every file the input is made of, kept when a pass rebuilds the model in memory
        # (simplify): a save must never replace one (``writer._files_in_use``)
        "input_files": sorted(read | {os.path.realpath(own_file)}),
        "external": scan.external_refs > 0,
        "lifted_tensors": scan.lifted_tensors,
        "lifted_bytes": scan.lifted_bytes,
    }
    return model


def sort_if_needed(model: ir.Model) -> bool:
    """Sort nodes topologically when the file does not: ONNX requires it, but ONNX Runtime
    tolerates any order and some tools write others (``onnxruntime.transformers.float16``
    appends its Cast nodes at the end). Every pass and ``clone`` assume the order; a sorted
    graph is left exactly as it is. Returns whether it sorted."""
    from memshrink.checks import check_topological
    from memshrink.errors import PassError

    try:
        check_topological(model.graph)
    except PassError:
        try:
            model.graph.sort()
        except ValueError as exc:  # a cycle: no order exists
            raise ModelLoadError(f"the graph has a cycle: {exc}") from None
        return True
    return False


@functools.lru_cache(maxsize=1)
def _known_opsets() -> dict[str, int]:
    """Highest opset version this ``onnx`` knows for each standard domain (~0.1 s: cached)."""
    known: dict[str, int] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        known[schema.domain] = max(known.get(schema.domain, 0), schema.since_version)
    known[""] = max(known.get("", 0), onnx.defs.onnx_opset_version())
    return known


def check_opsets(model: ir.Model, where: str) -> None:
    """Refuse opsets of standard domains newer than ``onnx`` knows: their ops' semantics are
    unknown, so no rewrite (or check) of them can be trusted. Custom domains pass through."""
    for domain, version in model.opset_imports.items():
        key = "" if domain == "ai.onnx" else domain
        if key == "":
            newest: int | None = onnx.defs.onnx_opset_version()
        elif key.startswith("ai.onnx"):
            newest = _known_opsets().get(key)
        else:
            newest = None  # a custom domain: its ops are opaque to every pass
        if newest is not None and not 1 <= version <= newest:
            raise ModelLoadError(
                f"{where}: unknown opset {domain or 'ai.onnx'} {version} (this onnx "
                f"{onnx.__version__} knows versions 1..{newest}); upgrade onnx or "
                "convert the model to a known opset"
            )


@functools.cache
def _runtime_standard_ops() -> frozenset[tuple[str, str]] | None:
    """Ops ONNX Runtime registers in the standard domains beside ONNX's own.

    Why: ORT's transformers optimizer writes ``SimplifiedLayerNormalization`` (and ORT keeps
    ``Scale``, ``Crop``, ``ImageScaler`` … of old ONNX) in the ``ai.onnx`` domain, and ORT runs
    them: refusing them refused real Llama-style exports (session 14). Without ONNX Runtime
    nothing says a runtime refuses an op, so every op passes."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as ort_c
    except ImportError:  # pragma: no cover - onnxruntime is a dependency
        return None
    return frozenset((s.domain, s.name) for s in ort_c.get_all_operator_schema())


def check_standard_ops(model: ir.Model, where: str) -> None:
    """Refuse a node of ``ai.onnx`` / ``ai.onnx.ml`` whose op those domains do not have.

    Why: ONNX Runtime refuses such a model at load, but every pass treated the node as
    opaque: a local function whose body calls ``Reluu`` was inlined and written out with
    exit 0 (QA session 14). ``check_opsets`` has already refused opsets newer than ``onnx``
    knows, so an op it does not know in any version exists nowhere."""
    bodies = [model.graph, *(f.graph for f in model.functions.values())]
    # a call of a local function declared in a standard domain has its own, clearer error
    # (``local_function_checks``)
    local = {(f.domain, f.name) for f in model.functions.values()}
    for body in bodies:
        for node in ir.traversal.RecursiveGraphIterator(body):
            domain = "" if node.domain == "ai.onnx" else node.domain
            if (node.domain, node.op_type) in local:
                continue
            if domain not in ("", "ai.onnx.ml") or onnx.defs.has(node.op_type, domain):
                continue
            runtime_ops = _runtime_standard_ops()
            if runtime_ops is None or (domain, node.op_type) in runtime_ops:
                continue  # ONNX Runtime's own op in the standard domain: it runs the model
            raise ModelLoadError(
                f"{where}: node {node.name or node.op_type!r} calls {node.op_type!r}, "
                f"which the {domain or 'ai.onnx'} domain does not define (runtimes refuse "
                "the model)"
            )


def check_node_domains(model: ir.Model, where: str) -> None:
    """Refuse a graph node (subgraphs included) whose domain the model's ``opset_import`` lacks,
    unless a runtime knows the domain without one (the standard ones, ONNX Runtime's
    ``com.microsoft*``, OpenVINO's).

    Why: ONNX Runtime refuses such a model at load ("No opset import for domain 'my.ops'")
    even with a custom-op library that defines the op, but ``optimize`` and ``estimate`` took
    it with exit 0 (QA sessions 14, 15). Function bodies are checked against their own imports
    before onnx-ir reads them (``local_function_checks``)."""
    from memshrink.local_function_checks import RUNTIME_DOMAINS, STANDARD, dom

    known = {dom(d) for d in model.opset_imports} | STANDARD | RUNTIME_DOMAINS
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        d = dom(node.domain)
        if d in known:
            continue
        raise ModelLoadError(
            f"{where}: node {node.name or node.op_type!r} calls {d}.{node.op_type}, but the "
            f"model has no opset_import for the domain {d!r}: ONNX Runtime refuses the model; "
            f"add one (e.g. {d} version 1)"
        )


def iter_tensor_slots(model: ir.Model):
    """Yield ``(tensor, setter)`` for every tensor held by the model.

    Covers initializers of every (sub)graph and tensor-valued node attributes, so
    savers and passes can swap a tensor without knowing where it lives.
    """
    for graph in model.graphs():
        for value in list(graph.initializers.values()):
            if value.const_value is not None:
                yield value.const_value, _initializer_setter(value)
        for node in graph:
            yield from _attribute_slots(node)
    # Function bodies (and their subgraphs) can hold Constant tensors too.
    for function in model.functions.values():
        for node in ir.traversal.RecursiveGraphIterator(function):
            yield from _attribute_slots(node)


def _attribute_slots(node: ir.Node):
    for name, attr in list(node.attributes.items()):
        if attr.type == ir.AttributeType.TENSOR and attr.value is not None:
            yield attr.value, _attr_setter(node, name)
        elif attr.type == ir.AttributeType.TENSORS:
            for i, tensor in enumerate(attr.value):
                yield tensor, _attr_list_setter(node, name, i)


def _initializer_setter(value: ir.Value):
    def setter(tensor: ir.TensorProtocol) -> None:
        value.const_value = tensor

    return setter


def _attr_setter(node: ir.Node, name: str):
    def setter(tensor: ir.TensorProtocol) -> None:
        node.attributes[name] = ir.AttrTensor(name, tensor)

    return setter


def _attr_list_setter(node: ir.Node, name: str, index: int):
    def setter(tensor: ir.TensorProtocol) -> None:
        tensors = list(node.attributes[name].value)
        tensors[index] = tensor
        node.attributes[name] = ir.AttrTensors(name, tensors)

    return setter


def _set_attribute_tensor_base_dir(model: ir.Model, base_dir: str) -> None:
    for tensor, _ in iter_tensor_slots(model):
        if isinstance(tensor, ir.ExternalTensor) and not tensor.base_dir:
            tensor.base_dir = base_dir


def _check_external_entries(proto: onnx.ModelProto) -> None:
    """The raw ``external_data`` entries, before onnx-ir drops unknown keys with a warning
    (``extrefs.check_keys``); offsets and lengths must be numbers."""
    from onnx.external_data_helper import _get_all_tensors

    from memshrink.extrefs import check_keys

    for t in _get_all_tensors(proto):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        check_keys(t.name, [e.key for e in t.external_data])
        for e in t.external_data:
            if e.key in ("offset", "length") and not e.value.strip().isdigit():
                raise ExternalDataError(
                    f"tensor {t.name or '<unnamed>'!r}: external data {e.key} {e.value!r} "
                    "is not a number"
                )


def validate_external_data(model: ir.Model, base_dir: str) -> None:
    """Refuse references that escape the model's folder, point at missing files or run past EOF."""
    from memshrink.extrefs import ExternalRef, check_ref

    sizes: dict[str, int] = {}
    for tensor, _ in iter_tensor_slots(model):
        if not isinstance(tensor, ir.ExternalTensor):
            continue
        ref = ExternalRef(
            tensor.name or "", os.fspath(tensor.location), tensor.offset or 0, tensor.length,
            tensor.nbytes,
        )  # fmt: skip
        check_ref(ref, base_dir, sizes)


def materialize(tensor: ir.TensorProtocol) -> ir.TensorProtocol:
    """An in-memory copy of a file-backed tensor (for tensors that must be written inline)."""
    if not isinstance(tensor, ir.ExternalTensor):
        return tensor
    return ir.Tensor(
        tensor.numpy().copy(), dtype=tensor.dtype, name=tensor.name, doc_string=tensor.doc_string
    )


def serialize_with_data(model: ir.Model) -> onnx.ModelProto:
    """A complete in-memory ModelProto (weights included), for tools that need one (onnxsim).

    Costs the weights in memory: callers cap the model size first. The model is unchanged.
    """
    swapped = []
    try:
        for tensor, setter in iter_tensor_slots(model):
            if isinstance(tensor, ir.ExternalTensor):
                swapped.append((tensor, setter))
                setter(materialize(tensor))
        return opaque_types.serialize(model)
    finally:
        for tensor, setter in reversed(swapped):
            setter(tensor)


def source_path(model: ir.Model) -> str | None:
    """The .onnx file the model was loaded from, if any."""
    return (model.meta.get(META_SOURCE) or {}).get("path")


def weight_bytes(model: ir.Model) -> int:
    """Total bytes of all tensors held by the model (from shapes; no data read)."""
    return sum(tensor.nbytes for tensor, _ in iter_tensor_slots(model))


def save(model: Any, path: str | os.PathLike, **options: Any) -> Any:
    """Save atomically; see :func:`memshrink.writer.save_model` for options."""
    from memshrink.writer import save_model

    return save_model(load(model), path, **options)


def _why(exc: BaseException) -> str:
    """onnx_ir's ``SerdeError`` names only the function or graph; its root cause says what is
    wrong (a ``KeyError``: a name used, e.g. as a function's output, that nothing defines)."""
    root = exc
    while root.__cause__ is not None or root.__context__ is not None:
        root = root.__cause__ or root.__context__  # type: ignore[assignment]
    if root is exc:
        return str(exc)
    if isinstance(root, KeyError):
        return f"{exc}: {root} is used but never defined"
    return f"{exc}: {type(root).__name__}: {root}"
