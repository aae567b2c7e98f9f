"""CPU kernel temporaries that ORT's MLAS-backed kernels take from the arena (ORT CPU only).

Why they matter even when small: the BFC arena hands a free chunk out whole unless it is at
least twice the request, so a 128 KiB temporary can decide whether the next tensor fits an
existing region or opens a new one, and with it where the memory-pattern block lands in run 2
(HuBERT after ``--passes all``: 5.7 MiB of steady-state growth measured, 2.2 predicted without
them; docs/estimate.md, "Session 11: kernel temporaries steer the arena").

* ``Conv`` / ``FusedConv`` on float (``conv.cc`` -> ``MlasConvPrepare``, ``convolve.cpp``):
  pointwise convolutions (stride 1, no padding, 1x1) and full-width single-channel kernels run
  as one GEMM with no buffer; when the filter count per group exceeds the output size the whole
  im2col matrix is expanded (``OutputSize x K`` floats); otherwise the N dimension is split
  over ``T`` threads, each with a ``MLAS_SGEMM_STRIDEN x MLAS_SGEMM_STRIDEK`` (128 x 128)
  float tile: ``T x 64 KiB``. ``T`` is ``1 + FilterCount x OutputSize x K / 65536`` capped by
  16 and by the intra-op pool, then trimmed by the 16-aligned N stride.
* ``BiasGelu`` / ``FastGelu`` with a bias (``bias_gelu.cc``): one temporary of the input's
  size (float); the fp16 kernels take two halves per element.
* ``LSTM`` / ``GRU`` / ``RNN`` / ``DynamicQuantizeLSTM``: the whole sequence's gate buffers
  (``ort_rnn``).
* ``Attention`` (opset 23/24, ``llm/attention.cc``, ``ApplyAttention``): the whole score
  matrix ``B x Nq x S x T`` in the input's type, then, while it is filled, a float copy of
  the mask: the mask's element count when it is bool (0/1 -> 0/-inf) or when ``is_causal``
  overlays it, ``S x T`` for ``is_causal`` without a mask (not for one query over a past).
  Measured 2026-11-27 (one Attention of [2, 4, 1024, 16], verifier child): run 1 +44 MiB
  without a mask (32 MiB of scores), +49 causal (+4), +53 with a bool [2, 1, 1024, 1024]
  mask (+8); predicted 12 without the rule (docs/estimate.md, "Session 13").

``cpu_heap_scratch``: temporaries a kernel mallocs itself (glibc, not the arena), so they add
to the peak of their step and leave nothing in the arena:

* ``ScatterElements`` / ``Scatter`` (``scatter.cc``, ``CopyScatterData``): a bounds-checked
  copy of the indices, ``std::vector<Tin>`` of the indices' element count: the indices'
  bytes. Measured at the GNN row's sizes (40000 x 64 int64 indices, 19.5 MiB): run 1 63.6 MiB
  against 42.6 predicted without it (docs/estimate.md, "Session 12: scatter graphs").
* ``GatherND`` / ``ScatterND`` (``gather_nd.cc``, ``scatter_nd.cc``, ``PrepareForCompute``):
  one ``uint64`` offset per slice, ``std::vector`` of ``prod(indices.shape[:-1])`` entries.
  Measured on a [4096, 1024] float (session 13): GatherND of 262,144 scalars (2 MiB of
  offsets) run 1 / steady 12.9 / 14.9 MiB against 11.9 / 11.9 predicted without it;
  ScatterND of 65,536 scalars (0.5 MiB) 27.0 / 27.5 against 26.9 / 26.9.
"""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path

from memshrink.estimate.graph import GraphInfo, NodeInfo
from memshrink.estimate.ort_optimized import MS_DOMAIN
from memshrink.estimate.ort_rnn import recurrent_scratch

SGEMM_STRIDE_N = 128  # MLAS_SGEMM_STRIDEN
SGEMM_STRIDE_K = 128  # MLAS_SGEMM_STRIDEK
TILE_FLOATS = SGEMM_STRIDE_N * SGEMM_STRIDE_K  # MLAS_CONV_WORKING_BUFFER_SIZE_PER_THREAD
THREAD_COMPLEXITY = 64 * 1024  # MLAS_SGEMM_THREAD_COMPLEXITY
MAX_THREADS = 16  # MLAS_MAXIMUM_THREAD_COUNT
STRIDE_N_ALIGN = 16  # MLAS_SGEMM_STRIDEN_THREAD_ALIGN
FLOAT = 1
FLOAT16 = 10
BOOL = 9


@functools.cache
def physical_cores() -> int:
    """ORT's default intra-op pool size: one thread per physical core this process may use
    (``GetNumPhysicalCpuCores``); SMT siblings share a core id."""
    try:
        cpus = os.sched_getaffinity(0)
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1
    cores = set()
    for c in cpus:
        topo = Path(f"/sys/devices/system/cpu/cpu{c}/topology")
        try:
            pkg = (topo / "physical_package_id").read_text().strip()
            core = (topo / "core_id").read_text().strip()
        except OSError:
            return max(1, len(cpus))
        cores.add((pkg, core))
    return max(1, len(cores))


def _conv_geometry(g: GraphInfo, node: NodeInfo) -> tuple[list[int], list[int], list[int]] | None:
    """(input spatial, kernel, output spatial) plus validity, or None when unknown."""
    x = g.tensors.get(node.inputs[0]) if node.inputs else None
    w = g.tensors.get(node.inputs[1]) if len(node.inputs) > 1 else None
    y = g.tensors.get(node.outputs[0]) if node.outputs else None
    if x is None or w is None or y is None or not x.shape or not w.shape or not y.shape:
        return None
    if len(x.shape) != len(w.shape) or len(y.shape) != len(x.shape) or len(x.shape) < 3:
        return None
    return list(x.shape), list(w.shape), list(y.shape)


def conv_working_bytes(g: GraphInfo, node: NodeInfo, threads: int) -> int:
    """Bytes of the working buffer ``Conv<float>`` takes per call (0: none)."""
    geo = _conv_geometry(g, node)
    if geo is None or g.tensors[node.inputs[0]].elem_type != FLOAT:
        return 0
    xs, ws, ys = geo
    dims = len(xs) - 2
    if not 1 <= dims <= 3:
        return 0
    group = int(node.attrs.get("group", 1) or 1)
    c_in = xs[1] // group
    filters = ws[0] // group
    kernel = ws[2:]
    out = ys[2:]
    k = c_in * math.prod(kernel)
    out_size = math.prod(out)
    strides = list(node.attrs.get("strides") or [1] * dims)
    dil = list(node.attrs.get("dilations") or [1] * dims)
    auto_pad = str(node.attrs.get("auto_pad", "NOTSET"))
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        padded = any(
            (o - 1) * s + (kk - 1) * d + 1 > i
            for o, s, kk, d, i in zip(out, strides, kernel, dil, xs[2:], strict=True)
        )
    else:
        padded = any(int(p) for p in (node.attrs.get("pads") or []))
    if all(s == 1 for s in strides) and not padded:
        if k == c_in:
            return 0  # pointwise: GEMM straight on the input
        spatial_in = ([1] + xs[2:]) if dims == 1 else xs[2:]
        kern = ([1] + kernel) if dims == 1 else kernel
        direct = kern[1] == spatial_in[1] or (kern[0] == spatial_in[0] and kern[1] == 1)
        if dims <= 2 and all(d == 1 for d in dil) and c_in == 1 and direct:
            return 0  # the kernel spans the whole row / column: GEMM direct
    if filters > out_size:
        return 4 * out_size * k
    complexity = filters * out_size * k
    t = (
        int(complexity / THREAD_COMPLEXITY) + 1
        if complexity < THREAD_COMPLEXITY * MAX_THREADS
        else MAX_THREADS
    )
    t = min(t, max(1, threads))
    stride_n = -(-out_size // t)
    if t > 1:
        stride_n = -(-stride_n // STRIDE_N_ALIGN) * STRIDE_N_ALIGN
        if stride_n >= out_size:
            t = 1
        elif stride_n * (t - 1) >= out_size:
            t -= 1
    return 4 * t * TILE_FLOATS


def bias_gelu_bytes(g: GraphInfo, node: NodeInfo) -> int:
    """Bytes of the temporary ``BiasGelu`` / ``FastGelu`` takes (0: none)."""
    x = g.tensors.get(node.inputs[0]) if node.inputs else None
    if x is None or not x.nbytes:
        return 0
    has_bias = len(node.inputs) > 1 and bool(node.inputs[1])
    if x.elem_type == FLOAT:
        return int(x.nbytes) if has_bias else 0
    if x.elem_type == FLOAT16 and (has_bias or node.op_type == "FastGelu"):
        return 2 * int(x.nbytes)
    return 0


def cpu_kernel_scratch(g: GraphInfo, node: NodeInfo, threads: int | None = None) -> list[int]:
    """The MLAS-side temporaries of one node on ORT CPU, in bytes."""
    std = node.domain in ("", "ai.onnx")
    if (node.op_type == "Conv" and std) or (
        node.op_type == "FusedConv" and node.domain == MS_DOMAIN
    ):
        size = conv_working_bytes(g, node, physical_cores() if threads is None else threads)
        return [size] if size else []
    if node.op_type in ("BiasGelu", "FastGelu") and node.domain == MS_DOMAIN:
        size = bias_gelu_bytes(g, node)
        return [size] if size else []
    if node.op_type == "Attention" and std:
        return [b for b in attention_bytes(g, node) if b]
    return recurrent_scratch(g, node)


def attention_bytes(g: GraphInfo, node: NodeInfo) -> tuple[int, int]:
    """(score matrix bytes, mask copy bytes) of the standard ``Attention`` op on ORT CPU;
    (0, 0) where a shape is unknown."""

    def shape(i: int) -> tuple[int, ...] | None:
        t = g.tensors.get(node.inputs[i]) if len(node.inputs) > i and node.inputs[i] else None
        return tuple(t.shape) if t is not None and t.shape else None

    q, k = shape(0), shape(1)
    qt = g.tensors.get(node.inputs[0]) if node.inputs else None
    if q is None or k is None or qt is None or len(q) != len(k) or len(q) not in (3, 4):
        return 0, 0
    item = 2 if qt.elem_type == FLOAT16 else 4
    if len(q) == 4:
        batch, heads, s_q, s_kv = q[0], q[1], q[2], k[2]
    else:
        batch, heads, s_q, s_kv = q[0], int(node.attrs.get("q_num_heads", 0)), q[1], k[1]
    past = shape(4)
    s_past = (past[2] if len(past) == 4 else past[1]) if past else 0
    total = s_past + s_kv
    probs = batch * heads * s_q * total * item
    causal = int(node.attrs.get("is_causal", 0)) == 1 and not (s_q == 1 and s_past > 0)
    mask, mt = shape(3), (g.tensors.get(node.inputs[3]) if len(node.inputs) > 3 else None)
    if mask is not None and mt is not None:
        copy = math.prod(mask) * item if (mt.elem_type == BOOL or causal) else 0
    else:
        copy = s_q * total * item if causal else 0
    return probs, copy


def cpu_heap_scratch(g: GraphInfo, node: NodeInfo) -> list[int]:
    """Bytes one node on ORT CPU mallocs outside the arena while it runs (module docstring)."""
    if node.op_type in ("ScatterElements", "Scatter") and node.domain in ("", "ai.onnx"):
        idx = g.tensors.get(node.inputs[1]) if len(node.inputs) > 1 else None
        return [int(idx.nbytes)] if idx is not None and idx.nbytes else []
    if node.op_type in ("GatherND", "ScatterND") and len(node.inputs) > 1:
        idx = g.tensors.get(node.inputs[1])
        if idx is None or not idx.shape:
            return []
        slices = math.prod(idx.shape[:-1])  # one uint64 offset per slice
        return [8 * slices] if slices else []
    return []
