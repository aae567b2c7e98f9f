"""A weight-free, shape-annotated view of a model: what every later stage of the estimator reads.

Why a private view instead of the ``onnx_ir`` model itself: the estimator must never mutate the
caller's model nor read weight values, and it needs two shape views of each tensor — the
*symbolic* one the runtime sees at session creation (ONNX Runtime's planner reuses buffers only
when these match) and the *concrete* one after binding input dims (which gives the bytes).
Both come from ONNX shape inference run on a proto that holds the graph's structure and only
the tiny integer initializers shape inference needs (Reshape targets, axes); large weights
become typed graph inputs, so their data is never touched.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir

from memshrink.bindings import Dim, bind_input_shapes, load_sidecar
from memshrink.compact_attrs import (
    THRESHOLD,
    digest_value,
    drop_large_lists,
    has_large_lists,
    inference_ignores,
    marked,
    note_lengths,
    noted_length,
    parse_without_large_lists,
    splice,
)
from memshrink.errors import ModelLoadError, UnboundDimensionError, UsageError
from memshrink.estimate import contrib_shapes, dd_bounds, shape_values
from memshrink.estimate.ort_metadata import kept_string_bytes
from memshrink.irgraphs import graphs as ir_graphs
from memshrink.local_functions import calls_functions, inline_functions
from memshrink.transforms.weight_io import read_array

# Integer initializers at most this big are passed with their data (shape-inference needs
# Reshape/Unsqueeze/Slice constants); everything else is shape + dtype only.
SMALL_CONST_BYTES = 4096
_INT_TYPES = {
    onnx.TensorProto.INT64,
    onnx.TensorProto.INT32,
    onnx.TensorProto.INT8,
    onnx.TensorProto.UINT8,
    onnx.TensorProto.BOOL,
}

SymShape = tuple[int | str | None, ...]
#: Marker -> large list (``compact_attrs.marked``) of one inference: its weight-free protos
#: carry the lists as markers, and ``_infer`` splices them in; None: the proto has no markers.
Lists = dict[bytes, tuple[Any, str]] | None


@dataclass
class TensorInfo:
    """One tensor of the graph: dtype, symbolic and concrete shape, where it lives."""

    name: str
    kind: str  # "input" | "initializer" | "activation"
    elem_type: int = 0  # onnx.TensorProto data type, 0 = unknown
    sym_shape: SymShape | None = None  # as the runtime sees it at session creation
    shape: tuple[int, ...] | None = None  # concrete after binding (None = unknown)
    producer: int | None = None  # node index
    consumers: list[int] = field(default_factory=list)
    is_output: bool = False
    external: bool | None = None  # initializers: stored in an external file?
    # initializers of a file with external data that are stored inside the .onnx itself
    # (``_mark_inline``): ORT copies them out of the parsed ModelProto onto the heap
    inline: bool = False
    init_bytes: int | None = None  # initializers: stored size
    folded: bool = False  # computed from weights once at load time (constant folding)
    zero: bool = False  # a shared Conv bias whose values are all zero (``_mark_zero_biases``)
    small: tuple[int, ...] | None = None  # values of a tiny int weight (``_mark_small_ints``)

    @property
    def itemsize(self) -> float | None:
        return _itemsize(self.elem_type)

    @functools.cached_property
    def nbytes(self) -> int | None:
        if self.init_bytes is not None:
            return self.init_bytes
        size = _itemsize(self.elem_type)
        if self.shape is None or size is None:
            return None
        n = 1
        for d in self.shape:
            n *= d
        return int(n * size + 0.5)


@functools.lru_cache(maxsize=64)
def _itemsize(elem_type: int) -> float | None:
    if not elem_type:
        return None
    try:
        return float(ir.DataType(elem_type).itemsize)
    except (ValueError, AttributeError, TypeError):  # STRING has no fixed size
        return None


@dataclass
class NodeInfo:
    index: int
    name: str
    op_type: str
    domain: str
    inputs: list[str]  # "" = omitted optional input
    outputs: list[str]
    implicit_inputs: list[str] = field(default_factory=list)  # outer names used by subgraphs
    subgraphs: list[GraphInfo] = field(default_factory=list)
    # the attribute each of ``subgraphs`` comes from (If: "then_branch" / "else_branch")
    subgraph_attrs: list[str] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)  # int/float/string(s) attributes only
    meta: dict[str, str] = field(default_factory=dict)  # metadata_props (memshrink.inplace)
    # the body a node of a flattened graph comes from (``ort_bodies``): "" = the main graph;
    # ORT gives each body its own session state (and prepacked copies, ``ort_weights``)
    scope: str = ""


@dataclass
class GraphInfo:
    nodes: list[NodeInfo]
    tensors: dict[str, TensorInfo]
    inputs: list[str]
    outputs: list[str]
    initializers: list[str]
    unknown: list[str] = field(default_factory=list)  # activations of unknown size
    # activations sized by a data-dependent op's upper bound (``dd_bounds``) -> the rule
    bounded: dict[str, str] = field(default_factory=dict)
    folded: set[int] = field(default_factory=set)  # nodes the runtime folds at load time
    # ORT CPU, fp16 models (``ort_fp16.lower``): initializers stored as fp16 that the runtime
    # converts to anon f32 copies at session creation (their ``nbytes`` are the f32 copy's)
    fp16_cast: set[str] = field(default_factory=set)
    opset: int = 0  # the default domain's opset (0: unknown); decides which ops are functions
    # node outputs whose shape the file declares (value_info): a runtime starts from these
    declared: set[str] = field(default_factory=set)
    # declared dims left empty (neither a value nor a name), per declared tensor: they name
    # nothing for ORT's planner (``ort_symdims``)
    declared_empty: dict[str, frozenset[int]] = field(default_factory=dict)
    # ``unk__N`` names the file itself declares (``value_info`` written by an earlier tool):
    # ORT reads them as names, unlike the ones this estimator's own inference makes up
    declared_unk: frozenset[str] = frozenset()


def node_count(g: GraphInfo) -> int:
    """Nodes of ``g`` and of every If / Loop / Scan body in it, at any depth: ORT makes a
    session state with kernels for each body and OpenVINO reads each body into its own
    ov.Model, so a body's nodes cost what the main graph's do (an Optimum merged decoder:
    one If over two ~600-node decoders, docs/estimate.md, "Session 12: subgraph nodes")."""
    return sum(1 + sum(node_count(s) for s in n.subgraphs) for n in g.nodes)


# Never constant-folded by ONNX Runtime (non-deterministic, or kept for QDQ fusion).
_NO_FOLD = frozenset(
    {
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
        "QuantizeLinear",
        "DequantizeLinear",
        "If",
        "Loop",
        "Scan",
    }
)


def fold_constants(g: GraphInfo) -> None:
    """Mark what the runtimes compute once at load time: nodes whose inputs are all weights or
    folded, and ``Shape``/``Size`` of statically shaped tensors (ORT ``ConstantFolding``; OpenVINO
    folds the same). Their outputs become weights held in anon memory, not activations."""
    for node in g.nodes:
        if node.op_type in _NO_FOLD or node.subgraphs or node.domain not in ("", "ai.onnx"):
            continue
        if any(g.tensors[o].is_output for o in node.outputs if o):
            continue
        ins = [n for n in node.inputs if n]
        if node.op_type in ("Shape", "Size") and ins:
            src = g.tensors[ins[0]].sym_shape
            ok = src is not None and all(isinstance(d, int) for d in src)
        else:
            ok = all(g.tensors[n].kind == "initializer" for n in ins)
        if not ok:
            continue
        g.folded.add(node.index)
        for o in node.outputs:
            if not o:
                continue
            t = g.tensors[o]
            t.kind = "initializer"
            t.folded = True
            t.producer = None
            t.external = False
            t.init_bytes = t.nbytes or 0
            g.initializers.append(o)
        for n in ins:
            t = g.tensors[n]
            t.consumers = [c for c in t.consumers if c != node.index]
    g.unknown = [n for n in g.unknown if g.tensors[n].kind == "activation"]


@dataclass
class ModelView:
    """Everything the estimator knows about a model, computed once per call."""

    graph: GraphInfo
    bindings: dict[str, tuple[int, ...]]
    declared_inputs: list[tuple[str, tuple[Dim, ...]]]
    model_path: str | None
    weight_bytes: int
    external_weight_bytes: int
    embedded: bool  # how the saved file stores its weights (decides heap copy vs mmap)
    # an in-memory model's future data file under an external save policy: what
    # ``writer.save`` will put there (None: read from a path, or no such policy)
    data_file_bytes: int | None = None
    # graph inputs declared without any shape (not even a rank): the ORT OpenVINO EP then
    # takes no node of the graph (``ort_openvino``); ``declared_inputs`` cannot tell them
    # from unnamed dims once ``--shape`` gave them a rank
    shapeless_inputs: frozenset[str] = frozenset()
    # node / value metadata_props and doc strings ORT keeps resident (``ort_metadata``)
    metadata_bytes: int = 0


# --------------------------------------------------------------------------- loading


def _as_ir(model: Any) -> tuple[ir.Model, str | None]:
    if isinstance(model, ir.Model):
        return model, None
    if isinstance(model, onnx.ModelProto):
        return ir.serde.deserialize_model(model), None
    if isinstance(model, str | os.PathLike):
        path = os.fspath(model)
        if os.path.isdir(path):  # a partition folder, most likely: say what works instead
            raise ModelLoadError(
                f"{path} is a folder: estimate takes one .onnx file (for a partition folder, "
                "estimate a part_NNN.onnx, or measure the folder with memshrink profile)"
            )
        if not os.path.isfile(path):
            raise ModelLoadError(f"model not found: {path}")
        try:
            from memshrink.model import (
                load as ms_load,  # lazy weights, when the lead's loader exists
            )
        except ImportError:
            ms_load = ir.load  # type: ignore[assignment]
        try:
            m = ms_load(path)
        except Exception as exc:  # noqa: BLE001 - one clear line for any parse failure
            if isinstance(exc, ModelLoadError):
                raise
            raise ModelLoadError(f"cannot load {path}: {exc}") from exc
        return m, path
    raise ModelLoadError(f"unsupported model type {type(model).__name__}")


def _dims_of(shape: ir.Shape | None) -> tuple[Dim, ...] | None:
    if shape is None:
        return None
    out: list[Dim] = []
    for d in shape:
        if isinstance(d, int):
            # ``dim_value: -1`` (older converters' "unknown"): runtimes read it as dynamic;
            # kept as a value, shape inference computed Conv outputs of size 0 from it
            out.append(d if d >= 0 else None)
        else:
            out.append(getattr(d, "value", None))
    return tuple(out)


def _is_external(t: Any) -> bool:
    return isinstance(t, ir.ExternalTensor)


def _in_model_file(t: Any, path: str | None) -> bool:
    """The lazy loader maps an embedded initializer from the .onnx file itself: an
    ``ExternalTensor`` whose location is the model's own file."""
    if not path or not isinstance(t, ir.ExternalTensor):
        return False
    try:
        return Path(t.base_dir or "", t.location).resolve() == Path(path).resolve()
    except (OSError, TypeError, ValueError):
        return False


def _mark_inline(g: GraphInfo, names: set[str]) -> None:
    """Flags ``names`` (initializers, bodies' too) as stored inside the .onnx of a file with
    external data: memshrink's own ``external-data`` leaves small weights and weights read in
    Loop / Scan bodies there (``loop_weights_inline``), so its outputs are mixed files."""
    for n in names & set(g.tensors):
        if g.tensors[n].kind == "initializer":
            g.tensors[n].inline = True
    for node in g.nodes:
        for sub in node.subgraphs:
            _mark_inline(sub, names)


# --------------------------------------------------------------------------- proto building


def _value_info(name: str, elem_type: int, dims: Sequence[Dim] | None) -> onnx.ValueInfoProto:
    vi = onnx.ValueInfoProto()
    vi.name = name
    tt = vi.type.tensor_type
    tt.elem_type = elem_type
    if dims is not None:
        tt.shape.SetInParent()
        for d in dims:
            dp = tt.shape.dim.add()
            if isinstance(d, int) and d >= 0:
                dp.dim_value = d
            elif isinstance(d, str) and d:
                dp.dim_param = d
    return vi


def _weight_free_proto(
    model: ir.Model, input_dims: Mapping[str, Sequence[Dim]], table: Lists
) -> onnx.ModelProto:
    """The model's structure with large initializers as typed inputs (no weight data).
    ``table``: where given, large lists are written empty and marked, their arrays recorded
    there (``compact_attrs.marked``) for ``_infer`` to splice in."""
    g = model.graph
    mp = onnx.ModelProto()
    mp.ir_version = model.ir_version or onnx.IR_VERSION
    for domain, version in model.opset_imports.items():
        op = mp.opset_import.add()
        op.domain = domain
        op.version = version
    gp = mp.graph
    gp.name = g.name or "main"
    for v in g.inputs:
        if v.name in g.initializers:
            continue
        et = int(v.dtype) if v.dtype is not None else 0
        gp.input.append(_value_info(v.name or "", et, input_dims.get(v.name or "")))
    for name, v in g.initializers.items():
        et = int(v.dtype) if v.dtype is not None else 0
        t = v.const_value
        dims = _dims_of(v.shape) if v.shape is not None else None
        if t is not None and dims is None:
            dims = tuple(int(d) if isinstance(d, int) else None for d in t.shape)
        small = (
            t is not None
            and et in _INT_TYPES
            and getattr(t, "nbytes", SMALL_CONST_BYTES + 1) <= SMALL_CONST_BYTES
        )
        if small and t is not None:
            gp.initializer.append(ir.serde.serialize_tensor(t))  # tiny: Reshape targets, axes
            gp.initializer[-1].name = name
        else:
            gp.input.append(_value_info(name, et, dims))
    with contextlib.ExitStack() as stack:
        if table is not None:  # large lists: empty and marked, spliced in by ``_infer``
            stack.enter_context(marked(model, table, note=True))
        for node in g:
            # into the graph's own message: ``append`` would copy each node (a forest's lists)
            ir.serde.serialize_node_into(np_ := gp.node.add(), node)
            note_lengths(np_, node)
    for v in g.outputs:
        et = int(v.dtype) if v.dtype is not None else 0
        gp.output.append(_value_info(v.name or "", et, _dims_of(v.shape)))
    for v in _declared_values(g):
        if v.shape is not None and v.dtype is not None and not v.is_graph_input():
            gp.value_info.append(_value_info(v.name or "", int(v.dtype), _dims_of(v.shape)))
    if calls_functions(model):
        mp = _functions_inlined(mp, model)
    return mp


def _functions_inlined(mp: onnx.ModelProto, model: ir.Model) -> onnx.ModelProto:
    """``mp`` (weight-free) with the model's local-function calls replaced by their bodies:
    ONNX Runtime inlines them at load (its EP gets the inlined graph too), so the tensors it
    plans are the bodies' (measured: ``docs/optimize.md``, "inline-functions"). Only the
    weight-free structure is copied."""
    for f in model.functions.values():
        mp.functions.append(ir.serde.serialize_function(f))
    skeleton = ir.serde.deserialize_model(mp)
    inline_functions(skeleton)
    return ir.serde.serialize_model(skeleton)


ZERO_BIAS_MAX_BYTES = 64 << 10


def _mark_zero_biases(graph: GraphInfo, g: ir.Graph) -> None:
    """Flag Conv biases shared by several nodes whose values are all zero (``TensorInfo.zero``).

    Why: OpenVINO drops an Add of a zero constant, so such a bias fuses into each Conv, while a
    shared non-zero bias stays a separate node (``openvino._shared_bias``). Only these small
    tensors are read (``dedup-weights`` makes them: the folded zero biases of random-init BNs).
    """
    for t in graph.tensors.values():
        if t.kind != "initializer" or len(set(t.consumers)) < 2:
            continue
        if (t.init_bytes or 0) > ZERO_BIAS_MAX_BYTES:
            continue
        if not any(
            graph.nodes[c].op_type == "Conv"
            and len(graph.nodes[c].inputs) > 2
            and graph.nodes[c].inputs[2] == t.name
            for c in t.consumers
        ):
            continue
        v = g.initializers.get(t.name)
        tensor = v.const_value if v is not None else None
        if tensor is None:
            continue
        try:
            t.zero = not read_array(tensor).any()  # pread: no map of the data file
        except Exception:  # unreadable data (missing file): assume a real bias
            t.zero = False


SMALL_INT_MAX = 8  # elements: indices, axes and shape pieces, never data


def _mark_small_ints(graph: GraphInfo, g: ir.Graph, inlined: onnx.GraphProto | None = None) -> None:
    """Keep the values of tiny int32/int64 weights and ``Constant`` outputs
    (``TensorInfo.small``). Why: ORT's ``CommonSubexpressionElimination`` merges nodes whose
    constant inputs are equal by value and ``ReshapeFusion`` reads which dim a ``Gather``
    picks (``ort_optimized.reshape_fusion``); only in-file tensors of at most 8 elements are
    read. ``inlined``: the graph with local functions inlined (their bodies' ``Constant``
    nodes, under the names the view gives them)."""
    tensors: dict[str, ir.TensorProtocol] = {}
    for name, v in g.initializers.items():
        if v.const_value is not None:
            tensors[str(name)] = v.const_value
    for node in g:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.outputs:
            attr = node.attributes.get("value")
            if attr is not None and attr.type == ir.AttributeType.TENSOR:
                tensors[str(node.outputs[0].name)] = attr.as_tensor()
    for np_ in inlined.node if inlined is not None else ():
        if np_.op_type == "Constant" and np_.domain in ("", "ai.onnx") and np_.output:
            name = np_.output[0]
            if name in tensors:
                continue
            for a in np_.attribute:
                if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                    tensors[name] = ir.serde.deserialize_tensor(a.t)
    for name, tensor in tensors.items():
        t = graph.tensors.get(name)
        if t is None or int(tensor.dtype) not in (6, 7) or _is_external(tensor):
            continue
        if tensor.size > SMALL_INT_MAX:
            continue
        try:
            t.small = tuple(int(x) for x in read_array(tensor).reshape(-1))
        except Exception:  # unreadable: keep no value
            t.small = None


def _declared_values(g: ir.Graph) -> list[ir.Value]:
    outs = {id(v) for v in g.outputs}
    vals = []
    for node in g:
        for v in node.outputs:
            if id(v) not in outs and v.name:
                vals.append(v)
    return vals


def _listless(mp: onnx.ModelProto, table: dict[bytes, tuple[Any, str]]) -> onnx.ModelProto | None:
    """``mp`` with each marker replaced by the doc_string :func:`splice` would write (the
    list's length note), when every marked list is one ONNX's inference ignores
    (``compact_attrs.INFERENCE_IGNORES``): then its inference equals the spliced model's with the lists
    dropped (``parse_without_large_lists``). None otherwise."""
    if not inference_ignores(mp, table):
        return None
    light = onnx.ModelProto()
    light.CopyFrom(mp)
    for node in light.graph.node:
        for a in node.attribute:
            hit = table.get(a.doc_string.encode())
            if hit is not None:
                a.doc_string = hit[1]
    return light


def _infer(mp: onnx.ModelProto, table: Lists) -> onnx.ModelProto:
    """ONNX's shape inference; the result without large scalar lists (only its structure and
    types are read) when the model has any. ``table``: the marked lists of ``mp``."""
    data = b""
    light = _listless(mp, table) if table else None
    if light is not None:
        try:
            return onnx.shape_inference.infer_shapes(light, strict_mode=False, data_prop=True)
        except Exception:  # noqa: BLE001 - as below: the model as the notes left it
            return light
    try:
        if not table and not has_large_lists(mp):
            return onnx.shape_inference.infer_shapes(mp, strict_mode=False, data_prop=True)
        from onnx.onnx_cpp2py_export import shape_inference as c_inference

        data = mp.SerializeToString()
        if table:  # the marked lists' fields, written from their arrays (``compact_attrs``)
            data = splice(data, table, strict=False)
        return parse_without_large_lists(c_inference.infer_shapes(data, False, False, True))
    except Exception:  # noqa: BLE001 - inference is best effort; unknowns are reported
        # with marked lists: the model as the lists' notes left it (their lengths)
        return parse_without_large_lists(data) if table and data else mp


_CACHE: OrderedDict[
    tuple, tuple[onnx.ModelProto, dict[str, tuple[int, SymShape | None]], dict[str, str]]
] = OrderedDict()
_CACHE_SIZE = 8


_OPAQUE_ATTRS = (
    ir.AttributeType.GRAPH,
    ir.AttributeType.GRAPHS,
    ir.AttributeType.TENSOR,
    ir.AttributeType.TENSORS,
)


def _fingerprint(model: ir.Model) -> int:
    """A cheap structural hash: the pass manager re-estimates after every pass, and shape
    inference (the slow part) only needs redoing when the structure changed."""
    parts: list[Any] = []
    for node in model.graph:
        parts.append(
            (
                node.op_type,
                node.domain,
                tuple(v.name if v is not None else "" for v in node.inputs),
                tuple(v.name for v in node.outputs),
                # declared shapes count: a pass (inplace) may complete them
                tuple(
                    None if v.shape is None else tuple(str(d) for d in v.shape)
                    for v in node.outputs
                ),
                tuple(
                    (k, id(a.value) if a.type in _OPAQUE_ATTRS else digest_value(a.value))
                    for k, a in node.attributes.items()
                ),
                tuple(sorted(node.metadata_props.items())),  # memshrink.inplace records
            )
        )
    for name, v in model.graph.initializers.items():
        parts.append((name, None if v.shape is None else tuple(str(d) for d in v.shape), v.dtype))
        t = v.const_value
        if (
            t is not None
            and v.dtype is not None
            and int(v.dtype) in _INT_TYPES
            and getattr(t, "nbytes", SMALL_CONST_BYTES + 1) <= SMALL_CONST_BYTES
        ):  # values inference reads (Reshape targets, NMS's max boxes): a new value re-infers
            parts.append(t.tobytes())
    parts.append(tuple((v.name, v.dtype) for v in model.graph.outputs))
    for fid, f in model.functions.items():  # bodies are inlined into the view
        parts.append((fid, tuple((n.op_type, n.domain, len(n.inputs)) for n in f)))
    parts.append(
        tuple(  # the dtype too: an fp16 twin of an f32 graph has other tensor types
            (v.name, None if v.shape is None else tuple(str(d) for d in v.shape), v.dtype)
            for v in model.graph.inputs
        )
    )
    return hash(tuple(parts))


def _cached_infer(
    model: ir.Model,
    fp: int,
    dims: Mapping[str, Sequence[Dim]],
    *,
    symbolic_tool: bool,
    data_bounds: bool = False,
    dim_bounds: Mapping[str, int] | None = None,
) -> tuple[onnx.ModelProto, dict[str, tuple[int, SymShape | None]], dict[str, str]]:
    """ONNX shape inference (fast, C++), then, where concrete shapes stay unknown, ONNX
    Runtime's symbolic shape inference tool (slower, Python, but resolves Range, attention
    masks and computed Reshape targets), the shape computations' values, and with
    ``data_bounds`` the data-dependent ops' upper bounds (``dd_bounds``; only with every input
    bound; never for the session-creation shapes, where ORT sees them unknown). The third
    item: each tensor sized through a bound -> the rule it follows."""
    key = (
        fp,
        tuple(sorted((k, tuple(v)) for k, v in dims.items())),
        symbolic_tool,
        data_bounds,
        tuple(sorted((dim_bounds or {}).items())),
    )
    hit = _CACHE.get(key)
    if hit is not None:
        _CACHE.move_to_end(key)
        return hit
    table: Lists = {}  # the weight-free protos' marked lists (``_weight_free_proto``)
    return _infer_uncached(model, fp, dims, key, symbolic_tool, data_bounds, dim_bounds, table)


def _infer_uncached(
    model: ir.Model,
    fp: int,
    dims: Mapping[str, Sequence[Dim]],
    key: tuple,
    symbolic_tool: bool,
    data_bounds: bool,
    dim_bounds: Mapping[str, int] | None,
    table: Lists,
) -> tuple[onnx.ModelProto, dict[str, tuple[int, SymShape | None]], dict[str, str]]:
    if data_bounds:
        return _remember(key, _with_bounds(model, fp, dims, symbolic_tool, dim_bounds or {}, table))
    proto = _weight_free_proto(model, dims, table)
    declared: dict[str, tuple[int, SymShape | None]] = {}
    _collect_types(proto.graph, declared)
    inferred = _infer(proto, table)
    types: dict[str, tuple[int, SymShape | None]] = {}
    _collect_types(inferred.graph, types)
    raw_types = dict(types)
    subst: dict[str, int] = {}
    for v in model.graph.inputs:
        for d, b in zip(_dims_of(v.shape) or (), dims.get(v.name or "", ()), strict=False):
            if isinstance(d, str) and isinstance(b, int) and b >= 0:
                subst[d] = b
    _keep_declared(types, declared, subst)
    if _has_unknown(inferred.graph, types):
        inferred = _contrib_fill(proto, types, table) or inferred
    if symbolic_tool and _has_unknown(inferred.graph, types):
        try:
            ssi = _run_symbolic_tool(_tool_proto(proto, raw_types, table))
            if ssi is not None:
                more: dict[str, tuple[int, SymShape | None]] = {}
                _collect_types(ssi.graph, more)
                for name, (et, shp) in more.items():
                    old = types.get(name)
                    if old is None or _concrete(old[1]) is None and _concrete(shp) is not None:
                        types[name] = (et or (old[0] if old else 0), shp)
        except Exception:  # noqa: BLE001 - best effort; what stays unknown is reported
            pass
    if _all_bound(dims) and _has_unknown(inferred.graph, types):
        _shape_values(proto, types, {}, table)
    # the cached proto only feeds _build_graph (structure, small attributes): a forest's
    # lists (left in when _infer failed and gave ``proto`` back) would stay in the cache, up
    # to _CACHE_SIZE copies; cleared fields keep their arena memory, so re-parse
    if drop_large_lists(inferred):
        inferred = onnx.ModelProto.FromString(inferred.SerializeToString())
    return _remember(key, (inferred, types, {}))


def _with_bounds(
    model: ir.Model,
    fp: int,
    dims: Mapping[str, Sequence[Dim]],
    symbolic_tool: bool,
    dim_bounds: Mapping[str, int],
    table: Lists,
) -> tuple[onnx.ModelProto, dict[str, tuple[int, SymShape | None]], dict[str, str]]:
    """The plain inference's result with the data-dependent sizes bounded on top."""
    inferred, base, _ = _cached_infer(model, fp, dims, symbolic_tool=symbolic_tool)
    types = dict(base)
    bounded: dict[str, str] = {}
    if _all_bound(dims) and _has_unknown(inferred.graph, types):
        proto = _weight_free_proto(model, dims, table)
        _contrib_fill(proto, types, table)
        vals = _shape_values(proto, types, {}, table)
        bounded = _bound_data_dependent(proto, types, vals, dim_bounds, table)
    return inferred, types, bounded


def _all_bound(dims: Mapping[str, Sequence[Dim]]) -> bool:
    """Every input shape known: the shape computations have values."""
    return all(all(isinstance(d, int) and d >= 0 for d in v) for v in dims.values())


def _remember(
    key: tuple,
    hit: tuple[onnx.ModelProto, dict[str, tuple[int, SymShape | None]], dict[str, str]],
) -> tuple[onnx.ModelProto, dict[str, tuple[int, SymShape | None]], dict[str, str]]:
    _CACHE[key] = hit
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return hit


MAX_BOUND_ROUNDS = 32  # Keypoint R-CNN: RPN TopK -> NMS -> RoI heads -> NMS -> keypoints


def _bound_data_dependent(
    proto: onnx.ModelProto,
    types: dict[str, tuple[int, SymShape | None]],
    vals: dict[str, Any],
    overrides: Mapping[str, int],
    table: Lists,
) -> dict[str, str]:
    """Give the first unknown outputs of NonZero / NMS / TopK / If / Loop their upper bound as
    a declared shape, then infer and evaluate the shape computations again so the bound
    reaches every tensor after them; repeated while a new source appears. Returns each tensor
    that got its size this way -> which bound it follows (for the estimate's assumptions)."""
    unknown_before = {n for n, (_, s) in types.items() if _concrete(s) is None}
    sources: dict[str, str] = {}
    for _ in range(MAX_BOUND_ROUNDS):
        shapes = {n: s for n, (_, s) in types.items()}
        found = dd_bounds.bound_sources(proto.graph, shapes, vals, overrides)
        if not found:
            break
        for owner, name, bshape, how in found:
            keep = [vi for vi in owner.value_info if vi.name != name]
            del owner.value_info[:]
            owner.value_info.extend(keep)
            et = types.get(name, (0, None))[0]
            owner.value_info.append(dd_bounds.value_info(name, et, bshape))
            types[name] = (et, bshape)
            sources[name] = how
        mp = onnx.ModelProto()
        mp.CopyFrom(proto)
        mp.graph.CopyFrom(shape_values.as_initializers(proto.graph, vals))
        more: dict[str, tuple[int, SymShape | None]] = {}
        _collect_types(_infer(mp, table).graph, more)
        for name, (et, shp) in more.items():
            old = types.get(name)
            if (old is None or _concrete(old[1]) is None) and _concrete(shp) is not None:
                types[name] = (et or (old[0] if old else 0), shp)
        vals = _shape_values(proto, types, vals, table)
    resolved = {n for n in unknown_before if _concrete(types.get(n, (0, None))[1]) is not None}
    return {n: sources.get(n, "follows a bounded data-dependent size") for n in resolved}


MAX_SHAPE_ROUNDS = 16  # Swin-V2: one round per stage's window padding


def _shape_values(
    proto: onnx.ModelProto,
    types: dict[str, tuple[int, SymShape | None]],
    vals: dict[str, Any],
    table: Lists,
) -> dict[str, Any]:
    """Fill ``types`` where shape inference left them unknown by evaluating the small shape
    computations on the bound input shapes (``shape_values``), then inferring again with those
    values as initializers; repeated while it resolves more (a resolved tensor's ``Shape``
    starts the next computation); ``vals``: an earlier call's values. Returns the values."""
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 17)
    for _ in range(MAX_SHAPE_ROUNDS):
        shapes = {n: _concrete(s) for n, (_, s) in types.items()}
        before = len(vals)
        vals = shape_values.evaluate(proto.graph, shapes, opset, vals)
        if len(vals) == before:
            return vals
        mp = onnx.ModelProto()
        mp.CopyFrom(proto)
        mp.graph.CopyFrom(shape_values.as_initializers(proto.graph, vals))
        more: dict[str, tuple[int, SymShape | None]] = {}
        _collect_types(_infer(mp, table).graph, more)
        for name, v in vals.items():  # a value's shape is exact: it beats a file's
            et = types[name][0] if name in types else 0  # stale value_info (``unk__N``)
            more[name] = (et or more.get(name, (0, None))[0], tuple(int(d) for d in v.shape))
        found = 0
        for name, (et, shp) in more.items():
            old = types.get(name)
            if (old is None or _concrete(old[1]) is None) and _concrete(shp) is not None:
                types[name] = (et or (old[0] if old else 0), shp)
                found += 1
        if _contrib_fill(proto, types, table) is not None:
            found += 1
        if not found:
            return vals
    return vals


MAX_CONTRIB_ROUNDS = 512  # one round per run of standard ops between two contrib ops
# Each round re-infers the whole graph: 300 contrib ops in a 1,200-node chain took `estimate`
# 1.1 -> 11.7 s uncapped. Rounds x nodes is capped so a contrib-heavy LLM stays fast; what
# is still untyped then is reported as unknown (a partial estimate), as before this rule.
CONTRIB_NODE_ROUNDS = 24_000


def contrib_rounds(n_nodes: int) -> int:
    """How many contrib-fill rounds a graph of ``n_nodes`` nodes gets (at least 4)."""
    return max(4, min(MAX_CONTRIB_ROUNDS, CONTRIB_NODE_ROUNDS // max(1, n_nodes)))


def _contrib_fill(
    proto: onnx.ModelProto, types: dict[str, tuple[int, SymShape | None]], table: Lists
) -> onnx.ModelProto | None:
    """Type ORT's contrib ops (``contrib_shapes``) where ONNX's inference can't: declare their
    outputs in ``proto`` (kept there, so later re-inferences carry them too), infer again,
    repeated while a declaration changes. Fills ``types``; returns the last inference (None
    when nothing was declared)."""
    if not contrib_shapes.has_rules(proto.graph):
        return None
    out = None
    for _ in range(contrib_rounds(len(proto.graph.node))):
        found = contrib_shapes.infer(proto.graph, types)
        have = {vi.name: vi for vi in proto.graph.value_info}
        new = {}
        for name, typed in found.items():
            old = types.get(name)
            if old is not None and old[1] is not None and old[0]:
                # known: a declared or inferred shape stays (declared again in a fresh
                # proto), unless this one is concrete where it is not (an output declared
                # under an exporter's own dim names)
                if _concrete(old[1]) is not None and name not in have:
                    typed = (old[0], old[1])
                elif _concrete(old[1]) is not None or _concrete(typed[1]) is None:
                    continue
            vi = contrib_shapes.value_info(name, typed)
            if have.get(name) != vi:
                new[name] = vi
        if not new:
            break
        keep = [vi for vi in proto.graph.value_info if vi.name not in new]
        del proto.graph.value_info[:]
        proto.graph.value_info.extend([*keep, *new.values()])
        for o in proto.graph.output:  # a declared output's own dims (an exporter's names)
            if o.name in new:  # would stand for the producer's in the consumers
                o.type.CopyFrom(new[o.name].type)
        out = _infer(proto, table)
        more: dict[str, tuple[int, SymShape | None]] = {}
        _collect_types(out.graph, more)
        for name, (et, shp) in [*more.items(), *((n, found[n]) for n in new)]:
            old = types.get(name)
            if (
                old is None
                or old[1] is None
                or _concrete(old[1]) is None
                and (_concrete(shp) is not None or name in new)
            ):
                types[name] = (et or (old[0] if old else 0), shp)
    return out


def _keep_declared(
    types: dict[str, tuple[int, SymShape | None]],
    declared: Mapping[str, tuple[int, SymShape | None]],
    subst: Mapping[str, int],
) -> None:
    """Declared dims (``value_info``, e.g. completed by the ``inplace`` pass) win over dims
    shape inference could not name (``unk__N`` or none): the runtime's planner reads the
    declared ones. ``subst``: input symbols bound in this pass (``N`` -> 2)."""
    for name, (et, decl) in declared.items():
        dshape = (
            None
            if decl is None
            else tuple(subst.get(d, d) if isinstance(d, str) else d for d in decl)
        )
        cur = types.get(name)
        if dshape is None:
            continue
        if cur is None or cur[1] is None:
            types[name] = (cur[0] if cur else et, dshape)
            continue
        ishape = tuple(subst.get(d, d) if isinstance(d, str) else d for d in cur[1])
        if len(ishape) != len(dshape):
            continue
        merged = tuple(
            d if (i is None or (isinstance(i, str) and i.startswith("unk__"))) and d else i
            for i, d in zip(ishape, dshape, strict=True)
        )
        if merged != cur[1]:
            types[name] = (cur[0] or et, merged)


def _tool_proto(
    proto: onnx.ModelProto, types: Mapping[str, tuple[int, SymShape | None]], table: Lists
) -> onnx.ModelProto:
    """``proto`` without its large scalar lists when ONNX's inference infers the same types
    without them (a forest's ``nodes_*``: the Python tool copies the model and every node it
    hands to ONNX, 1.3 GiB peak for a 24 MiB RandomForest); else ``proto`` itself."""
    if table:  # the lists are marked, not in ``proto``: it is the light one
        same: dict[str, tuple[int, SymShape | None]] = {}
        _collect_types(_infer(proto, None).graph, same)  # infer it as it is
        if same == dict(types):
            return proto
        return onnx.ModelProto.FromString(splice(proto.SerializeToString(), table, strict=False))
    if not has_large_lists(proto):
        return proto
    light = onnx.ModelProto()
    light.CopyFrom(proto)
    drop_large_lists(light)
    same = {}
    _collect_types(_infer(light, None).graph, same)
    return light if same == dict(types) else proto


def _run_symbolic_tool(proto: onnx.ModelProto) -> Any:
    """Run ORT's tool inside a temp folder: when it can't finish it writes
    ``sym_shape_infer_temp.onnx`` into the current directory, i.e. the user's."""
    import os
    import tempfile

    cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="memshrink-ssi-") as tmp:
        os.chdir(tmp)
        try:
            return _symbolic_shape_inference().infer_shapes(
                proto, auto_merge=True, guess_output_rank=False
            )
        finally:
            os.chdir(cwd)


def _symbolic_shape_inference() -> Any:
    """ORT's ``SymbolicShapeInference``, loaded from its file: importing the
    ``onnxruntime.tools`` package would import torch (seconds) for an unrelated helper, and
    ``onnxruntime`` itself loads its native library (+18 MiB RSS) that the tool (numpy,
    onnx, sympy) never calls: the package is only located."""
    mod = sys.modules.get("memshrink_ort_ssi")
    if mod is None:
        import importlib.util

        found = importlib.util.find_spec("onnxruntime")  # no import of a top-level package
        if found is None or not found.submodule_search_locations:
            raise ImportError("onnxruntime")
        path = Path(found.submodule_search_locations[0]) / "tools" / "symbolic_shape_infer.py"
        spec = importlib.util.spec_from_file_location("memshrink_ort_ssi", path)
        if spec is None or spec.loader is None:
            raise ImportError(path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["memshrink_ort_ssi"] = mod
        spec.loader.exec_module(mod)
    return mod.SymbolicShapeInference


def _has_unknown(gp: onnx.GraphProto, types: Mapping[str, tuple[int, SymShape | None]]) -> bool:
    for node in gp.node:
        for o in node.output:
            if o and _concrete(types.get(o, (0, None))[1]) is None:
                return True
    return False


def _collect_types(gp: onnx.GraphProto, out: dict[str, tuple[int, SymShape | None]]) -> None:
    for vi in list(gp.input) + list(gp.output) + list(gp.value_info):
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            continue
        shape: SymShape | None = None
        if tt.HasField("shape"):
            shape = tuple(
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                for d in tt.shape.dim
            )
        prev = out.get(vi.name)
        if prev is None or (prev[1] is None and shape is not None):
            out[vi.name] = (tt.elem_type, shape)
    for init in gp.initializer:
        out.setdefault(init.name, (init.data_type, tuple(init.dims)))
    for node in gp.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _collect_types(attr.g, out)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sg in attr.graphs:
                    _collect_types(sg, out)


# --------------------------------------------------------------------------- graph view


def _concrete(shape: SymShape | None) -> tuple[int, ...] | None:
    if shape is None:
        return None
    for d in shape:
        if type(d) is not int:
            return None
    return shape  # type: ignore[return-value]


def _build_graph(
    gp: onnx.GraphProto,
    sym: Mapping[str, tuple[int, SymShape | None]],
    conc: Mapping[str, tuple[int, SymShape | None]],
    init_info: Mapping[str, tuple[int, bool]],
    outer: set[str],
) -> GraphInfo:
    tensors: dict[str, TensorInfo] = {}
    init_names = [i.name for i in gp.initializer] + [
        vi.name for vi in gp.input if vi.name in init_info
    ]
    input_names = [vi.name for vi in gp.input if vi.name not in init_info]

    def info(name: str, kind: str) -> TensorInfo:
        t = tensors.get(name)
        if t is None:
            et, cshape = conc.get(name, sym.get(name, (0, None)))
            _, sshape = sym.get(name, (et, cshape))
            t = TensorInfo(
                name=name, kind=kind, elem_type=et, sym_shape=sshape, shape=_concrete(cshape)
            )
            if name in init_info:
                t.init_bytes, t.external = init_info[name]
            tensors[name] = t
        return t

    for n in input_names:
        info(n, "input")
    for n in init_names:
        info(n, "initializer")
    nodes: list[NodeInfo] = []
    local = set(input_names) | set(init_names)
    for idx, np_ in enumerate(gp.node):
        subgraphs: list[GraphInfo] = []
        sub_attrs: list[str] = []
        implicit: list[str] = []
        for attr in np_.attribute:
            graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for sg in graphs:
                sub = _build_graph(sg, sym, conc, init_info, outer | local)
                subgraphs.append(sub)
                sub_attrs.append(attr.name)
                implicit.extend(_free_names(sg))
        node = NodeInfo(
            index=idx,
            name=np_.name or f"{np_.op_type}_{idx}",
            op_type=np_.op_type,
            domain=np_.domain,
            inputs=list(np_.input),
            outputs=list(np_.output),
            implicit_inputs=sorted({n for n in implicit if n in local or n in tensors}),
            subgraphs=subgraphs,
            subgraph_attrs=sub_attrs,
            attrs=_small_attrs(np_),
            meta={m.key: m.value for m in getattr(np_, "metadata_props", [])},
        )
        nodes.append(node)
        for n in node.inputs + node.implicit_inputs:
            if n and (n in tensors or n not in outer):
                info(n, "activation").consumers.append(idx)
        for n in node.outputs:
            if n:
                t = info(n, "activation")
                t.producer = idx
                local.add(n)
    _fill_dropout_masks(nodes, tensors)
    outputs = [vi.name for vi in gp.output]
    for n in outputs:
        if n in tensors:
            tensors[n].is_output = True
    unknown = sorted(
        t.name for t in tensors.values() if t.kind == "activation" and t.nbytes is None
    )
    return GraphInfo(
        nodes=nodes,
        tensors=tensors,
        inputs=input_names,
        outputs=outputs,
        initializers=init_names,
        unknown=unknown,
    )


def _fill_dropout_masks(nodes: Sequence[NodeInfo], tensors: Mapping[str, TensorInfo]) -> None:
    """Dropout's mask has its input's shape; ONNX shape inference leaves it untyped in old
    opsets (zoo SqueezeNet, opset 9), which would make the whole estimate partial."""
    for node in nodes:
        if node.op_type != "Dropout" or node.domain not in ("", "ai.onnx"):
            continue
        if len(node.outputs) < 2 or not node.outputs[1] or not node.inputs:
            continue
        mask, data = tensors[node.outputs[1]], tensors.get(node.inputs[0])
        if (mask.shape is not None and mask.elem_type) or data is None or data.shape is None:
            continue
        # bool from opset 10 (T1 / T2); Dropout-7's mask is T, but ORT drops an unread
        # Dropout at session creation anyway, so the size only matters for file order.
        mask.elem_type = mask.elem_type or onnx.TensorProto.BOOL
        mask.sym_shape = mask.sym_shape or data.sym_shape
        mask.shape = data.shape


_SMALL_ATTR_TYPES = (
    onnx.AttributeProto.INT,
    onnx.AttributeProto.INTS,
    onnx.AttributeProto.FLOAT,
    onnx.AttributeProto.STRING,
)


def _small_attrs(np_: onnx.NodeProto) -> dict[str, Any]:
    """Scalar attributes (group, axis, kernel_shape, ...): rewrite rules such as ORT's NCHWc
    transformer decide on them; tensors and graphs are left out."""
    out: dict[str, Any] = {}
    for a in np_.attribute:
        # a forest's 10^5-element lists would sit in the view as Python objects: the view
        # keeps their lengths only (ORT's tree-ensemble rule counts entries)
        if (n := noted_length(a)) is not None:
            out[a.name] = n
        elif a.type in _SMALL_ATTR_TYPES and max(len(a.ints), len(a.floats)) < THRESHOLD:
            v = onnx.helper.get_attribute_value(a)
            out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def _free_names(gp: onnx.GraphProto) -> list[str]:
    """Names a subgraph reads from outer scopes (its implicit inputs)."""
    defined = {vi.name for vi in gp.input} | {i.name for i in gp.initializer}
    free: list[str] = []
    for node in gp.node:
        for n in node.input:
            if n and n not in defined:
                free.append(n)
        for attr in node.attribute:
            graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for sg in graphs:
                free.extend(n for n in _free_names(sg) if n not in defined)
        defined.update(node.output)
    return free


def build_view(
    model: Any,
    *,
    shapes: Mapping[str, Sequence[int]] | None = None,
    dims: Mapping[str, int] | None = None,
    embedded: bool | None = None,
    allow_partial: bool = False,
    dim_bounds: Mapping[str, int] | None = None,
) -> ModelView:
    """Load (lazily), bind input dims, run shape inference twice, and build the view.

    Data-dependent sizes (NonZero, NMS, TopK ...) get their upper bound (``dd_bounds``);
    ``dim_bounds`` (tensor name -> N) replaces the bound of those tensors.

    Raises ``UnboundDimensionError`` naming every unbound input dim unless ``allow_partial``,
    in which case unbound dims stay symbolic and the affected tensors are listed as unknown.
    """
    irm, path = _as_ir(model)
    g = irm.graph
    # No shape at all is an unknown rank, not a scalar: --shape gives it a rank (dims unknown).
    declared_or_none = [
        (v.name or "", _dims_of(v.shape)) for v in g.inputs if v.name not in g.initializers
    ]
    declared = [
        (n, d if d is not None else (None,) * len(shapes[n]) if shapes and n in shapes else ())
        for n, d in declared_or_none
    ]
    # An in-memory model loaded from a file keeps using that file's sidecar.
    source = irm.meta.get("memshrink.source") if path is None else None
    side_path = path or (source.get("path") if isinstance(source, dict) else None)
    sidecar = load_sidecar(side_path) if side_path else None
    if sidecar is not None and dims:
        # Explicit symbol bindings beat the sidecar's default feed for the inputs they cover.
        covered = {
            name
            for name, decl in declared
            if any(isinstance(d, str) for d in decl)
            and all(not isinstance(d, str) or d in dims for d in decl)
        }
        sidecar.inputs = [i for i in sidecar.inputs if i.name not in covered]
    try:
        bound = bind_input_shapes(
            [
                (n, d if o is not None or d else None)
                for (n, d), (_, o) in zip(declared, declared_or_none, strict=True)
            ],
            shapes=shapes,
            dims=dims,
            sidecar=sidecar,
        )
    except UnboundDimensionError:
        if not allow_partial:
            raise
        bound = {}
        dims = dict(dims or {})
        for name, decl in declared:
            if shapes and name in shapes:
                bound[name] = tuple(int(d) for d in shapes[name])
            else:
                bound[name] = tuple(
                    d if isinstance(d, int) else dims.get(d, -1) if isinstance(d, str) else -1
                    for d in decl
                )
    sym_dims = {name: decl for name, decl in declared}
    fp = _fingerprint(irm)
    sym_proto, sym_types, _ = _cached_infer(irm, fp, sym_dims, symbolic_tool=False)
    conc_dims: dict[str, Sequence[Dim]] = {
        name: tuple(d if d >= 0 else decl[i] for i, d in enumerate(bound[name]))
        for name, decl in declared
    }
    same = all(tuple(conc_dims[n]) == tuple(sym_dims[n]) for n, _ in declared)
    _, conc_types, bounded = _cached_infer(
        irm,
        fp,
        sym_dims if same else conc_dims,
        symbolic_tool=not same,
        data_bounds=True,
        dim_bounds=dim_bounds,
    )
    init_info: dict[str, tuple[int, bool]] = {}
    inline: set[str] = set()  # stored inside the .onnx itself (a mixed file's: ``_mark_inline``)
    weight_bytes = ext_bytes = 0
    for name, v in g.initializers.items():
        t = v.const_value
        nb = int(t.nbytes) if t is not None else 0
        ext = _is_external(t)
        init_info[name] = (nb, ext)
        if _in_model_file(t, path):
            inline.add(name)
        weight_bytes += nb
        ext_bytes += nb if ext else 0
    # bodies' own initializers (a BeamSearch decoder's weights): stored size and location
    # for the runtimes' body-weight rules (``ort_bodies``); the totals stay the main graph's
    body_bytes = body_ext = 0
    for sg in ir_graphs(irm):
        if sg is g:
            continue
        for name, v in sg.initializers.items():
            t = v.const_value
            nb, ext = int(t.nbytes) if t is not None else 0, _is_external(t)
            init_info.setdefault(name, (nb, ext))
            if _in_model_file(t, path):
                inline.add(name)
            body_bytes, body_ext = body_bytes + nb, body_ext + (nb if ext else 0)
    graph = _build_graph(sym_proto.graph, sym_types, conc_types, init_info, set())
    graph.opset = int(irm.opset_imports.get("", irm.opset_imports.get("ai.onnx", 0)) or 0)
    decl_values = [dv for dv in _declared_values(irm.graph) if dv.name and dv.shape is not None]
    graph.declared = {str(dv.name) for dv in decl_values}
    unk: set[str] = set()
    for dv in decl_values:
        dims_ = _dims_of(dv.shape) or ()
        empty = frozenset(i for i, dd in enumerate(dims_) if dd is None)
        if empty:
            graph.declared_empty[str(dv.name)] = empty
        unk.update(d for d in dims_ if isinstance(d, str) and d.startswith("unk__"))
    graph.declared_unk = frozenset(unk)
    unused = sorted(set(dim_bounds or {}) - {n for n, h in bounded.items() if h == "--dim-bound"})
    if unused:
        raise UsageError(
            f"--dim-bound names {', '.join(unused)}: no data-dependent tensor of unknown size "
            "by that name (the estimate's assumptions list the ones it bounds)"
        )
    graph.bounded = {n: how for n, how in bounded.items() if n in graph.tensors}
    fold_constants(graph)
    _mark_zero_biases(graph, g)
    _mark_small_ints(graph, g, sym_proto.graph if irm.functions else None)
    if embedded is None:
        every, every_ext = weight_bytes + body_bytes, ext_bytes + body_ext  # bodies' too
        embedded = _file_embeds_weights(path, every) if path else every_ext < every / 2
        if embedded and path and every_ext > sum(init_info[n][0] for n in inline):
            # some weights live in a data file: ORT maps those and copies only the ones stored
            # inside (a file half inline reads as embedded by its size)
            embedded = False
    if not embedded and inline:
        _mark_inline(graph, inline)
        # the data files hold the rest: OpenVINO reads the inline ones with the ModelProto
        ext_bytes -= sum(init_info[n][0] for n in inline if n in g.initializers)
    return ModelView(
        graph=graph,
        bindings={k: tuple(v) for k, v in bound.items()},
        declared_inputs=declared,
        model_path=path,
        weight_bytes=weight_bytes,
        external_weight_bytes=ext_bytes,
        embedded=bool(embedded),
        data_file_bytes=None if path else _written_external_bytes(irm),
        shapeless_inputs=frozenset(n for n, d in declared_or_none if d is None),
        metadata_bytes=kept_string_bytes(irm),
    )


def _written_external_bytes(model: ir.Model) -> int | None:
    """Bytes ``writer.save`` will write to the data file of this in-memory model, when its
    save policy (``external-data``'s, kept by a pass's trial clones) says external: every
    tensor of at least the policy's threshold that it does not keep inline, wherever it lives
    now. Why not only the tensors already external: a pass's new weights (``chunk``'s channel
    slices) are in memory until the save, then mapped from the data file like the rest
    (EfficientFormer channels x4: 35.0 MB already external, 45.5 MB written; OpenVINO's
    prediction inside the pass was 10 MiB low). None without such a policy: an in-memory
    model has no data file (yet)."""
    from memshrink.model import META_SAVE, iter_tensor_slots
    from memshrink.writer import DEFAULT_THRESHOLD

    policy = model.meta.get(META_SAVE) or {}
    if not policy.get("external"):
        return None
    threshold = int(policy.get("threshold", DEFAULT_THRESHOLD))
    inline = set(policy.get("inline", ()))
    return sum(
        int(t.nbytes)
        for t, _ in iter_tensor_slots(model)
        if t.nbytes >= threshold and t.nbytes > 0 and t.name not in inline
    )


def _file_embeds_weights(path: str, weight_bytes: int) -> bool:
    """A saved .onnx embeds its weights when the file itself is about as big as they are."""
    try:
        size = Path(path).stat().st_size
    except OSError:
        return False
    return weight_bytes > 0 and size >= 0.5 * weight_bytes
