"""OpenVINO CPU plugin (2026.4): predicted read_model, compile_model and infer peaks.

Rules, from the plugin's source (``src/plugins/intel_cpu``) and micro-measurements on this
machine (``docs/estimate.md``, "OpenVINO"):

* **Weights.** ``read_model`` maps external weights and copies embedded ones (peak 2x: the
  ModelProto plus a Constant per tensor; the ``ov.Model`` keeps 1x). ``compile_model`` reads
  every external weight (see "External data pages") and makes one private,
  re-laid-out copy of every Conv/ConvTranspose/FullyConnected weight (1.0x, measured on plain
  3x3, 1x1 and MatMul chains). A Conv followed by BatchNormalization (or a Mul by a constant)
  gets its weights rewritten by the fusion: the fused Constant stays in the compiled graph
  beside its reordered copy (2.0x). ConvTranspose weights are transposed then reordered (2x).
* **Fixed cost.** ``read_model`` builds an ov.Model (anon per ov op the frontend makes,
  per Constant, plus the .onnx's structure bytes; ``ov_read.py``) that lives until
  ``compile_model`` returns, and touches frontend library pages.
  Compilation adds plugin/oneDNN library pages (file-backed, more with more op kinds) and
  anonymous memory: a constant, per Conv/FC primitive, per *distinct* primitive configuration
  (JIT code shared by identical ones; made at the first infer under dynamic shapes), per
  Snippets subgraph node and per tokenized MHA block (its own kernel). Fitted on hand-built
  sweeps (``docs/bench/ov_pernode_bench.py``) and the ``--passes all`` CNNs.
* **External data pages.** Every weight is read at compile; the kernel maps padding pages
  only when they are in the page cache (a cold file's read-around), so a file whose 64 KiB
  alignment padding is a hole (memshrink's writer) maps between its allocated bytes and its
  size: the middle is predicted.
* **Activations.** ``MemoryControl`` places every static intermediate edge with
  ``ov::MemorySolver`` (largest box first, lowest offset free over its lifetime: the same rule
  as ``planners.greedy_by_size``) in one workspace whose pages are written during the first
  infer. Edges removed by the plugin's fusions (Conv/FC + activation/BN/per-channel ops,
  Conv + residual Add written in place into the other input, element-wise chains) and in-place
  views (Reshape/Squeeze/Unsqueeze/Flatten) take no memory of their own; NCHW inputs of a Conv
  get a layout Reorder. One stream on a 2-core machine with the default LATENCY hint, so one
  workspace. Models with symbolic input dims compile with dynamic shapes: edges grouped into
  non-overlapping sets (one growing block each) and Conv weights re-laid out at the first
  infer, unless the caller reshapes first (option ``reshape=1``).

No weight byte is read: only shapes, dtypes and (for external data) file sizes and blocks.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memshrink.estimate import (
    ov_dyn_nodes,
    ov_eltwise,
    ov_expand,
    ov_gelu,
    ov_if,
    ov_kinds,
    ov_layout,
    ov_norm,
    ov_plain,
    ov_read,
    ov_read_pages,
    ov_rnn,
    ov_slices,
)
from memshrink.estimate.disjoint import find_root
from memshrink.estimate.graph import GraphInfo, ModelView, NodeInfo, TensorInfo
from memshrink.estimate.host import normalize_precision, ov_default_precision
from memshrink.estimate.lifetimes import ALIAS_OPS, Buffer, positions, tensor_buffers
from memshrink.estimate.ort import HOLD_OUTPUTS, option_flag
from memshrink.estimate.planners import all_planners, greedy_by_size
from memshrink.estimate.stages import BackendPrediction, Stage
from memshrink.estimate.weights import FLOAT, FP16, split_weights
from memshrink.extrefs import initializer_locations

MiB = 1 << 20
INT64 = 7  # onnx.TensorProto.INT64

# Measured once on this machine (OpenVINO 2026.4, 2-core AVX2, docs/estimate.md); never per model.
# Per-node costs fitted on hand-built sweeps (docs/bench/ov_pernode_bench.py) and five
# ``--passes all`` outputs (docs/estimate.md, "Per-node costs").
OV_CALIBRATION: dict[str, float] = {
    # read_model anon (``ov_read.py``; fitted on ``ov_read_sweep.py``'s 20 micro-graphs)
    "ov_read": 1.72 * MiB,  # frontend objects of an empty graph
    "ov_read_per_op": 0.00356 * MiB,  # ... per ov op the frontend makes (not Constants)
    "ov_read_per_const": 0.00428 * MiB,  # ... per Constant held in the .onnx or made
    "ov_read_per_ext_const": 0.00491 * MiB,  # ... per Constant over external data (mmapped)
    "ov_read_per_conv_shape_item": 0.0025 * MiB,  # ... per op / Constant of a Conv's bias
    # reshape or group split (``ov_read.conv_shape_items``; Conv chains, session 11)
    "ov_read_per_proto_byte": 0.847,  # ... per byte of the .onnx's structure (names, metadata)
    # read_model's library pages (file-backed; ``ov_read_pages.py``, fitted on 164 files of
    # session 10's sweep and ``ov_lib_kinds.json``, rms 0.17 MiB): the frontend's base ...
    "ov_read_lib": 3.59 * MiB,
    "ov_read_lib_per_sqrt_type": 0.249 * MiB,  # ... x sqrt(distinct op types)
    "ov_read_lib_shape": 1.22 * MiB,  # ... an op reshaping by a computed shape (biased Conv)
    "ov_read_lib_shape_read": 0.74 * MiB,  # ... else one reading a shape (Shape, reduce-all)
    "ov_read_lib_loop": 0.45 * MiB,  # ... else a Loop / Scan
    "ov_read_lib_quant": 0.30 * MiB,  # ... quantize ops (FakeQuantize), on top
    "ov_compile_anon": 8 * MiB,  # plugin graph, executor, primitive caches
    # Library pages touched by read + compile (file-backed), by the plugin node kinds of the
    # graph and its If / Loop bodies (``ov_kinds.node_kinds``): a graph with an FC / MatMul
    # touches oneDNN's matmul code (``ov_lib``), one with a Conv its convolution code too
    # (``ov_lib_conv``), plus some per distinct kind (pooling, concat, reduce, ...). Fitted on
    # 24 static compiles, 2026-11-27 (rms 0.8 MiB; docs/estimate.md, "Session 10").
    "ov_lib": 28.5 * MiB,
    "ov_lib_conv": 30.2 * MiB,
    "ov_lib_eltwise": 23.5 * MiB,  # graphs without a Conv/FC (Snippets only)
    "ov_lib_per_op_type": 0.7 * MiB,  # ... per distinct node kind
    "ov_lib_op_types": 10,  # distinct node kinds counted at most
    # Per-node compile anon (fitted on an AVX2 host, session 5). Re-measured 2026-11-27 on this
    # AVX512-BF16 host (``ov_pernode_bench.py``, docs/estimate.md, "Session 8: per-node costs"):
    # identical 1x1 Conv+Relu +0.1075 MiB each at compile (the ov.Model's share included),
    # distinct (cin, cout) +0.2875: a configuration's JIT code is made with its primitive, at
    # compile under static shapes and at the first infer under dynamic ones (dynamic chain:
    # compile +0.12 / infer 1 +0.30 per distinct Conv). The micro slope (0.18 per distinct
    # configuration) over-predicts the real CNN exports (their Convs share oneDNN kernels this
    # key does not see), so the values stay; only the JIT's stage follows the measurement.
    "ov_per_kernel": 0.075 * MiB,  # anon per Conv/FC primitive (node, descriptors, Const)
    # ... under dynamic shapes at bf16 / f16 the primitive is made at the first infer and
    # compile keeps only its node: chains of 32 identical units on a symbolic batch, compile
    # anon over read's per-op share, 0.036 (MatMul + bias), 0.044 (Conv 3x3), 0.030 (Conv
    # 1x1), 0.054 (depthwise 3x3) MiB each, nothing more at infer 1 (2026-11-27, session 14,
    # docs/estimate.md, "Session 14: dynamic runtime nodes").
    "ov_per_kernel_dyn": 0.04 * MiB,
    # ... and the plugin's own base is lower by this much: one-unit graphs, compile anon over
    # read anon, symbolic / static batch: MatMul + bias 6.70 / 6.96, Conv 3x3 6.83 / 7.04,
    # Conv 1x1 6.86 / 7.36 MiB (mean 0.32 less; session 14).
    "ov_compile_anon_dyn_less": 0.3 * MiB,
    "ov_per_conv_config": 0.04 * MiB,  # anon per distinct Conv/FC configuration (JIT code)
    "ov_per_subgraph": 0.125 * MiB,  # anon per Snippets subgraph node (element-wise chain)
    # A tokenized MHA Snippets subgraph (``mha_internal``: MatMul -> [scale/mask] -> Softmax ->
    # MatMul) JIT-compiles its own kernel, not shared between identical blocks: 120 identical
    # attention heads ([1, 32, 784] x [1, 784, 32]) +0.41 MiB each at compile, bf16, +0.52 at
    # f32, static or symbolic batch; the same MatMuls without the Softmax (not tokenized)
    # +0.056 / +0.054: the block's kernel is 0.36 (bf16) / 0.46 (f32), the rest its nodes.
    "ov_per_mha": 0.36 * MiB,
    "ov_per_mha_f32": 0.46 * MiB,
    # ... when the scores' last dim is wider than 32 (``mha_wide_count``) the static kernel costs
    # more, flat in the width: N = 4 -> 16 blocks on [1, 4, S, 64] inputs, block minus the same
    # MatMuls with a Relu for the Softmax, compile anon at bf16 / f32: S = 32 0.365 / 0.434,
    # 64 0.632 / 0.612, 128 0.65 / 0.62, 256 0.673 / 0.603 (session 9: S = 784 0.58 / 0.80).
    # Measured 2026-11-27, docs/estimate.md, "Session 9: the heads split's copies".
    "ov_per_mha_wide": 0.63 * MiB,
    "ov_per_mha_wide_f32": 0.66 * MiB,
    "ov_mha_narrow_dim": 32,
    # ... and with a symbolic sequence (T5 / Whisper decoders: tokenized too, session 9), the
    # kernel is compiled for dynamic shapes: 64 heads [1, S, 32] x [1, 32, S] -> Softmax ->
    # x [1, S, 32], S symbolic: +0.914 MiB each at compile (bf16), +1.235 (f32); the same
    # MatMuls without the Softmax +0.033 / +0.034. T5-tiny with Snippets disabled compiles
    # 5.5 MiB less anon (6 blocks).
    "ov_per_mha_dyn": 0.88 * MiB,
    "ov_per_mha_dyn_f32": 1.20 * MiB,
    # A DynamicQuantizeLinear (ORT ``quantize_dynamic``'s activations) is decomposed into
    # Reduce min/max, Snippets / Eltwise scale and zero-point nodes and Converts, each with its
    # own kernel: compile anon +0.55 MiB per node, 4 vs 12 chained [2, 16, 64] DQL ->
    # DequantizeLinear (8.88 -> 13.28 MiB over read), the same static or dynamic, bf16 or f32;
    # the MatMulIntegers beside them +0.05 each (12 vs 12 float MatMuls). Measured 2026-11-27.
    "ov_per_dyn_quant": 0.55 * MiB,
    # A Gather reading an activation stays a runtime Gather node (with index / axis Constants):
    # 4 / 36 / 68 scalar-index Gathers of one [B, 64, 16] input into a Concat, the verifier's
    # child (bf16, dynamic batch): compile peak 31.37 / 32.65 / 33.88 MiB, +0.039 MiB per
    # Gather at compile and at infer 1, of which read's per-op / per-Constant rule already
    # gives 0.013 (read measured +0.009). The compiled model's own share, measured after the
    # ov.Model is dropped: +0.031 each, the same static (6.77 / 7.70 / 8.70 MiB) and at f32.
    # Element-wise / Transpose nodes cost ~0.0125 each (inside ``ov_compile_anon``'s fit).
    # Mamba's unrolled scan holds 128 (docs/estimate.md, "Session 10: Gather nodes").
    "ov_per_gather": 0.026 * MiB,
    # Dynamic shapes, bf16 / f16: every other op reading a float activation stays a runtime
    # node (Concat, StridedSlice, Pad, Convert, MVN, GridSample, ...; an element-wise chain is
    # one Eltwise node): chains of 32 units on a symbolic batch, compile anon over read's
    # share, Slice + Pad 0.060 MiB, Slice + Slice + Concat 0.045, LayerNormalization 0.049
    # (``ov_dyn_nodes``; docs/estimate.md, "Session 14: dynamic runtime nodes").
    "ov_per_dyn_node": 0.03 * MiB,
    # A Transpose / Reshape / Softmax / activation MatMul node of the runtime graph, beyond the
    # read's per-op share (``ov_plain``): chains of 16 -> 128 units, static, bf16 host, compile
    # anon per unit over the prediction: Softmax +0.016, Transpose +0.018 / +0.036, Reshape
    # +0.035, MatMul +0.026 MiB; 64 query pieces of four dynamo layers (7 such nodes a piece)
    # +0.117 compile / +0.145 infer 3 each: 0.02 (docs/estimate.md, "Session 13: plain nodes").
    "ov_per_plain_node": 0.02 * MiB,
    "ov_conv": 1.0,  # x Conv weight bytes: one re-laid-out private copy
    "ov_conv_fused": 2.0,  # x Conv weights rewritten by a BN/Mul fusion: fused Constant + copy
    "ov_deconv": 2.0,  # x ConvTranspose weights: transposed, then re-laid out
    # Inference precision bf16 / f16 (the plugin's default on AVX512-BF16 / AMX hosts): the
    # re-laid-out Conv copy is stored in the low precision, half its f32 bytes (6 x 512x512x3x3
    # convs: compile 148.6 -> 121.1 MiB, with BN 203.2 -> 176.0, ResNet-50 infer 254 -> 202;
    # measured 2026-11-27, docs/estimate.md). FC weights: ``ov_fc_lowp_*`` below.
    "ov_conv_copy_lowp": 0.5,
    "ov_fc": 1.0,  # x MatMul/Gemm constant B bytes: packed copy
    # FC weights at bf16 / f16: packed in the low precision (half the f32 bytes), and a
    # weight in ONNX MatMul's [K, N] order is first transposed into a low-precision Constant
    # (another half, kept); one already [N, K] (Gemm transB=1, MatMul of Transpose(W)) is not.
    # Static shapes: both at compile (zoo VGG-19 / AlexNet, Gemm transB=1: compile 870.5 /
    # 395.6 MiB, predicted 1106 / 508 at 1x; 4 x MatMul 2048^2 [K, N]: 167.0 vs 160.9 at
    # f32). Dynamic shapes: the transposed Constant at compile, the pack at the first infer,
    # with or without a fused activation (4 x MatMul 2048^2 + bias, 64 MiB: compile 131.3 /
    # infer 1 170.1 at bf16 against 159.9 / 165.7 at f32; with Relu 131.7 / 170.8 against
    # 96.4 / 171.4; MatMul(x, Transpose(W)), W 32768x768, 96 MiB, a tied LM head: 129.7 /
    # 215.0 against 224.4 / 257.6). Measured 2026-11-27, the verifier's child.
    # A [K, N] weight read by several FCs (batch or sequence chunks sharing weights) is
    # transposed, and then packed, once per FC at bf16; at f32, and for an [N, K] weight,
    # the packed copy is shared (16 MiB [K, N] weight read by 4 FCs, static: compile 122.4 MiB
    # at bf16 against 73.7 for one FC; 68.6 / 67.9 at f32; [N, K] read by 4: 65.9).
    "ov_fc_lowp_transposed": 0.5,  # x [K, N] FC weight bytes, per FC reading it
    "ov_fc_lowp_packed": 0.5,  # x every FC weight's bytes (and again per extra [K, N] reader)
    "ov_infer": 1 * MiB,  # infer request, output tensors' bookkeeping
    # Dynamic shapes: library pages first touched at the first infer instead of at compile,
    # where every primitive (not only Conv/FC) is made: static compile file pages minus the
    # dynamic compile's, 19 models with and without Conv/FC weights, 0.4-4.6 MiB, mean 2.8
    # (the dynamic run 1 is the static run 1 within ~1 MiB). Measured 2026-11-27 (session 10;
    # session 5's 6 MiB from a 4 x FC+Relu chain and BERT-base applied only with deferred
    # weights, so control-flow and element-wise graphs got none).
    "ov_deferred_lib": 2.8 * MiB,
    # ... at f32 the FC code goes with the deferred primitives: compile touches none of it
    # (4 x FC+Relu chain, session 5 on an f32-only host: infer 1 file +6.3 MiB, BERT-base
    # +6.1; 2026-11-27 at f32: the same chain 23.9 -> 32.1 MiB from compile to infer 1, the
    # 3 x MatMul+Add+Relu of ``ir7`` 23.9 -> 32.2; legacy CNN 28.9 -> 33.6).
    "ov_deferred_lib_f32": 6 * MiB,
    # Dynamic shapes: the caller drops the ov.Model after compile_model (``compile_model(
    # read_model(path))``, the verifier's ``del model``); the heap blocks it frees are taken
    # again by the small allocations of the first infer (primitives, small weight copies), so
    # that much of the infer-1 growth is not new RSS. Measured 2026-11-27 (bf16 host, own
    # harness, infer 1 anon with the ov.Model kept vs dropped): EfficientNet-B0 `all` 26.8 vs
    # 23.7 MiB (read anon 5.7), RegNetY-200MF `all` 18.9 vs 16.2 (read anon 5.0); a static
    # MobileNetV2 (nothing made at infer 1) 42.3 vs 42.2.
    "ov_model_heap_reuse": 0.55,  # x the ov.Model's own anon (``graph_anon``)
}

# Ops the CPU plugin fuses into a preceding Conv/FC/element-wise node (one consumer).
SIMPLE = frozenset(
    {
        "Relu",
        "LeakyRelu",
        "PRelu",
        "Clip",
        "Sigmoid",
        "Tanh",
        "Elu",
        "Selu",
        "HardSigmoid",
        "HardSwish",
        "Softplus",
        "Mish",
        "Gelu",
        "Erf",
        "Abs",
        "Exp",
        "Sqrt",
        "Neg",
        "Round",
        "BatchNormalization",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Pow",
        "Sum",
    }
)
HEADS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})
# Element-wise ops Snippets also tokenizes into Subgraph nodes (``subgraph_count``), beyond the
# ones fused into a Conv/FC: comparisons, logic and ``Where`` (``Select``). The exporters'
# ``IsNaN -> Where`` guard after each Softmax is one ``Equal + Where`` Subgraph per attention
# core (docs/estimate.md, "Session 12: the query split's Subgraphs").
SNIPPETS_OPS = SIMPLE | frozenset(
    {
        "Equal",
        "Greater",
        "Less",
        "GreaterOrEqual",
        "LessOrEqual",
        "And",
        "Or",
        "Xor",
        "Not",
        "Where",
    }
)
# ... and a MatMulInteger by an int8 weight, also an FC primitive in the runtime graph (12 of
# them compile +0.6 MiB over 12 float MatMuls, measured 2026-11-27)
KERNEL_OPS = HEADS | {"MatMulInteger"}
FOLDS_INTO_WEIGHTS = frozenset({"BatchNormalization", "Mul"})
AFFINE = frozenset({"BatchNormalization", "Mul", "Add", "Sub", "Div"})  # with a constant


@dataclass
class OvWeights:
    """Weight bytes by what the CPU plugin does with them."""

    kept: int = 0  # Constants of the ov.Model (embedded: heap; external: mapped)
    inline: int = 0  # part of ``kept`` stored inside the .onnx of a file with external data
    conv: int = 0  # Conv weights re-laid out once
    conv_fused: int = 0  # Conv weights rewritten by a BN/Mul fusion
    deconv: int = 0
    conv_f32: int = 0  # part of conv + conv_fused + deconv stored as float32
    fc: int = 0
    fc_postop: int = 0  # part of ``fc`` whose FC has a fused activation (see ``_fc_postop``)
    fc_fused: int = 0  # part of ``fc`` rewritten by a Mul-by-constant fusion (``_fc_scaled``)
    fc_nk: int = 0  # part of ``fc`` given as [N, K] (``Transpose(W)``, Gemm transB): ``_fc_nk``
    fc_kn_shared: int = 0  # [K, N] FC weight bytes x (FC readers - 1): batch/sequence chunks
    fp16: int = 0
    file_bytes: int = 0  # external data files' size (alignment padding included)
    file_alloc: int = 0  # ... their allocated bytes (padding written as holes excluded)
    folded: set[str] = field(default_factory=set)  # names in conv_fused / fc_fused
    # data files holding only ``folded`` weights (``writer``'s folded file): mapped while
    # compile reads them, then unmapped with the ov.Model (size, allocated bytes)
    released_bytes: int = 0
    released_alloc: int = 0


def _const_inputs(g: GraphInfo, idx: int) -> list[bool]:
    return [
        bool(n) and n in g.tensors and g.tensors[n].kind == "initializer"
        for n in g.nodes[idx].inputs
    ]


def _single_consumer(g: GraphInfo, name: str) -> int | None:
    t = g.tensors[name]
    cons = sorted(set(t.consumers))
    if len(cons) != 1 or t.is_output:
        return None
    return cons[0]


def _data_file_bytes(view: ModelView) -> tuple[int, int]:
    """(size, allocated bytes) of the external data files next to the model: metadata only
    (``stat``), never read. ``memshrink``'s writer leaves the alignment padding as holes, so
    a file can hold far less than its size (``st_blocks``)."""
    if view.model_path is None:
        # not written yet: the bytes the writer will put there (no holes: alloc = size)
        size = view.external_weight_bytes if view.data_file_bytes is None else view.data_file_bytes
        return size, size
    try:
        refs = initializer_locations(view.model_path)
    except Exception:  # noqa: BLE001 - fall back to the weights' own size
        return view.external_weight_bytes, view.external_weight_bytes
    base = os.path.dirname(os.path.abspath(view.model_path))
    files = {os.path.join(base, loc) for _, loc in refs}
    stats = [os.stat(f) for f in files if os.path.isfile(f)]
    size = sum(st.st_size for st in stats)
    alloc = sum(min(st.st_size, st.st_blocks * 512) for st in stats)
    return max(size, view.external_weight_bytes), max(alloc, view.external_weight_bytes)


F32ISH = (FLOAT, FP16)  # f16 weights are decompressed to f32 Constants at read / compile


def _released_file_bytes(view: ModelView, folded: set[str]) -> tuple[int, int]:
    """(size, allocated bytes) of the data files whose every tensor is a weight the plugin
    folds (``folded``): no Constant of the compiled model points into them, so their mapping
    goes after compile (EfficientFormer-L1 after ``safe``, the 19.0 MiB folded file: infer
    156.1 -> 136.3 MiB measured; docs/optimize.md, "External data on OpenVINO"). A saved
    file only: an in-memory model inside a pass is predicted as one mapped file, as before.
    Why: a pass's trial changes which weights fold (a chunk between a Conv and its Mul), and
    crediting the folded file there moved ``chunk``'s choice on EfficientFormer ``all`` to a
    layout that measured higher (compile 156-160 -> 167 MiB): the credit is the save's."""
    if view.model_path is None:
        return 0, 0
    try:
        refs = initializer_locations(view.model_path)
    except Exception:  # noqa: BLE001 - no file to read: nothing released
        return 0, 0
    base = os.path.dirname(os.path.abspath(view.model_path))
    files: dict[str, bool] = {}
    for name, loc in refs:
        f = os.path.join(base, loc)
        files[f] = files.get(f, True) and name in folded
    size = alloc = 0
    for f, only in files.items():
        if only and os.path.isfile(f):
            st = os.stat(f)
            size += st.st_size
            alloc += min(st.st_size, st.st_blocks * 512)
    return size, alloc


def mapped_file_pages(w: OvWeights) -> int:
    """File pages of the external data that compile leaves mapped: every weight is read
    (re-laid out, or checked for subnormals), and the kernel maps the 64 KiB around each
    fault from the page cache. Padding holes are in the page cache only once something read
    them (a cold file's read-around; not a file just written): a warm file maps its allocated
    bytes, a cold one its whole size (multibranch after ``--passes all``: 25.1 vs 47.3 MiB,
    measured both ways). Predicted: the middle; ``details`` gives both ends.
    f16 weights are not among them: their f32 decompressed Constants replace them, and their
    pages are gone by the compile peak (4 x MatMul of a 2048^2 f16 weight, 32 MiB external:
    compile RSS 131.6 MiB, anon 104.5, i.e. no weight pages; 2026-11-27)."""
    return max(0, (w.file_bytes + w.file_alloc) // 2 - w.fp16)


def weight_rules(view: ModelView, only: set[int] | None = None) -> OvWeights:
    """Weight bytes by what the plugin does with them; ``only``: count the Conv/FC weights of
    these nodes alone (kept Constants and the data file are left out)."""
    g = view.graph
    w = OvWeights()
    for name in g.initializers:
        t = g.tensors[name]
        nb = t.nbytes or 0
        if t.folded and not t.consumers:
            continue
        if only is None and not t.folded:
            w.kept += nb
            w.inline += nb if t.inline else 0
        if only is None and t.elem_type == FP16:
            w.fp16 += nb
        if t.elem_type == FP16:  # decompressed to f32 Constants first: copies are of those
            nb *= 2
        for c in sorted(set(t.consumers)):
            if only is not None and c not in only:
                continue
            node = g.nodes[c]
            if not node.inputs or node.inputs[0] == name:
                continue
            op = node.op_type
            if op in ("Conv", "ConvTranspose") and node.inputs[1] == name and t.elem_type in F32ISH:
                w.conv_f32 += nb
            if op == "Conv" and node.inputs[1] == name:
                out = node.outputs[0]
                nxt = _single_consumer(g, out) if out else None
                fused = False
                if nxt is not None and g.nodes[nxt].op_type in FOLDS_INTO_WEIGHTS:
                    fused = g.nodes[nxt].op_type != "Mul" or any(_const_inputs(g, nxt))
                if fused:
                    w.conv_fused += nb
                    w.folded.add(name)
                else:
                    w.conv += nb
                break
            if op == "ConvTranspose" and node.inputs[1] == name:
                w.deconv += nb
                break
            if op in ("MatMul", "Gemm") and node.inputs[1] == name:
                w.fc += nb
                if node.outputs and node.outputs[0] and _fc_postop(g, node.outputs[0]):
                    w.fc_postop += nb
                if node.outputs and node.outputs[0] and _fc_scaled(g, node.outputs[0]):
                    w.fc_fused += nb
                    w.folded.add(name)
                if _fc_nk(g, node, name):
                    w.fc_nk += nb
                else:
                    readers = sum(
                        1
                        for k in set(t.consumers)
                        if g.nodes[k].op_type in ("MatMul", "Gemm")
                        and len(g.nodes[k].inputs) > 1
                        and g.nodes[k].inputs[1] == name
                    )
                    w.fc_kn_shared += nb * max(0, readers - 1)
                break
    if only is None and not view.embedded:
        w.file_bytes, w.file_alloc = _data_file_bytes(view)
        w.released_bytes, w.released_alloc = _released_file_bytes(view, w.folded)
    return w


def _fc_nk(g: GraphInfo, node: NodeInfo, name: str) -> bool:
    """Is this FC's constant weight already in the plugin's [N, K] order: Gemm ``transB=1``,
    or MatMul of a ``Transpose`` of a weight (a tied LM head), which the plugin folds into the
    FullyConnected instead of transposing the weight at compile."""
    if node.op_type == "Gemm":
        return bool(node.attrs.get("transB", 0))
    for c in g.folded:
        prev = g.nodes[c]
        if prev.op_type == "Transpose" and name in prev.outputs:
            t = g.tensors.get(name)
            perm = list(prev.attrs.get("perm", []) or [])
            rank = len(t.shape) if t is not None and t.shape else 2
            return not perm or perm[-2:] == [rank - 1, rank - 2]
    return False


VIEWS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten"})
ACTIVATIONS = SIMPLE - {"Add", "Sub", "Mul", "Div", "Pow", "Sum", "BatchNormalization"}


def _fc_scaled(g: GraphInfo, out: str) -> bool:
    """An FC output scaled by a constant per output channel (or a scalar), through at most its
    bias Add: ConvNeXt's layer scale ``gamma * (x W + b)``. The plugin folds the scale into the
    weights and keeps the new Constant beside its packed copy, as for Conv + BN: 2x (measured:
    8 x MatMul 1024² + bias + Mul, compile anon 77.0 MiB against 45.3 without the Mul)."""
    nxt = _single_consumer(g, out)
    if nxt is not None and g.nodes[nxt].op_type == "Add" and any(_const_inputs(g, nxt)):
        nxt = _single_consumer(g, g.nodes[nxt].outputs[0])
    if nxt is None or g.nodes[nxt].op_type != "Mul":
        return False
    node = g.nodes[nxt]
    for name, const in zip(node.inputs, _const_inputs(g, nxt), strict=True):
        if const:
            shape = g.tensors[name].shape
            return shape is not None and all(d == 1 for d in shape[:-1])
    return False


def _fc_postop(g: GraphInfo, out: str) -> bool:
    """Does this FC get an activation fused as a post-op (its bias Add skipped)?

    Measured on OpenVINO 2026.4 with dynamic input dims: an FC whose only post-op is its bias
    (or a residual Add, a Reshape, a LayerNorm) packs its weights at ``compile_model``; an FC
    followed by Relu/Gelu/Tanh/... packs them at the first infer, when its oneDNN primitive is
    made with the post-op. Decomposed GELU (``x * 0.5 * (1 + Erf(x / c))``, the tanh form) is
    matched the way the plugin's GeluFusion does: a branch of the FC's output reaches Erf/Tanh.
    """
    for _ in range(3):  # skip the bias Add and the exporter's 2-D/3-D Reshapes around a Gemm
        nxt = _single_consumer(g, out)
        if nxt is None or not g.nodes[nxt].outputs:
            break
        node = g.nodes[nxt]
        if node.op_type in VIEWS or (node.op_type == "Add" and any(_const_inputs(g, nxt))):
            out = node.outputs[0]
    t = g.tensors.get(out)
    if t is None or t.is_output:
        return False
    consumers = sorted(set(t.consumers))
    if len(consumers) == 1 and g.nodes[consumers[0]].op_type in ACTIVATIONS:
        return True
    from memshrink.estimate import ov_mlas  # ov_mlas imports this module

    if ov_mlas.swish_reader(g, out):  # SiLU, x * Sigmoid(x): SwishFusion makes it a post-op
        return True
    frontier, seen = list(consumers), set(consumers)
    for _ in range(6):  # GELU: Div/Mul/Pow/Add steps before the Erf/Tanh (tanh form: 5)
        nxt_frontier = []
        for c in frontier:
            node = g.nodes[c]
            if node.op_type in ("Erf", "Tanh"):
                return True
            if node.op_type not in ("Mul", "Div", "Pow", "Add"):
                continue
            for o in node.outputs:
                for cc in g.tensors[o].consumers if o in g.tensors else ():
                    if cc not in seen:
                        seen.add(cc)
                        nxt_frontier.append(cc)
        frontier = nxt_frontier
    return False


@dataclass
class Fusion:
    """One edge the plugin removes: ``edge`` (made by a Conv/FC/element-wise node) is consumed
    only by ``op``, which is executed inside the producer and writes ``into``."""

    edge: str
    into: str  # the consumer's output: the fused node's real output
    other: str | None  # a second activation input (residual Add): overwritten in place


def fusions(g: GraphInfo) -> list[Fusion]:
    """Edges removed by the plugin's fusions, in graph order.

    A tensor made by a Conv/FC/element-wise node whose only consumer is a simple op (activation,
    BatchNormalization, arithmetic with a constant) is never materialized: the producer writes
    the simple op's result. A Conv directly followed by a residual Add writes the sum into the
    other input's buffer when the Add reads it last and it is not the Conv's own input
    (``FuseConvolutionSumAndConvolutionSumActivation``); other binary ops on two activations
    (an Add after a Relu) stay separate nodes with their own output.
    """
    out_list: list[Fusion] = []
    conv_like: set[str] = set()  # a Conv's output, possibly through folded BN/affine ops
    conv_inputs: dict[str, set[str]] = {}  # ... and that Conv's data input
    swish_x, swish_s = swish_pairs(g)
    for node in g.nodes:
        if node.op_type not in HEADS and node.op_type not in SIMPLE:
            continue
        if _shared_bias(g, node):
            continue  # bias Add kept apart: the post-ops run as a Snippets node
        for out in node.outputs:
            if node.op_type == "Conv" and out:
                conv_like.add(out)
                conv_inputs[out] = {node.inputs[0]}
            if out in swish_s:  # Sigmoid(x) inside x * Sigmoid(x): never materialized
                out_list.append(Fusion(out, swish_s[out], None))
                continue
            if out in swish_x:  # x * Sigmoid(x) is one Swish op, fused like an activation
                out_list.append(Fusion(out, swish_x[out], None))
                continue
            c = _single_consumer(g, out) if out else None
            if c is None or g.nodes[c].op_type not in SIMPLE:
                continue
            consumer = g.nodes[c]
            if not consumer.outputs or not consumer.outputs[0]:
                continue
            others = [
                n
                for n in consumer.inputs
                if n and n != out and n in g.tensors and g.tensors[n].kind != "initializer"
            ]
            if out in conv_like and not others and consumer.op_type in AFFINE:
                conv_like.add(consumer.outputs[0])  # BN / x*c / x+c folded into the Conv
                conv_inputs[consumer.outputs[0]] = conv_inputs.get(out, set())
            if others and not (
                out in conv_like
                and consumer.op_type in ("Add", "Sum")
                and not set(others) & conv_inputs.get(out, set())
            ):
                continue  # a binary op on two activations: its own (Snippets) node
            out_list.append(Fusion(out, consumer.outputs[0], others[0] if others else None))
    return out_list


def swish_pairs(g: GraphInfo) -> tuple[dict[str, str], dict[str, str]]:
    """SiLU written as ``Mul(x, Sigmoid(x))`` (EfficientNet, YOLO, timm's ``act/Mul``), where
    x is read by nothing else: the plugin's SwishFusion makes it one Swish op, which a Conv/FC
    takes as a post-op like any activation. Returns ({x: Mul output}, {Sigmoid output: Mul
    output}). Runtime model of timm EfficientNet-B0: 81 Convolution nodes named
    ``.../Conv/WithoutBiases,.../act/Mul``, no Sigmoid or Mul node of a SiLU left."""
    xs: dict[str, str] = {}
    ss: dict[str, str] = {}
    for node in g.nodes:
        if node.op_type != "Sigmoid" or not node.inputs or not node.outputs:
            continue
        x, s = node.inputs[0], node.outputs[0]
        tx, ts = g.tensors.get(x), g.tensors.get(s)
        if tx is None or ts is None or tx.kind != "activation" or tx.is_output:
            continue
        m = _single_consumer(g, s)
        if m is None:
            continue
        mul = g.nodes[m]
        if mul.op_type != "Mul" or sorted(mul.inputs) != sorted([x, s]) or not mul.outputs[0]:
            continue
        if set(tx.consumers) != {node.index, m}:
            continue
        xs[x] = mul.outputs[0]
        ss[s] = mul.outputs[0]
    return xs, ss


def _shared_bias(g: GraphInfo, node: NodeInfo) -> bool:
    """A Conv whose bias Constant feeds other nodes too (e.g. batch chunks sharing weights):
    the plugin leaves the bias Add, and everything after it, out of the Conv (measured on a
    16-chunk ResNet-50: 784 Snippets subgraphs, one per Conv post-op chain)."""
    if node.op_type != "Conv" or len(node.inputs) < 3 or not node.inputs[2]:
        return False
    t = g.tensors.get(node.inputs[2])
    # an all-zero bias is no bias: the plugin removes x + 0 and fuses the rest into the Conv
    # (4 Conv+Relu sharing one bias: 4 Subgraph / Eltwise nodes, none when it is zero)
    return t is not None and t.kind == "initializer" and len(set(t.consumers)) > 1 and not t.zero


def _fc_output(g: GraphInfo, name: str) -> bool:
    """``name`` is made by a MatMul/Gemm, or by the bias Add right after one."""
    t = g.tensors.get(name)
    p = g.nodes[t.producer] if t is not None and t.producer is not None else None
    if p is not None and p.op_type == "Add":
        acts = [i for i in p.inputs if i in g.tensors and g.tensors[i].kind == "activation"]
        src = g.tensors[acts[0]].producer if len(acts) == 1 else None
        p = g.nodes[src] if src is not None else None
    return p is not None and p.op_type in ("MatMul", "Gemm")


def fused_away(g: GraphInfo) -> set[str]:
    return {f.edge for f in fusions(g)}


def gelu_chains(g: GraphInfo) -> dict[int, str]:
    """Nodes of each Erf-form GELU (``x * 0.5 * (1 + erf(x / sqrt 2))`` in any of the orders
    the exporters write, ``/ sqrt 2`` or ``* 1/sqrt 2``), mapped to the chain's input ``x``:
    OpenVINO's ``GeluFusion`` makes each one ``Gelu`` op, which the CPU plugin then fuses
    into the FullyConnected that makes ``x`` (``subgraph_count``)."""
    out: dict[int, str] = {}
    for erf in g.nodes:
        if erf.op_type != "Erf" or not erf.inputs or not erf.outputs:
            continue
        pre_i = g.tensors[erf.inputs[0]].producer if erf.inputs[0] in g.tensors else None
        pre = g.nodes[pre_i] if pre_i is not None else None
        if pre is None or pre.op_type not in ("Div", "Mul") or len(pre.inputs) != 2:
            continue
        if not ov_gelu.const_scalar(g, pre.inputs[1]):
            continue
        x = pre.inputs[0]
        xt = g.tensors.get(x)
        if xt is None or xt.kind != "activation":
            continue
        halves = {
            c for c in xt.consumers
            if g.nodes[c].op_type == "Mul" and any(ov_gelu.const_scalar(g, i) for i in g.nodes[c].inputs)
        }  # fmt: skip
        half_outs = {g.nodes[c].outputs[0]: c for c in halves if g.nodes[c].outputs}
        chain = [pre.index, erf.index]
        cur, done = erf.outputs[0], False
        for _ in range(4):
            c = _single_consumer(g, cur)
            if c is None or g.nodes[c].op_type not in ("Add", "Mul") or not g.nodes[c].outputs:
                break
            node = g.nodes[c]
            other = [i for i in node.inputs if i != cur]
            if len(other) != 1:
                break
            if done:  # a trailing 0.5 after x * (1 + erf)
                if node.op_type == "Mul" and ov_gelu.const_scalar(g, other[0]):
                    chain.append(c)
                break
            chain.append(c)
            cur = node.outputs[0]
            if other[0] == x:
                done = True
            elif other[0] in half_outs:
                chain.append(half_outs[other[0]])
                break
            elif not ov_gelu.const_scalar(g, other[0]):
                chain = []
                break
        else:
            chain = []
        if len(chain) >= 4 and (done or any(i in halves for i in chain)):
            for i in chain:
                out[i] = x
    return out


def subgraph_count(g: GraphInfo, gone: set[str]) -> int:
    """Snippets subgraph nodes in the plugin graph: element-wise ops not absorbed by a Conv/FC,
    merged into one node along edges the tokenizer can follow.

    Members: simple ops none of whose activation inputs is fused away, and the bias Add of
    each Conv whose bias is shared (``_shared_bias``). A producer joins its consumer's
    subgraph when every reader of its output is a member (merging then makes no cycle
    through a Conv). Each subgraph node costs its own memory even when identical ones share
    JIT code: ResNet-50 b16 chunked 16 ways has 784 (counted 784), U-Net after ``all`` 92.
    """
    parent: dict[str, str] = {}
    # an Erf GELU on a FullyConnected's output is that FC's post-op, not a Snippets node
    # (runtime models after ``all``, static shapes: ConvNeXt-tiny 232 Subgraphs, counted 808
    # before; ViT-base 74, counted 316)
    gelu = gelu_chains(g)
    fc_gelu = {i for i, x in gelu.items() if _fc_output(g, x)}
    member_out: dict[str, str] = {}  # tensor -> member key of the op that makes it
    for node in g.nodes:
        if node.index in fc_gelu:
            continue
        if node.op_type == "Conv" and node.outputs and node.outputs[0] and _shared_bias(g, node):
            key = f"bias:{node.index}"
            parent[key] = key
            member_out[node.outputs[0]] = key
            continue
        if node.op_type not in SNIPPETS_OPS:
            continue
        acts = [
            i for i in node.inputs if i and i in g.tensors and g.tensors[i].kind == "activation"
        ]
        if not acts or any(i in gone for i in acts):
            continue
        key = f"n:{node.index}"
        parent[key] = key
        for o in node.outputs:
            if o:
                member_out[o] = key
    for node in g.nodes:
        key = f"n:{node.index}"
        if key not in parent:
            continue
        for i in node.inputs:
            src = member_out.get(i) if i else None
            if src is None:
                continue
            t = g.tensors[i]
            readers = set(t.consumers)
            if not t.is_output and all(f"n:{c}" in parent for c in readers):
                parent[find_root(parent, src)] = find_root(parent, key)
    return len({find_root(parent, k) for k in parent})


def conv_configs(g: GraphInfo) -> tuple[int, int]:
    """(Conv/FC primitives with a constant weight, distinct configurations among them).

    A configuration is what a oneDNN primitive (and its JIT code) is keyed by: op, input and
    weight shapes, strides, pads, dilations, groups, bias, and the post-ops fused into it.
    Identical ones share their JIT code; every primitive still costs its node, descriptors
    and Constants (sweeps: 64 identical 1x1 Convs +0.055 MiB each, 64 distinct +0.19).
    """
    fused = {f.edge: f for f in fusions(g)}
    keys: set[tuple[Any, ...]] = set()
    n = 0
    for node in g.nodes:
        if node.op_type not in KERNEL_OPS or len(node.inputs) < 2:
            continue
        w = g.tensors.get(node.inputs[1])
        if w is None or w.kind != "initializer":
            continue
        n += 1
        x = g.tensors.get(node.inputs[0])
        post: list[str] = []
        out = node.outputs[0] if node.outputs else ""
        while out in fused and len(post) < 8:
            f = fused[out]
            prod = g.tensors[f.into].producer if f.into in g.tensors else None
            post.append((g.nodes[prod].op_type if prod is not None else "?") + "+" * bool(f.other))
            out = f.into
        a = node.attrs
        keys.add(
            (
                node.op_type,
                x.shape if x is not None else None,
                w.shape,
                tuple(a.get("strides", ()) or ()),
                tuple(a.get("pads", ()) or ()),
                tuple(a.get("dilations", ()) or ()),
                a.get("group", 1),
                len(node.inputs) > 2 and bool(node.inputs[2]),
                tuple(post),
            )
        )
    return n, len(keys)


def dyn_quant_count(g: GraphInfo) -> int:
    """DynamicQuantizeLinear nodes, each compiled into its own small kernels
    (``ov_per_dyn_quant``)."""
    return sum(n.op_type == "DynamicQuantizeLinear" for n in g.nodes)


def lib_pages(g: GraphInfo, c: Mapping[str, float]) -> int:
    """Library pages (file-backed) that read_model and compile_model touch: oneDNN's code
    when the graph (or an If / Loop body) has an FC or a Conv, plus some per distinct plugin
    node kind (``ov_kinds``; static compiles measured 23.9-36.4 MiB, 2026-11-27)."""
    kinds = ov_kinds.node_kinds(g)
    if kinds & ov_kinds.CONV_KINDS:
        base = c["ov_lib_conv"]
    elif kinds & (ov_kinds.FC_KINDS | ov_rnn.RNN_OPS):  # oneDNN's RNN runs on its GEMM code
        base = c["ov_lib"]
    else:
        base = c["ov_lib_eltwise"]
    return int(base + c["ov_lib_per_op_type"] * min(len(kinds), int(c["ov_lib_op_types"])))


MHA_ELTWISE = frozenset({"Add", "Mul", "Div"})  # seen inside tokenized MHA (scale, mask)


def batch_only_dynamic(view: ModelView) -> bool:
    """Every symbolic input dim is an axis 0 (a batch): OpenVINO's own shape propagation then
    keeps every other dim static, even where ONNX shape inference left an ``unk__`` dim."""
    return all(
        isinstance(d, int) or k == 0 for _, dims in view.declared_inputs for k, d in enumerate(dims)
    )


def mha_internal(g: GraphInfo, dynamic: bool = True) -> set[str]:
    """Tensors inside the attention blocks the CPU plugin tokenizes into one Snippets ``MHA``
    subgraph (``TokenizeMHASnippets``): ``MatMul(Q, K) -> [element-wise]* -> Softmax ->
    MatMul(., V)`` on 3-D/4-D activations, each inner tensor read only by the next op. The
    subgraph computes the scores in blocks, so they are never materialized.

    The pattern alone decides, static or symbolic sequence (``dynamic`` is no longer used; kept
    for callers): session 9 compiled every attention model at hand with its symbolic dims and
    counted the runtime graph's Subgraph nodes: T5-tiny 6 / 6, T5-small 18 / 18, Whisper-tiny
    4 / 4 (its other 2 Softmax read a Where), DeiT 4 / 4, LeViT 11 / 11, MobileViT 9 / 9,
    Swin-V2 5 / 5, and 0 / 0 on BERT, GPT-2, DistilBERT, RoBERTa, ViT-B/16 (their Softmax output
    goes through the exporter's ``IsNaN -> Where`` guard, or the mask through a ``Where``, so
    the pattern does not match). Session 6 gated it on static score dims after RoBERTa and
    DistilBERT kept MatMul + Softmax; those exports fail the pattern itself. Legacy ViT-base /
    Whisper-base encoder (symbolic batch): one Subgraph per layer; Whisper's 8 x 1500 x 1500
    scores are 68 MiB per tensor: predicted +70 % at infer before this rule."""
    out: set[str] = set()

    def only(name: str) -> NodeInfo | None:
        t = g.tensors.get(name)
        if t is None or t.is_output or len(set(t.consumers)) != 1 or len(t.consumers) != 1:
            return None
        return g.nodes[t.consumers[0]]

    def acts(n: NodeInfo) -> bool:
        return all(i in g.tensors and g.tensors[i].kind != "initializer" for i in n.inputs[:2] if i)

    for n in g.nodes:
        if n.op_type != "MatMul" or len(n.inputs) < 2 or not acts(n) or not n.outputs:
            continue
        y = g.tensors.get(n.outputs[0])
        if y is None or y.shape is None or len(y.shape) not in (3, 4):
            continue
        inner = [n.outputs[0]]
        nxt = only(n.outputs[0])
        while nxt is not None and nxt.op_type in MHA_ELTWISE and nxt.outputs:
            inner.append(nxt.outputs[0])
            nxt = only(nxt.outputs[0])
        if nxt is None or nxt.op_type != "Softmax" or not nxt.outputs:
            continue
        if int(nxt.attrs.get("axis", -1)) not in (-1, len(y.shape) - 1):
            continue
        inner.append(nxt.outputs[0])
        mm = only(nxt.outputs[0])
        if mm is None or mm.op_type != "MatMul" or mm.inputs[0] != nxt.outputs[0] or not acts(mm):
            continue
        out.update(inner)
    return out


def mha_folded_transposes(g: GraphInfo, inner: set[str]) -> set[str]:
    """Outputs of Transposes swapping the last two dims that only an MHA block's first MatMul
    reads (K^T): the plugin folds them into the MatMul (``transpose_b``), so no buffer. Runtime
    graph of one core on Q/K/V inputs [4, 12, 512, 64] (whole or split by heads): no Transpose
    node, the Subgraph's layers ``sc0,p0,y0`` (2026-11-27, docs/estimate.md, "Session 9: the
    heads split's copies")."""
    out: set[str] = set()
    for name in inner:
        t = g.tensors.get(name)
        if t is None or t.producer is None or g.nodes[t.producer].op_type != "MatMul":
            continue
        mm = g.nodes[t.producer]
        kt = g.tensors.get(mm.inputs[1]) if len(mm.inputs) > 1 else None
        if kt is None or kt.producer is None or len(kt.consumers) != 1 or kt.is_output:
            continue
        tr = g.nodes[kt.producer]
        perm = [int(p) for p in tr.attrs.get("perm", [])]
        rank = len(perm)
        swap = [*range(rank - 2), rank - 1, rank - 2]
        if tr.op_type == "Transpose" and rank >= 2 and perm == swap:
            out.add(kt.name)
    return out


def mha_count(g: GraphInfo, dynamic: bool = True) -> int:
    """Tokenized MHA Snippets subgraphs (``mha_internal``): one per Softmax inside one. Each
    compiles its own kernel (``ov_per_mha``), identical blocks too."""
    inner = mha_internal(g, dynamic)
    return sum(1 for n in g.nodes if n.op_type == "Softmax" and n.outputs and n.outputs[0] in inner)


def _mha_scores(g: GraphInfo) -> Iterator[TensorInfo | None]:
    """The scores (the Softmax input) of each tokenized MHA block, None where unknown."""
    inner = mha_internal(g)
    for n in g.nodes:
        if n.op_type == "Softmax" and n.outputs and n.outputs[0] in inner:
            yield g.tensors.get(n.inputs[0]) if n.inputs else None


def mha_wide_count(g: GraphInfo, narrow: int, seq_dynamic: bool = False) -> int:
    """Tokenized MHA blocks compiled for static shapes whose scores' last dim is wider than
    ``narrow``: their kernel costs ``ov_per_mha_wide`` instead of ``ov_per_mha``. With
    ``seq_dynamic`` the blocks ``mha_dynamic_count`` counts are left out."""
    count = 0
    for t in _mha_scores(g):
        if t is None or not t.shape:
            continue
        sym = t.sym_shape
        if seq_dynamic and (sym is None or not all(isinstance(d, int) for d in sym[-2:])):
            continue
        if t.shape[-1] > narrow:
            count += 1
    return count


def mha_dynamic_count(g: GraphInfo) -> int:
    """Tokenized MHA blocks whose scores have a symbolic last dim as compiled (a symbolic
    sequence): their kernel is JIT-compiled for dynamic shapes, which costs more
    (``ov_per_mha_dyn``). Call only for a model compiled with symbolic dims beyond a batch."""
    count = 0
    for t in _mha_scores(g):
        sym = t.sym_shape if t is not None else None
        if sym is None or not all(isinstance(d, int) for d in sym[-2:]):
            count += 1
    return count


def ov_buffers(
    g: GraphInfo,
    order: Sequence[int],
    dynamic: bool = True,
    precision: str = "f32",
    gelu: bool = True,
    plain_eltwise: bool = False,
) -> list[Buffer]:
    """Activation buffers after the plugin's fusions.

    ``plain_eltwise``: dynamic shapes (any dynamic dim, the batch's too): no Snippets, so
    element-wise chains fuse only the plain way (``ov_eltwise.fused_eltwise``'s ``plain``).

    ``gelu``: plan a decomposed GELU as one op (``ov_gelu``); the ORT OpenVINO EP's
    partitioned workspaces keep the op-by-op plan their factors were fitted on.

    A fused edge shares one buffer with the fused node's output (alive from the producer's
    step); a residual sum written in place shares the overwritten input's buffer; attention
    scores inside a tokenized MHA subgraph (``mha_internal``) take no buffer. Under a bf16 / f16
    inference precision the plugin converts at the graph's inputs and outputs and keeps every
    float32 edge in between in the low precision: half the bytes (ResNet-50 b16 infer
    activations 90 -> 50 MiB, U-Net 262 -> 134; measured 2026-11-27). An int64 edge is i32 in
    the plugin, whatever the precision: half its bytes (an Expand to [40000, 256] and an Add
    measure 155.3 MiB at infer 1 in int64, 155.1 in int32; docs/estimate.md, "Session 12:
    scatter graphs").
    """
    bufs = tensor_buffers(g, order)
    inner = mha_internal(g, dynamic)
    folded = mha_folded_transposes(g, inner)
    for b in bufs:
        if b.tensors and all(t in inner or t in folded for t in b.tensors):
            b.size = 0
    owner = {t: b for b in bufs for t in b.tensors}
    pos = positions(order)
    for name in folded:  # the MatMul reads the Transpose's input: it lives until then
        producer = g.tensors[name].producer
        src = owner.get(g.nodes[producer].inputs[0]) if producer is not None else None
        reader = pos.get(g.tensors[name].consumers[0], -1)
        if src is not None and reader > src.end:
            src.end = reader

    def merge(keep: Buffer, drop: Buffer, size: int) -> None:
        keep.start, keep.end = min(keep.start, drop.start), max(keep.end, drop.end)
        keep.size = size
        keep.is_output = keep.is_output or drop.is_output
        for t in drop.tensors:
            owner[t] = keep
        keep.tensors.extend(drop.tensors)
        drop.tensors = []
        drop.size = 0

    # an If whose condition follows from static dims is replaced by its branch at compile: a
    # branch of views is a view of the outer tensor, no body, no copy (``ov_if``)
    for node in g.nodes:
        srcs = ov_if.view_sources(g, node) if node.op_type == "If" else None
        if srcs is None:
            continue
        for b in bufs:
            if b.transient and b.producer == node.index:
                b.size = 0
        for out, view_of in zip(node.outputs, srcs, strict=True):
            if view_of == "":  # an Identity: the runtime graph keeps an Identity node that copies
                continue
            bo, bs = owner.get(out), owner.get(view_of)
            if bo is None or bo.is_output or bo is bs:
                continue
            if bs is None:  # a view of a graph input or weight: no memory of its own
                bo.size = 0
            else:
                merge(bs, bo, bs.size)

    # an Expand read only by element-wise ops: they broadcast its input themselves (the
    # plugin's Broadcast after them is in place): no buffer of its own (``ov_expand``)
    for name, data in ov_expand.absorbed(g).items():
        be, bs = owner.get(name), owner.get(data)
        if be is None or be.is_output or be is bs or be.tensors != [name]:
            continue
        if bs is not None:
            bs.end = max(bs.end, be.end)
        be.size = 0

    over_input: dict[str, str] = {}
    for f in fusions(g):
        be, bi = owner.get(f.edge), owner.get(f.into)
        if be is None or bi is None or be is bi:
            continue
        bo = owner.get(f.other) if f.other else None
        t_other = g.tensors[f.other] if f.other else None
        last = max((pos[c] for c in t_other.consumers if c in pos), default=-1) if t_other else -1
        consumer = g.tensors[f.into].producer
        if (
            bo is not None
            and bo is not be
            and bo is not bi
            and not bi.is_output
            and not bo.is_output
            and consumer is not None
            and pos.get(consumer) == last
            and bo.size >= bi.size
        ):
            merge(bo, be, bo.size)  # the producer writes the sum over the other input
            merge(bo, bi, bo.size)
        else:
            merge(bi, be, max(bi.size, be.size))
            if (
                f.other in g.inputs
                and t_other is not None
                and not bi.is_output
                and consumer is not None
                and pos.get(consumer) == last
            ):
                over_input[f.other] = f.into  # the sum goes over the input's reordered copy
    gels = ov_gelu.gelus(g) if gelu else []
    for gl in gels:  # one Gelu op; on an FC's output, that FC's post-op
        be = owner.get(gl.output)
        if be is None:
            continue
        inner = set(gl.inner)
        for name in gl.inner:
            bt = owner.get(name)
            if bt is not None and bt is not be and set(bt.tensors) <= inner:
                bt.size = 0
        bx = owner.get(gl.x)
        made = [g.tensors[n].producer for n in bx.tensors if n in g.tensors] if bx else []
        if (
            bx is not None
            and bx is not be
            and not bx.is_output
            and any(p is not None and g.nodes[p].op_type in HEADS for p in made)
        ):
            merge(be, bx, max(be.size, bx.size))
    # a chain of element-wise ops on activations is one Eltwise node: its inputs live until
    # its last member runs (a channel split's partial sums, ``ov_eltwise``)
    in_gelu = {
        g.tensors[t].producer for gl in gels for t in [*gl.inner, gl.output] if t in g.tensors
    }
    chains = ov_eltwise.fused_eltwise(g, {p for p in in_gelu if p is not None}, plain_eltwise)
    chain_read = ov_eltwise.extend_lifetimes(g, chains, owner, pos)
    half = precision != "f32"
    if half:
        tail = precision_tail(g)
        back = ov_slices.f32_concat_inputs(g, tail)  # converted to f32 per core for a Concat
        gathered = weight_gathers(g)
        # ... and an f32 fused Eltwise reads its inputs' f32 copies (a Reorder after each)
        back |= {t for c in chains if c.output in tail for t in c.inputs if t in chain_read}
        for b in list(bufs):
            floats = [g.tensors[t].elem_type == FLOAT for t in b.tensors if t in g.tensors]
            in_tail = any(t in tail or t in back for t in b.tensors)
            if not b.size or b.is_output or not floats or not all(floats) or in_tail:
                continue
            if b.tensors[0] in gathered:
                # kept f32 up to a Reorder into the low precision right after it
                copy = Buffer(len(bufs), b.size // 2, b.start, b.end, [b.tensors[0] + "/lowp"])
                bufs.append(copy)
                b.end = b.start
                continue
            b.size //= 2
    for b in bufs:  # the plugin runs int64 as i32 (its ConvertPrecision i64 -> i32)
        ints = [g.tensors[t].elem_type == INT64 for t in b.tensors if t in g.tensors]
        if b.size and not b.is_output and ints and all(ints):
            b.size //= 2
    ov_slices.apply(g, bufs, pos, half)  # a split graph input: one whole copy, views of it
    for name, step, size in output_reorders(g, pos, half):
        bufs.append(Buffer(len(bufs), size, step, step, [name + "/before_reorder"]))
    for node in g.nodes:  # a recurrent node's low-precision sequences and LSTM cell states
        size = ov_rnn.rnn_scratch(g, node, half)
        at = pos.get(node.index)
        if size and at is not None:
            bufs.append(
                Buffer(len(bufs), size, at, at, [f"{node.name}/rnn"], node.index, transient=True)
            )
    for name in g.inputs:  # NCHW inputs of a Conv are reordered to the blocked/NHWC layout
        t = g.tensors[name]
        steps = [pos[c] for c in t.consumers if c in pos]
        if t.shape and len(t.shape) == 4 and steps and _feeds_conv(g, name):
            size = (t.nbytes or 0) // (2 if half and t.elem_type == FLOAT else 1)
            end = max(steps)
            summed = owner.get(over_input[name]) if name in over_input else None
            if summed is not None and summed.size <= size:
                # Conv+Sum over a graph input writes into its reordered copy (the request's
                # tensor is not written): 3 residual blocks at 64x112x112 measure the same
                # infer growth as the plain chain (10 MiB, 2026-11-27)
                end, summed.size = max(end, summed.end), 0
            bufs.append(Buffer(len(bufs), size, 0, end, [name + "/reorder"]))
    # a LayerNorm over the last axis of a 4-D tensor runs decomposed (``ov_norm``)
    bufs += ov_norm.decomposed_layer_norms(g, pos, half, len(bufs))
    return [b for b in bufs if b.tensors or b.transient]


# Plugin node types at which ``Graph::EnforceInferencePrecision`` stops its walk back from the
# outputs (Convolution, FullyConnected, MatMul, Interpolate, RNN cells/sequences, ROIPooling),
# by the ONNX ops that become them.
LOWP_ANCHORS = frozenset(
    {"Conv", "ConvTranspose", "MatMul", "Gemm", "Resize", "LSTM", "GRU", "RNN", "MaxRoiPool"}
)


def precision_tail(g: GraphInfo) -> set[str]:
    """Tensors the CPU plugin keeps in f32 under a bf16 inference precision: everything made
    between the last Conv/FC/MatMul/Interpolate of each path and the graph's outputs.

    ``EnforceInferencePrecision`` walks back from every output through all parents and stops
    at those node types; the nodes it passed keep f32 "to maintain accuracy" (a ReduceMean
    head, a LayerNorm, an activation after the last Conv). It runs before the fusions, so a
    Conv whose fused activation is in the tail writes f32 (runtime model of 6 x Conv+Relu ->
    ReduceMean: the last Convolution's output precision is f32, the five before bf16).
    """
    tail: set[str] = set()
    stack = [name for name in g.outputs if name in g.tensors]
    seen: set[int] = set()
    while stack:
        t = g.tensors[stack.pop()]
        if t.producer is None or t.producer in seen:
            continue
        node = g.nodes[t.producer]
        if node.op_type in LOWP_ANCHORS:
            continue
        seen.add(t.producer)
        tail.update(o for o in node.outputs if o)
        stack.extend(i for i in node.inputs if i in g.tensors and g.tensors[i].kind == "activation")
    return tail


GATHERS = frozenset({"Gather", "GatherND", "GatherElements"})


def weight_gathers(g: GraphInfo) -> set[str]:
    """Float outputs of Gather / GatherND / GatherElements whose data is a weight and whose
    indices are computed. Under a bf16 / f16 inference precision the plugin keeps an input
    that comes from a Constant in f32 (``EnforceInferencePrecision``), and these nodes write
    their data's precision, so the output stays f32 and a Reorder converts it for the
    low-precision reader: f32 bytes, then a half-size copy. Measured 2026-11-27 (bf16 host,
    run 1): ``GatherND`` of [4, 192, 64] by [256, 2, 1] / [512, 2, 1] -> batched MatMul 76 /
    113 MiB, 53.8 / 66.8 predicted with every edge at half, 77.7 / 114.6 with this rule;
    ``Gather`` of a [1000, 256] table by [8, 2048] -> Add -> MatMul 130, 115.3 -> 123.3
    (docs/estimate.md, "Session 13")."""
    out: set[str] = set()
    for node in g.nodes:
        if node.op_type not in GATHERS or node.index in g.folded or len(node.inputs) < 2:
            continue
        data, idx = (g.tensors.get(node.inputs[0]), g.tensors.get(node.inputs[1]))
        if data is None or idx is None or data.kind != "initializer" or idx.kind == "initializer":
            continue
        if data.elem_type == FLOAT:
            out.update(o for o in node.outputs if o)
    return out


# Ops that write their output in their input's layout (channels-last / blocked after a Conv).
KEEPS_LAYOUT = SIMPLE | {"Resize", "MaxPool", "AveragePool", "Concat", "Upsample"}


def output_reorders(g: GraphInfo, pos: Mapping[int, int], half: bool) -> list[tuple[str, int, int]]:
    """(output, its producer's step, bytes) of each graph output the plugin writes through a
    layout Reorder: a 4-D/5-D output made in a Conv's channels-last or blocked layout (by the
    Conv, or by ops that keep its layout: pooling, Resize, element-wise, Concat) is computed
    into an edge of its own and reordered to the planar output. The edge is in the inference
    precision unless its producer is in the f32 tail (``precision_tail``). DeepLab's
    ``Interpolate`` -> 21x800x800 output: runtime model ``Interpolate`` (acdb) ->
    ``Reorder`` (abcd) -> ``Output``; infer +51 MiB at f32, about half at bf16."""
    tail = precision_tail(g) if half else set()
    out: list[tuple[str, int, int]] = []
    for name in g.outputs:
        t = g.tensors.get(name)
        if t is None or t.producer is None or not t.shape or len(t.shape) not in (4, 5):
            continue
        if t.elem_type != FLOAT or t.producer not in pos:
            continue
        cur: str | None = name
        for _ in range(32):  # back through layout-keeping ops to the Conv that set the layout
            ct = g.tensors.get(cur) if cur else None
            node = g.nodes[ct.producer] if ct is not None and ct.producer is not None else None
            if node is None or node.op_type in ("Conv", "ConvTranspose"):
                break
            if node.op_type not in KEEPS_LAYOUT:
                node = None
                break
            acts = [i for i in node.inputs if i in g.tensors and g.tensors[i].kind == "activation"]
            cur = acts[0] if acts else None
        if node is None:
            continue
        size = t.nbytes or 0
        if half and name not in _tail_made(g, t.producer, tail):
            size //= 2
        out.append((name, pos[t.producer], size))
    return out


def _tail_made(g: GraphInfo, producer: int, tail: set[str]) -> set[str]:
    """The producer's outputs that stay f32: those it makes inside the precision tail."""
    return {o for o in g.nodes[producer].outputs if o in tail}


def _feeds_conv(g: GraphInfo, name: str) -> bool:
    return any(g.nodes[c].op_type in ("Conv", "ConvTranspose") for c in g.tensors[name].consumers)


def nonoverlapping_sets(bufs: Sequence[Buffer], syncs: Sequence[int] = ()) -> int:
    """Dynamic-shape plan (``MemoryManageNonOverlapingSets``): boxes taken by start, each put
    in the first group whose last box ended before it starts; a group is one block that grows
    to its largest box. Returns the sum of the groups' largest boxes. A box that spans a sync
    step (``syncs``, sorted: ``ov_order.sync_steps``) first ends at the next sync step at or
    after its end, or never (``memory_control.cpp``)."""
    return sum(sizes[-1] for sizes in set_blocks(bufs, syncs))


def dynamic_size_buffers(g: GraphInfo, bufs: Sequence[Buffer]) -> tuple[list[Buffer], list[Buffer]]:
    """(static-size, dynamic-size) buffers of a dynamic-shape graph.

    ``MemoryControl`` (``memory_control.cpp``) hands a region whose size is known at compile
    (every dim of its edges static, as a ``Shape`` output's ``[rank]``) to
    ``MemoryManagerStatic`` (``ov::MemorySolver``), and only the regions of unknown size to
    ``MemoryManageNonOverlapingSets``. A buffer counts as static-size when every tensor in it
    has a fully static declared shape (``sym_shape``)."""
    static: list[Buffer] = []
    dyn: list[Buffer] = []
    for b in bufs:
        if not b.size:
            continue
        known = b.tensors and all(_static_shape(g, t) for t in b.tensors)
        (static if known else dyn).append(b)
    return static, dyn


def _static_shape(g: GraphInfo, name: str) -> bool:
    t = g.tensors.get(name)
    return (
        t is not None and t.sym_shape is not None and all(isinstance(d, int) for d in t.sym_shape)
    )


def dynamic_plan(
    g: GraphInfo, bufs: Sequence[Buffer], syncs: Sequence[int] = (), split: bool = False
) -> int:
    """Bytes of a dynamic-shape graph's activation plan: ``nonoverlapping_sets`` over every
    buffer, or with ``split`` (option ``memshrink.ov_split_static``, off by default) the
    static-size regions through the memory solver (greedy by size) plus the dynamic-size ones
    through ``nonoverlapping_sets`` (``dynamic_size_buffers``), as ``MemoryControl`` does.
    Mixed, small shape tensors occupy sets that large edges then join: EnCodec (dynamic batch
    and samples, 647 shape-sized edges) plans 64.4 MiB mixed, 15.2 split, and its `all` output
    (shape subgraphs folded) 15.0 either way, while both measure the same (native f32 infer 1
    over compile +48.4 MiB). Off because the mixed over-count hides a first-infer cost of
    dynamic graphs not yet found: split, RAFT and Deformable DETR fall below -10 % on the EP
    (docs/estimate.md, EP "Session 14")."""
    if not split:
        return nonoverlapping_sets(bufs, syncs)
    static, dyn = dynamic_size_buffers(g, bufs)
    return (greedy_by_size(static)[0] if static else 0) + nonoverlapping_sets(dyn, syncs)


def block_events(bufs: Sequence[Buffer], syncs: Sequence[int] = ()) -> list[tuple[int, int]]:
    """The first infer's allocations of the dynamic plan (``nonoverlapping_sets``), in order:
    (bytes allocated, bytes freed) for each new block (freed 0) and each growth of a block to
    a larger box (the block is allocated anew and its old size freed)."""
    return _plan(bufs, syncs)[1]


def set_blocks(bufs: Sequence[Buffer], syncs: Sequence[int] = ()) -> list[list[int]]:
    """``nonoverlapping_sets``' groups, each as the sizes its block grows through (the last
    one its largest box)."""
    return _plan(bufs, syncs)[0]


def _plan(
    bufs: Sequence[Buffer], syncs: Sequence[int]
) -> tuple[list[list[int]], list[tuple[int, int]]]:
    never = 1 << 62
    boxes = []
    for b in bufs:
        if not b.size:
            continue
        end = b.end
        lo, up = bisect.bisect_left(syncs, b.start), bisect.bisect_left(syncs, b.end)
        if lo != up:
            end = syncs[up] if up < len(syncs) else never
        boxes.append((b.start, end, b.size))
    groups: list[tuple[list[int], list[int]]] = []  # ([last end], sizes grown through)
    events: list[tuple[int, int]] = []
    for start, end, size in sorted(boxes):
        for last, sizes in groups:
            if last[0] < start:
                last[0] = end
                if size > sizes[-1]:
                    events.append((size, sizes[-1]))
                    sizes.append(size)
                break
        else:
            groups.append(([end], [size]))
            events.append((size, 0))
    return [sizes for _, sizes in groups], events


def is_dynamic(view: ModelView, opts: Mapping[str, Any] | None = None) -> bool:
    """OpenVINO compiles with dynamic shapes when an input dim is symbolic, unless the caller
    reshapes the model to the bound shapes first (option ``reshape=1``, as ``Model.reshape``)."""
    if option_flag(opts, "reshape", False):
        return False
    return any(not isinstance(d, int) for _, dims in view.declared_inputs for d in dims)


PRECISION_KEYS = ("INFERENCE_PRECISION_HINT", "inference_precision_hint", "inference_precision")
# estimator-only: "0" leaves out the plugin's input tensors and the caller's output copies
# (``io_bytes``); the ORT OpenVINO EP predicts its own I/O on top of the native rules
NATIVE_IO = "memshrink.ov_native_io"
# OpenVINO's read_model property (``runtime.backends.OV_READ_PROPERTIES``): NO reads external
# weights into memory at compile, one buffer per tensor, instead of mapping the data file
ENABLE_MMAP = "ENABLE_MMAP"
# estimator-only: "0" leaves the folded weights' data file mapped after compile. The ORT
# OpenVINO EP sets it: ORT maps each tensor itself, so the file layout does not change the
# EP (EfficientFormer after ``safe``, run 3: +178 MiB one file, +175 two, measured)
RELEASE_FOLDED = "memshrink.ov_release_folded"
# estimator-only, off by default: plan a dynamic graph's static-size edges apart (``dynamic_plan``)
SPLIT_STATIC = "memshrink.ov_split_static"
# Opt-in: charge ``ov_per_plain_node`` per plain runtime node (``ov_plain``).
PLAIN_NODES = "memshrink.ov_plain_nodes"


def io_bytes(g: GraphInfo) -> tuple[int, int]:
    """(graph input bytes, graph output bytes) at the model's own dtypes.

    Inputs: the infer request's input tensors are allocated with the compiled graph
    (static shapes: at ``compile_model``; ``request.infer(numpy)`` copies the feed into them):
    1 x [1,64,448,448] f32 into a ReduceMean, compile +46 MiB over the same graph's other
    costs; also under Conv and Relu graphs (+47, +48). Outputs: the verifier copies every
    output out of the request (``.data.copy()``) and holds the copies until the next run's are
    made: run 1 one copy, later runs two (Relu on 49 MiB in and out: infer 1 +99 MiB = the
    output edge and its copy, infer 2 and 3 +49 more at the peak, freed after). Measured
    2026-11-27, the verifier's child, bf16 and f32 alike."""
    ins = sum(g.tensors[n].nbytes or 0 for n in g.inputs if n in g.tensors)
    outs = sum(g.tensors[n].nbytes or 0 for n in g.outputs if n in g.tensors)
    return ins, outs


# glibc's largest dynamic mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX, 32 MiB): a
# block under it comes from the heap, whose freed space stays resident
MMAP_THRESHOLD_MAX = 32 << 20


def feed_copies(g: GraphInfo) -> int:
    """Bytes of one more copy of each graph input under 32 MiB, resident from infer 1 on.

    ``request.infer(numpy)`` holds a copy of a feed beside the request's input tensor; under
    glibc's mmap threshold it stays on the heap. Measured 2026-11-27 (f32 and bf16 alike, the
    verifier's child): x -> Relu -> GlobalAveragePool, infer growth over compile minus the
    rest of the prediction: input 2.3 / 9.2 / 18.4 MiB -> +1.7 / +8.8 / +18.6; 36.8 MiB ->
    -0.8 (none). Also under a Conv (+8.7 to +10.4), ResNet-50 b16's 9.2 MiB input (+9.1 /
    +9.3, original and chunked), and the 16 MiB Relu's "one more copy" of ``io_bytes``."""
    sizes = (g.tensors[n].nbytes or 0 for n in g.inputs if n in g.tensors)
    return sum(b for b in sizes if b < MMAP_THRESHOLD_MAX)


def inference_precision(opts: Mapping[str, Any] | None) -> tuple[str, str]:
    """(``f32``/``bf16``/``f16``, where it comes from): the compile config's
    ``INFERENCE_PRECISION_HINT`` when given (``--session-option``, which the verifier passes
    to ``compile_model``), else the CPU plugin's default on this host."""
    for key in PRECISION_KEYS:
        if key in (opts or {}):
            return normalize_precision((opts or {})[key]), f"option {key}"
    return ov_default_precision(), "this host's CPU plugin default"


def conv_copy_bytes(w: OvWeights, c: Mapping[str, float], precision: str) -> int:
    """Private Conv / ConvTranspose weight bytes made by compile (or the first infer): the
    re-laid-out copy of a float32 weight is in the inference precision (bf16 / f16: half the
    bytes); a fused or transposed Constant beside it stays as the model has it."""
    full = c["ov_conv"] * w.conv + c["ov_conv_fused"] * w.conv_fused + c["ov_deconv"] * w.deconv
    saving = (1.0 - c["ov_conv_copy_lowp"]) * w.conv_f32 if precision != "f32" else 0.0
    return int(full - saving)


def fused_constant_bytes(w: OvWeights, c: Mapping[str, float]) -> int:
    """The Constants a Conv+BN/Mul fusion writes (the weights as stored, f32), part of
    ``conv_copy_bytes``. The fusion is one of compile's graph transformations, so it runs at
    ``compile_model`` even when dynamic shapes defer the Conv primitives (and their re-laid-out
    copies) to the first infer: 6 x Conv 512x512x3x3 + BN (54 MiB, symbolic batch) compile anon
    62.7 MiB against 8.4 without the BNs, the bf16 copies (+27) at infer 1 (2026-11-27)."""
    return int((c["ov_conv_fused"] - c["ov_conv"]) * w.conv_fused)


def deferred_bytes(w: OvWeights, c: Mapping[str, float], precision: str) -> int:
    """Weight bytes a dynamic-shape Conv/FC re-lays out at the first infer instead of at
    compile: the Conv copies (a Conv+BN fusion's Constant excepted: ``fused_constant_bytes``);
    at f32 the packed copy of FCs with a fused activation, at bf16 / f16 every FC's pack."""
    conv = conv_copy_bytes(w, c, precision) - fused_constant_bytes(w, c)
    if precision != "f32":
        return conv + int(c["ov_fc_lowp_packed"] * (w.fc + w.fc_kn_shared))
    return conv + int(c["ov_fc"] * w.fc_postop)


# Ops whose output size depends on the input's values, not its shape: what reads them is
# compiled with dynamic shapes even in a model whose inputs are all static.
DATA_DEPENDENT = frozenset({"NonZero", "NonMaxSuppression", "Unique", "Compress"})


def data_dependent_nodes(g: GraphInfo) -> set[int]:
    """Nodes downstream of a data-dependent size (``DATA_DEPENDENT``). The CPU plugin gives
    them dynamic shapes, so their Conv/FC primitives (and weight copies) are made at the first
    infer as in a dynamic model: [256, 2048] -> NonZero row pick -> 4 x (MatMul 2048^2 + Relu),
    64 MiB, bf16: compile anon 43.0 MiB, infer 1 83.0 (static rows: 75.0 / 83.1); f32 10.7 /
    84.8 (2026-11-27). Keypoint R-CNN's RoI heads (fc6 49 MiB, 8 x 9 MiB keypoint Convs)."""
    tainted: set[str] = set()
    late: set[int] = set()
    grew = True
    while grew:  # one pass on a topologically sorted graph, more on one that is not
        grew = False
        for i, node in enumerate(g.nodes):
            if i in late:
                continue
            if node.op_type in DATA_DEPENDENT or any(x in tainted for x in node.inputs if x):
                late.add(i)
                tainted.update(o for o in node.outputs if o)
                grew = True
    return late


def predict(
    view: ModelView,
    order: list[int],
    opts: Mapping[str, Any],
    sched: str,
    calibration: Mapping[str, float] | None = None,
) -> BackendPrediction:
    """Stage peaks for OpenVINO CPU: read_model, compile_model, run_1, steady_state."""
    c = dict(OV_CALIBRATION)
    c.update(calibration or {})
    g = view.graph
    w = weight_rules(view)
    precision, precision_from = inference_precision(opts)
    gone = fused_away(g)
    dynamic = is_dynamic(view, opts)
    # Dynamic shapes: no Snippets tokenization, element-wise ops stay plain Eltwise nodes
    # (BERT-base after ``all``: 78 Eltwise, 0 Subgraph in the runtime model).
    n_sub = 0 if dynamic else subgraph_count(g, gone)
    bufs = ov_buffers(
        g, order, dynamic and not batch_only_dynamic(view), precision, plain_eltwise=dynamic
    )
    half = precision != "f32"
    tail = precision_tail(g) if half else set()
    pos = positions(order)
    for b in ov_layout.layout_copies(
        g, order, pos, half, tail, KEEPS_LAYOUT, ALIAS_OPS, bufs, dynamic
    ):
        b.id = len(bufs)
        bufs.append(b)
    planners = all_planners(tensor_buffers(g, order), len(order))
    planners["ov_memory_solver"] = greedy_by_size(bufs)[0]
    from memshrink.estimate.ov_order import sync_steps  # ov_order imports this module

    syncs = sync_steps(g, positions(order)) if dynamic else []
    split = option_flag(opts, SPLIT_STATIC, False)
    planners["ov_nonoverlapping_sets"] = dynamic_plan(g, bufs, syncs, split)
    act = planners["ov_nonoverlapping_sets" if dynamic else "ov_memory_solver"]
    # The same plan without the graph outputs' own edges, for the ORT OpenVINO EP, which counts
    # its outputs itself (ORT's tensor, and OpenVINO's under dynamic dims: ``ep_output_copies``)
    inner = [b for b in bufs if not b.is_output]
    act_inner = dynamic_plan(g, inner, syncs, split) if dynamic else greedy_by_size(inner)[0]
    planned = dynamic_size_buffers(g, inner)[1] if split else inner
    events = block_events(planned, syncs) if dynamic else []
    # Weights stored in the .onnx are not structure (an embedded file's tensors can read as
    # external to onnx-ir, which maps them: go by how the file stores them).
    inside = view.weight_bytes if view.embedded else view.weight_bytes - view.external_weight_bytes
    structure = ov_read.proto_bytes(view.model_path, inside)
    graph_anon = ov_read.read_anon(g, c, structure)
    if precision == "f32":  # FCs without a post-op on MLAS: no oneDNN FC code (``ov_mlas``)
        from memshrink.estimate import ov_mlas  # ov_mlas imports this module

        lib = ov_mlas.f32_lib_pages(g, g, w.fc_postop, c)
    else:
        lib = lib_pages(g, c)
    read_lib = ov_read_pages.read_lib_pages(g, c)  # If / Loop bodies are translated too
    rd = Stage("read_model", overhead=graph_anon + read_lib)
    mapped = option_flag(opts, ENABLE_MMAP, True)
    if view.embedded:
        # 2x and nothing more: the graph's own anon is the external model's (the 9 MiB of
        # "parser state" once added here made every embedded read +5 to +50 % on 2026-11-27:
        # MobileNetV2 36.6 measured, SqueezeNet 17.8, ResNet-50 204.6, BERT-base 847.7).
        rd.weights_anon = 2 * w.kept
        rd.notes.append("embedded weights: ModelProto on the heap plus a Constant per tensor")
        kept_anon, kept_file = w.kept, 0
    elif mapped:
        rd.notes.append("external weights are memory-mapped by read_model")
        kept_anon, kept_file = w.inline, mapped_file_pages(w)
    else:
        # Measured (docs/optimize.md, "External data on OpenVINO"): read_model reads no
        # weight; compile and infer as the embedded model's, weights on the heap per tensor,
        # so the originals of folded weights are freed with the ov.Model.
        rd.notes.append("ENABLE_MMAP=NO: external weights are read into memory at compile")
        kept_anon, kept_file = w.kept, 0
    if not view.embedded and w.inline:
        # a file with external data that stores some weights inside (``TensorInfo.inline``):
        # those are read as an embedded file's (DLRM `all`, two 14.6 MiB tables inside:
        # read_model 67.2 measured)
        rd.weights_anon = 2 * w.inline
        rd.notes.append(
            "weights stored inside the .onnx: ModelProto on the heap plus a Constant per tensor"
        )
    conv_copies = conv_copy_bytes(w, c, precision)
    # Dynamic shapes: Conv primitives, and FCs with a fused activation, are made (and their
    # weights re-laid out) at the first infer, when the input shape is known. So are those of
    # a static model's nodes downstream of a data-dependent size (NonZero, NMS: a detector's
    # RoI heads), which the plugin compiles with dynamic shapes (``data_dependent_nodes``).
    late = set() if dynamic else data_dependent_nodes(g)
    if dynamic:
        deferred = deferred_bytes(w, c, precision)
    elif late:
        deferred = deferred_bytes(weight_rules(view, only=late), c, precision)
    else:
        deferred = 0
    fc_total = c["ov_fc"] * w.fc
    if precision != "f32":  # bf16 / f16: see ``ov_fc_lowp_transposed``
        kn = w.fc - w.fc_nk + w.fc_kn_shared
        packed = c["ov_fc_lowp_packed"] * (w.fc + w.fc_kn_shared)
        fc_total = c["ov_fc_lowp_transposed"] * kn + packed
    # A scale folded into an FC's weights: the fused Constant stays beside the packed copy.
    copies = int(fc_total + c["ov_fc"] * w.fc_fused + 2 * w.fp16) + conv_copies - deferred
    n_kernels, n_configs = conv_configs(g)
    # Library pages touched at the first infer: with any primitive made there (the deferred
    # Conv/FC copies), and in every dynamic graph at bf16 / f16 (element-wise, control flow:
    # If / Loop bodies too; int8 MatMulInteger FCs: ORT-quantized BERT 1.9 MiB). At f32 a
    # dynamic graph whose only kernels are FCs without a post-op makes them at compile: no
    # shift (4 x MatMul 1024^2 at f32: compile file 23.5, infer 1 24.2). At f32 the 6 MiB
    # shift is the Conv / FC (and MatMul) code made at the first infer; a dynamic graph without
    # Conv / FC moves only the element-wise share (session 12: Relu -> Sigmoid -> Add -> Mul on
    # [b, 64, 32, 32] at f32, file pages compile -> infer 1: native 51 -> 53 MiB, EP 59 -> 62).
    f32_fc_code = precision == "f32" and bool(
        ov_kinds.node_kinds(g) & (ov_kinds.CONV_KINDS | ov_kinds.FC_KINDS)
    )
    shift_key = "ov_deferred_lib_f32" if f32_fc_code else "ov_deferred_lib"
    at_infer = dynamic and (precision != "f32" or not n_kernels)
    lib_shift = int(c[shift_key]) if deferred or at_infer else 0
    n_mha = mha_count(g)
    mha_inner = mha_internal(g)
    n_plain = ov_plain.plain_nodes(g, mha_inner, mha_folded_transposes(g, mha_inner))
    # Not charged by default (session 13): right on micro-graphs and query pieces, but it takes
    # MobileViT (already over at compile) past 10 % in the stored sweeps; opt in with
    # ``--session-option memshrink.ov_plain_nodes=1`` (docs/estimate.md, "Session 13").
    plain_cost = c["ov_per_plain_node"] * n_plain if option_flag(opts, PLAIN_NODES, False) else 0
    # Dynamic shapes at bf16 / f16: kernels cost their node only at compile, and every other
    # float runtime node costs its executor (``ov_dyn_nodes``; session 14).
    dyn_half = dynamic and precision != "f32"
    per_kernel = c["ov_per_kernel_dyn" if dyn_half else "ov_per_kernel"]
    n_dyn = ov_dyn_nodes.dyn_nodes(g, gone | mha_inner)[0] if dyn_half else 0
    seq_dynamic = dynamic and not batch_only_dynamic(view)
    n_mha_dyn = mha_dynamic_count(g) if seq_dynamic else 0
    n_mha_wide = mha_wide_count(g, int(c["ov_mha_narrow_dim"]), seq_dynamic)
    # Dynamic shapes: the distinct configurations' JIT code is made with the primitives, at
    # the first infer (``ov_per_conv_config``).
    jit = int(c["ov_per_conv_config"] * n_configs)
    jit_shift = jit if dynamic else 0
    fixed = int(
        graph_anon  # the ov.Model is alive until compile_model returns
        + lib
        + c["ov_compile_anon"]
        - (c["ov_compile_anon_dyn_less"] if dyn_half else 0)
        + per_kernel * n_kernels
        + c["ov_per_dyn_node"] * n_dyn
        + jit
        + c["ov_per_subgraph"] * n_sub
        + c["ov_per_dyn_quant"] * dyn_quant_count(g)
        + c["ov_per_gather"] * ov_kinds.activation_gathers(g)
        + plain_cost
        + c["ov_per_mha_f32" if precision == "f32" else "ov_per_mha"]
        * (n_mha - n_mha_dyn - n_mha_wide)
        + c["ov_per_mha_wide_f32" if precision == "f32" else "ov_per_mha_wide"] * n_mha_wide
        + c["ov_per_mha_dyn_f32" if precision == "f32" else "ov_per_mha_dyn"] * n_mha_dyn
    )
    cm = Stage("compile_model", overhead=fixed - lib_shift - jit_shift)
    cm.weights_anon = kept_anon + copies
    cm.weights_file = kept_file
    cm.notes.append(
        "Conv/FC weights re-laid out into private copies (Conv+BN: fused Constant kept too); "
        "the external data file's weight pages are mapped (padding holes: half, see "
        "details.ov_weights file_bytes / file_alloc); assumes no f32 subnormals"
    )
    run = Stage(
        "steady_state",
        weights_anon=cm.weights_anon,
        weights_file=cm.weights_file,
        activations=act,
        overhead=int(fixed + c["ov_infer"]),
    )
    released = (w.released_bytes + w.released_alloc) // 2 if kept_file else 0
    if not option_flag(opts, RELEASE_FOLDED, True):
        released = 0
    if released:  # the folded weights' own file (``writer``): unmapped with the ov.Model
        run.weights_file -= min(released, run.weights_file)
        run.notes.append("the folded weights' data file is unmapped after compile_model")
    run.notes.append(
        "activations: dynamic input dims, one growing block per set of non-overlapping edges"
        if dynamic
        else "activations: ov::MemorySolver (greedy by size) over the fused graph"
    )
    if late and deferred:
        run.weights_anon += deferred
        run.notes.append(
            f"{len(late)} nodes after a data-dependent size (NonZero, NMS): their Conv/FC "
            "weights re-laid out at the first infer, as under dynamic shapes"
        )
    if dynamic:  # Conv primitives (and their weight reorders) are made at the first infer
        run.weights_anon += deferred
        run.notes.append(
            "dynamic shapes: Conv weights, and FC weights with a fused activation, "
            "re-laid out at the first infer"
            if precision == "f32"
            else "dynamic shapes, low precision: Conv weights re-laid out, and every FC's "
            "weights packed again (half their f32 bytes), at the first infer"
        )
    if dynamic:  # the first infer's small allocations reuse the dropped ov.Model's heap
        # ... and, with weights on the heap, its f16 Constants: the compiled model holds their
        # decompressed f32 copies, so the originals go with the ov.Model, and the deferred FC
        # packs land in their blocks. 4 x MatMul(x, Cast(W f16 1024^2)), embedded, symbolic
        # [B, S]: infer 1 72.8 MiB dynamic against 80.1 static, 8 MiB of f16 weights; timm
        # LeViT-fp16 embedded infer 1 117.7 (14.3 MiB f16; 131.6 predicted without this).
        # Measured 2026-11-27 (session 10), bf16 host.
        heap_f16 = w.fp16 if view.embedded or not mapped else 0
        graph_heap = c["ov_model_heap_reuse"] * graph_anon + heap_f16
        reuse = int(min(graph_heap, deferred + jit_shift))
        if reuse > 0:
            run.overhead -= reuse
            run.notes.append(
                f"{reuse / MiB:.1f} MiB of the first infer's allocations reuse the heap the "
                "ov.Model freed after compile_model"
            )
    # Embedded weights: a Conv+BN/Mul fusion makes a new Constant; the original heap Constant
    # belongs to the ov.Model, which the caller drops after compile_model (as the verifier
    # does): the run stages keep the fused Constant and its copy, 2x (zoo ResNet-50: compile
    # 337 MiB, infer 257; DenseNet-121 infer 156).
    # The same for an FC whose scale was folded (Whisper's q_proj: f32 infer 250.7 measured).
    # External data keeps its mapping: other Constants still point into the file (unless
    # ENABLE_MMAP=NO: then each tensor is its own heap buffer, as embedded).
    freed = w.conv_fused + w.fc_fused if view.embedded or not mapped else 0
    if freed:
        run.weights_anon -= freed
        run.notes.append("embedded Conv+BN / FC+scale: the original Constants go with the ov.Model")
    first = Stage("run_1", run.weights_anon, run.weights_file, act, run.overhead)
    if option_flag(opts, NATIVE_IO, True):
        ins, outs = io_bytes(g)
        held = 2 * outs if option_flag(opts, HOLD_OUTPUTS, True) else outs
        if not dynamic:  # the input tensors are made with the static graph
            cm.activations += ins
        feeds = feed_copies(g)
        first.activations += ins + outs + feeds
        run.activations += ins + held + feeds
        first.notes.append(
            "input tensors of the infer request, a heap copy of each feed under 32 MiB; "
            "one copy of each output"
        )
        run.notes.append(
            "input tensors and feed copies; the previous run's output copies beside the new ones"
        )
    assumptions = [
        "OpenVINO CPU plugin, 1 stream (LATENCY hint): Conv/FC + simple-op fusions, "
        "Conv+Sum in place, MemorySolver greedy by size",
        f"fused edges: {len(gone)}, Snippets subgraphs: {n_sub}, MHA subgraphs: {n_mha} "
        f"({n_mha_dyn} with a symbolic sequence, {n_mha_wide} static wider than "
        f"{int(c['ov_mha_narrow_dim'])}), "
        f"Conv/FC primitives: {n_kernels} ({n_configs} distinct)",
        f"inference precision {precision} ({precision_from}): "
        + (
            "Conv/FC weight copies and the float activations before the graph's f32 tail in it, "
            "half their f32 bytes; a [K, N] FC weight also transposed once per FC reading it"
            if precision != "f32"
            else "as the model"
        ),
    ]
    details = {
        "ov_weights": w.__dict__.copy(),
        "inference_precision": precision,
        "subgraphs": n_sub,
        "kernels": n_kernels,
        "kernel_configs": n_configs,
        "mha_subgraphs": n_mha,
        "mha_wide": n_mha_wide,
        "plain_nodes": n_plain,
        "dyn_nodes": n_dyn,
        "lib_pages": lib,
        "freed_after_compile": freed,
        "activations_without_outputs": act_inner,
        "workspace_block_events": events,
    }
    stages = [rd, cm, first, run]
    return BackendPrediction(
        "openvino", sched, order, stages, planners, split_weights(g), details, assumptions
    )
