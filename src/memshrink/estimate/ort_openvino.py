"""ONNX Runtime's OpenVINO execution provider (``ort-openvino``, device CPU): stage peaks.

How the EP spends memory (source: ``onnxruntime/core/providers/openvino``; runtime:
onnxruntime-openvino 1.24.1, which bundles OpenVINO 2025.4.1; micro-graphs measured through
``memshrink profile``, ``docs/estimate.md`` section "ORT OpenVINO EP"):

* ORT loads the model and keeps its own initializers: embedded weights as heap copies,
  external ones memory-mapped. When every node is supported the whole graph becomes one fused
  node; ORT builds no CPU kernels, so nothing is prepacked and ORT plans no activation arena.
* ``BackendManager`` turns the fused subgraph into a ModelProto (``GraphViewer::ToProto`` with
  initializers) and ``BasicBackend`` has OpenVINO read and compile it on the CPU plugin.
  *External* weights travel as references to ORT's mapping: OpenVINO keeps no second copy (as
  native ``read_model`` maps the file). *Embedded* ones are inlined in the proto: with static
  dims it is serialized and compiled from the string, whose weight copy is freed afterwards
  but stays resident in glibc's heap for tensors up to 32 MiB (one more 1x; larger ones are
  unmapped after session creation); with dynamic dims the proto and the string are both kept.
* ORT's basic (level 1) graph optimizations run before partitioning, for every EP: a weight
  constant-folded by ORT (GPT-2's ``Transpose(lm_head.weight)``, 147 MiB) is a new ORT-owned
  initializer (1x anon) that reaches OpenVINO inside the serialized ModelProto: OpenVINO keeps
  its own Constant of it (1x) and the proto bytes plus their serialized string are alive while
  OpenVINO reads it (2x, session creation only).
* Ops the EP does not claim (``UNSUPPORTED``; measured: ``IsNaN``, which every torch-exported
  transformer here has once per layer) run on ORT's CPU EP, and the graph is cut into several
  OpenVINO subgraphs (BERT-base: 13; with a 4x batch split, 52: each chunk's piece between two
  cuts is its own subgraph). Each is a separately compiled model with its own infer request
  and activation workspace, all alive at once: the workspaces add up instead of sharing one
  plan. Tensors crossing a cut live in ORT's CPU arena. A weight read by k subgraphs (the
  chunks of a batch split all read the layer's weights) is mapped k times (RSS counts each
  mapping) and, for Conv/FC, re-laid out k times: k - 1 more copies of each, for the whole
  session (measured on MatMul chains, and BERT b4x512 batch x4: +1255 MiB file, predicted
  +1248).
* A cluster of one node that is not the last goes to ORT's CPU EP (or joins the next cluster
  it shares an edge with), and a ``Mod`` of a 0-d tensor runs there too (``subgraph_ids``,
  ``on_ort_cpu``: Swin-V2's window-padding arithmetic, 12 subgraphs).
* A graph input declared without a shape makes the EP claim no node at all: ORT's CPU EP
  runs the graph (``takes_nothing``). ORT's ``EliminateIdentity`` (level 1) makes an Identity
  of a weight a name before partitioning: no folded copy.
* Dynamic dims, embedded: OpenVINO reads the serialized string as native ``read_model`` reads
  an embedded file, beside ORT's copy and the EP's proto and string (5x at the read); when
  every tensor is over glibc's mmap threshold all those transient copies are unmapped after
  session creation (``all_big``).
* From there the CPU plugin behaves exactly as native OpenVINO: the same re-laid-out Conv/FC
  copies, the same dynamic-shape deferral of Conv and post-op FC weights to the first infer,
  the same ``MemorySolver`` workspace. So the prediction is native OpenVINO's (``openvino.py``,
  reused, not copied) plus ORT's copies, plus the partitioning, plus a fixed cost of the EP.
* ... but always at f32: FCs without a fused activation run on MLAS, so such graphs load no
  oneDNN FC code (``ep_lib_pages``; SiLU counts as an activation, ``ov_mlas.swish_fcs``), and only the
  nodes the EP claims load plugin code. ORT's level-1 Conv+Mul/BN fusion makes new ORT-owned
  weights that travel inline in the EP's ModelProto (dynamic dims: proto + string, 2x).

Stages match the verifier's ``session`` / ``run1`` / ``run3``: ``session_creation`` (ORT load
+ OpenVINO read + compile), ``run_1``, ``steady_state``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from memshrink.estimate import openvino, ort_identity, ort_ml, ov_mlas
from memshrink.estimate.disjoint import find_root
from memshrink.estimate.graph import GraphInfo, ModelView, NodeInfo
from memshrink.estimate.lifetimes import Buffer, positions
from memshrink.estimate.ort import HOLD_OUTPUTS, option_flag, session_options_rules
from memshrink.estimate.planners import greedy_by_size
from memshrink.estimate.schedule import ort_default
from memshrink.estimate.stages import BackendPrediction, Stage

MiB = 1 << 20

# Measured once (2-core AVX2, onnxruntime-openvino 1.24.1, docs/estimate.md); never per model.
# Deltas over native OpenVINO's figures for the same graph, on the EP's own baseline (ORT
# imported; the OpenVINO libraries load during session creation).
OVEP_CALIBRATION: dict[str, float] = {
    "ovep_anon": 1.3 * MiB,  # ORT session objects + the EP's contexts (one Relu: +1.3 MiB)
    # ORT's graph + the subgraph's ModelProto the EP builds, per node (``--passes all``
    # outputs, EP session anon over native compile: 0.006-0.009 MiB per node, 123-1969 nodes)
    "ovep_per_node": 0.007 * MiB,
    # Embedded weights, static dims: the transient copy made while OpenVINO reads the serialized
    # subgraph is freed into glibc's heap and stays resident for tensors up to this size (larger
    # ones are mmapped by glibc and returned): multibranch (all 24 MiB in tensors < 1 MiB)
    # measured +59 MiB over native OpenVINO, 3x predicted +42; 8 x 9 MiB Conv tensors: 3x.
    "ovep_small_tensor": 1 * MiB,
    "ovep_file": 16.4 * MiB,  # ORT + EP + OpenVINO frontend library pages (one Relu: +16.4)
    # Static shapes cut into several subgraphs: fractions of the summed per-subgraph greedy
    # workspaces held after session creation and in the run stages. Fitted on BERT b4x512
    # `all` (13 subgraphs, dims made static: 0.75 / 1.57; batch split x4, 52: 0.81 / 1.98);
    # checked on `all` with batch x2 + channels x4 (see docs/estimate.md, rule 10).
    "ovep_static_ws_session": 0.8,
    "ovep_static_ws_run": 1.8,
}

# Ops the EP (onnxruntime-openvino 1.24.1, OpenVINO 2025.4, device CPU) leaves to ORT's CPU
# EP, as seen in ORT's verbose node placements on the suite. Not the EP's full capability list.
UNSUPPORTED = frozenset(
    {
        "IsNaN",
        # Sequence ops (the sweep's sequence-ops row: all six on [CPUExecutionProvider], the
        # MatMul / Relu / Sigmoid before them and the Add after them in 2 OpenVINO subgraphs)
        "SequenceConstruct",
        "SequenceInsert",
        "SequenceAt",
        "SequenceLength",
        "SequenceEmpty",
        "SequenceErase",
        "SplitToSequence",
        "ConcatFromSequence",
        # Scan (ORT's verbose placements: the sweep's scan-cumulative and scan-reverse rows, a
        # Relu -> Scan -> Relu micro-graph: Scan on [CPUExecutionProvider])
        "Scan",
        # QOperator quantization (session 12): every QLinear* op and QGemm, one per micro-graph
        # Relu -> QuantizeLinear -> op -> DequantizeLinear -> Relu, runs on ORT CPU (2 OpenVINO
        # subgraphs around it); the static QOperator CNN row keeps only its DequantizeLinear on
        # OpenVINO. QDQ models (QuantizeLinear / DequantizeLinear pairs) stay on OpenVINO.
        "QLinearConv",
        "QLinearMatMul",
        "QLinearAdd",
        "QLinearMul",
        "QLinearSigmoid",
        "QLinearLeakyRelu",
        "QLinearSoftmax",
        "QLinearConcat",
        "QLinearAveragePool",
        "QLinearGlobalAveragePool",
        "QGemm",
        # Text ops (skl2onnx's TF-IDF pipeline, ORT's verbose placements: StringNormalizer,
        # com.microsoft Tokenizer and TfIdfVectorizer on [CPUExecutionProvider], a Cast the only
        # OpenVINO subgraph; session 9 saw StringNormalizer on int-bool-string too)
        "StringNormalizer",
        "Tokenizer",
        "TfIdfVectorizer",
    }
)
# OpenVINO has no ai.onnx.ml ops (its frontend refuses TreeEnsemble*, ZipMap, Scaler...): the EP
# leaves the whole domain to ORT's CPU EP (skl2onnx / onnxmltools models run that way).
ORT_CPU_DOMAINS = frozenset({"ai.onnx.ml"})


def on_ort_cpu(n: NodeInfo, g: GraphInfo | None = None) -> bool:
    """Whether the EP leaves node ``n`` to ORT's CPU EP.

    With the graph ``g``: also a ``Mod`` of a 0-d tensor (ORT's verbose placements, session 14:
    int64 scalar Add -> Mod -> Add and a float ``fmod=1`` one put the Mod on
    [CPUExecutionProvider], a Mod on [4, 8] stays on OpenVINO; the timm Swin-V2 export's 38
    window-padding Mods of ``Gather(Shape(x))`` scalars all run on ORT CPU)."""
    if n.op_type in UNSUPPORTED or n.domain in ORT_CPU_DOMAINS:
        return True
    if g is not None and n.op_type == "Mod" and n.inputs and n.index not in g.folded:
        t = g.tensors.get(n.inputs[0])  # (a folded one is gone before partitioning)
        return t is not None and t.sym_shape is not None and len(t.sym_shape) == 0
    return False


def takes_nothing(view: ModelView) -> bool:
    """Whether the EP compiles no OpenVINO subgraph at all, so ORT's CPU EP runs every node.

    * A graph input declared without a shape (not even a rank): the EP claims no node of the
      graph, not even those that never read that input (ORT's verbose placements, ORT 1.24.1:
      ``x`` shapeless -> MatMul -> Relu, and the same beside a shaped input's MatMul -> Relu ->
      Sigmoid chain: "All nodes placed on [CPUExecutionProvider]"; the sweep's
      input-without-shape row measured 27.1 MiB at session, ORT CPU + the fixed cost).
    * Only ai.onnx.ml nodes (and ``IsNaN``) besides ``Constant`` / ``Identity`` / folded ones:
      nothing left for OpenVINO (measured on ai.onnx.ml graphs only: an IsNaN-only graph keeps
      the OpenVINO path; ep-compat's guard compares its rewrites there).
    """
    if view.shapeless_inputs:
        return True
    g = view.graph
    return any(n.domain in ORT_CPU_DOMAINS for n in g.nodes) and not any(
        not on_ort_cpu(n, g) and i not in g.folded and n.op_type not in ("Constant", "Identity")
        for i, n in enumerate(g.nodes)
    )


_STAGES = (
    ("session_creation", "compile_model"),
    ("run_1", "run_1"),
    ("steady_state", "steady_state"),
)


def ort_initializer_bytes(view: ModelView) -> int:
    """Bytes of the initializers ORT keeps (constant-folding intermediates excluded)."""
    g = view.graph
    total = 0
    for name in g.initializers:
        t = g.tensors[name]
        if t.folded:
            continue  # made by the estimator's constant folding, not stored in the file
        total += t.nbytes or 0
    return total


GLIBC_MMAP_THRESHOLD_MAX = 32 << 20  # 64-bit glibc: larger blocks are always mmapped


def big_initializer_bytes(view: ModelView) -> int:
    """Bytes of stored initializers larger than glibc's largest mmap threshold."""
    g = view.graph
    sizes = (g.tensors[n].nbytes or 0 for n in g.initializers if not g.tensors[n].folded)
    return sum(nb for nb in sizes if nb > GLIBC_MMAP_THRESHOLD_MAX)


def big_tensor(view: ModelView) -> bool:
    """Whether some stored initializer is larger than glibc's largest mmap threshold."""
    g = view.graph
    return any(
        (g.tensors[n].nbytes or 0) > GLIBC_MMAP_THRESHOLD_MAX
        for n in g.initializers
        if not g.tensors[n].folded
    )


def ort_node_count(g: GraphInfo) -> int:
    """Nodes left in ORT's graph when the EP builds its subgraph proto: ORT turns ``Constant``
    nodes into initializers at load, level 1 removes ``Identity`` nodes, and constant folding
    removes what the estimator folds too (ViT-base TorchScript export: 1235 nodes, 755 left).
    If / Loop / Scan bodies count theirs (each body is a graph ORT partitions again)."""
    return sum(
        1 + sum(_body_node_count(s) for s in n.subgraphs)
        for i, n in enumerate(g.nodes)
        if n.op_type not in ("Constant", "Identity") and i not in g.folded
    )


def _body_node_count(g: GraphInfo) -> int:
    return sum(
        1 + sum(_body_node_count(s) for s in n.subgraphs)
        for n in g.nodes
        if n.op_type not in ("Constant", "Identity")
    )


def all_big(view: ModelView) -> bool:
    """Whether every transient copy the EP's dynamic path makes is unmapped after session
    creation: each tensor over glibc's largest mmap threshold is mmapped (and returned when
    freed) unless the heap already has a free block that large, and the freed heap here is
    the transient copies of the small tensors (3 each: proto, string, OpenVINO's read). So:
    some big tensor, and 3x the small ones' bytes below the smallest big one.

    Measured (dynamic batch, embedded, MiB over baseline, session / after / run 1): 5 x
    MatMul+Add+Relu 3584^2 (49 MiB tensors, 14 KiB biases) 1255 / 295 / 546; one 98 MiB
    Gather table 518 / 147 / 148; and where the small ones could host the big copies, not:
    a 49 MiB MatMul + 16 x 4 MiB 603 / 471 / 471, the 98 MiB table + 16 x 4 MiB 845 / 470 / 471.
    """
    g = view.graph
    sizes = [g.tensors[n].nbytes or 0 for n in g.initializers if not g.tensors[n].folded]
    big = [nb for nb in sizes if nb > GLIBC_MMAP_THRESHOLD_MAX]
    return bool(big) and 3 * (sum(sizes) - sum(big)) < min(big)


# estimator-only, off by default: ``heap_regrowth`` (session 13). It fixes the SD-VAE decoder
# (-16.6 -> +3.6 %) and Swin-V2 (-8 -> 0 %) but takes EnCodec's original from +8 to +15 % at
# run 1 (116 block growths whose freed heap later allocations reuse more than the best-fit
# replay says): not yet general enough to be the default.
HEAP_REGROWTH = "memshrink.ovep_heap_regrowth"


def heap_regrowth(view: ModelView, events: list[tuple[int, int]]) -> int:
    """Bytes of OpenVINO's dynamic workspace left as unused heap after the first infer
    (dynamic dims, embedded weights, one subgraph).

    glibc raises its mmap threshold to the size of an mmapped block when it is freed (up to 32
    MiB). Session creation frees the EP's serialized subgraph (about the weights' bytes) and
    the proto's tensors, so from then on blocks under the largest of those come from the heap.
    OpenVINO's dynamic plan allocates its blocks during the first infer and grows them as
    larger boxes arrive (``openvino.block_events``): a grown block's old size is freed into
    the heap, where a later, smaller allocation can reuse it (best fit, split) and what no
    allocation reuses stays resident. Blocks over the threshold are mmapped and returned.
    SD-VAE decoder (embedded 9.6 MiB, dynamic, 256^2 output): EP run 1 220.6 MiB, with
    ``MALLOC_MMAP_THRESHOLD_=131072`` (threshold pinned low) 174.3, predicted 44.5 left over;
    native OpenVINO f32 156.2, pinned at 32 MiB 199.7 (+43.5).
    """
    g = view.graph
    sizes = [g.tensors[n].nbytes or 0 for n in g.initializers if not g.tensors[n].folded]
    freed = [ort_initializer_bytes(view), *sizes]
    threshold = max((b for b in freed if b <= GLIBC_MMAP_THRESHOLD_MAX), default=0)
    free: list[int] = []  # heap chunks freed by grown blocks, not yet reused
    for new, old in events:
        if new < threshold:
            fits = [c for c in free if c >= new]
            if fits:
                chunk = min(fits)
                free.remove(chunk)
                if chunk > new:
                    free.append(chunk - new)
        if 0 < old < threshold:
            free.append(old)
    return sum(free)


def small_initializer_bytes(view: ModelView, limit: float) -> int:
    """Bytes of stored initializers of at most ``limit`` bytes each."""
    g = view.graph
    sizes = (g.tensors[n].nbytes or 0 for n in g.initializers if not g.tensors[n].folded)
    return sum(nb for nb in sizes if nb <= limit)


def folded_bytes(view: ModelView) -> int:
    """Bytes of weights ORT's level-1 constant folding creates (and some node still reads)."""
    g = view.graph
    return sum(
        g.tensors[n].nbytes or 0
        for n in g.initializers
        if g.tensors[n].folded and g.tensors[n].consumers
    )


def subgraph_ids(g: GraphInfo) -> dict[int, int]:
    """OpenVINO subgraph of each supported node, the EP's way.

    ``GetPartitionedClusters`` (``ov_versions/utils.cc``) cuts ORT's topological order (the
    DEFAULT reverse DFS) at every unsupported node into runs of consecutive supported nodes,
    and ``GetConnectedClusters`` splits each run into its connected pieces. So parallel chunks
    each get their own subgraphs: BERT b4x512 has 13 subgraphs whole and 52 with its batch split
    4x (ORT's verbose log); 4 MatMul chains with one ``IsNaN`` each, 8.
    """
    topo = ort_default(g)
    run, runs = 0, {}
    for i in topo:
        if on_ort_cpu(g.nodes[i], g):
            run += 1
        elif i not in g.folded and g.nodes[i].op_type not in ("Constant", "Identity"):
            # ORT folds those, turns Constants into initializers and removes Identities
            # (level 1) before partitioning
            runs[i] = run
    parent = {i: i for i in runs}

    for i in runs:
        for name in g.nodes[i].inputs:
            t = g.tensors.get(name) if name else None
            if t is not None and t.producer in runs and runs[t.producer] == runs[i]:
                parent[find_root(parent, t.producer)] = find_root(parent, i)
    # ``GetConnectedClusters``' order: by run, then by each piece's first node in ORT's order
    at = {node: k for k, node in enumerate(topo)}
    pieces: dict[int, list[int]] = {}
    for i in sorted(runs, key=lambda n: at[n]):
        pieces.setdefault(find_root(parent, i), []).append(i)
    clusters = sorted(pieces.values(), key=lambda c: (runs[c[0]], at[c[0]]))
    return _one_node_clusters(g, clusters)


def _one_node_clusters(g: GraphInfo, clusters: list[list[int]]) -> dict[int, int]:
    """The EP's rule for clusters of one node (``GetCapability::Execute``, onnxruntime 1.24,
    ``ov_versions/capability.cc``): such a cluster, unless it is the last one, is not given to
    OpenVINO; if it shares an edge with the next cluster it joins that one, else ORT's CPU EP
    runs it. Seen in ORT's verbose placements: Swin-V2's shape arithmetic (each ``Mod`` on ORT
    CPU leaves a ``Sub`` or ``Gather`` alone between two of them: 57 nodes on CPU, 12
    OpenVINO subgraphs), session 12's lone QuantizeLinear / MaxPool / Flatten between QOperator
    nodes; a lone DequantizeLinear at the end, the last cluster, stays on OpenVINO."""
    out: dict[int, int] = {}
    n = 0
    for k, cluster in enumerate(clusters):
        if len(cluster) == 1 and k < len(clusters) - 1:
            node = cluster[0]
            if _touches(g, node, set(clusters[k + 1])):
                clusters[k + 1].append(node)
            continue
        for node in cluster:
            out[node] = n
        n += 1
    return out


def _touches(g: GraphInfo, node: int, others: set[int]) -> bool:
    """Whether ``node`` reads an output of, or feeds, a node in ``others``."""
    for name in g.nodes[node].inputs:
        t = g.tensors.get(name) if name else None
        if t is not None and t.producer in others:
            return True
    return (
        any(c in others for name in g.nodes[node].outputs for c in g.tensors[name].consumers)
        if all(name in g.tensors for name in g.nodes[node].outputs)
        else False
    )


def subgraph_count(g: GraphInfo) -> int:
    """OpenVINO subgraphs the EP makes of ``g``: one without unsupported nodes (as ``predict``
    assumes), else ``subgraph_ids``' count."""
    if not any(on_ort_cpu(n, g) for n in g.nodes):
        return 1
    return len(set(subgraph_ids(g).values()))


def ep_lib_pages(g: GraphInfo, fc_postop_bytes: int, ov_c: Mapping[str, float]) -> int:
    """Library pages the EP's OpenVINO compiles touch: native ``lib_pages`` over the nodes the
    EP claims (those on ORT's CPU EP load no plugin code), at the EP's f32, where an FC without
    a fused activation runs on MLAS, not oneDNN (``ov_mlas.f32_lib_pages``). Measured (EP
    session file peak, MiB absolute, baseline 22): one Relu 61.5, 4 element-wise 61.9, MatMul
    48^2 alone 60.5, 4 x MatMul 256^2 on [8, 128, 256] 60.5, MatMul 48^2 -> Relu + Sigmoid
    (not fused: two readers) 63.5, activation MatMul 62.0; 4 x MatMul 256^2 + Relu 68.3
    (docs/estimate.md, EP rule 15).
    """
    claimed = dataclasses.replace(g, nodes=[n for n in g.nodes if not on_ort_cpu(n, g)])
    return ov_mlas.f32_lib_pages(claimed, g, fc_postop_bytes, ov_c)


def static_request_inputs(g: GraphInfo) -> int:
    """Bytes of the graph inputs, which a static subgraph's infer request allocates when the EP
    creates it at session creation (before ORT's own buffers are bound to it at the first run,
    after which OpenVINO's copies are free memory the run reuses).

    Measured (session 12, ``memshrink profile``, EP session creation, MiB measured / predicted
    before): one Conv 3x3 128->128 on a static [1, 128, 256, 256] input (32 MiB) 90 / 61.4; 3 x
    (Conv + Relu) there 94 / 66.1, the same ending in 3 channels (0.75 MiB output) 92 / 64.0,
    so the input's, not the output's; 64 channels (16 MiB) 74 / 61.1; 5 x at 192^2 (18 MiB)
    84 / 70.8; 128^2 (8 MiB) 70 / 66.1; dynamic h, w 57 / 58.4 (no request until the shape is
    known). SAM ViT at 1024^2 (12 MiB input): 95.9 / 85.7. The run stages are unchanged (within
    -2.5 ... +10 % on these graphs before and after).
    """
    return sum(
        t.nbytes or 0 for t in g.tensors.values() if t.kind == "input" and t.nbytes is not None
    )


def resident_request_inputs(g: GraphInfo) -> int:
    """Bytes of the static request's input tensors still resident in the run stages.

    At the first run the EP gives OpenVINO ORT's input buffers and the request's own input
    tensors are freed: one over glibc's largest mmap threshold (32 MiB) is unmapped, a smaller
    one stays in the heap (the threshold has risen past it by then), and OpenVINO's workspace,
    allocated in the same run, does not fit in it. Measured (session 13, one Conv 3x3 Cin -> 3
    on a static input, EP run 1 over session creation, MiB): input 4 / 8 / 16 / 24 / 31.75 MiB
    +4.8 / +8.8 / +17.5 / +25.9 / +33.2; 32.0 / 32.2 / 44 MiB +1.5 / +3.0 / +2.1 (the input's
    reordered copy and the outputs, 1.5 MiB, in both cases).
    """
    return sum(
        t.nbytes
        for t in g.tensors.values()
        if t.kind == "input" and t.nbytes is not None and t.nbytes < GLIBC_MMAP_THRESHOLD_MAX
    )


RELAYOUT = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})


def ep_output_copies(g: GraphInfo, dynamic: bool, opts: Mapping[str, Any]) -> tuple[int, int]:
    """Bytes the EP's graph outputs add at (run 1, steady state), beyond native OpenVINO's plan.

    Static dims: ORT allocates each output and OpenVINO writes into it (1x). Dynamic dims:
    OpenVINO's request allocates the output, and the EP copies it into ORT's tensor (2x). The
    verifier holds the previous run's outputs while the next runs (1x more from run 2 on).
    Measured, EP run 1 / run 2 over baseline, 3 x Conv 128^2 3x3 on [1,128,256,256] + a last
    Conv to 3 / 64 / 128 channels (output 0.75 / 16 / 32 MiB), MiB: dynamic h, w 126.0 /
    158.7 / 191.7 (2.1x the output), static 126.3 / 142.9 / 159.8 (1.1x); run 2 +0.7 / +16 /
    +32 (1x). ``ov_native_io`` leaves these out of the native rules.
    """
    outs = openvino.io_bytes(g)[1]
    first = (2 if dynamic else 1) * outs
    held = outs if option_flag(opts, HOLD_OUTPUTS, True) else 0
    return first, first + held


def shared_weight_copies(g: GraphInfo, sub: Mapping[int, int]) -> tuple[int, int]:
    """(bytes, re-laid-out bytes) of the extra copies of weights read by several subgraphs.

    Each OpenVINO subgraph is a model of its own: it maps the external weights it reads
    through its own view of ORT's initializers (RSS counts each mapping) and its CPU plugin
    re-lays out its own copy of every Conv/FC weight. A weight read by k subgraphs costs k - 1
    more of each (measured: 4 MatMul 2048^2 external, batch split 2x / 4x with an IsNaN cut:
    +66 / +194 MiB file and +68 / +198 MiB anon for 64 MiB of weights; one reader each: +0).
    """
    extra = relaid = 0
    for name in g.initializers:
        t = g.tensors[name]
        if t.folded or not t.nbytes:
            continue
        readers = {c for c in t.consumers if c in sub}
        k = len({sub[c] for c in readers})
        if k < 2:
            continue
        extra += (k - 1) * t.nbytes
        if any(
            g.nodes[c].op_type in RELAYOUT and g.nodes[c].inputs[1:2] == [name] for c in readers
        ):
            relaid += (k - 1) * t.nbytes
    return extra, relaid


def partitioned_activations(
    g: GraphInfo, order: list[int], bufs: list[Buffer], dynamic: bool, sub: Mapping[int, int]
) -> tuple[int, int]:
    """(OpenVINO workspaces summed over subgraphs, ORT arena for the tensors crossing a cut).
    Each subgraph (``sub``: node -> subgraph) plans its own buffers the native way, and all
    of them are alive at once: parallel chunks in separate subgraphs do not share one."""
    groups: dict[int, list[Buffer]] = {}
    crossing: list[Buffer] = []
    for b in bufs:
        if not b.size:
            continue
        if b.producer is None or b.producer not in sub:
            crossing.append(b)  # made by an ORT CPU node (or a graph input's reorder)
            if b.producer is None:
                groups.setdefault(0, []).append(b)
            continue
        sg = sub[b.producer]
        groups.setdefault(sg, []).append(b)
        readers = {c for t in b.tensors if t in g.tensors for c in g.tensors[t].consumers}
        if any(sub.get(c, -1) != sg for c in readers):
            crossing.append(b)
    if dynamic:  # each OpenVINO subgraph syncs at its Conv + Sum nodes (``ov_order``)
        from memshrink.estimate.ov_order import sync_steps

        syncs = sync_steps(g, positions(order))
    plan = (
        (lambda bs: openvino.nonoverlapping_sets(bs, syncs))
        if dynamic
        else (lambda bs: greedy_by_size(bs)[0])
    )
    workspaces = sum(plan(bs) for bs in groups.values())
    return workspaces, greedy_by_size(crossing)[0] if crossing else 0


def predict(
    view: ModelView,
    order: list[int],
    opts: Mapping[str, Any],
    sched: str,
    calibration: Mapping[str, float] | None = None,
) -> BackendPrediction:
    """Stage peaks for ORT + OpenVINOExecutionProvider (device CPU), the verifier's way."""
    c = dict(OVEP_CALIBRATION)
    c.update(calibration or {})
    if takes_nothing(view):
        return _ort_cpu_only(view, opts, c)
    # ORT's level 1 runs before partitioning: ``EliminateIdentity`` makes an Identity of a
    # weight a name, no folded copy (``ort_identity``; legacy torch exports write one per
    # deduplicated weight: RegNetY's 69, 3.4 MiB that were charged 4x at session creation).
    # Only the EP's own folded-weight charge reads that graph: native OpenVINO's prediction
    # keeps the graph as written (on the eliminated one it moved SSDlite +11 MiB, away from
    # the measurement; not investigated).
    g_ort = ort_identity.eliminate(view.graph)
    ort_view = view if g_ort is None else dataclasses.replace(view, graph=g_ort)
    ov_c = openvino.OV_CALIBRATION
    # The EP compiles for CPU with precision FP32 (its default, which sets OpenVINO's
    # INFERENCE_PRECISION_HINT to f32 whatever the host supports): native rules at f32.
    native = openvino.predict(
        view,
        order,
        {
            "INFERENCE_PRECISION_HINT": "f32",
            openvino.NATIVE_IO: 0,
            openvino.RELEASE_FOLDED: 0,
            **opts,
        },
        sched,
    )
    by_name = {s.name: s for s in native.stages}
    g = view.graph
    folded = folded_bytes(ort_view)
    # ORT's heap copies of embedded weights, plus ORT's folded weights and OpenVINO's Constants.
    ort_copy = (ort_initializer_bytes(view) if view.embedded else 0) + 2 * folded
    # Embedded weights: a Conv+BN/Mul fusion *replaces* OpenVINO's heap Constant by the fused
    # one, so the fused weights cost 1x (fused) + 1x (re-laid-out copy), not the 2x + kept
    # native OpenVINO charges for mapped originals (zoo ResNet-50: 373 MiB measured, 464 with
    # the native rule). Measured the same way on native OpenVINO infer (257 MiB); the native
    # estimator still charges the mapped-file rule there (see docs/estimate.md).
    fused_w = int(native.details["ov_weights"]["conv_fused"]) if view.embedded else 0
    ort_copy -= int((ov_c["ov_conv_fused"] - ov_c["ov_conv"]) * fused_w)
    # + the forests of tree-ensemble nodes, which run on ORT's CPU EP (``ort_ml``)
    fixed_anon = int(
        c["ovep_anon"] + c["ovep_per_node"] * ort_node_count(g) + ort_ml.tree_ensemble_bytes(g)
    )
    fixed_file = int(c["ovep_file"])
    # The EP's lib pages: its claimed nodes only, FCs without a post-op on MLAS (f32)
    ep_lib = ep_lib_pages(g, int(native.details["ov_weights"]["fc_postop"]), ov_c)
    lib_saving = int(native.details["lib_pages"]) - ep_lib
    fixed_file -= lib_saving
    # Dynamic dims: an FC with a fused SiLU is made at the first infer, with oneDNN's FC code
    # (4 x MatMul 256^2 + SiLU, dynamic batch, EP session / run 1 53.3 / 65.2 MiB; static 62 /
    # 65): native ``_fc_postop`` counts SiLU as a post-op, so its ``ov_deferred_lib_f32`` shift
    # and deferred packs carry into these stages.
    cut = [n.op_type for n in g.nodes if on_ort_cpu(n, g)]
    dynamic = openvino.is_dynamic(view, opts)
    # Dynamic input dims, one subgraph, embedded weights: BasicBackend keeps the subgraph's
    # ModelProto (weights inlined) while OpenVINO reads the serialized string it was given:
    # 2x more at session creation (measured 5x the weights on MatMul chains of 32 and 128 MiB,
    # against 3x with static dims); the run stages: see below.
    kept_proto = 2 * ort_initializer_bytes(view) if view.embedded and dynamic and not cut else 0
    if kept_proto and kept_proto // 2 < GLIBC_MMAP_THRESHOLD_MAX:
        # A string under 32 MiB is served from freed heap, not a fresh mapping: only the proto
        # counts. EP - native compile - fixed cost, dynamic embedded: 8 x Conv 128^2 3x3 (4.5
        # MiB) 1.9x the weights, RegNetY (7.2) 1.9x, EfficientNet-B0 (15.2) 2.5x; from 8 x
        # MatMul 1024^2 (32 MiB of weights: the string is over 32 MiB with the graph's bytes)
        # up, 3x and more, as rule 2 says.
        kept_proto //= 2
    ort_copy += kept_proto
    # Static dims, embedded: OpenVINO compiles straight from the serialized string, whose
    # weight copy is freed once compiled; glibc keeps the freed pages of tensors up to its
    # largest mmap threshold (32 MiB) resident, and unmaps larger ones (2 x 36 MiB Conv chain:
    # session 272 MiB, run 1 202; 4 x 20 MiB: 298 / 279; U-Net's 36 MiB tensor).
    unmapped = big_initializer_bytes(view) if view.embedded and not dynamic else 0
    small = (
        small_initializer_bytes(view, c["ovep_small_tensor"])
        if view.embedded and not dynamic and not cut
        else 0
    )
    ort_copy += small
    # One subgraph: OpenVINO's plan without the graph outputs' edges, which the EP's own
    # output rule counts (``ep_output_copies``: OpenVINO writes a static output into ORT's
    # tensor; a dynamic one is its own request tensor, then copied). Native's plan holds them
    # once more wherever no freed edge can host them: one Conv 3 -> 64 on a static [1, 3, 512,
    # 512] input (64 MiB output) measured +133 MiB at run 1, predicted +195 with them.
    acts: int | None = native.details.get("activations_without_outputs")
    n_sub = 1
    planners = dict(native.planners)
    shared = relaid = static_session = 0
    if cut:
        sub = subgraph_ids(g)
        n_sub = len(set(sub.values()))
        # op-by-op GELU here: ``ovep_static_ws_*`` were fitted on that plan (with the GELU as
        # one op, BERT b4x512's 12 cut subgraphs went from -7 % to -22 %; session 13)
        bufs = openvino.ov_buffers(
            g, order, dynamic and not openvino.batch_only_dynamic(view), gelu=False
        )
        ws, arena = partitioned_activations(g, order, bufs, dynamic, sub)
        acts = ws + arena
        if not dynamic:
            # Static subgraphs: each infer request holds its workspace from session creation,
            # and more appears in run 1 (measured, not explained: rule 10 in the docs)
            acts = int(c["ovep_static_ws_run"] * ws) + arena
            static_session = int(c["ovep_static_ws_session"] * ws)
        planners = {**native.planners, "ovep_subgraph_workspaces": ws, "ovep_ort_arena": arena}
        shared, relaid = shared_weight_copies(g, sub)
        # External: one more mapping per extra reader. Embedded: only the re-laid-out copies
        # are modelled (the inlined proto copies per subgraph were not measured).
        if view.embedded:
            shared = 0
    # ORT's memory pattern (on by default, every input shape bound): run 2 allocates one block
    # of run 1's traced peak beside the arena chunks run 1 kept, so the tensors crossing a cut
    # cost their plan twice in steady state (4 attention layers cut after Softmax, dynamic seq
    # 512 / 1024: run 2 adds +22 / +114 MiB, crossing plan 18 / 66 MiB).
    pattern = 0
    if cut and session_options_rules({k: str(v) for k, v in opts.items()})["enable_mem_pattern"]:
        pattern = int(planners["ovep_ort_arena"])
    stages = []
    for name, src in _STAGES:
        s = by_name[src]
        st = Stage(
            name,
            weights_anon=s.weights_anon + ort_copy + relaid,
            weights_file=s.weights_file + shared,
            activations=s.activations if acts is None or not s.activations else acts,
            overhead=s.overhead + fixed_anon + fixed_file,
            notes=list(s.notes),
        )
        if ort_copy:
            st.notes.append("ORT's own initializers on the heap beside OpenVINO's")
        stages.append(st)
    stages[0].notes.append("ORT load + OpenVINO read_model + compile_model")
    # Graph outputs (before the dynamic embedded floor below, which the freed heap covers)
    out_copies = ep_output_copies(g, dynamic, opts) if not cut else (0, 0)
    if out_copies[0]:
        stages[1].activations += out_copies[0]
        stages[2].activations += out_copies[1]
        stages[1].notes.append(
            "graph outputs: ORT's output tensor"
            + (" and OpenVINO's (dynamic dims)" if dynamic else "")
        )
        stages[2].notes.append("graph outputs, and the caller's outputs of the previous run")
    if static_session:
        stages[0].activations += static_session
        stages[0].notes.append("static subgraphs: workspaces allocated at session creation")
    request_inputs = static_request_inputs(g) if not dynamic and not cut else 0
    if request_inputs:
        stages[0].activations += request_inputs
        stages[0].notes.append(
            "static shapes: the infer request made at session creation holds OpenVINO's own "
            "input tensors"
        )
        kept = resident_request_inputs(g)
        for st in stages[1:]:
            st.activations += kept
            if kept:
                st.notes.append(
                    "static shapes: the request's own input tensors under 32 MiB stay on the heap"
                )
    # Native OpenVINO's run stages drop the embedded Conv+BN originals with the ov.Model; the
    # EP's fused-weight correction above (ort_copy) already covers every stage.
    refill = int(native.details.get("freed_after_compile", 0))
    for st in stages[1:]:
        st.weights_anon += refill
    if unmapped:
        for st in stages[1:]:
            st.weights_anon -= unmapped
            st.notes.append("the compile-time copies of weights > 32 MiB are unmapped")
    if small:
        for st in stages:
            st.notes.append(
                "embedded tensors <= 1 MiB: OpenVINO's transient read copy stays on the heap"
            )
    regrown = (
        heap_regrowth(view, native.details.get("workspace_block_events", []))
        if kept_proto and option_flag(opts, HEAP_REGROWTH, False)
        else 0
    )
    if regrown:
        for st in stages[1:]:
            st.activations += regrown
            st.notes.append(
                "dynamic shapes, embedded: the freed proto raised glibc's mmap threshold, so the "
                "workspace blocks outgrown during the first infer stay on the heap"
            )
    if kept_proto:
        # OpenVINO reads the serialized string as native read_model reads an embedded file
        # (ModelProto + a Constant per tensor: 2x) while the EP's proto and string are alive:
        # session creation peaks in that read when native read peaks above native compile
        # (FCs with a fused activation deferred to the first infer: 5 x MatMul+Add+Relu
        # 3584^2, 245 MiB, measured 1255 MiB, was predicted 1035 at 4x; 20 x 1792^2: 1267,
        # was 1037), else in compile as before (RegNetY, 7 MiB: read 26, compile 57 native).
        read_extra = max(0, by_name["read_model"].peak - by_name["compile_model"].peak)
        stages[0].weights_anon += read_extra
        # After session creation the serialized string (one block of the weights' size,
        # mmapped by glibc) is returned; the proto's freed tensors stay as free heap that the
        # first infer's re-laid-out weights and activations reuse: a run stage holds the larger
        # of the two (branch `epnan`: BERT-base and BERT b4x512 after ep-compat, one subgraph,
        # measured 1672 and 1675 MiB at run, 2147 at session, for both input sizes).
        # Without a tensor over glibc's largest mmap threshold nothing is returned: the run
        # stages hold the session peak (Whisper-base encoder, 78 MiB in tensors <= 4 MiB:
        # session 431, run 435; MatMul chains of 4 and 16 MiB tensors: 212 / 212, 716 / 700).
        # OpenVINO's read copy (``read_extra``) is freed before the string and the proto, and
        # compile reuses its heap: the floor is the session peak without it (20 x MatMul 1792^2
        # 245 MiB, tensors <= 32 MiB: run 1033 measured, 1037 predicted so).
        floor = stages[0].peak - read_extra
        if big_tensor(view):
            floor -= ort_initializer_bytes(view)
        if all_big(view):
            # Every big transient copy unmapped (see ``all_big``): what stays is one copy of
            # the weights and the small tensors' transients (3 each), then the first infer's
            # re-laid-out weights (what native OpenVINO defers to it).
            w_all = ort_initializer_bytes(view)
            w0 = w_all + 3 * (w_all - big_initializer_bytes(view))
            compile_w = by_name["compile_model"].weights_anon
            for (_, src), st in zip(_STAGES[1:], stages[1:], strict=True):
                st.weights_anon = w0 + max(0, by_name[src].weights_anon - compile_w)
            stages[0].notes.append("weights all > 32 MiB: the transient copies are unmapped")
        else:
            for st in stages[1:]:
                st.weights_anon += max(floor, st.peak - kept_proto) - st.peak
        stages[0].notes.append("dynamic shapes: the EP's ModelProto and its serialized string")
        for st in stages[1:]:
            st.notes.append("dynamic shapes: the freed proto's heap, reused by the first infer")
    # ORT's level-1 ConvMulFusion / ConvBNFusion run before partitioning: a Conv's external
    # weight scaled by a Mul / BatchNormalization becomes a new ORT-owned initializer (heap, in
    # place of the file mapping ORT drops) that reaches OpenVINO inline in the subgraph's
    # ModelProto. Dynamic dims: the EP keeps that proto and OpenVINO reads its serialized string
    # (rule 2), so session creation holds 2x more of those weights, and with every tensor under
    # glibc's 32 MiB mmap threshold the run stages keep that heap. Measured, 4 x Conv 512^2
    # 3x3 -> Mul(scale) -> Relu, external, dynamic batch (36 MiB): EP session 218 / run 1 204
    # MiB (no Mul: 88 / 134); EfficientFormer-L1 after `all` (13.8 MiB fused): session 168.9.
    ort_fused = 0
    if not view.embedded and dynamic:
        ort_fused = int(native.details["ov_weights"]["conv_fused"])
    if ort_fused:
        stages[0].weights_anon += 2 * ort_fused
        stages[0].notes.append(
            "ORT-fused Conv weights (Conv+Mul/BN) travel inline: the EP's proto + its string (2x)"
        )
        if not big_tensor(view):
            for st in stages[1:]:
                st.weights_anon += max(0, stages[0].peak - st.peak)
    if folded:
        stages[0].weights_anon += 2 * folded
        stages[0].notes.append(
            "ORT-folded weights travel in the ModelProto: proto + serialized string (2x)"
        )
    if shared or relaid:
        for st in stages:
            st.notes.append(
                f"weights read by several OpenVINO subgraphs: {shared / MiB:.0f} MiB more mapped, "
                f"{relaid / MiB:.0f} MiB more re-laid out (one copy per extra subgraph)"
            )
    if pattern:
        stages[2].activations += pattern
        stages[2].notes.append("ORT's memory-pattern block for the crossing tensors (run 2 on)")
    if cut:
        for st in stages[1:]:
            st.notes.append(
                f"{n_sub} OpenVINO subgraphs ({len(cut)} nodes on ORT CPU): one workspace "
                "each, plus ORT's arena for the tensors crossing a cut"
            )
    assumptions = [
        "ORT OpenVINO EP, device_type CPU: "
        + (
            f"{len(cut)} unsupported nodes ({', '.join(sorted(set(cut)))}) on ORT CPU cut the "
            f"graph into {n_sub} OpenVINO subgraphs"
            if cut
            else "the whole graph is one OpenVINO subgraph"
        ),
        "ORT keeps its initializers (embedded: heap copies; external: the mapped file that "
        "OpenVINO reads too; its own constant-folding results: heap, and OpenVINO a Constant "
        "of each); OpenVINO then spends what native OpenVINO CPU would",
        f"EP fixed cost over native OpenVINO: {fixed_anon / MiB:.1f} MiB anon + "
        f"{c['ovep_file'] / MiB:.1f} MiB library pages",
    ] + native.assumptions
    details = dict(native.details)
    details["ort_initializers_heap"] = ort_copy
    details["ovep_subgraphs"] = n_sub
    details["ovep_lib_pages"] = ep_lib
    details["ovep_shared_weight_copies"] = {"mapped": shared, "relaid_out": relaid}
    return BackendPrediction(
        "ort-openvino",
        sched,
        order,
        stages,
        planners,
        native.weights,
        details,
        assumptions,
    )


def _ort_cpu_only(
    view: ModelView, opts: Mapping[str, Any], c: Mapping[str, float]
) -> BackendPrediction:
    """No node for OpenVINO (an skl2onnx forest, a LightGBM regressor; ``Identity`` nodes do not
    count, as in ``ort_node_count``: a TreeEnsemble + Identity model compiled nothing either): the EP compiles
    nothing and ORT's CPU EP runs the graph, so ORT CPU's prediction plus the EP's fixed cost
    (its libraries and contexts load anyway). Measured on 4 such models: EP session 27.7-28.6
    MiB, ORT CPU 10.3-11.3, difference 17.3-17.4 (fixed cost: 1.3 + 16.4 = 17.7)."""
    from memshrink.estimate.backends import PREDICTORS
    from memshrink.estimate.schedule import schedule as make_schedule

    cpu = PREDICTORS["ort"](view, make_schedule(view.graph, "ort_default"), opts, "ort_default")
    fixed = int(c["ovep_anon"] + c["ovep_file"])
    stages = [
        dataclasses.replace(
            s,
            overhead=s.overhead + fixed,
            notes=[*s.notes],
            modes={k: v + fixed for k, v in s.modes.items()},
        )
        for s in cpu.stages
    ]
    stages[0].notes.append("no node for OpenVINO: ORT's CPU EP runs the whole graph")
    why = (
        f"graph input(s) without a shape ({', '.join(sorted(view.shapeless_inputs))}): the EP "
        "claims no node"
        if view.shapeless_inputs
        else f"no node OpenVINO can take (ai.onnx.ml or {', '.join(sorted(UNSUPPORTED))} only)"
    )
    assumptions = [
        f"ORT OpenVINO EP, device_type CPU: {why}: ORT CPU's prediction plus the EP's fixed "
        f"cost, {fixed / MiB:.1f} MiB"
    ] + cpu.assumptions
    details = {**cpu.details, "ovep_subgraphs": 0}
    if "glibc_band" in details:
        details["glibc_band"] = {
            k: (lo + fixed, hi + fixed) for k, (lo, hi) in details["glibc_band"].items()
        }
    if "glibc_replays" in details:
        details["glibc_replays"] = {
            m: [{k: v + fixed for k, v in r.items()} for r in rs]
            for m, rs in details["glibc_replays"].items()
        }
    return BackendPrediction(
        "ort-openvino",
        "ort_default",
        cpu.order,
        stages,
        cpu.planners,
        cpu.weights,
        details,
        assumptions,
        graph=cpu.graph,
    )
