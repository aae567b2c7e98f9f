"""ONNX Runtime CUDA EP: device memory per stage as the verifier measures it, and host memory.

Rules, from ``onnxruntime/core`` (1.31) and ORT's own arena log on an H200 (``docs/estimate.md``):

* Initializers are copied to the device one by one through the CUDA BFC arena
  (``session_state_utils.cc``: ``DeserializeTensorProto`` -> ``AllocateTensor`` with the arena
  allocator; the verbose log shows one arena request per weight, no reserved block). The arena
  grows by ``kNextPowerOfTwo`` regions (1 MiB first, doubling) and never shrinks; a free chunk is
  split only when it is at least twice the request. NVML counts every region in full, so the
  device figure is the arena's *reserved* bytes, not the bytes in use.
* A run copies the graph inputs into arena buffers, then allocates the planned activations in
  the same arena: ``ort.plan`` without its CPU fusion chains and CPU-kernel scratch. The CUDA
  ``FusedConv`` (Conv+Relu, Conv+Add+Relu, ``conv_activation_fusion.cc``) writes a new output
  while the residual input stays alive, unlike the CPU's NCHWc Sum that writes into it; an
  unfused Conv->Relu already runs in place. Measured: ResNet-50's steady state is predicted
  within 2 % this way and -50 % with the CPU chains. Graph outputs are copied to the host and
  released.
* Memory pattern (on by default): run 1 allocates tensor by tensor, later runs one block of the
  traced best-fit peak.
* cuDNN workspaces: none in the printed figure. Every request the EP's allocator saw, traced
  through an external allocator on an H200 (``docs/bench/cuda_alloc_trace.py``) for ResNet-50
  b16, U-Net, MobileNetV2 and BERT, originals and ``--passes all`` outputs, is an input, a
  planned buffer, a graph output or the pattern block, and replaying them through
  ``ort.BFCArena`` gives the measured regions. But cuDNN picks per size: a 3x3 conv of 64
  channels at 256x256 took 2.0x its output. So the range's top and passes' guards
  (``guard_options``) assume ``cuda_conv_workspace`` x each Conv's output.
* Fixed costs, calibrated once (``CUDA_CALIBRATION``): the verifier compares each stage with an
  empty session (its own process) at the same stage (``verify/gpu_delta.py``): ``session`` with
  the empty session's creation figure (context + EP, ``cuda_session``), each run with the empty
  session after its run, which adds what any first run loads (cuBLAS and cuDNN handles, lazily
  loaded kernels, ``cuda_first_run``). So neither fixed cost is in a stage figure: session
  creation is the weights' arena regions alone, a run the arena plus ``cuda_run_modules``.
* Host: CUDA/ORT libraries at session creation, the weights staged on the host while they are
  copied (embedded: the ModelProto, plus a staging buffer when it exceeds glibc's mmap
  threshold; external: a constant 128 MiB measured on six models of 64-474 MiB; both: the
  constant-folded results, computed on the CPU), then what a first run loads lazily: each
  kernel family's CUDA module once (all binary element-wise ops are one ~105 MiB module),
  cuBLAS per distinct GEMM shape, cuDNN per convolution configuration, and the cuDNN state of
  every Conv node (``host_libraries``); with cuDNN's EXHAUSTIVE algorithm search (ORT's
  default; ``memshrink.cuda_conv_algo_search`` says otherwise) the engines it tries for each
  depthwise 1x1 configuration, the one geometry where the search measurably costs more.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memshrink.errors import UsageError
from memshrink.estimate import ort as ortsim
from memshrink.estimate.cuda_loop import loop_events
from memshrink.estimate.graph import GraphInfo, ModelView
from memshrink.estimate.lifetimes import Buffer, tensor_buffers
from memshrink.estimate.planners import all_planners, best_fit
from memshrink.estimate.weights import split_weights

if TYPE_CHECKING:
    from memshrink.estimate.stages import BackendPrediction

MiB = 1 << 20
# Measured once on one NVIDIA H200, driver 580.159.04, onnxruntime-gpu 1.31.1 (CUDA 13, lazy
# module loading), with docs/bench/estimate_cuda_bench.py; see docs/estimate.md ("CUDA").
CUDA_CALIBRATION: dict[str, float] = {
    # Device (NVML per process).
    "cuda_session": 594 * MiB,  # context + EP after creating a session with no weights
    "cuda_first_run": 72 * MiB,  # what any first run adds (handles, kernels): in run baselines
    "cuda_run_modules": 2 * MiB,  # kernels of a real model beyond the empty session's
    # Outside the arena, once a convolution runs (cuDNN's engines on the device; session 14,
    # arena log vs NVML, H200): +11..13 MiB on five real exports (HF ResNet, an fp16 CNN,
    # Whisper's Conv1d encoder, EfficientNet-B0, U-Net), +3 on ResNet-50 and MobileNetV2
    "cuda_conv_device": 11 * MiB,
    # Outside the arena, per If / Loop / Scan node: what any first run adds again (the empty
    # session's 72 MiB): torch.cond's If +72, a Loop holding an If +144, FCOS's If +72 (+12
    # of convs) over the arena regions ORT's log reports (session 14, H200)
    "cuda_control_flow": 72 * MiB,
    # x a Conv's output: a cuDNN workspace from the arena at every run, where cuDNN picks an
    # algorithm that needs one (not in the printed figure; the range's top and passes' guards)
    "cuda_conv_workspace": 1.0,
    # Host (VmHWM over the child's baseline).
    "cuda_host_session": 276 * MiB,  # CUDA runtime + EP libraries at session creation
    "cuda_host_first_run": 1.5 * MiB,  # any first run (the smallest op measured: Slice 1.6)
    "cuda_host_cublas": 100 * MiB,  # cuBLAS/cuBLASLt once a GEMM runs (its first kernels) ...
    "cuda_host_cublas_shape": 5.7 * MiB,  # ... and per further distinct GEMM shape (kernels)
    "cuda_host_run": 60.8 * MiB,  # cuDNN and its engines once a first convolution runs ...
    "cuda_host_conv_bias": 50.4 * MiB,  # ... its bias addition (cudnnAddTensor), once ...
    "cuda_host_cudnn_config": 3.7 * MiB,  # ... per further convolution configuration (fit) ...
    "cuda_host_cudnn_grouped": 9.4 * MiB,  # ... per grouped (kernel, stride): other engines ...
    "cuda_host_conv_node": 0.87 * MiB,  # ... and per further Conv node (its cuDNN state)
    "cuda_host_search_dw1x1": 26 * MiB,  # EXHAUSTIVE search: per depthwise 1x1 configuration
    "cuda_host_cudnn_pool": 20 * MiB,  # cuDNN's pooling kernels (MaxPool 20.0, AveragePool 20.0)
    "cuda_host_family": 2.5 * MiB,  # a kernel family without a measured cost (median)
    "cuda_host_node": 3 * 1024,  # per node: ORT's kernel objects (3.1 KiB measured, 4,000 Adds)
    # per initializer (its TensorProto, OrtValue, NodeArg): 2,000 Adds of one shared scalar vs
    # 2,000 scalars, one each, +3.2 MiB at session creation, +2.8 at run 1 (H200, session 11)
    "cuda_host_initializer": 1.6 * 1024,
    "cuda_host_external_staging": 128 * MiB,  # external weights: transient anon while copying
    "cuda_host_embedded_retained": 0.25,  # x embedded weights: freed ModelProto heap kept
}
#: Estimator-only session option: how many seeded random weight orders ``device_range``
#: replays besides the file order (0 = none).
WEIGHT_ORDERS = "memshrink.cuda_weight_orders"
DEFAULT_WEIGHT_ORDERS = 8
#: Estimator-only session option: the ``cudnn_conv_algo_search`` provider option the session
#: will run with (``EXHAUSTIVE``, ORT's default; ``HEURISTIC``; ``DEFAULT``).
CONV_ALGO_SEARCH = "memshrink.cuda_conv_algo_search"
CONV_ALGO_SEARCHES = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")
#: Estimator-only session option: a cuDNN workspace of this many times each Conv's output,
#: taken from the arena at every run (default 0: none). Which algorithm cuDNN picks, and so
#: its workspace, depends on sizes the graph does not decide (traced on an H200: none for
#: ResNet-50 b16, U-Net, MobileNetV2 and ResNet's batch chunks; 2.0x the output for a 3x3 conv
#: of 64 channels at 256x256; ResNet's spatial bands grew the arena one region at run 2).
CONV_WORKSPACE = "memshrink.cuda_conv_workspace"


def guard_options() -> dict[str, str]:
    """Session options a pass's CUDA guard estimates with: the file's weight order only (a
    guard compares layouts, not ranges), and a workspace of ``cuda_conv_workspace`` x each
    Conv's output, so a rewrite is kept only if its GPU gain survives cuDNN picking algorithms
    with workspaces (ResNet-50 b16 spatial x4: 257 MiB predicted without, 513 with, measured
    513 at steady state)."""
    return {
        WEIGHT_ORDERS: "0",
        CONV_WORKSPACE: str(CUDA_CALIBRATION["cuda_conv_workspace"]),
    }


GEMM_OPS = frozenset({"MatMul", "Gemm", "Attention", "MultiHeadAttention"})
INT64 = 7
SMALL_INT64 = 64 << 10
GLIBC_MMAP_MAX = 32 * MiB  # DEFAULT_MMAP_THRESHOLD_MAX on 64-bit glibc
CONV_OPS = frozenset({"Conv", "ConvTranspose", "FusedConv"})
#: ORT CUDA kernels that call cuDNN (pooling and normalization through cuDNN descriptors).
CUDNN_OPS = CONV_OPS | frozenset(
    {
        "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool",
        "BatchNormalization", "LRN", "LSTM", "GRU", "RNN",
    }
)  # fmt: skip
POOL_OPS = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool"})
#: Kernel families of the ORT CUDA EP: the ops whose kernels are compiled into one CUDA module
#: (one ``.cu`` translation unit under ``onnxruntime/core/providers/cuda``). With lazy module
#: loading the first run loads a module, whole, the first time any of its kernels runs, so the
#: host cost is paid once per family, not per op or node (``docs/estimate.md``, "CUDA EP").
#: An op in no family is its own family.
KERNEL_FAMILIES: dict[str, frozenset[str]] = {
    # math/binary_elementwise_ops_impl.cu: every binary op, type and broadcast variant.
    "binary_elementwise": frozenset(
        {
            "Add",
            "Sub",
            "Mul",
            "Div",
            "Pow",
            "PRelu",
            "And",
            "Or",
            "Xor",
            "Mod",
            "Equal",
            "Greater",
            "Less",
            "GreaterOrEqual",
            "LessOrEqual",
            "BitShift",
        }
    ),
    # math/unary_elementwise_ops_impl.cu (Cast's Impl_Cast lives there too). IsNaN joins it
    # by measurement: Erf + IsNaN + Where cost what Erf + Cast + Where cost (21.0 / 21.2 MiB).
    "unary_elementwise": frozenset(
        {
            "Abs",
            "Neg",
            "Ceil",
            "Floor",
            "Reciprocal",
            "Sqrt",
            "Exp",
            "Log",
            "Erf",
            "Not",
            "Round",
            "Sin",
            "Cos",
            "Sign",
            "Cast",
            "IsNaN",
            "IsInf",
        }
    ),
    # activation/activations_impl.cu.
    "activations": frozenset(
        {
            "Relu",
            "Tanh",
            "Sigmoid",
            "Elu",
            "LeakyRelu",
            "Selu",
            "Softplus",
            "Softsign",
            "ThresholdedRelu",
            "HardSigmoid",
            "HardSwish",
            "Celu",
            "Gelu",
        }
    ),
    "softmax": frozenset({"Softmax", "LogSoftmax"}),  # math/softmax_impl.cu
    "layer_norm": frozenset({"LayerNormalization", "SimplifiedLayerNormalization"}),
    "reduction": frozenset(
        {
            "ReduceSum",
            "ReduceMean",
            "ReduceMax",
            "ReduceMin",
            "ReduceProd",
            "ReduceL1",
            "ReduceL2",
            "ReduceLogSum",
            "ReduceLogSumExp",
            "ReduceSumSquare",
            "ArgMax",
            "ArgMin",
        }
    ),
    "cublas": GEMM_OPS | frozenset({"FusedMatMul", "FusedGemm", "Einsum"}),
    "cudnn": CUDNN_OPS,
}
#: One-time host cost per family (MiB over the session, first run minus session creation,
#: minus the first run's own ``cuda_host_first_run``), measured on an H100 with one- and
#: two-node graphs over a 4x128x768 input (``docs/bench/cuda_host_op_sweep.json``,
#: ``cuda_host_op_combo.json``). cuBLAS and cuDNN are priced by their own rules below.
FAMILY_HOST_MIB: dict[str, float] = {
    "binary_elementwise": 105.0,  # any one of Add/Sub/Mul/Div/Pow/Equal: 104.0-105.3
    "unary_elementwise": 9.7,  # Erf 9.9, Sqrt 10.0, Cast 9.2; Erf + Sqrt + Cast 10.2
    "Where": 9.7,  # Add + Equal + Where 116.4, less Add (binary_elementwise)
    "softmax": 6.8,
    "activations": 2.6,  # Relu, Tanh
    "layer_norm": 2.5,
    "reduction": 2.1,  # ReduceMean over the last axis (ORT's own kernel, not cuDNN)
    "Transpose": 1.5,
    "Slice": 0.1,
    "Split": 1.7,
    "Concat": 3.4,
}
#: Ops that launch no kernel of their own (metadata or a plain copy): no module to load.
NO_KERNEL_OPS = frozenset(
    {
        "Shape", "Size", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Constant",
        "Dropout", "MemcpyFromHost", "MemcpyToHost",
    }
)  # fmt: skip
_FAMILY_OF = {op: fam for fam, ops in KERNEL_FAMILIES.items() for op in ops}


@dataclass
class DeviceModel:
    """Predicted CUDA arena state per stage (bytes)."""

    weights_reserved: int  # arena regions after all initializers are on the device
    run_1: int  # arena regions after the first run
    steady_state: int  # ... after the third run
    weights: int  # initializer bytes copied to the device
    regions: list[int] = field(default_factory=list)


def device_weights(g: GraphInfo) -> list[int]:
    """Bytes of each initializer the session copies to the device, in graph order.

    Constant-folded results are included, folding intermediates are not. Small int64 tensors
    are left out: the CUDA kernels take shape-like inputs (Reshape shape, Slice starts, axes)
    in CPU memory (``OrtMemTypeCPUInput``), so they stay on the host."""
    out = []
    for name in g.initializers:
        t = g.tensors[name]
        if not t.consumers or _cpu_input_only(g, name):
            continue
        nb = t.nbytes or 0
        if nb and not (t.elem_type == INT64 and nb <= SMALL_INT64):
            out.append(nb)
    return out


#: inputs the CUDA EP's control-flow kernels read in CPU memory (``OrtMemTypeCPUInput`` in
#: ``cuda/controlflow/loop.cc`` and ``if.cc``): Loop's trip count and condition, If's condition
CPU_INPUT_SLOTS: dict[str, tuple[int, ...]] = {"Loop": (0, 1), "If": (0,)}


def _cpu_input_only(g: GraphInfo, name: str) -> bool:
    """Whether every reader of ``name`` takes it in CPU memory: then ORT leaves it on the host
    (session 15: a Loop's trip count and condition made no arena request at session creation,
    where a 1-byte device copy would have taken a 1 MiB region)."""
    for c in g.tensors[name].consumers:
        node = g.nodes[c]
        slots = CPU_INPUT_SLOTS.get(node.op_type, ())
        if name in node.implicit_inputs or any(
            x == name and k not in slots for k, x in enumerate(node.inputs)
        ):
            return False
    return True


def device_inputs(g: GraphInfo) -> list[int]:
    """Bytes of each graph input a run copies from the host into the arena."""
    return [
        g.tensors[n].nbytes or 0
        for n in g.inputs
        if g.tensors[n].consumers and (g.tensors[n].nbytes or 0) > 0
    ]


def conv_workspace(g: GraphInfo, node_index: int, factor: float) -> int:
    """cuDNN workspace bytes a convolution would take from the arena while it runs: ``factor``
    x its output (``conv.cc``: ``GetScratchBuffer`` of the chosen algorithm's workspace)."""
    n = g.nodes[node_index]
    if factor <= 0 or n.op_type not in CONV_OPS or not n.outputs or not n.outputs[0]:
        return 0
    return int(factor * (g.tensors[n.outputs[0]].nbytes or 0))


def simulate_device(
    g: GraphInfo,
    plan: ortsim.OrtPlan,
    order: list[int],
    *,
    mem_pattern: bool = True,
    weight_seed: int | None = None,
    workspace: float = 0.0,
    weights_graph: GraphInfo | None = None,
) -> DeviceModel:
    """Replay the weights, then three runs, through one BFC arena; report its reserved bytes.

    Run 1 allocates each planned buffer in turn; with the memory pattern on, later runs take
    one block of the traced best-fit peak (graph outputs excluded), which needs a free chunk
    that large: after run 1 the arena is fragmented by the weights, so it often grows once
    more (ResNet-50: +128 MiB at run 2, measured). The arena also holds the weights, whose
    power-of-two slack absorbs small activations; NVML sees reserved regions, not pages.
    ``weight_seed``: copy the weights in that seeded random order instead of file order.
    ``workspace``: each Conv also takes that many times its output from the arena while it
    runs (``CONV_WORKSPACE``; none by default: what the traces of the suite's CNNs showed).
    """
    arena_ = ortsim.BFCArena()
    weights = device_weights(weights_graph or g)
    if weight_seed is not None:
        random.Random(weight_seed).shuffle(weights)
    for nb in weights:
        arena_.alloc(nb, touch=False)
    after_weights = arena_.reserved
    bufs = [b for b in plan.buffers if b.size and not b.scratch]  # CPU-kernel scratch only
    traced = [b for b in bufs if not b.is_output]
    block = best_fit(traced, ortsim.ALLOC_ALIGN)[0] if mem_pattern and traced else 0
    inputs = device_inputs(g)
    scratch = [conv_workspace(g, node, workspace) for node in order]
    by_start: dict[int, list[Buffer]] = {}
    by_end: dict[int, list[Buffer]] = {}
    for b in bufs:
        by_start.setdefault(b.start, []).append(b)
        by_end.setdefault(b.end, []).append(b)

    loops = {
        s: loop_events(g, g.nodes[i]) for s, i in enumerate(order) if g.nodes[i].op_type == "Loop"
    }

    def run(pattern: bool) -> None:
        held = [arena_.alloc(nb, touch=False) for nb in inputs]
        if pattern and block:
            held.append(arena_.alloc(block, touch=False))
        chunks: dict[int, Any] = {}
        for s in range(len(order)):
            if s in loops:  # the iterations' own requests; the Loop's outputs at their end
                _replay_loop(arena_, loops[s], by_start.get(s, []), chunks, pattern)
            for b in by_start.get(s, []) if s not in loops else []:
                if b.is_output or not pattern:  # planned tensors live in the pattern block
                    chunks[b.id] = arena_.alloc(b.size, touch=False)
            if ws := scratch[s]:
                arena_.free(arena_.alloc(ws, touch=False))
            for b in by_end.get(s, []):
                if b.id in chunks and not b.is_output:
                    arena_.free(chunks.pop(b.id))
        for c in [*chunks.values(), *held]:  # outputs copied to the host, then released
            arena_.free(c)

    run(False)
    run_1 = arena_.reserved
    run(mem_pattern)
    run(mem_pattern)
    return DeviceModel(after_weights, run_1, arena_.reserved, sum(weights), list(arena_.regions))


def run_graph(
    g: GraphInfo, order: list[int], sched: str, level: str
) -> tuple[GraphInfo, list[int]]:
    """The graph the CUDA EP runs and its order: ORT's level 1 and 2 transformers emulated
    (``ort_optimized.optimize(ep="cuda")``: Erf Gelu -> Gelu, Add + LayerNormalization ->
    SkipLayerNormalization, MatMul + bias -> Gemm, scaled MatMul -> FusedMatMul, Conv + Relu
    -> FusedConv, ...; no NCHWc), the order taken on the rewritten graph as ORT does.

    Why: the activations ORT plans are those of the rewritten graph. Session 14's traces showed
    the CUDA plan of the graph as written too large on transformers (Llama-GQA after ``all``:
    pattern block 19.6 MiB planned, 15.4 traced, run 3 predicted one 32 MiB region more than
    measured); with the rewrite the 81 stages of ``docs/bench/cuda_real14.json`` went from 70
    to 72 within 10 % (Llama ``all`` run 3 65 -> 33 MiB, measured 32; Whisper's encoder run 1
    172 -> 156, measured 154). An explicit ``file`` schedule keeps the graph as written."""
    from memshrink.estimate.ort_optimized import optimize
    from memshrink.estimate.schedule import schedule

    if level == "disable" or sched not in ("ort_default", "ort_priority"):
        return g, order
    gr = optimize(g, level=level, ep="cuda").graph
    return gr, schedule(gr, sched)


def _replay_loop(
    arena_: ortsim.BFCArena,
    events: list[Any],
    planned: list[Buffer],
    chunks: dict[int, Any],
    pattern: bool,
) -> None:
    """One Loop step: its iterations' requests (``cuda_loop.loop_events``) in place of the
    body's one transient block, the Loop's planned outputs where its iterations end."""
    live: dict[object, Any] = {}
    for kind, key, nb in events:
        if kind == "a":
            live[key] = arena_.alloc(nb, touch=False)
        elif kind == "f":
            arena_.free(live.pop(key))
        else:
            for b in planned:
                if not b.transient and (b.is_output or not pattern):
                    chunks[b.id] = arena_.alloc(b.size, touch=False)


CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})


def _all_nodes(g: GraphInfo) -> list[Any]:
    """Nodes of the graph and of every control-flow body in it, folded ones left out."""
    out = []
    for n in g.nodes:
        if n.index in g.folded:
            continue
        out.append(n)
        for sub in n.subgraphs:
            out += _all_nodes(sub)
    return out


def has_control_flow(g: GraphInfo) -> bool:
    """Whether an If / Loop / Scan runs: then the CUDA EP takes no memory-pattern block at run 2.

    Traced on the H200 (every request to the EP's allocator, session 14): torch.cond's If and
    a Loop holding an If request the same tensors one by one at run 2 as at run 1, where every
    model without control flow requests one block of run 1's planned peak; the arena log shows
    no growth after run 1 (steady state = run 1: 140 / 212 MiB measured, the block predicted
    +64 MiB more for the If)."""
    return any(n.op_type in CONTROL_FLOW_OPS for n in _all_nodes(g))


def run_device_extra(g: GraphInfo, *, all_branches: bool = False) -> int:
    """Device bytes a run adds outside the arena, over the empty session after its run.

    ``cuda_run_modules`` for any model (kernels the empty session did not load); once a
    convolution runs, ``cuda_conv_device`` (cuDNN's engines); per control-flow body that runs,
    ``cuda_control_flow``: a Loop's or Scan's body, and one branch per If (``all_branches``:
    both, the range's top: which branch runs is data). Why: ORT's verbose arena log against
    NVML on real exports and hand-made graphs (session 14, H200, ``docs/bench/cuda_real14.py
    traces``): transformers' NVML figure is the arena's regions + 1 MiB, convolution models'
    + 11..13; torch.cond's If + 74, two Ifs in a row + 147, a Loop + 76, FCOS (99 convs, one
    If) + 84, a Loop whose body holds an If that took one branch + 146, one whose If took both
    (iteration parity) + 222. Each body that runs repeats what the empty session's own first
    run adds (72 MiB); with the external allocator (no arena) it is gone after the run, so it
    is EP allocator memory the arena log does not report."""
    c = CUDA_CALIBRATION
    extra = c["cuda_run_modules"]
    if any(n.op_type in CONV_OPS for n in _all_nodes(g)):
        extra += c["cuda_conv_device"]
    return int(extra + c["cuda_control_flow"] * _bodies(g, all_branches))


def _bodies(g: GraphInfo, all_branches: bool) -> int:
    """Control-flow bodies that run: each Loop/Scan body, one branch per If (or both)."""
    out = 0
    for n in g.nodes:
        if n.index in g.folded or not n.subgraphs:
            continue
        inner = [_bodies(sub, all_branches) for sub in n.subgraphs]
        if n.op_type == "If" and not all_branches:
            out += 1 + max(inner, default=0)
        else:
            out += len(n.subgraphs) + sum(inner)
    return out


def empty_session(stage: str) -> int:
    """NVML bytes of the empty CUDA session at ``stage``, what the verifier subtracts there
    (``verify.gpu_delta.matched_baseline``): context + EP at session creation, plus what its
    first run loads (handles, kernels) at every run stage."""
    c = CUDA_CALIBRATION
    first = 0 if stage == "session_creation" else int(c["cuda_first_run"])
    return int(c["cuda_session"]) + first


def _stage_figures(dev: DeviceModel, modules: int) -> dict[str, int]:
    """GPU memory over the empty session at the same stage, as ``predict`` reports it: the
    arena alone at session creation (the empty session's creation figure holds the context and
    the EP, and no first-run state yet), the arena and what a run adds outside it
    (``run_device_extra``: ``modules``) after a run."""
    return {
        "session_creation": dev.weights_reserved,
        "run_1": dev.run_1 + modules,
        "steady_state": dev.steady_state + modules,
    }


def device_range(
    g: GraphInfo,
    plan: ortsim.OrtPlan,
    order: list[int],
    samples: int,
    *,
    mem_pattern: bool = True,
    file_order: DeviceModel | None = None,
    workspace: float = 0.0,
    weights_graph: GraphInfo | None = None,
) -> dict[str, tuple[int, int]]:
    """(lowest, highest) GPU figure per stage over the file order and ``samples`` seeded
    random weight orders.

    Why: ORT copies initializers in the iteration order of a hash map keyed by OrtValue index
    (``session_state_utils.cc``, ``SaveInitializedTensors``), whose hash is seeded per process,
    so every process packs the weights into the power-of-two regions differently. Measured on
    BERT b4x512 after ``--passes all`` (one file, 16 plain processes, H100 and H200): the arena
    reached its steady ~1 GiB at session creation in 3, in run 1 in 8, in run 2 in 5 (run 1
    516..520 MiB over the empty session); steady state 1028..1044 in all. Which stage grows the
    arena is that lottery; the steady state is stable. The file order is one draw of it (the
    point prediction: run 1 1027); this is the spread (run 1 514..1047).

    The top also holds two outcomes no weight order gives. cuDNN's workspace: the file order
    replayed with ``cuda_conv_workspace`` x each Conv's output (``CONV_WORKSPACE``; ResNet-50
    b16's spatial x4 measured 513 MiB at steady state, 257 predicted without). And run 1
    reaching the steady state: U-Net's run 1 measured 1,038..1,070 MiB in 3 of 4 processes on
    2026-11-27 (524..530 in the others) although its traced requests, replayed in 200 random
    weight orders, never grow past 545: where run 1's chunks land (addresses the replay does
    not know) can make it grow where run 2's pattern block does.
    """
    wg = weights_graph or g  # the graph as written (``g``: the one that runs, ``run_graph``)
    first = file_order or simulate_device(
        g, plan, order, mem_pattern=mem_pattern, workspace=workspace, weights_graph=wg
    )
    modules = run_device_extra(wg)
    seen = [_stage_figures(first, modules)]
    for seed in range(samples):
        dev = simulate_device(
            g, plan, order, mem_pattern=mem_pattern, weight_seed=seed, workspace=workspace,
            weights_graph=wg,
        )  # fmt: skip
        seen.append(_stage_figures(dev, modules))
    top = CUDA_CALIBRATION["cuda_conv_workspace"]
    if workspace < top and any(n.op_type in CONV_OPS for n in g.nodes):
        seen.append(
            _stage_figures(
                simulate_device(
                    g, plan, order, mem_pattern=mem_pattern, workspace=top, weights_graph=wg
                ),
                modules,
            )
        )
    out = {k: (min(s[k] for s in seen), max(s[k] for s in seen)) for k in seen[0]}
    out["run_1"] = (out["run_1"][0], max(out["run_1"][1], out["steady_state"][1]))
    # which If branches run is data: the top counts every branch's first-run cost
    branches = run_device_extra(wg, all_branches=True) - modules
    for k in ("run_1", "steady_state"):
        out[k] = (out[k][0], out[k][1] + branches)
    # Rare orders, sampled cheaply: the weights alone. The arena never shrinks, so a run holds
    # at least what its session reserved: a rare session outcome bounds every stage from above.
    rare = weight_only_range(device_weights(wg), samples)
    if rare is not None:
        lo, hi = out["session_creation"]
        out["session_creation"] = (min(lo, rare[0]), max(hi, rare[1]))
        for k in ("run_1", "steady_state"):
            out[k] = (out[k][0], max(out[k][1], rare[1] + modules))
    return out


#: Weight orders replayed without the runs (``weight_only_range``), and the most weight
#: allocations spent on them (a model of many small initializers gets fewer orders).
WEIGHT_ONLY_ORDERS, WEIGHT_ONLY_ALLOCS = 512, 20_000


def weight_only_range(weights: list[int], skip: int = 0) -> tuple[int, int] | None:
    """(lowest, highest) arena reserved after the weights alone, over up to
    ``WEIGHT_ONLY_ORDERS`` seeded random copy orders (seeds after the ``skip`` full samples).

    Why (BERT-base-ext, one file, three processes on the H200: session 514, 514 and 1,034 MiB;
    eight full samples 512..576): the outcome is decided by *when the largest weight comes*. The
    89 MiB word embedding needs one free chunk that large; copied after >= ~94 % of the other
    weights' bytes, no such chunk is left in the 256 MiB region and the arena adds a 512 MiB
    one (1 GiB reserved); copied after only 20..59 MiB, it opens the 256 MiB region early
    (576). In 3,000 uniform random orders: 1 GiB 104 times (3.5 %), 576 254 times, else
    512..553. Eight full samples see a 3.5 % outcome with 25 % odds; the weights alone replay
    fast (BERT's 97 weights x 206 orders: 0.04 s of CPU), so many more orders cost little; at
    most ``WEIGHT_ONLY_ALLOCS`` allocations in all (3,000 small weights: 6 orders, 0.6 s)."""
    if not weights or samples_budget(len(weights)) <= 0:
        return None
    seen = []
    for seed in range(skip, skip + samples_budget(len(weights))):
        ws = list(weights)
        random.Random(seed).shuffle(ws)
        arena_ = ortsim.BFCArena()
        for nb in ws:
            arena_.alloc(nb, touch=False)
        seen.append(arena_.reserved)
    return min(seen), max(seen)


def samples_budget(n_weights: int) -> int:
    """How many weight-only orders ``weight_only_range`` replays for ``n_weights`` weights."""
    return min(WEIGHT_ONLY_ORDERS, WEIGHT_ONLY_ALLOCS // max(n_weights, 1))


def _distinct(
    g: GraphInfo, ops: frozenset[str], skip: set[int] | frozenset[int] = frozenset()
) -> int:
    """Distinct (op, input shapes) configurations: each needs its own kernels (cuBLASLt
    heuristics), loaded lazily on first use."""
    seen = set()
    for n in g.nodes:
        if n.op_type in ops and n.index not in skip:
            seen.add((n.op_type, tuple(g.tensors[i].shape if i else None for i in n.inputs)))
    return len(seen)


def kernel_families(g: GraphInfo) -> dict[str, int]:
    """Kernel families (``KERNEL_FAMILIES``) the first run loads, with their node counts.

    Folded nodes run nothing; ops without a kernel (``NO_KERNEL_OPS``) load nothing; a 1x1
    convolution counts as a cuBLAS user too (cuDNN runs it as a GEMM: a 3x3 and a 1x1 Conv
    cost 114 MiB more than the 3x3 alone, what a first MatMul costs). No fusion is emulated:
    ORT 1.31's CUDA graph keeps ResNet's Conv, Add and Relu apart (its optimized model, dumped
    on an H200), and a Conv -> Add -> Relu loads the binary module like a lone Add.
    Control-flow bodies count with their node."""
    out: dict[str, int] = {}

    def visit(graph: GraphInfo) -> None:
        for n in graph.nodes:
            if n.index in graph.folded or n.op_type in NO_KERNEL_OPS:
                continue
            fam = _FAMILY_OF.get(n.op_type, n.op_type)
            out[fam] = out.get(fam, 0) + 1
            if fam == "cudnn" and _is_pointwise_conv(graph, n):
                out["cublas"] = out.get("cublas", 0) + 1
            for sub in n.subgraphs:
                visit(sub)

    visit(g)
    return out


def _grouped_geometries(g: GraphInfo, convs: list[Any]) -> set[tuple[Any, ...]]:
    """Distinct (kernel, strides) of grouped convolutions: cuDNN runs them with other engines
    (measured: a grouped 1x1 and a depthwise 5x5 each cost 9.4 MiB more than a plain 3x3)."""
    out = set()
    for n in convs:
        if int(n.attrs.get("group", 1)) > 1 and len(n.inputs) > 1 and n.inputs[1]:
            w = g.tensors[n.inputs[1]].shape
            out.add((tuple(w[2:]) if w else None, tuple(n.attrs.get("strides", ()))))
    return out


def _is_pointwise_conv(g: GraphInfo, n: Any) -> bool:
    """An ungrouped 1x1 stride-1 convolution, which cuDNN runs through GEMM kernels (a grouped
    1x1 measured like any grouped convolution: 122 MiB, not 227; a stride-2 1x1 alone 112-151
    MiB over six sizes, a stride-1 one 198-220: strided ones load no cuBLAS,
    ``docs/bench/cuda_conv_search_grid.json``)."""
    if n.op_type not in CONV_OPS or len(n.inputs) < 2 or not n.inputs[1]:
        return False
    if int(n.attrs.get("group", 1)) > 1:
        return False
    if any(int(st) != 1 for st in n.attrs.get("strides", ())):
        return False
    w = g.tensors[n.inputs[1]].shape
    return w is not None and len(w) > 2 and all(d == 1 for d in w[2:])


def _conv_key(g: GraphInfo, n: Any) -> tuple[Any, ...]:
    """A convolution configuration: op, weight shape, attributes other than the padding."""
    w = g.tensors[n.inputs[1]].shape if len(n.inputs) > 1 and n.inputs[1] else None
    return (n.op_type, w, tuple(sorted((k, repr(v)) for k, v in n.attrs.items() if k != "pads")))


def depthwise_pointwise_configs(g: GraphInfo) -> int:
    """Distinct depthwise 1x1 convolution configurations (one input channel per group, one
    output channel per group, 1x1 kernel): the ones cuDNN's EXHAUSTIVE search pays for.

    Measured (H200, ``docs/bench/cuda_conv_search.py``): a depthwise 1x1 alone costs the host
    25.0-30.5 MiB more with EXHAUSTIVE than with HEURISTIC at every size tried (10 processes:
    32-512 channels, 14-224 pixels, strides 1 and 2), and each further such configuration in
    one process +26 again; grouped 1x1s that are not depthwise (4, 8 or 32 groups) +0.9-1.6,
    every dense and depthwise kxk of ResNet-50, MobileNetV2 and U-Net within a few MiB."""
    seen = set()
    for n in g.nodes:
        if n.op_type != "Conv" or n.index in g.folded or len(n.inputs) < 2 or not n.inputs[1]:
            continue
        w = g.tensors[n.inputs[1]].shape
        grp = int(n.attrs.get("group", 1))
        if w is None or len(w) < 3:
            continue
        if grp > 1 and w[0] == grp and w[1] == 1 and all(d == 1 for d in w[2:]):
            seen.add(_conv_key(g, n))
    return len(seen)


def family_host(families: Mapping[str, int]) -> float:
    """One-time host bytes of the element-wise and other small families (not cuBLAS/cuDNN)."""
    c = CUDA_CALIBRATION
    return sum(
        FAMILY_HOST_MIB[f] * MiB if f in FAMILY_HOST_MIB else c["cuda_host_family"]
        for f in families
        if f not in ("cublas", "cudnn")
    )


def conv_configs(g: GraphInfo) -> int:
    """Distinct convolution configurations: op, weight shape and attributes other than the
    padding; not the input shape.

    Measured (H200, ``docs/bench/cuda_host_sweep.py``): 64 convolutions of 64 distinct input
    shapes and one weight shape cost the host what 64 of one shape cost (+4 %), and U-Net's
    spatial chunks (per-band pads, 19 -> 47 configurations counted with pads) added 34 MiB,
    what their extra nodes cost; so chunks of a convolution add nodes, not configurations."""
    return len({_conv_key(g, n) for n in g.nodes if n.op_type in CONV_OPS})


def host_libraries(g: GraphInfo, search: str = "EXHAUSTIVE") -> int:
    """Host bytes a first run adds for CUDA libraries and kernel modules (over session creation).

    Per kernel family, once (``kernel_families``): lazy CUDA module loading loads a family's
    module the first time any of its kernels runs (measured: any binary element-wise op ~105
    MiB, a second or a thousandth one nothing more; ``FAMILY_HOST_MIB``). cuBLAS once (a GEMM or
    a 1x1 convolution), then per further distinct GEMM shape. cuDNN once (a first convolution;
    pooling alone loads less), its bias addition once, then per further distinct convolution
    configuration and per Conv *node*: each ORT Conv kernel keeps its own cuDNN state (measured
    0.87 MiB a node, the same with ``cudnn_conv_algo_search=HEURISTIC``, so not the algorithm
    search). Why it matters: ``chunk`` repeats every Conv once per chunk (ResNet-50 b16: 53 ->
    848 nodes, host 715 -> 1376 MiB measured). ``search`` (``cudnn_conv_algo_search``):
    EXHAUSTIVE adds ``cuda_host_search_dw1x1`` per depthwise 1x1 configuration
    (``depthwise_pointwise_configs``); the other terms were measured with EXHAUSTIVE, and
    HEURISTIC matched them on ResNet-50 and MobileNetV2 (within 4 MiB)."""
    c = CUDA_CALIBRATION
    fams = kernel_families(g)
    if not fams:
        return 0
    libs = c["cuda_host_first_run"] + family_host(fams)
    if "cublas" in fams:
        n_gemm = _distinct(g, KERNEL_FAMILIES["cublas"] - CUDNN_OPS, g.folded)
        libs += c["cuda_host_cublas"] + c["cuda_host_cublas_shape"] * max(n_gemm - 1, 0)
    if "cudnn" in fams:
        convs = [n for n in g.nodes if n.op_type in CONV_OPS and n.index not in g.folded]
        # Pooling: +19.6 measured beside a Conv too. BatchNormalization, LRN and the RNNs alone
        # (not measured) are priced like pooling: cuDNN's non-convolution kernels.
        if any(n.op_type in POOL_OPS for n in g.nodes) or not convs:
            libs += c["cuda_host_cudnn_pool"]
        if convs:
            libs += c["cuda_host_run"] + c["cuda_host_cudnn_config"] * (conv_configs(g) - 1)
            libs += c["cuda_host_conv_node"] * (len(convs) - 1)
            if any(len(n.inputs) > 2 and n.inputs[2] for n in convs):
                libs += c["cuda_host_conv_bias"]
            libs += c["cuda_host_cudnn_grouped"] * len(_grouped_geometries(g, convs))
            if search.upper() == "EXHAUSTIVE":
                libs += c["cuda_host_search_dw1x1"] * depthwise_pointwise_configs(g)
    return int(libs)


def host_stages(view: ModelView, search: str = "EXHAUSTIVE") -> dict[str, int]:
    """Host RSS peak per stage over the child's baseline (bytes); ``search`` is the session's
    ``cudnn_conv_algo_search`` (``host_libraries``)."""
    g = view.graph
    c = CUDA_CALIBRATION
    sizes = device_weights(g)
    largest = max(sizes, default=0)
    folded = sum(
        g.tensors[n].nbytes or 0
        for n in g.initializers
        if g.tensors[n].folded and g.tensors[n].consumers
    )
    stored = view.weight_bytes
    if view.embedded:
        # The ModelProto's weights stay on the heap while the copies are made; a staging
        # buffer over glibc's largest mmap threshold (32 MiB) is a fresh mapping, smaller
        # ones reuse heap the runtime has already freed.
        staged = stored + folded + (largest if largest > GLIBC_MMAP_MAX else 0)
    elif stored:
        staged = int(c["cuda_host_external_staging"]) + folded
    else:  # no weights at all (measured: 64 and 512 Relus, 275 MiB, the bare libraries)
        staged = folded
    kernels = c["cuda_host_node"] * (len(g.nodes) - len(g.folded))
    kernels += c["cuda_host_initializer"] * sum(
        1 for n in g.initializers if g.tensors[n].consumers or not g.tensors[n].folded
    )
    session = int(c["cuda_host_session"] + kernels + staged)
    retained = c["cuda_host_embedded_retained"] * stored if view.embedded else 0
    run = int(c["cuda_host_session"] + kernels + host_libraries(g, search) + retained)
    return {"session_creation": session, "run_1": run, "steady_state": run}


def predict(
    view: ModelView, order: list[int], opts: Mapping[str, Any], sched: str
) -> BackendPrediction:
    """The CUDA backend's ``BackendPrediction`` (device figures as stage peaks)."""
    from memshrink.estimate.stages import BackendPrediction, Stage

    g = view.graph
    rules = ortsim.session_options_rules({k: str(v) for k, v in opts.items()})
    gr, order_r = run_graph(g, order, sched, str(rules["graph_optimization_level"]))
    plan = ortsim.plan(gr, order_r, reuse=bool(rules["enable_mem_reuse"]), fusions=False, cpu=False)
    workspace = float(opts.get(CONV_WORKSPACE, 0.0))
    pattern = bool(rules["enable_mem_pattern"]) and not has_control_flow(g)
    dev = simulate_device(
        gr, plan, order_r, mem_pattern=pattern, workspace=workspace, weights_graph=g
    )
    modules = run_device_extra(g)
    sc = Stage("session_creation", weights_anon=dev.weights_reserved)
    sc.notes.append(
        f"device: {dev.weights / MiB:.0f} MiB of initializers in arena regions of "
        f"{dev.weights_reserved / MiB:.0f} MiB (power-of-two growth), over the empty session "
        f"at creation ({empty_session('session_creation') / MiB:.0f} MiB: context + EP)"
    )
    r1 = Stage("run_1", dev.weights_reserved, 0, dev.run_1 - dev.weights_reserved, modules)
    r1.notes.append("device: inputs and planned activations in the same arena (reserved bytes)")
    ss = Stage("steady_state", dev.weights_reserved, 0, dev.steady_state - dev.weights_reserved)
    ss.overhead = modules
    ss.notes.append("device: run 3, planned tensors in one memory-pattern block from run 2 on")
    stages = [sc, r1, ss]
    samples = int(opts.get(WEIGHT_ORDERS, DEFAULT_WEIGHT_ORDERS))
    spread = (
        device_range(
            gr,
            plan,
            order_r,
            samples,
            mem_pattern=pattern,
            file_order=dev,
            workspace=workspace,
            weights_graph=g,
        )  # fmt: skip
        if samples > 0
        else {}
    )
    search = str(opts.get(CONV_ALGO_SEARCH, "EXHAUSTIVE")).upper()
    if search not in CONV_ALGO_SEARCHES:
        raise UsageError(
            f"{CONV_ALGO_SEARCH}={search!r}: expected one of {', '.join(CONV_ALGO_SEARCHES)}"
        )
    host = host_stages(view, search)
    for st in stages:
        if st.name in spread:
            lo, hi = spread[st.name]
            st.notes.append(
                f"device: {lo / MiB:.0f}..{hi / MiB:.0f} MiB over {samples} random weight "
                "orders (ORT's copy order differs per process)"
            )
        st.notes.append(f"host: {host[st.name] / MiB:.0f} MiB over the process baseline")
    bufs = tensor_buffers(g, order)
    planners = all_planners(bufs, len(order))
    planners["cuda_arena_run_1"] = dev.run_1 - dev.weights_reserved
    planners["cuda_arena_steady_state"] = dev.steady_state - dev.weights_reserved
    # one best-fit block of a run's planned buffers (outputs too) and its inputs: a smooth
    # figure (the arena's regions move in powers of two) that chunk ranks layouts by where ORT
    # CPU cannot run the model (transforms/chunk.ranks_by_cuda)
    run_bufs = [b for b in plan.buffers if b.size and not b.scratch]
    planners["cuda_plan_peak"] = sum(device_inputs(g)) + (
        best_fit(run_bufs, ortsim.ALLOC_ALIGN)[0] if run_bufs else 0
    )
    details = {
        "plan": plan,
        "device": {s.name: s.peak for s in stages},
        "device_range": spread,
        "device_absolute": {s.name: empty_session(s.name) + int(s.peak) for s in stages},
        "empty_session": {s.name: empty_session(s.name) for s in stages},
        "host": host,
        "arena_regions": dev.regions,
        "weights_on_device": dev.weights,
    }
    assumptions = [
        "ORT CUDA EP, default provider options (arena kNextPowerOfTwo, no gpu_mem_limit), "
        f"cudnn_conv_algo_search={search} ({CONV_ALGO_SEARCH}), lazy CUDA module loading",
        "device figures: NVML per-process memory over an empty CUDA session measured in its own "
        "process at the same stage (the verifier's method: session creation over its creation, "
        "runs over it after its run; details['empty_session']); absolute NVML figures in "
        "details['device_absolute']",
        "calibrated on one H200 with onnxruntime-gpu 1.31.1; other GPUs/drivers change the "
        "fixed costs",
        "weights copied to the device in file order; ORT's order is a per-process hash order, "
        f"so each stage may land anywhere in details['device_range'] ({samples} random orders)",
        f"ORT session options: {rules}",
    ]
    return BackendPrediction(
        "cuda", sched, order, stages, planners, split_weights(g), details, assumptions
    )
