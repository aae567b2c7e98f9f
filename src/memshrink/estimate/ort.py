"""ONNX Runtime CPU rules: its allocation plan, its BFC arena, and its memory pattern.

Read from ``onnxruntime/core/framework``:

* ``allocation_planner.cc`` — per output, in execution order: a graph output gets its own
  buffer; an ``Alias`` kernel output (Reshape, Squeeze, Unsqueeze, Flatten, Identity) shares its
  input's buffer; a ``MayInplace`` kernel output takes its input's buffer when that buffer has no
  other pending use and ``SameSize`` holds (same element size, identical ``TensorShapeProto``:
  equal ``dim_value`` or equal non-empty ``dim_param``); otherwise the most recently freed buffer
  with ``SameSize`` is reused (never for scalars, unknown shapes or strings); otherwise a new
  buffer. Graph inputs, weights and outputs are never freed, so never reused.
* ``bfc_arena.cc`` — requests rounded to 256 B; the smallest free chunk that fits is taken and
  split only if it is at least twice the request; when nothing fits a new region is reserved,
  the region size doubling (1 MiB first) until it holds the request. Regions are never returned.
  Only pages actually written count in RSS, so we track the bytes each region ever handed out.
* ``mem_pattern_planner.h`` / ``execution_frame.cc`` — run 1 traces the planned allocations
  (graph outputs excluded); from run 2 on, one block of the traced best-fit peak is taken from
  the arena. The arena's run-1 regions are all free by then but the block only reuses one of them
  if a single region is large enough; otherwise the arena grows again: that is why steady state is
  often about twice run 1 (``MEASURING.md``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memshrink.errors import UsageError
from memshrink.estimate.graph import GraphInfo, NodeInfo
from memshrink.estimate.lifetimes import ALIAS_OPS, Buffer, positions, subgraph_peak
from memshrink.estimate.ort_optimized import MS_DOMAIN, NCHWC_DOMAIN
from memshrink.estimate.ort_scratch import cpu_heap_scratch, cpu_kernel_scratch
from memshrink.estimate.planners import best_fit

# CPU kernels registered with MayInplace(0, 0).
MAY_INPLACE_OPS = frozenset(
    {
        "Relu",
        "LeakyRelu",
        "Sigmoid",
        "HardSigmoid",
        "Tanh",
        "Elu",
        "Selu",
        "Celu",
        "Softplus",
        "Softsign",
        "ThresholdedRelu",
        "Cast",
        "Clip",
        "Softmax",
        "LogSoftmax",
    }
)
# CUDA kernels registered with MayInplace(0, 0): the activations (``cuda/activation/
# activations.cc``, which has no Celu). The CUDA Softmax, LogSoftmax, Cast and Clip kernels lack
# it, so on the CUDA EP their output always takes a buffer of its own (session 15: an
# in-place Softmax planned for the CUDA EP hid the ``inplace`` pass's +16 MiB on an fp16 GPT-2).
CUDA_MAY_INPLACE_OPS = MAY_INPLACE_OPS - {"Celu", "Cast", "Clip", "Softmax", "LogSoftmax"}
ALLOC_ALIGN = 64  # kAllocAlignment
BFC_MIN = 256
BFC_INITIAL_REGION = 1 << 20
BFC_MAX_DEAD = 128 << 20


@dataclass
class OrtPlan:
    """Result of emulating the allocation planner: the buffers ORT really allocates."""

    buffers: list[Buffer]  # kAllocate / kAllocateOutput buffers, in allocation order
    reused: dict[str, str] = field(default_factory=dict)  # tensor -> tensor whose buffer it took
    kinds: dict[str, str] = field(
        default_factory=dict
    )  # tensor -> alias|inplace|freelist|new|output


def _same_size(g: GraphInfo, a: str, b: str) -> bool:
    ta, tb = g.tensors[a], g.tensors[b]
    if ta.elem_type == 8 or tb.elem_type == 8:  # strings never reuse
        return False
    if ta.itemsize is None or ta.itemsize != tb.itemsize:
        return False
    sa, sb = ta.sym_shape, tb.sym_shape
    if sa is None or sb is None or len(sa) != len(sb):
        return False
    for x, y in zip(sa, sb, strict=True):
        if isinstance(x, int) and isinstance(y, int) and x == y:
            continue
        if isinstance(x, str) and isinstance(y, str) and x and x == y and not _unnamed(x, g):
            continue
        return False
    return True


def _unnamed(dim: str, g: GraphInfo | None = None) -> bool:
    """A dim ONNX's shape inference named ``unk__N`` because it could not name it: ONNX
    Runtime's own inference leaves it without a ``dim_param``, and its planner never matches
    an empty dim (measured: ``Add -> Reshape(computed shape) -> Softmax`` at 48 MiB runs
    Softmax out of place, run 1 +110 MiB, where the shared ``unk__0`` predicted in place,
    +59; Whisper-base's encoder steady state 449 MiB measured, 287 predicted). Dims the model
    declares keep their names (``graph._keep_declared``); the ``inplace`` pass renames
    ``unk__N`` ones for this reason. An ``unk__N`` the file itself declares (``value_info``
    an earlier tool wrote, ``g.declared_unk``) is a ``dim_param`` ORT reads and propagates
    like any name: an SD-style U-Net's ``all`` output declares its [2, 4, 1024, 1024]
    attention scores ``[unk__42, 4, unk__31, unk__35]`` and ORT ran the Softmax in place
    (run 1 52 MiB measured, 81 predicted with the names dropped; docs/estimate.md, "Session
    12: declared unk__ dims")."""
    return dim.startswith("unk__") and (g is None or dim not in g.declared_unk)


CONV_FUSE_AFTER = frozenset(
    {"BatchNormalization", "Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "Tanh", "Add"}
)


def _fused_source(g: GraphInfo, node: NodeInfo, convish: set[str]) -> str | None:
    """The Conv(-chain) output this node is fused into by ORT's CPU graph optimizations:
    ``ConvBNFusion`` (BN folded into Conv weights), ``ConvActivationFusion`` and the NCHWc
    transformer's Conv+Add ("Sum") fusion. The fused chain writes one tensor."""
    if node.op_type not in CONV_FUSE_AFTER or node.domain not in ("", "ai.onnx"):
        return None
    cands = node.inputs[:2] if node.op_type == "Add" else node.inputs[:1]
    for name in cands:
        if not name or name not in convish:
            continue
        t = g.tensors[name]
        if t.is_output or len(t.consumers) != 1:
            continue
        if node.op_type == "BatchNormalization" and g.nodes[t.producer or 0].op_type != "Conv":
            continue
        if node.op_type == "Add":
            other = [n for n in node.inputs[:2] if n != name]
            ot = g.tensors.get(other[0]) if other else None
            if ot is None or ot.sym_shape != t.sym_shape:
                continue  # a bias-like broadcast Add is not the residual Sum fusion
        return name
    return None


def plan(
    g: GraphInfo,
    order: Sequence[int],
    *,
    reuse: bool = True,
    fusions: bool = True,
    cpu: bool = True,
) -> OrtPlan:
    """Emulate ``allocation_planner.cc`` for sequential execution on one device.

    With ``fusions`` (graph optimization level extended or all, the default), Conv followed by
    BatchNormalization / an activation / a residual Add is one fused kernel: the chain's
    intermediate tensors do not exist. ``cpu``: add the MLAS-side kernel temporaries of ORT's
    CPU kernels (``ort_scratch``; off for the CUDA EP's plan).
    """
    convish: set[str] = set()
    pos = positions(order)
    end_step = len(order) - 1
    # Use counts per tensor: consumers in the schedule (+1 for graph outputs: never freed).
    uses: dict[str, int] = {}
    for name, t in g.tensors.items():
        if t.kind != "activation":
            continue
        uses[name] = sum(1 for c in t.consumers if c in pos) + (1 if t.is_output else 0)
    owner: dict[str, str] = {}  # tensor -> original tensor owning the buffer
    buf_of: dict[str, Buffer] = {}  # original tensor -> its buffer
    count: dict[str, int] = {}  # original -> pending uses
    freelist: dict[tuple, list[str]] = {}  # SameSize key -> originals, last freed last
    result = OrtPlan(buffers=[])

    def new_buffer(name: str, step: int, idx: int) -> None:
        t = g.tensors[name]
        b = Buffer(len(result.buffers), t.nbytes or 0, step, step, [name], idx, t.is_output)
        result.buffers.append(b)
        buf_of[name] = b
        owner[name] = name
        count[name] = uses.get(name, 0)

    freed: set[str] = set()

    def release(orig: str, step: int) -> None:
        if orig in freed:
            return
        freed.add(orig)
        b = buf_of[orig]
        b.end = step
        if b.is_output:
            return
        key = _size_key(g, orig)
        if key is not None:
            freelist.setdefault(key, []).append(orig)

    def scratch(sizes: list[int], step: int, idx: int, *, heap: bool = False) -> None:
        """Kernel temporaries of node ``idx``: taken and given back within its step (from the
        arena, or with ``heap`` from glibc malloc)."""
        for size in sizes:
            result.buffers.append(
                Buffer(
                    len(result.buffers),
                    size,
                    step,
                    step,
                    [f"{g.nodes[idx].name}/scratch"],
                    idx,
                    transient=True,
                    scratch=True,
                    heap=heap,
                )
            )

    for step, idx in enumerate(order):
        node = g.nodes[idx]
        std = node.domain in ("", "ai.onnx")
        scratch(kernel_scratch(g, node), step, idx)
        for k, out in enumerate(node.outputs):
            if not out:
                continue
            t = g.tensors[out]
            inp = node.inputs[0] if node.inputs else ""
            if t.is_output:
                new_buffer(out, step, idx)
                result.kinds[out] = "output"
                continue
            src = _fused_source(g, node, convish) if fusions and k == 0 else None
            if src is not None and owner.get(src) in buf_of:
                orig = owner[src]
                owner[out] = orig
                count[orig] += uses.get(out, 0)
                buf_of[orig].tensors.append(out)
                result.reused[out] = src
                result.kinds[out] = "fused"
                convish.add(out)
                continue
            if std and k == 0 and node.op_type in ("Conv", "FusedConv") and out:
                convish.add(out)
            if std and k == 0 and node.op_type in ALIAS_OPS and inp:
                if inp not in owner or owner[inp] not in buf_of:
                    owner[out] = inp  # a view of a user input or a weight: no arena memory
                    result.kinds[out] = "alias"
                    continue
                orig = owner[inp]
                owner[out] = orig
                count[orig] += uses.get(out, 0)
                buf_of[orig].tensors.append(out)
                result.reused[out] = inp
                result.kinds[out] = "alias"
                continue
            src_in = _inplace_input(node, cpu) if reuse and k == 0 else None
            if src_in:
                cand = owner.get(src_in)
                if (
                    cand is not None
                    and cand in buf_of
                    and count.get(cand, 0) == 1
                    and not buf_of[cand].is_output
                    and _same_size(g, src_in, out)
                ):
                    owner[out] = cand
                    count[cand] += uses.get(out, 0)
                    buf_of[cand].tensors.append(out)
                    result.reused[out] = src_in
                    result.kinds[out] = "inplace"
                    continue
            key = _size_key(g, out) if reuse else None
            stack = freelist.get(key) if key is not None else None
            if stack:
                hit = stack.pop()
                freed.discard(hit)
                b = buf_of[hit]
                owner[out] = hit
                count[hit] = uses.get(out, 0)
                b.tensors.append(out)
                b.end = step
                result.reused[out] = hit
                result.kinds[out] = "freelist"
                continue
            new_buffer(out, step, idx)
            result.kinds[out] = "new"
        if cpu:  # MLAS temporaries: taken after the kernel's output (conv.cc, bias_gelu.cc)
            scratch(cpu_kernel_scratch(g, node), step, idx)
            scratch(cpu_heap_scratch(g, node), step, idx, heap=True)
        # Release at last use: one use per input occurrence; outputs nobody reads at once.
        for name in node.inputs + node.implicit_inputs:
            o = owner.get(name) if name else None
            if o is None or o not in buf_of:
                continue
            count[o] -= 1
            if count[o] == 0:
                release(o, step)
        for name in node.outputs:
            if not name:  # an omitted optional output ("" in the output list)
                continue
            o = owner.get(name)
            unused = uses.get(name, 0) == 0 and not g.tensors[name].is_output
            if o is not None and o in buf_of and count[o] == 0 and unused:
                release(o, step)
        if node.subgraphs:
            extra = subgraph_peak(node, shared_outputs=True)
            if extra:
                result.buffers.append(
                    Buffer(
                        len(result.buffers),
                        extra,
                        step,
                        step,
                        [f"{node.name}/body"],
                        idx,
                        transient=True,
                    )
                )
    for b in result.buffers:
        if b.is_output:
            b.end = end_step
    return result


def _inplace_input(node: NodeInfo, cpu: bool = True) -> str | None:
    """The input a kernel may overwrite with its output (``MayInplace(i, 0)``), if any:
    unary activations etc. (input 0); NCHWc Conv and FusedConv accumulate into their ``Sum``
    input (input 3, ``nchwc_ops.cc`` / ``fused_conv.cc``). ``cpu`` False: the CUDA EP's
    kernels (``CUDA_MAY_INPLACE_OPS``)."""
    ops = MAY_INPLACE_OPS if cpu else CUDA_MAY_INPLACE_OPS
    if node.domain in ("", "ai.onnx") and node.op_type in ops:
        return node.inputs[0] if node.inputs and node.inputs[0] else None
    if (node.op_type, node.domain) in (("Conv", NCHWC_DOMAIN), ("FusedConv", MS_DOMAIN)):
        return node.inputs[3] if len(node.inputs) > 3 and node.inputs[3] else None
    return None


def kernel_scratch(g: GraphInfo, node: NodeInfo) -> list[int]:
    """Temporaries a CPU kernel takes from the arena while it runs (not in the plan).

    ``Where`` (``where_op.cc``) materializes ``cond ? X : 0`` and ``!cond ? Y : 0`` as two
    tensors of the broadcast shape, then merges them into the output.

    ``ConvTranspose`` (``conv_transpose.cc``) takes one column buffer from the temp-space
    allocator (the arena) per call: ``C_out / group x prod(kernel)`` rows by the input's
    spatial size, floats, reused across groups and images. A 64 -> 32 channel 2x2 one on a
    256 x 256 input: 32 MiB, which run 1 writes into a region the planned buffers leave half
    untouched (ORT's verbose arena log: regions 32, 32, 64, 128 MiB, all written; run 1
    +274.8 MiB measured, 235.4 predicted without it).
    """
    std = node.domain in ("", "ai.onnx")
    if node.op_type == "Where" and std and node.outputs:
        t = g.tensors.get(node.outputs[0])
        if t is not None and t.nbytes:
            return [t.nbytes, t.nbytes]
    if node.op_type == "ConvTranspose" and std and len(node.inputs) > 1:
        x, w = g.tensors.get(node.inputs[0]), g.tensors.get(node.inputs[1])
        if x is None or w is None or not x.shape or not w.shape or len(w.shape) < 3:
            return []
        # W is [C_in, C_out / group, k...]: its row size is C_out / group x prod(kernel)
        size = 4 * math.prod(w.shape[1:]) * math.prod(x.shape[2:])
        return [size] if size > 0 else []
    return []


def _size_key(g: GraphInfo, name: str) -> tuple | None:
    """``SameSize`` as a hashable key: None when ORT would never reuse (unknown, scalar, string)."""
    t = g.tensors[name]
    s = t.sym_shape
    if t.elem_type == 8 or t.itemsize is None or not s:
        return None
    if any(
        d is None
        or (isinstance(d, int) and d < 0)
        or d == ""
        or (isinstance(d, str) and _unnamed(d, g))
        for d in s
    ):
        return None
    return (t.itemsize, s)


# --------------------------------------------------------------------------- BFC arena


@dataclass(eq=False)  # identity: ``chunks.index`` compared every field (3x slower replays)
class _Chunk:
    region: int
    offset: int
    size: int
    used: bool = False


class BFCArena:
    """Chunk-level emulation of ``bfc_arena.cc`` that also tracks the pages ever written."""

    def __init__(self, initial: int = BFC_INITIAL_REGION, max_dead: int = BFC_MAX_DEAD) -> None:
        self.next_region = initial
        self.max_dead = max_dead
        self.regions: list[int] = []
        self.chunks: list[_Chunk] = []  # all chunks, kept sorted by (region, offset)
        self.touched: list[list[tuple[int, int]]] = []  # per region: merged written ranges
        self.in_use = 0
        self.peak_in_use = 0

    @property
    def reserved(self) -> int:
        return sum(self.regions)

    @property
    def resident(self) -> int:
        return sum(self.region_resident())

    def region_resident(self) -> list[int]:
        """Bytes ever written, per region."""
        return [sum(hi - lo for lo, hi in ranges) for ranges in self.touched]

    def _extend(self, rounded: int) -> None:
        grew = False
        while rounded > self.next_region:
            self.next_region *= 2
            grew = True
        size = self.next_region
        self.regions.append(size)
        self.touched.append([])
        self.chunks.append(_Chunk(len(self.regions) - 1, 0, size))
        if not grew:
            self.next_region *= 2

    def alloc(self, nbytes: int, touch: bool = True) -> _Chunk:
        rounded = max(BFC_MIN, -(-nbytes // BFC_MIN) * BFC_MIN)
        best: _Chunk | None = None
        best_key = (0, 0, 0)
        for c in self.chunks:
            if not c.used and c.size >= rounded:
                key = (c.size, -c.region, c.offset)  # equal sizes: lowest address first
                if best is None or key < best_key:
                    best, best_key = c, key
        if best is None:
            self._extend(rounded)
            best = self.chunks[-1]
        if best.size >= 2 * rounded or best.size - rounded >= self.max_dead:
            rest = _Chunk(best.region, best.offset + rounded, best.size - rounded)
            best.size = rounded
            self.chunks.insert(self.chunks.index(best) + 1, rest)
        best.used = True
        if touch:
            self._touch(best.region, best.offset, best.offset + nbytes)
        self.in_use += best.size
        self.peak_in_use = max(self.peak_in_use, self.in_use)
        return best

    def touch(self, chunk: _Chunk, lo: int, hi: int) -> None:
        self._touch(chunk.region, chunk.offset + lo, chunk.offset + hi)

    def _touch(self, region: int, lo: int, hi: int) -> None:
        if hi <= lo:
            return
        ranges = self.touched[region]
        merged = []
        for a, b in ranges:
            if b < lo or a > hi:
                merged.append((a, b))
            else:
                lo, hi = min(lo, a), max(hi, b)
        merged.append((lo, hi))
        merged.sort()
        self.touched[region] = merged

    def free(self, chunk: _Chunk) -> None:
        chunk.used = False
        self.in_use -= chunk.size
        i = self.chunks.index(chunk)
        nxt = self.chunks[i + 1] if i + 1 < len(self.chunks) else None
        if nxt is not None and not nxt.used and nxt.region == chunk.region:
            chunk.size += nxt.size
            del self.chunks[i + 1]
        prv = self.chunks[i - 1] if i > 0 else None
        if prv is not None and not prv.used and prv.region == chunk.region:
            prv.size += chunk.size
            del self.chunks[i]


def _aligned(n: int) -> int:
    return -(-n // ALLOC_ALIGN) * ALLOC_ALIGN if n else 0


def pattern_block(plan_: OrtPlan) -> int:
    """The memory-pattern block: ORT's planner over run 1's traced allocations (every planned
    buffer but the graph outputs and kernel scratch, ``execution_frame.cc``)."""
    traced = [b for b in plan_.buffers if not b.is_output and b.size and not b.scratch]
    return best_fit(traced, ALLOC_ALIGN)[0]


@dataclass
class OrtRunModel:
    """Predicted activation memory of ONNX Runtime CPU, per stage (bytes)."""

    run_1: int  # arena pages written during run 1
    steady_state: int  # after run 2 (mem pattern block added)
    pattern_block: int  # size of the memory-pattern block
    arena_reserved: int  # bytes reserved by the arena (virtual; not all resident)
    live_peak: int  # peak of the planned buffers alive together (no arena effects)
    outputs: int  # graph outputs bytes (copied to numpy on return)
    assumptions: list[str]
    regions: list[int] = field(default_factory=list)  # arena region sizes, extension order
    touched_run_1: list[int] = field(default_factory=list)  # per region: bytes written, run 1
    touched: list[int] = field(default_factory=list)  # per region: bytes written, steady state
    heap_largest: int = 0  # the largest kernel malloc outside the arena (``Buffer.heap``)


def simulate(
    plan_: OrtPlan,
    n_steps: int,
    *,
    mem_pattern: bool = True,
    arena: bool = True,
    hold_outputs: bool = False,
    creation: Sequence[int] = (),
) -> OrtRunModel:
    """Replay three runs through the BFC arena and report the pages written.

    Run 1 allocates every planned buffer (and kernel scratch) from the arena. With the memory
    pattern on, run 1 traces the planned allocations and every later run takes one block of
    their best-fit peak from the arena (``execution_frame.cc``); the block lands in a free
    chunk only if one is large enough, which after run 1 it rarely is, so steady state is
    run 1 plus the block — measured on ResNet-50 b16 (117 -> 216 MiB, block 98), U-Net
    (385 -> 769, block 384; ORT's verbose arena log shows the 384 MiB request extending the
    arena in run 2) and multibranch (76 -> 151). With the pattern off, later runs repeat run 1
    in the warm arena: steady state = run 1 (measured 117/124, 385/385, 67/67).

    With ``hold_outputs`` the caller still holds the previous run's outputs
    while the next run executes (``out = sess.run(...)`` in a loop, and ``memshrink verify``):
    ORT 1.32 returns numpy arrays that wrap the outputs' arena chunks (zero copy), so those
    chunks are released only when the next run returns. On BERT b4x512 after ``chunk`` the
    held 6 MiB output splits run 1's 64 MiB region, the 63.5 MiB pattern block takes a new
    128 MiB region in run 2 and the 64 MiB region in run 3 (arena log): +192 MiB measured
    held (184 predicted), +125 released before each run (120). The estimator turns it on by
    default (``memshrink verify`` and ``out = sess.run(...)`` loops hold them).

    ``creation``: the arena allocations session creation makes and keeps (``creation_arena``:
    ConvTranspose's prepacked filters), replayed first. They set the region size the next
    extension starts from, and their regions' free tails take small run-time tensors (U-Net:
    two 8 MiB regions whose tails hold its 1 MiB output, arena log); their own pages are
    weights, so every figure here is the growth over the state they leave.
    """
    bufs = plan_.buffers
    outputs = sum(b.size for b in bufs if b.is_output)
    live = [0] * (n_steps + 1)
    for b in bufs:
        live[b.start] += b.size
        live[b.end + 1] -= b.size
    acc = peak = 0
    for s in range(n_steps):
        acc += live[s]
        peak = max(peak, acc)
    notes: list[str] = []
    block_size = pattern_block(plan_) if mem_pattern else 0
    if not arena:
        notes.append("arena off: every tensor is malloc'd and freed; RSS follows the live peak")
        return OrtRunModel(peak, peak, block_size, 0, peak, outputs, notes)
    by_start: dict[int, list[Buffer]] = {}
    by_end: dict[int, list[Buffer]] = {}
    for b in bufs:
        by_start.setdefault(b.start, []).append(b)
        by_end.setdefault(b.end, []).append(b)
    arena_ = BFCArena()

    held: list[_Chunk] = []  # the previous run's outputs, still referenced by the caller

    def run(pattern: bool) -> None:
        block = arena_.alloc(_aligned(block_size)) if pattern and block_size else None
        chunks: dict[int, _Chunk] = {}
        for s in range(n_steps):
            temps = []
            for b in by_start.get(s, []):
                if b.heap:  # glibc, outside the arena: on top of the pages written so far
                    if b.size:
                        heap_top[0] = max(heap_top[0], sum(grown()) + b.size)
                    continue
                if not b.size or (block is not None and not b.is_output and not b.scratch):
                    continue  # planned tensors live inside the pattern block
                c = arena_.alloc(_aligned(b.size))
                if b.scratch:
                    temps.append(c)
                else:
                    chunks[b.id] = c
            for c in temps:
                arena_.free(c)
            for b in by_end.get(s, []):
                if b.id in chunks and not b.is_output:
                    arena_.free(chunks.pop(b.id))
        if block is not None:
            arena_.free(block)
        # The returned numpy arrays wrap the outputs' arena chunks (zero copy): the caller's
        # ``out = sess.run(...)`` drops the previous run's arrays only when this run returns.
        for c in held:
            arena_.free(c)
        held[:] = list(chunks.values())
        if not hold_outputs:
            for c in held:
                arena_.free(c)
            held.clear()

    for size in creation:
        if size:
            arena_.alloc(_aligned(size))
    base = arena_.region_resident()

    def grown() -> list[int]:
        now = arena_.region_resident()
        return [t - (base[i] if i < len(base) else 0) for i, t in enumerate(now)]

    heap_top = [0]  # the highest arena pages + a kernel's own malloc, this run so far
    run(False)
    touched_1 = grown()
    run_1 = max(sum(touched_1), heap_top[0])
    heap_top[0] = 0
    run(mem_pattern)
    run(mem_pattern)
    touched = grown()
    heap_steady = max(0, heap_top[0] - sum(touched))
    notes.append(
        f"steady state: run 1's arena + the memory-pattern block ({block_size} B)"
        if mem_pattern
        else "memory pattern off: later runs repeat run 1 in the warm arena"
    )
    if hold_outputs:
        notes.append("the caller holds each run's outputs (zero copy) until the next run returns")
    if any(creation):
        notes.append(
            f"session creation's arena allocations replayed first ({len(creation)} kept chunks, "
            f"{sum(creation)} B: ConvTranspose's prepacked filters)"
        )
    if run_1 > sum(touched_1) or heap_steady:
        notes.append(
            "kernels' own mallocs (ScatterElements' index copy) on top of the arena: "
            f"run 1 +{(run_1 - sum(touched_1)) / 2**20:.1f} MiB, steady state "
            f"+{heap_steady / 2**20:.1f} MiB"
        )
    return OrtRunModel(
        run_1,
        sum(touched) + heap_steady,
        block_size,
        arena_.reserved,
        peak,
        outputs,
        notes,
        list(arena_.regions),
        touched_1,
        touched,
        max((b.size for b in bufs if b.heap), default=0),
    )


# Kernels whose ``PrePack`` takes its buffer from the kernel's own (arena) allocator: ORT's
# verbose arena log shows U-Net's ConvTranspose filters (8 and 2 MiB requests) extending the
# arena during session creation, while MatMul/Gemm packing (BERT, ResNet-50's FC) does not.
ARENA_PREPACK = {"ConvTranspose": 1}


def creation_arena(g: GraphInfo) -> list[int]:
    """Sizes of the arena chunks session creation allocates and keeps, in ORT's order (node
    index): one prepacked copy of each constant ConvTranspose filter (same bytes as the filter;
    once per initializer, as the arena log of U-Net shows)."""
    seen: set[str] = set()
    sizes: list[int] = []
    for node in g.nodes:
        pos = ARENA_PREPACK.get(node.op_type)
        if pos is None or node.domain not in ("", "ai.onnx") or len(node.inputs) <= pos:
            continue
        name = node.inputs[pos]
        t = g.tensors.get(name)
        if t is None or t.kind != "initializer" or name in seen:
            continue
        seen.add(name)
        sizes.append(t.nbytes or 0)
    return sizes


HOLD_OUTPUTS = "memshrink.hold_outputs"  # estimator-only key in ``session_options``
INT_RANGE = "memshrink.int_range"  # estimator-only: "LO,HI" of integer inputs (Gather ids)
# estimator-only: the glibc mode to predict for embedded weights ("pinned" | "consolidated" |
# "partly_pinned" | "copies_merged" | "address_classes"; default ``ort_weights.embedded_mode``);
# all are reported
GLIBC_MODE = "memshrink.glibc_mode"
GLIBC_MODES = ("pinned", "consolidated", "partly_pinned", "copies_merged", "address_classes")


def option_flag(opts: Mapping[str, Any] | None, key: str, default: bool) -> bool:
    """A boolean session option as users write it (``1``/``true``/``yes``/``on``; absent:
    ``default``), read the same way by every backend's rules."""
    v = (opts or {}).get(key)
    if v is None:
        return default
    return str(v).strip().lower() in ("1", "true", "yes", "on")


def session_options_rules(opts: Mapping[str, str]) -> dict[str, bool | str]:
    """Normalize the session options that change memory: order, pattern, arena, reuse, and
    the estimator-only ``memshrink.hold_outputs`` (default on: the caller keeps the previous
    run's outputs, as ``memshrink verify`` and an ``out = sess.run(...)`` loop do)."""

    def flag(key: str, default: bool) -> bool:
        return option_flag(opts, key, default)

    order = str(opts.get("execution_order", "DEFAULT")).upper()
    mode = str(opts.get(GLIBC_MODE, "")).strip().lower()
    if mode and mode not in GLIBC_MODES:
        raise UsageError(f"{GLIBC_MODE} must be one of {', '.join(GLIBC_MODES)}, not {mode!r}")
    return {
        "execution_order": "PRIORITY_BASED" if "PRIORITY" in order else "DEFAULT",
        "enable_mem_pattern": flag("enable_mem_pattern", True),
        "enable_cpu_mem_arena": flag("enable_cpu_mem_arena", True),
        "enable_mem_reuse": flag("enable_mem_reuse", True),
        # Not an ORT option: whether the caller keeps run N's outputs while run N+1 executes.
        "hold_outputs": flag(HOLD_OUTPUTS, True),
        "glibc_mode": mode,
        "fusions": _level(opts) in ("extended", "all"),
        "graph_optimization_level": _level(opts),
    }


def _level(opts: Mapping[str, str]) -> str:
    """``graph_optimization_level`` as ``disable`` | ``basic`` | ``extended`` | ``all``."""
    v = str(opts.get("graph_optimization_level", "ALL")).upper()
    if "DISABLE" in v or v == "0":
        return "disable"
    if "BASIC" in v or v == "1":
        return "basic"
    if "EXTENDED" in v or v == "2":
        return "extended"
    return "all"
