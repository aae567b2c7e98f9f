"""ONNX Runtime CPU weight residency: what each initializer costs at session creation and after.

Rules follow what ORT 1.32 does with each weight (``optimizer/nchwc_transformer.cc``,
``conv_bn_fusion.cc``, ``optimizer/initializer.cc``, MLAS ``MlasGemmPackBSize``), confirmed by
dumping ORT's optimized graph and by tracing its large allocations with an ``LD_PRELOAD``
malloc logger (docs/estimate.md, "Weights on ONNX Runtime CPU"):

* **NCHWc** (optimization level ALL, x86-64): every fp32 4-D Conv
  weight that passes the transformer's channel checks becomes a new initializer padded to the
  block size (8, or 16 with AVX512F): C_out always, C_in when ``group == 1`` and
  ``C_in >= block``. ORT keeps exactly that one copy (the graph's OrtValue, used by session
  state as is); the mapped original is never touched again.
* **Conv+BatchNormalization / Conv+Mul fusion** (level basic) writes a fused weight first.
* **MatMul/Gemm B** are prepacked: ``round_up(N, 16) x K`` floats in anon memory, in node
  order, each source resident while it is packed.
* **Embedded** weights: session state copies each initializer out of the ModelProto; the copy
  stays unless the weight was rewritten or prepacked.
* **Freed copies**: the ``Initializer`` source, the reorder vector and the TensorProto of each
  conversion, the fused intermediates, and (embedded) the ModelProto strings and released
  copies. What glibc keeps of them is replayed (``glibc_heap``: the heap's extent after
  session creation's blocks, in ORT's order, ``creation_blocks``); embedded models in each of
  the modes a process lands in (``glibc_heap.embedded_modes``), one predicted
  (``embedded_mode``), the others reported beside it.

Everything here reads shapes, dtypes and the external flag only, never weight bytes.
"""

from __future__ import annotations

import functools
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field

from memshrink.estimate.glibc_heap import (
    ROTATIONS,
    GlibcHeap,
    embedded_modes,
    replay,
    verifier_threshold,
)
from memshrink.estimate.graph import GraphInfo, NodeInfo
from memshrink.estimate.host import cpu_flags as host_cpu_flags
from memshrink.estimate.ort_heap import CreationBlocks
from memshrink.estimate.schedule import ort_default
from memshrink.estimate.weights import FLOAT, FP16, ORT_PREPACK, WeightSplit

MiB = 1 << 20
DEFAULT_MMAP_THRESHOLD_MAX = 32 * MiB  # glibc malloc.c, 64-bit


def nchwc_block_size(cpu_flags: set[str] | None = None, machine: str | None = None) -> int:
    """MLAS's ``MlasNchwcGetBlockSize()`` (``mlas/lib/platform.cpp``): on x86-64 8 from the SSE2
    baseline up, 16 with AVX512F; elsewhere 1 (NCHWc off: ORT registers the transformer only
    above 1; ARM64 builds with ``MLAS_USE_ARM_NEON_NCHWC`` differ and are not modelled)."""
    machine = (machine or platform.machine()).lower()
    if machine not in ("x86_64", "amd64"):
        return 1
    if cpu_flags is None:
        cpu_flags = set(host_cpu_flags())
    return 16 if "avx512f" in cpu_flags else 8


def _round_up(n: int, block: int) -> int:
    return (n + block - 1) // block * block


def nchwc_filter_shape(
    w_shape: tuple[int, ...], group: int, block: int
) -> tuple[int, int, int, int] | None:
    """The reordered filter's shape if ORT's NCHWc transformer converts this Conv, else None."""
    if block <= 1 or len(w_shape) != 4:
        return None
    cout, cin, kh, kw = w_shape
    if group > 1:
        if cin == 1 and cout == group:  # depthwise (OIHWBo); 1.32 pads C_out (measured)
            return (_round_up(cout, block), 1, kh, kw)
        if cout % block or cin % block or cout % group or (cout // group) % block:
            return None
        return (cout, cin, kh, kw)
    if cin < block:  # first layer: NCHW input used directly (OIHWBo), C_in not padded
        return (_round_up(cout, block), cin, kh, kw)
    return (_round_up(cout, block), _round_up(cin, block), kh, kw)


def optimization_level(value: object) -> int:
    """ORT's graph optimization level as a number (``GraphOptimizationLevel``): 0 disabled,
    1 basic (Conv+BN/Mul/Add fusion, constant folding), 2 extended, 99 all (adds NCHWc)."""
    if value is None:
        return 99
    v = str(value).strip().upper()
    if v.lstrip("-").isdigit():
        return int(v)
    for key, level in (("DISABLE", 0), ("BASIC", 1), ("EXTENDED", 2), ("LAYOUT", 3)):
        if key in v:
            return level
    return 99


@dataclass
class ConvWeight:
    name: str
    nbytes: int  # as stored
    resident: int  # bytes of the copy the session keeps (padded when NCHWc converts it)
    nchwc: bool
    fused: bool  # a BatchNormalization / Mul was folded into it first
    rounds: int = 0  # fusion passes that rewrote it (Conv -> BN -> Mul by a constant: 2)


def _group(g: GraphInfo, node: NodeInfo, w_shape: tuple[int, ...]) -> int:
    """Conv's ``group`` from shapes alone: input channels / the filter's channels per group."""
    x = g.tensors.get(node.inputs[0])
    if x is None or not x.shape or len(x.shape) != 4 or len(w_shape) != 4 or w_shape[1] <= 0:
        return 1
    return max(1, x.shape[1] // w_shape[1])


def _fusion_rounds(g: GraphInfo, conv: NodeInfo) -> int:
    """How many times ORT's ConvBNFusion / ConvMulFusion rewrite this Conv's weight: once per
    BatchNormalization (or Mul by a constant) that is the only consumer of the chain so far,
    its other inputs all initializers. Each is one pass of the rule-based transformer (traced:
    DenseNet-121's Conv -> BN -> Mul(Unsqueeze(w)) writes the fused weight twice)."""
    rounds, name = 0, conv.outputs[0] if conv.outputs else ""
    while True:
        out = g.tensors.get(name)
        if out is None or out.is_output or len(set(out.consumers)) != 1:
            return rounds
        nxt = g.nodes[out.consumers[0]]
        if nxt.op_type not in ("BatchNormalization", "Mul") or not nxt.outputs:
            return rounds
        others = [n for n in nxt.inputs if n and n != name]
        if not others or not all(g.tensors[n].kind == "initializer" for n in others):
            return rounds
        rounds, name = rounds + 1, nxt.outputs[0]


def conv_weights(
    g: GraphInfo, block: int, *, fusions: bool = True, nchwc: bool = True
) -> list[ConvWeight]:
    """Every fp32 Conv weight initializer with what ORT does to it."""
    out: dict[str, ConvWeight] = {}
    for node in g.nodes:
        if node.op_type != "Conv" or node.domain not in ("", "ai.onnx") or len(node.inputs) < 2:
            continue
        t = g.tensors.get(node.inputs[1])
        if t is None or t.kind != "initializer" or t.elem_type != FLOAT or t.shape is None:
            continue
        nb = t.nbytes or 0
        bias_ok = (
            len(node.inputs) < 3
            or not node.inputs[2]
            or (g.tensors[node.inputs[2]].kind == "initializer")
        )
        rounds = _fusion_rounds(g, node) if fusions else 0
        shape = (
            nchwc_filter_shape(tuple(t.shape), _group(g, node, tuple(t.shape)), block)
            if nchwc and bias_ok
            else None
        )
        resident = nb
        if shape is not None:
            resident = shape[0] * shape[1] * shape[2] * shape[3] * 4
        prev = out.get(t.name)
        if prev is None or (shape is not None and not prev.nchwc):
            out[t.name] = ConvWeight(t.name, nb, resident, shape is not None, rounds > 0, rounds)
    return list(out.values())


def embedded_mode(g: GraphInfo, w: WeightSplit, convs: list[ConvWeight]) -> str:
    """The glibc mode (``glibc_heap.embedded_modes``) predicted for an embedded model, from
    what frees the session copies (docs/estimate.md, "Which glibc mode"). Prepacked weights'
    copies, each freed right after its packed copy is allocated: ``pinned`` (GPT-2 19 of 19
    processes, BERT-base 27 of 41). Rewritten Conv weights' copies, freed together once the
    graph transformers are done: ``copies_merged``, their region one hole (ResNet-50 b16's
    318 MiB run-1 cluster, 18 of 26 processes, and MobileNetV2's 45 MiB one: heap walks)
    and every other spare pinning with even odds (``partly_pinned`` tossed a coin for the
    copies too: ResNet-50 b16 run 1 +11 %). Processes still spread between the extremes
    (the band). An observed rule, not one read in glibc: which spare finds a tcache slot is
    decided by small allocations the replay does not see. The fp16 copies of
    weights ORT converts to f32 (``ort_fp16``) are freed together after the transformers too,
    whoever packs their f32 copies later (traced, LeViT-128S fp16: the copies' region one
    merged 7-11 MiB hole in 3 of 3 heap walks; ``creation_blocks``), and so are constant
    folding's intermediates (``_folding_blocks``; Swin-V2's processes 42.5-45.6 MiB at
    creation, partly pinned 44.5, pinned 54.8)."""
    cast = {n for n in g.fp16_cast if not g.tensors[n].folded}
    conv = sum(cw.nbytes for cw in convs if cw.nchwc or cw.fused)
    conv += sum((g.tensors[n].nbytes or 0) // 2 for n in cast)
    conv += sum(g.tensors[n].nbytes or 0 for n in _folding_intermediates(g))
    packed = sum(
        g.tensors[n].nbytes or 0 for n, k in w.names.items() if k == "prepacked" and n not in cast
    )
    return "copies_merged" if conv >= packed else "pinned"


def _heap_bytes(nbytes: int) -> int:
    """``nbytes`` if glibc serves such a block from the heap (a freed one can stay resident),
    0 for blocks over ``DEFAULT_MMAP_THRESHOLD_MAX``, always mmapped and returned on free."""
    return nbytes if nbytes <= DEFAULT_MMAP_THRESHOLD_MAX else 0


def conv_copies(convs: list[ConvWeight], stranded: float) -> tuple[int, int, int]:
    """Kept, freed and peak-scratch bytes of the rewritten Conv weights at session creation.

    Allocation sequence of ORT 1.32 (traced with an LD_PRELOAD malloc logger, see
    docs/estimate.md): Conv+BN/Mul fusion reads the source into an ``Initializer`` (A), writes
    the fused raw data (S) and stores it as the graph's OrtValue (K), freeing A and S; NCHWc
    reads its source (A), reorders into a vector (V), builds the new TensorProto (S) and stores
    it as the graph's OrtValue (K, kept: session state uses it without another copy), freeing A,
    V, S and the fused K it replaced. Blocks over 32 MiB are mmapped by glibc and returned on
    free; smaller freed blocks stay partly resident as heap fragments: the measured fraction
    ``stranded`` of them counts. Returns (kept + stranded, freed, the peak's extra scratch)."""
    kept = freed = scratch = 0
    for cw in convs:
        if cw.fused:
            freed += 2 * _heap_bytes(cw.nbytes)  # A, S of the fusion
        if cw.nchwc:
            kept += cw.resident
            freed += _heap_bytes(cw.nbytes) + 2 * _heap_bytes(cw.resident)  # A, V, S
            if cw.fused:
                freed += _heap_bytes(cw.nbytes)  # the fused K, replaced
            scratch = max(scratch, cw.nbytes + 2 * cw.resident)
        elif cw.fused:
            kept += cw.nbytes
            scratch = max(scratch, 2 * cw.nbytes)
    return kept + int(stranded * freed), freed, scratch


def _packed_size(g: GraphInfo, name: str) -> int:
    """``MlasGemmPackBSize`` for a fp32 2-D MatMul/Gemm B: N rounded up to 16
    (``MLAS_SGEMM_STRIDEN_THREAD_ALIGN``) x K floats, N read from the consumer's output (so
    Gemm's transB needs no attribute); other prepacking kernels (quantized MatMul, RNNs,
    Attention) are counted at their stored size."""
    t = g.tensors[name]
    size = t.nbytes or 0
    if t.elem_type != FLOAT or t.shape is None or len(t.shape) != 2 or not all(t.shape):
        return size
    ns: set[int] = set()
    for ci in set(t.consumers):
        node = g.nodes[ci]
        y = g.tensors.get(node.outputs[0]) if node.outputs else None
        if node.op_type not in ("MatMul", "Gemm") or y is None or not y.shape:
            return size
        ns.add(y.shape[-1])
    if len(ns) == 1 and (n := ns.pop()) in t.shape:
        return _round_up(n, 16) * (t.shape[0] * t.shape[1] // n) * 4
    return size


# kernels of ORT's optimized graph that pack a constant B (input 1) like MatMul/Gemm
FUSED_PACKERS = {"FusedGemm": (1,), "FusedMatMul": (1,)}


def pack_events(
    g: GraphInfo, w: WeightSplit, ort_graph: GraphInfo | None = None
) -> list[tuple[int, str, bool, bool, str]]:
    """ORT's prepacking calls in node order: (node, weight, first, last, scope). Session state
    calls ``PrePack`` once per *kernel* reading a weight, walking the optimized graph's nodes by
    index (``GraphViewer::Nodes``: fused nodes, e.g. MatMul+Add -> Gemm, are numbered after
    the originals in the order the optimizer made them; ``ort_graph`` is that graph, from
    ``ort_optimized``), then each body's session state its own nodes (``g`` flattened by
    ``ort_bodies``, ``NodeInfo.scope``). Within one session state a later kernel packs its own
    copy, which session state frees again as a duplicate of the first (measured: a 64 MiB B
    read by 2 or 3 MatMuls peaks one packed copy higher than by 1 and keeps one); each session
    state keeps its own packed copy (``first``: the first kernel of its scope; measured: a 4 MiB
    W packed in the main graph and in an If branch, or in both branches, keeps two). The
    weight's source is released only after its last kernel of all packed it (``last``;
    A..B..A..B peaks higher than A..A..B..B; a batch-chunked ViT-base peaks at 672 MiB with
    graph optimizations off, 564 with them on: the fused Gemms' order)."""
    names = {n for n, kind in w.names.items() if kind == "prepacked"}
    calls: list[tuple[int, str, str]] = []
    seen: set[str] = set()
    if ort_graph is not None:
        for i, node in enumerate(ort_graph.nodes):
            pos = ORT_PREPACK.get(node.op_type, ()) or FUSED_PACKERS.get(node.op_type, ())
            for j in pos:
                if j < len(node.inputs) and node.inputs[j] in names:
                    calls.append((i, node.inputs[j], node.scope))
                    seen.add(node.inputs[j])
    base = len(ort_graph.nodes) if ort_graph is not None else 0
    for name in sorted(names):  # bodies, and main-graph weights not found in ORT's graph
        t = g.tensors[name]
        for c in sorted(set(t.consumers)):
            node = g.nodes[c]
            if not node.scope and name in seen:
                continue  # numbered from ORT's graph above
            pos = ORT_PREPACK.get(node.op_type, ())
            fp16_conv = node.op_type == "Conv" and t.elem_type == FP16
            if any(node.inputs[i] == name for i in pos if i < len(node.inputs)) or fp16_conv:
                calls.append((base + c, name, node.scope))
    calls.sort()
    first = {(n, s): i for i, n, s in reversed(calls)}
    last = {n: i for i, n, _ in calls}
    return [(i, n, first[n, s] == i, last[n] == i, s) for i, n, s in calls]


def prepacked(g: GraphInfo, w: WeightSplit, ort_graph: GraphInfo | None = None) -> tuple[int, int]:
    """(packed bytes kept, creation transient) of ORT's prepacking. Session state packs the
    weights in node order (``pack_events``), one kept copy per session state that packs a
    weight; each weight's source pages (mapped, or its heap copy) are resident from its first
    kernel's packing to its last one's and released after, a later kernel's duplicate packed
    copy (same session state) is freed right after it is made, so the transient is the largest
    ``packed so far + live sources (+ a duplicate)`` beyond the final packed total (traced: the
    packed copy is the only large allocation; AlexNet/VGG-19/ZFNet creation peaks
    +80/+328/+288 MiB measured, +64/+312/+268 predicted; a batch-chunked ViT-base whose two
    chunks share every B: +213 measured)."""
    total = peak = live = 0
    sizes: dict[str, int] = {}  # once per weight: a deduplicated B has one event per reader
    for _, name, first, last, _ in pack_events(g, w, ort_graph):
        size = sizes.get(name)
        if size is None:
            size = sizes[name] = _packed_size(g, name)
            live += g.tensors[name].nbytes or 0  # its source, from the first packing on
        if first:
            total += size
            peak = max(peak, total + live)
        else:
            peak = max(peak, total + live + size)
        if last:
            live -= g.tensors[name].nbytes or 0
    return total, max(0, peak - total)


@dataclass
class OrtWeights:
    """Predicted ORT CPU weight bytes (deltas) at the session-creation peak and after it."""

    creation_anon: int = 0
    retained_anon: int = 0
    run_file: int = 0  # mapped pages touched by the runs (weights used in place)
    nchwc_block: int = 1
    classes: dict[str, int] = field(default_factory=dict)  # bytes per rule, for the report
    notes: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    blocks: CreationBlocks = field(default_factory=CreationBlocks)  # for the heap replay
    # embedded weights: the replayed heaps per glibc mode (``partly_pinned``: several seeded
    # replays), the predicted mode, each heap's and each mode's mean (retained, creation) anon
    heaps: dict[str, list[GlibcHeap]] = field(default_factory=dict)
    mode: str = ""
    modes: dict[str, tuple[int, int]] = field(default_factory=dict)
    per_heap: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    # external weights: the four address rotations' heaps and their (retained, creation)
    # anon bytes; the prediction is their mean, the band their extremes
    rotation_heaps: list[GlibcHeap] = field(default_factory=list)
    per_rotation: list[tuple[int, int]] = field(default_factory=list)


def ort_cpu_weights(
    g: GraphInfo,
    w: WeightSplit,
    *,
    embedded: bool,
    calibration: Mapping[str, float],
    level: int = 99,
    block: int | None = None,
    mode: str | None = None,
    ort_graph: GraphInfo | None = None,
) -> OrtWeights:
    """Weight residency of ORT CPU from the rules in the module docstring; ``level`` is the
    session's graph optimization level (``optimization_level``), ``block`` overrides the
    host's NCHWc block size, ``ort_graph`` the graph ORT runs (its node numbering orders
    the prepacking, ``pack_events``)."""
    c = calibration
    block = nchwc_block_size() if block is None else block
    use_nchwc = level >= 99 and block > 1
    convs = conv_weights(g, block, fusions=level >= 1, nchwc=use_nchwc)
    res = OrtWeights(nchwc_block=block if use_nchwc else 1)
    res.blocks = creation_blocks(g, w, convs, embedded=embedded, ort_graph=ort_graph)
    # what glibc keeps of the copies session creation writes: the replayed heap's extent plus
    # the live mmapped blocks (``glibc_heap``); external data averages the four address
    # rotations, embedded weights are replayed in each of their two modes
    if embedded:
        res.heaps = embedded_modes(res.blocks)
        res.mode = embedded_mode(g, w, convs) if mode is None else mode
        chosen = res.heaps[res.mode]
        heap = sum(h.resident for h in chosen) // len(chosen)
        heap_peak = sum(h.peak for h in chosen) // len(chosen)
    else:
        # the rotations are the external weights' coin: each is a heap some process has
        # (RetinaNet `all`: tops 85-88 / 104 MiB replayed, 81-88 / 106 traced)
        res.rotation_heaps = [replay(res.blocks, r) for r in range(ROTATIONS)]
        heap = sum(h.resident for h in res.rotation_heaps) // ROTATIONS
        heap_peak = sum(h.peak for h in res.rotation_heaps) // ROTATIONS
    res.assumptions.append(
        f"ORT CPU NCHWc block size {block if use_nchwc else 'off'} "
        "(MlasNchwcGetBlockSize: 16 with AVX512F, else 8 on x86-64; from this host's CPU flags); "
        "glibc malloc with its default dynamic mmap threshold "
        f"(weight copies replayed: {heap / MiB:.1f} MiB resident"
        + (f", embedded weights' {res.mode} mode)" if embedded else ")")
    )
    conv_kept, freed, _ = conv_copies(convs, 0.0)
    conv_mapped = sum(cw.nbytes for cw in convs if not (cw.nchwc or cw.fused) and not embedded)
    conv_embedded = sum(cw.nbytes for cw in convs if not (cw.nchwc or cw.fused) and embedded)
    packed, pack_transient = prepacked(g, w, ort_graph)
    # constant folding reads each source weight into a heap buffer (Initializer) while the
    # result is computed: a transient of the largest folded source
    folded_src = max(
        (
            g.tensors[n].nbytes or 0
            for i in g.folded
            for n in g.nodes[i].inputs
            if n and g.tensors[n].kind == "initializer" and not g.tensors[n].folded
        ),
        default=0,
    )

    def stages(resident: int, peak: int) -> tuple[int, int]:
        # the conversions' scratch (A + V + S) as the replay places it: in holes where they
        # fit; packing reads mapped sources (external) or the heap copies the replay holds
        transient = max(folded_src, peak - resident, 0 if embedded else pack_transient)
        retained = resident  # the folded results are replayed (``_folding_blocks``)
        # the session's own transient (``ort_session_transient``, counted as overhead) comes
        # first and is freed into the heap the weight copies then grow into: the peak is the
        # larger of the transient and the weights' retained + scratch bytes
        return retained, max(0, retained + transient - int(c["ort_session_transient"]))

    res.retained_anon, res.creation_anon = stages(heap, heap_peak)
    res.per_rotation = [stages(h.resident, h.peak) for h in res.rotation_heaps]
    if embedded:
        res.per_heap = {m: [stages(h.resident, h.peak) for h in hs] for m, hs in res.heaps.items()}
        res.modes = {m: _mean_pairs(v) for m, v in res.per_heap.items()}
        res.retained_anon, res.creation_anon = res.modes[res.mode]
        rewritten = {cw.name for cw in convs if cw.nchwc or cw.fused}
        res.classes["embedded_kept"] = sum(
            g.tensors[n].nbytes or 0
            for n in g.initializers
            if not g.tensors[n].folded and n not in rewritten and w.names.get(n) != "prepacked"
        )
        res.notes.append(
            "embedded weights: session state copies every initializer out of the ModelProto "
            "(heap); the strings and the copies of rewritten / prepacked weights are freed"
        )
        others = ", ".join(
            f"{m} {r / MiB:.1f} MiB (creation peak {c / MiB:.1f})"
            for m, (r, c) in res.modes.items()
            if m != res.mode
        )
        res.assumptions.append(
            "embedded weights: glibc keeps their freed copies pinned apart or merged, decided "
            "per process by the tcache (whether posix_memalign's spares find a slot); predicted "
            f"{res.mode} (weights {res.modes[res.mode][0] / MiB:.1f} MiB retained, creation "
            f"peak {res.modes[res.mode][1] / MiB:.1f}); the other modes retain {others}; "
            "external data (`memshrink optimize` writes it) has one mode"
        )
    else:
        in_place = w.external - w.prepacked_only - w.gather_tables - w.folded_anon
        converted = sum(
            cw.nbytes for cw in convs if (cw.nchwc or cw.fused) and g.tensors[cw.name].external
        )
        res.run_file = max(0, in_place - converted)
        res.notes.append(
            "external weights memory-mapped; NCHWc/fused Conv weights re-laid out into anon "
            "copies, MatMul/Gemm B prepacked"
        )
    res.classes.update(
        {
            "kept": conv_kept + packed + w.folded_anon + res.classes.get("embedded_kept", 0),
            "glibc_resident": heap,
            "conv_nchwc": sum(cw.resident for cw in convs if cw.nchwc),
            "conv_fused": sum(cw.nbytes for cw in convs if cw.fused),
            "conv_in_place": conv_mapped + conv_embedded,
            "conv_freed_copies": freed,
            "prepacked": packed,
            "folded": w.folded_anon,
        }
    )
    return res


def _mean_pairs(pairs: list[tuple[int, int]]) -> tuple[int, int]:
    n = len(pairs)
    return sum(a for a, _ in pairs) // n, sum(b for _, b in pairs) // n


READ_BLOCK = 4 * MiB  # ORT's FileInputStream block when parsing a model by path (traced)
STRING_RESERVE_MAX = 50_000_000  # protobuf's kSafeStringSize: larger strings grow by doubling
# a TensorProto's own small fields (name, dims), parsed between two raw-data strings and alive
# with the ModelProto: they keep each freed string's hole apart from its neighbours' (traced)
PROTO_FIELDS = 48


def _string_blocks(b: CreationBlocks, key: str, nbytes: int) -> None:
    """A raw-data string as protobuf parses it: ``reserve(size)`` up to 50 MB, then appends
    that double the capacity, each step freeing the last (traced: BERT's 94 MB table is
    50 MB + 1, then 100 MB + 1; a 512 MiB weight 50, 100, 200, 400, 800 MB), each written only
    as far as the string's bytes go: mmapped (every such string is over the 32 MiB threshold
    maximum), the doubled capacity's tail is never resident (an embedded 5 x 49 MiB MLP
    peaked at 304 MiB, where counting the 100 MB capacities predicted 539). Then the
    tensor's small fields, which stay: a freed string
    leaves a hole of its own size only, which its session copy (``posix_memalign``, 96 bytes
    more) never fits (multibranch's 216 KiB weights, traced in the verifier's child: the
    copies extend the heap top, and only the conversions' plain-malloc V and S reuse the
    strings' holes; merged holes put 4 MiB of copies into them in the replay)."""
    caps = [nbytes]
    if nbytes > STRING_RESERVE_MAX:
        caps = [STRING_RESERVE_MAX]
        while caps[-1] < nbytes:
            caps.append(2 * caps[-1])
    prev = ""
    for i, cap in enumerate(caps):
        k = key if i == len(caps) - 1 else f"{key}@{cap}"
        if len(caps) == 1:
            b.alloc(k, cap + 1)
        else:
            # a grown string holds what was copied in, then what the parser appends: the
            # doubled capacity's tail is never written (mmapped: never resident)
            b.alloc(k, cap + 1, written=caps[i - 1] if i else 0)
        if prev:
            b.free(prev)
        if len(caps) > 1:
            b.touch(k, min(cap, nbytes) + 1)
        prev = k
    b.alloc(f"fields:{key}", PROTO_FIELDS)


def _folded_inputs(g: GraphInfo, node: NodeInfo) -> list[str]:
    """The weights (stored or folded) a folded node reads: what ORT copies to fold it."""
    return [
        n
        for n in dict.fromkeys(node.inputs)
        if n and g.tensors[n].kind == "initializer" and g.tensors[n].nbytes
    ]


def _folding_intermediates(g: GraphInfo) -> list[str]:
    """Outputs of folded nodes that only other folded nodes read (dropped after the pass)."""
    return [
        o
        for i in sorted(g.folded)
        if _folded_inputs(g, g.nodes[i])
        for o in g.nodes[i].outputs
        if o and not g.tensors[o].consumers and not g.tensors[o].is_output
    ]


def _key(g: GraphInfo, n: str) -> str:
    """A weight's block as the graph first holds it: ``copy16:`` for an fp16 one ORT later
    converts to an f32 ``copy:`` (``ort_fp16``)."""
    return f"copy16:{n}" if n in g.fp16_cast else f"copy:{n}"


def _stored(g: GraphInfo, n: str) -> int:
    nb = g.tensors[n].nbytes or 0
    return nb // 2 if n in g.fp16_cast else nb


def _folding_blocks(b: CreationBlocks, g: GraphInfo, inits: list[str], *, embedded: bool) -> None:
    """ORT's ``ConstantFolding`` (level 1) as the heap sees it, per folded node in file order:
    each weight it reads copied into the optimizer's frame (``posix_memalign``), its output
    allocated and kept as a new initializer, the input copies freed. Once the pass is done
    the graph drops what nobody reads any more, together: the intermediates, and (embedded)
    the copies of weights only folded nodes read. Traced in the verifier's child on embedded
    Swin-V2 (timm legacy export): each window block's continuous-position-bias MLP folds
    into three 450 KiB [225, 512] intermediates kept to the end of the pass, 36 of them, plus
    one frame copy per fold, all freed together into the heap (the replay of the trace's own
    events: 37 MiB resident where the weight blocks alone replayed 17). An Identity that
    ``ort_identity`` eliminated (no inputs) folds nothing."""
    for i in sorted(g.folded):
        node = g.nodes[i]
        ins = _folded_inputs(g, node)
        if not ins:
            continue
        for n in ins:
            b.alloc(f"fin:{i}:{n}", _stored(g, n), aligned=True)
        for o in node.outputs:
            if o:
                b.alloc(_key(g, o), _stored(g, o), aligned=True)
        b.free(*(f"fin:{i}:{n}" for n in ins))
    unread = _folding_intermediates(g)
    if embedded:
        unread += [n for n in inits if not g.tensors[n].consumers]
    b.free(*(_key(g, n) for n in unread))


def creation_blocks(
    g: GraphInfo,
    w: WeightSplit,
    convs: list[ConvWeight],
    *,
    embedded: bool,
    ort_graph: GraphInfo | None = None,
) -> CreationBlocks:
    """The large allocations and frees of session creation in ORT 1.32's order, for the heap
    replays (``glibc_heap``, ``ort_heap``), as an ``LD_PRELOAD`` malloc trace of embedded
    BERT-base and ResNet-50 b16 shows them. Embedded only: the parser's 4 MiB read block, each
    raw-data string (``nbytes + 1``), the block freed after parsing; then per initializer in
    file order session state's copy (``posix_memalign``) followed by the string's free. Then
    per rewritten Conv weight the fusion's A, S, K and the NCHWc conversion's A, V, S, K
    (``conv_copies``); the copies of rewritten weights (embedded) freed; last, in node order,
    each prepacked weight's packed B followed by the free of its copy (embedded)."""
    b = CreationBlocks()
    # which raw-data strings the heap serves depends on the threshold the process starts with
    b.threshold = verifier_threshold(
        [g.tensors[n].nbytes or 0 for n in g.inputs if g.tensors[n].kind == "input"]
    )
    inits = [n for n in g.initializers if not g.tensors[n].folded]
    rewritten = {cw.name for cw in convs if cw.nchwc or cw.fused}
    cast = g.fp16_cast  # fp16 weights converted to f32 copies (``ort_fp16``)
    stored = functools.partial(_stored, g)

    # ORT runs each transformer over the whole graph in its topological order (the DEFAULT
    # reverse DFS): each pass of the Conv+BN/Mul fusions (level 1), then every NCHWc conversion
    # (level 3); the fused weights a later pass replaced are released after the last
    # conversion (traced). A, K (and session copies, packed B) come from ORT's allocator
    # (posix_memalign 64), V and S (a vector, a TensorProto string) from malloc.
    rank = {i: r for r, i in enumerate(ort_default(g))}

    def first_reader(n: str) -> int:
        return min((rank.get(i, i) for i in g.tensors[n].consumers), default=0)

    # a file with external data copies the initializers stored inside the .onnx the same way
    # (``TensorInfo.inline``; DLRM `all`: two 14.6 MiB tables read in Loop bodies, session
    # 53 MiB measured, 10 predicted without them)
    parsed = inits if embedded else [n for n in inits if g.tensors[n].inline]
    if parsed:
        total = sum(stored(n) for n in parsed)
        b.alloc("read", min(READ_BLOCK, total))
        for n in parsed:
            _string_blocks(b, f"str:{n}", stored(n))
        b.free("read")
        # session state's copy of every initializer as stored (an fp16 weight's too: the
        # graph holds the file's tensors until the transformers replace them; traced on
        # embedded LeViT-128S fp16), each followed by its string's free
        for n in parsed:
            b.alloc(_key(g, n), stored(n), aligned=True, copy=True)
            b.free(f"str:{n}")
    _folding_blocks(b, g, inits, embedded=embedded)
    # FuseInitializersTransformer (level ALL), after every copy: per fp16 weight in the order
    # of the Casts InsertCastTransformer made (topological), the source read into an
    # Initializer, the f32 copy kept as the graph's OrtValue, the source freed; the fp16
    # copies are released together once the graph drops the unused initializers (traced)
    converted = sorted((n for n in g.initializers if n in cast), key=first_reader)
    for n in converted:
        b.alloc(f"h:{n}", stored(n), aligned=True)
        b.alloc(f"copy:{n}", g.tensors[n].nbytes or 0, aligned=True)
        b.free(f"h:{n}")
    b.free(*(f"copy16:{n}" for n in converted))  # embedded or folded
    convs = sorted(convs, key=lambda cw: first_reader(cw.name))
    replaced: list[str] = []  # fused weights NCHWc replaces
    for r in range(max((cw.rounds for cw in convs), default=0)):
        for cw in convs:
            if cw.rounds > r:
                key = f"{cw.name}#{r}"
                b.alloc(f"fA:{key}", cw.nbytes, aligned=True)
                b.alloc(f"fS:{key}", cw.nbytes)
                b.alloc(f"fK:{key}", cw.nbytes, aligned=True)
                b.free(f"fS:{key}", f"fA:{key}")
                if r + 1 == cw.rounds and cw.nchwc:
                    replaced.append(f"fK:{key}")
    # a weight fused again is released once the fusions are done (traced: Inception v2)
    b.free(*(f"fK:{cw.name}#{r}" for cw in convs for r in range(cw.rounds - 1)))
    for cw in convs:
        if cw.nchwc:
            key = cw.name
            b.alloc(f"A:{key}", cw.nbytes, aligned=True)
            b.alloc(f"V:{key}", cw.resident)
            b.alloc(f"S:{key}", cw.resident)
            b.alloc(f"K:{key}", cw.resident, aligned=True)
            b.free(f"S:{key}", f"V:{key}", f"A:{key}")
    b.free(*replaced)
    b.free(*(f"copy:{n}" for n in inits if n in rewritten))
    # a later kernel's duplicate packed copy (``pack_events``) is freed at once and left no
    # measured trace in the heap (a batch-chunked ViT-base kept 352 MiB, its original 343): it
    # is a creation transient only (``prepacked``), not replayed
    for _, n, first, last, scope in pack_events(g, w, ort_graph):
        if first:  # one kept copy per session state (main graph, each body)
            b.alloc(f"pack:{scope}{n}", _packed_size(g, n), aligned=True)
        if last:
            b.free(f"copy:{n}")
    return b
