"""Per-runtime rules turning the graph, its schedule and its weights into predicted stages.

Every stage figure is a *delta over the process baseline* (after importing the runtime and
building the inputs), at the stage's peak, split into weights (anon vs file-mapped),
activations and runtime overhead. The small fixed overheads in ``CALIBRATION`` were measured
once on this machine with ``docs/bench/estimate_measure.py`` (see ``docs/estimate.md``);
nothing is fitted per model.
"""

from __future__ import annotations

import dataclasses
import platform
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from memshrink.estimate import ort as ortsim
from memshrink.estimate import ort_fp16, ort_identity, ort_inline, ort_ml, ort_symdims
from memshrink.estimate.gather_pages import gather_pages
from memshrink.estimate.glibc_heap import CLASSES, GlibcHeap, hole_shares, request2size
from memshrink.estimate.graph import GraphInfo, ModelView, node_count
from memshrink.estimate.lifetimes import tensor_buffers
from memshrink.estimate.openvino import OV_CALIBRATION
from memshrink.estimate.ort_arena_off import arena_off_runs
from memshrink.estimate.ort_bf16 import bf16_unsupported
from memshrink.estimate.ort_bodies import BodyWeights, flatten_bodies
from memshrink.estimate.ort_generation import generation_loop
from memshrink.estimate.ort_heap import CreationBlocks
from memshrink.estimate.ort_optimized import optimize
from memshrink.estimate.ort_pattern import pattern_band
from memshrink.estimate.ort_weights import optimization_level, ort_cpu_weights
from memshrink.estimate.planners import all_planners
from memshrink.estimate.schedule import schedule as make_schedule
from memshrink.estimate.stages import BackendPrediction, Stage
from memshrink.estimate.weights import WeightSplit, split_weights

MiB = 1 << 20
# Fixed per-runtime overheads (bytes), measured once (docs/estimate.md, "Calibration").
CALIBRATION: dict[str, float] = {
    # ONNX Runtime CPU, default graph optimization level (ORT_ENABLE_ALL), x86-64.
    "ort_session_anon": 1.35 * MiB,  # session objects, kernel registry, thread pool
    "ort_session_anon_per_node": 3 * 1024,  # graph nodes, kernels, plan entries
    "ort_session_file": 8.5 * MiB,  # library pages first touched by session creation
    "ort_session_transient": 4 * MiB,
    "ort_run": 1 * MiB,  # per-run bookkeeping outside the arena
    # ORT CPU weights: rules in ort_weights.py; what glibc keeps of freed copies is replayed
    # (``glibc_heap``), no constant.
    # CUDA EP: ``cuda.CUDA_CALIBRATION`` (measured on a GPU).
}


def session_transient(g: GraphInfo, w: WeightSplit) -> int:
    """ORT's parse buffer for the .onnx file: a 4 MiB block whose pages only the file's bytes touch.

    Tiny models measured no transient at all (session peak = state after creation, 9.7-11.7 MiB
    over 41 exports and the suite's tiny models, against 4 MiB more predicted with a constant),
    so the block counts only up to the file's size: the embedded weights plus ~100 bytes a node.
    """
    embedded = max(0, w.total - w.external)
    return int(min(CALIBRATION["ort_session_transient"], embedded + 100 * len(g.nodes)))


def _ort_cpu(
    view: ModelView, order: list[int], opts: Mapping[str, Any], sched: str
) -> BackendPrediction:
    rules = ortsim.session_options_rules({k: str(v) for k, v in opts.items()})
    view = _ort_identity(view)
    stored_view = view
    stored = split_weights(view.graph)  # as the file holds them (the parse buffer reads these)
    view, order, inline_notes = _ort_inline(view, order)
    lost = ort_symdims.ort_view(view.graph)
    if lost is not None:
        view = dataclasses.replace(view, graph=lost)
        inline_notes.append(
            "named dims ORT's shape inference cannot carry (a Reshape to a shape computed "
            "through Slice, not declared in the file, and what follows it) are unnamed for "
            "buffer reuse (ort_symdims)"
        )
    view, order, fp16_notes = _ort_fp16(view, order, str(rules["graph_optimization_level"]))
    w = split_weights(view.graph) if fp16_notes else stored
    # weights read inside If / Loop / Scan / BeamSearch bodies (``ort_bodies``)
    wg, bodies = flatten_bodies(view.graph, embedded=view.embedded)
    if wg is not view.graph:
        stored = split_weights(flatten_bodies(stored_view.graph, embedded=view.embedded)[0])
        w = split_weights(wg)
    if fp16_notes and sched in ("ort_default", "ort_priority"):
        order = make_schedule(view.graph, sched)  # the Casts where ORT's own order puts them
    g, order, opt_notes = _ort_graph(view, order, sched, str(rules["graph_optimization_level"]))
    opt_notes = inline_notes + fp16_notes + opt_notes
    reuse = bool(rules["enable_mem_reuse"])
    pband = None
    if sched == "ort_default" and rules["enable_mem_pattern"]:
        pband = pattern_band(
            g, lambda o: ortsim.pattern_block(ortsim.plan(g, o, reuse=reuse, fusions=False))
        )
        if pband is not None and pband.high > pband.low:
            order = pband.orders[pband.blocks.index(pband.high)]  # the bound a process can hit
    plan = ortsim.plan(g, order, reuse=reuse, fusions=False)
    hold = bool(rules["hold_outputs"])
    creation = ortsim.creation_arena(g)
    sim = ortsim.simulate(
        plan,
        len(order),
        mem_pattern=bool(rules["enable_mem_pattern"]),
        arena=bool(rules["enable_cpu_mem_arena"]),
        hold_outputs=hold,
        creation=creation,
    )
    assumptions = [f"ORT session options: {rules}"] + opt_notes + sim.assumptions
    if pband is not None and pband.high > pband.low:
        assumptions.append(
            f"memory-pattern block by process: ORT numbers its {pband.hash_nodes} final "
            "ReorderOutput nodes in hash order, so DEFAULT's order among their branches changes "
            f"from process to process; {len(pband.orders)} distinct orders give "
            f"{pband.low / MiB:.1f}-{pband.high / MiB:.1f} MiB "
            f"({pband.share_at_least(pband.high):.0%} of them the largest); predicted: the largest"
        )
    c = {**CALIBRATION, "ort_session_transient": session_transient(view.graph, stored)}
    ww = ort_cpu_weights(
        wg,  # weight rules and their calibration read the graph as written
        w,
        embedded=view.embedded,
        calibration=c,
        level=optimization_level(opts.get("graph_optimization_level")),
        mode=str(rules["glibc_mode"]) or None,
        ort_graph=g if g is not view.graph else None,
    )
    assumptions += ww.assumptions
    if not rules["enable_cpu_mem_arena"]:
        # every tensor its own malloc: the runs replayed on the heap creation left (``ort_arena_off``)
        heaps = ww.rotation_heaps or ww.heaps.get(ww.mode, [])
        if heaps:
            pairs = [
                arena_off_runs(plan, len(order), _classed(h, k), hold_outputs=hold)
                for h in heaps
                for k in range(CLASSES)
            ]
            sim = dataclasses.replace(
                sim,
                run_1=sum(a for a, _ in pairs) // len(pairs),
                steady_state=sum(b for _, b in pairs) // len(pairs),
            )
            lo, hi = min(b for _, b in pairs), max(b for _, b in pairs)
            assumptions.append(
                "arena off: the runs' tensors replayed through glibc's heap as session creation "
                "left it (dynamic mmap threshold, aligned blocks' spares): a tensor mmapped in "
                "run 1 comes from the heap top in later runs and its hole is not reused; "
                f"steady state {lo / MiB:.1f}-{hi / MiB:.1f} MiB of heap by the heap start's "
                "address class (a per-process coin), predicted: their mean"
            )
    # ai.onnx.ml forests: the kernels' parsed trees (attributes, not initializers; ort_ml.py)
    trees = ort_ml.tree_ensemble_bytes(view.graph)
    if trees:
        assumptions.append(
            f"tree ensembles: {trees / MiB:.1f} MiB of ORT's parsed trees "
            f"({ort_ml.TREE_BYTES_PER_NODE} B a node, {ort_ml.TREE_BYTES_PER_LEAF_ENTRY} B a "
            "leaf entry), from session creation on"
        )
    ovh = int(
        c["ort_session_anon"]
        + c["ort_session_anon_per_node"] * node_count(view.graph)
        + c["ort_session_file"]
        + trees
        + view.metadata_bytes
    )
    if view.metadata_bytes >= MiB // 8:
        assumptions.append(
            f"the file's node metadata and doc strings: {view.metadata_bytes / MiB:.1f} MiB "
            "ORT keeps from session creation on (ort_metadata)"
        )
    sc = Stage(
        "session_creation",
        weights_anon=ww.creation_anon,
        overhead=int(ovh + c["ort_session_transient"]),
        notes=list(ww.notes),
    )
    retained_anon, run_file = ww.retained_anon, ww.run_file
    tables = {n for n, k in w.names.items() if k == "gather"} if not view.embedded else set()
    gp = gather_pages(view.graph, tables, _int_range(opts.get(ortsim.INT_RANGE)))
    if gp.touched:
        run_file += gp.touched
        assumptions.append(
            f"Gather reads {len(gp.tables)} mapped table(s) in place: {gp.touched / MiB:.1f} MiB "
            "of file pages touched by the runs (64 KiB fault-around windows"
            + (
                "; ids from graph inputs assumed uniform random over "
                + (
                    f"[{opts[ortsim.INT_RANGE]})"
                    if opts.get(ortsim.INT_RANGE) is not None
                    else "the whole table, as `memshrink verify` feeds them: real text "
                    "touches less; set memshrink.int_range=LO,HI otherwise)"
                )
                if gp.random_ids
                else ")"
            )
        )
    glibc_band: dict[str, tuple[int, int]] = {}
    replays: dict[str, list[dict[str, int]]] = {}  # embedded: each replayed heap's stage peaks
    if view.embedded:
        # the arena's regions placed on each heap the glibc modes leave (``glibc_heap``)
        heap_acts = {m: [_arena_in_glibc_holes(sim, h) for h in hs] for m, hs in ww.heaps.items()}
        mode_acts = {
            m: (sum(a for a, _ in v) // len(v), sum(b for _, b in v) // len(v))
            for m, v in heap_acts.items()
        }
        acts = mode_acts[ww.mode]
    else:
        acts = _arena_after_holes(sim, ww.blocks)
    if acts != (sim.run_1, sim.steady_state):
        assumptions.append(
            "arena regions placed in freed weight-copy holes of the heap (glibc best fit) add "
            f"no RSS: run 1 {(sim.run_1 - acts[0]) / MiB:.1f} MiB, steady state "
            f"{(sim.steady_state - acts[1]) / MiB:.1f} MiB of arena pages credited"
        )
    # The outputs' numpy copies are not added: measured on GPT-2 (external data, 24.5 MiB of
    # logits) run 1 grew by the arena alone (+39.4 MiB, arena 38.4): the copies land in heap
    # that session creation freed.
    # BeamSearch / GreedySearch: the decoder's step loop in the arena (``ort_generation``)
    gen = generation_loop(view.graph, view.model_path, opts)
    assumptions += gen.notes
    stages = [sc]
    for name, act in (("run_1", acts[0]), ("steady_state", acts[1])):
        st = Stage(
            name,
            weights_anon=retained_anon,
            weights_file=run_file,
            activations=act,
            overhead=int(ovh + c["ort_run"] + gen.touched),
        )
        if gen.touched:
            st.notes.append(
                f"generation step loop: {gen.touched / MiB:.1f} MiB of arena pages "
                f"({gen.steps} decoder steps), counted in the overhead"
            )
        stages.append(st)
    if view.embedded:
        fixed = {s.name: s.peak - s.weights_anon - s.activations for s in stages}
        for m, (retained, created) in ww.modes.items():
            sc.modes[m] = fixed["session_creation"] + created
            for j, st in enumerate(stages[1:]):
                st.modes[m] = fixed[st.name] + retained + mode_acts[m][j]
        # every replayed heap's stage peaks: the band a process can land in
        band: dict[str, list[int]] = {s.name: [] for s in stages}
        for m, pairs in ww.per_heap.items():
            for (kept, made), placed in zip(pairs, heap_acts[m], strict=True):
                one = {sc.name: fixed[sc.name] + made}
                for j, st in enumerate(stages[1:]):
                    one[st.name] = fixed[st.name] + kept + placed[j]
                replays.setdefault(m, []).append(one)
                for k, v in one.items():
                    band[k].append(v)
        glibc_band = {k: (min(v), max(v)) for k, v in band.items()}
        assumptions.append(
            "stage peaks per glibc mode (embedded weights, at random per process): "
            + "; ".join(
                f"{m}: "
                + ", ".join(f"{s.name} {s.modes[m] / MiB:.1f}" for s in stages)
                + (" MiB (predicted)" if m == ww.mode else " MiB")
                for m in ww.modes
            )
        )
    stages[-2].notes.append("run 1: arena regions grown by the BFC allocator (pages written)")
    stages[-1].notes.append("steady state: run 1's regions + the memory-pattern block")
    bufs = tensor_buffers(g, order)
    planners = all_planners(bufs, len(order))
    planners["ort_plan_live"] = sim.live_peak
    planners["ort_run_1"] = sim.run_1
    planners["ort_steady_state"] = sim.steady_state
    planners["ort_mem_pattern_block"] = sim.pattern_block
    if rules["enable_mem_pattern"]:
        off = ortsim.simulate(
            plan, len(order), mem_pattern=False, hold_outputs=hold, creation=creation
        )
        planners["ort_steady_state_mem_pattern_off"] = off.steady_state
    if rules["enable_cpu_mem_arena"]:
        planners["ort_arena_off"] = ortsim.simulate(plan, len(order), arena=False).steady_state
    kinds: dict[str, int] = {}
    for k in plan.kinds.values():
        kinds[k] = kinds.get(k, 0) + 1
    details: dict[str, Any] = {
        "plan_kinds": kinds,
        "pattern_band": None
        if pband is None
        else {"low": pband.low, "high": pband.high, "blocks": sorted(pband.blocks)},
        "arena_reserved": sim.arena_reserved,
        "plan": plan,
        "ort_weights": {"nchwc_block": ww.nchwc_block, **ww.classes},
    }
    missing = bf16_unsupported(view.graph)
    if missing:  # no session at all: say so above the numbers (``ort_bf16``)
        details["ort_cpu_refuses"] = missing
    if ww.per_rotation:
        # external weights: each rotation's heap is one a process can have (the arena's
        # regions placed on it); the prediction is their mean, the band their extremes
        fixed = {s.name: s.peak - s.weights_anon - s.activations for s in stages}
        rot: dict[str, list[int]] = {s.name: [] for s in stages}
        for (kept, made), h in zip(ww.per_rotation, ww.rotation_heaps, strict=True):
            placed = _arena_in_glibc_holes(sim, h)
            rot[sc.name].append(fixed[sc.name] + made)
            for j, st in enumerate(stages[1:]):
                rot[st.name].append(fixed[st.name] + kept + placed[j])
        glibc_band = {k: (min(v), max(v)) for k, v in rot.items()}
        if glibc_band[sc.name][1] - glibc_band[sc.name][0] >= MiB:
            assumptions.append(
                "external weights: glibc's address coin (the four replayed rotations) puts a "
                "process anywhere in "
                + ", ".join(
                    f"{k} {lo / MiB:.1f}-{hi / MiB:.1f}" for k, (lo, hi) in glibc_band.items()
                )
                + " MiB; predicted: their mean"
            )
    if ww.modes:  # embedded weights: what each glibc mode retains / peaks at (anon bytes)
        details["glibc_modes"] = {
            m: {
                "retained": r,
                "creation": c,
                "predicted": m == ww.mode,
                "replays": len(ww.per_heap[m]),  # partly_pinned: the mean over seeded replays
            }
            for m, (r, c) in ww.modes.items()
        }
    if bodies.embedded or bodies.external_packed:
        glibc_band = _add_body_weights(
            stages, glibc_band, bodies, retained_anon + bodies.extra_anon, assumptions
        )
    if glibc_band:  # stage -> (lowest, highest) peak over the replays
        details["glibc_band"] = glibc_band
    if replays:  # mode -> each replayed heap's stage peaks (the band's members)
        details["glibc_replays"] = replays
    return BackendPrediction(
        "ort", sched, order, stages, planners, stored, details, assumptions, graph=g
    )


def _add_body_weights(
    stages: list[Stage],
    band: dict[str, tuple[int, int]],
    bodies: BodyWeights,
    retained: int,
    assumptions: list[str],
) -> dict[str, tuple[int, int]]:
    """A body's own initializers beyond a main-graph weight's cost (``ort_bodies``): embedded,
    two more anon copies; external and prepacked, the mapped pages stay resident."""
    anon, file = bodies.extra_anon, bodies.external_packed
    for st in stages:
        st.weights_anon += anon
        st.weights_file += file
        st.modes = {m: v + anon + file for m, v in st.modes.items()}
    # the packing's transient counted those mapped sources already (they never go)
    sc = stages[0]
    sc.weights_anon = max(retained, sc.weights_anon - file)
    assumptions.append(
        f"weights declared inside bodies (If / Loop / Scan / BeamSearch decoder): "
        f"{bodies.embedded / MiB:.2f} MiB embedded cost {anon / MiB:.2f} MiB more anon (the "
        f"subgraph's copies), {file / MiB:.2f} MiB external prepacked stay mapped"
    )
    return {k: (lo + anon + file, hi + anon + file) for k, (lo, hi) in band.items()}


def _classed(heap: GlibcHeap, k: int) -> GlibcHeap:
    """A copy of ``heap`` whose aligned blocks keep the trailing spare their address gives, for
    heap start class ``k`` (``glibc_heap.trailing_spare``: the runs' blocks are carved one after
    another from the top, so a process's class decides which of them pin)."""
    h = heap.clone()
    h.base = 16 * k
    return h


def _int_range(value: Any) -> tuple[int, int] | None:
    """``memshrink.int_range`` ("LO,HI" or a pair) as a tuple; None when unset."""
    if value is None:
        return None
    lo, hi = (value.split(",") if isinstance(value, str) else value)[:2]
    return int(lo), int(hi)


def _arena_after_holes(sim: ortsim.OrtRunModel, blocks: CreationBlocks) -> tuple[int, int]:
    """Run-1 and steady-state arena pages, less those of regions glibc serves from the holes
    session creation left: those pages are resident already. Weighted by the share of the
    replayed heaps (``glibc_heap.hole_shares``) where a region fits a hole."""
    if not sim.regions:
        return sim.run_1, sim.steady_state
    return _credit(sim, hole_shares(blocks, sim.regions))


def _arena_in_glibc_holes(sim: ortsim.OrtRunModel, heap: GlibcHeap) -> tuple[int, int]:
    """``_arena_after_holes`` on a heap ``glibc_heap`` replayed (embedded weights' modes); the
    heap is copied, not changed."""
    if not sim.regions:
        run_1, steady = sim.run_1, sim.steady_state
    else:
        h = heap.clone()
        run_1, steady = _credit(sim, [h.place(r) == "hole" for r in sim.regions])
    if sim.heap_largest and _heap_hole_fits(heap, sim.heap_largest):
        # kernels' own mallocs (GatherND's offsets, ScatterElements' index copy) below the
        # threshold session creation lifted are served from a freed weight copy's hole: no RSS
        run_1 -= max(0, sim.run_1 - sum(sim.touched_run_1))
        steady -= max(0, sim.steady_state - sum(sim.touched))
    return max(0, run_1), max(0, steady)


def _heap_hole_fits(heap: GlibcHeap, n: int) -> bool:
    """Whether glibc would serve ``malloc(n)`` from a free chunk below the top of ``heap``."""
    need = request2size(n)
    return need < heap.threshold and heap.holes > 0 and heap.largest_hole >= need


def _credit(sim: ortsim.OrtRunModel, in_hole: Sequence[float]) -> tuple[int, int]:
    """Run 1 and steady state less the touched pages of the regions in holes (``in_hole``: per
    region, True / False or the share of replayed heaps where it fits one)."""
    n1 = len(sim.touched_run_1)
    run_1 = sim.run_1 - sum(t * h for t, h in zip(sim.touched_run_1, in_hole[:n1], strict=True))
    steady = sim.steady_state - sum(t * h for t, h in zip(sim.touched, in_hole, strict=True))
    return int(run_1), int(steady)


def _ort_identity(view: ModelView) -> ModelView:
    """The graph with ORT's ``EliminateIdentity`` applied to weights (``ort_identity``)."""
    g = ort_identity.eliminate(view.graph)
    return view if g is None else dataclasses.replace(view, graph=g)


def _ort_inline(view: ModelView, order: list[int]) -> tuple[ModelView, list[int], list[str]]:
    """Function ops without a CPU kernel for their types, replaced by their bodies
    (``ort_inline``), as the session does at load."""
    done = ort_inline.inline(view.graph, order)
    if done is None:
        return view, order, []
    g, order = done
    before = Counter(n.op_type for n in view.graph.nodes)
    after = Counter(n.op_type for n in g.nodes)
    gone = {op: before[op] - after[op] for op in ort_inline.INLINED if before[op] > after[op]}
    note = "function ops ORT CPU has no kernel for, inlined at load as their ONNX bodies: " + (
        ", ".join(f"{op} x{k}" for op, k in gone.items())
    )
    return dataclasses.replace(view, graph=g), order, [note]


def _ort_fp16(
    view: ModelView, order: list[int], level: str = "all"
) -> tuple[ModelView, list[int], list[str]]:
    """An fp16 model as ORT CPU runs it on x86-64 (``ort_fp16``): its fp16 compute regions in
    f32, with Casts at the graph's inputs and outputs; at level ``all`` f32 copies of the fp16
    weights made at session creation, below it a Cast of each weight at every run. The Casts
    of the inputs run first, those of the outputs last, a weight's just before its first
    reader in ``order``."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return view, order, []
    g = ort_fp16.lower(view.graph, fuse_weights=level == "all")
    if g is None:
        return view, order, []
    n = len(view.graph.nodes)
    new = range(n, len(g.nodes))
    first = [i for i in new if g.nodes[i].inputs[0] in g.inputs]
    last = [i for i in new if g.nodes[i].outputs[0] in g.outputs]
    weights = [i for i in new if g.nodes[i].inputs[0] in g.initializers]
    inner = [i for i in new if i not in first and i not in last and i not in weights]
    order = list(order)
    for i in inner:  # a Cast between an fp16 node and an f32 one: right after its producer
        p = g.tensors[g.nodes[i].inputs[0]].producer
        order.insert(order.index(p) + 1 if p in order else len(order), i)
    for i in weights:
        readers = g.tensors[g.nodes[i].outputs[0]].consumers
        at = min((order.index(c) for c in readers if c in order), default=len(order))
        order.insert(at, i)
    cast = sum(g.tensors[t].nbytes or 0 for t in g.fp16_cast)
    notes = [
        "ORT CPU has no fp16 kernel for most ops on x86-64: those nodes (and fp16 data movement "
        "between them alone) run in f32 "
        f"(InsertCastTransformer: {len(first)} input / {len(inner)} inner / {len(last)} output "
        "Casts; "
        + (
            f"{len(g.fp16_cast)} fp16 weights converted to {cast / MiB:.1f} MiB of f32 copies)"
            if level == "all"
            else f"below ORT_ENABLE_ALL {len(weights)} fp16 weights cast to f32 at every run)"
        )
    ]
    return dataclasses.replace(view, graph=g), first + order + last, notes


def _ort_graph(
    view: ModelView, order: list[int], sched: str, level: str
) -> tuple[GraphInfo, list[int], list[str]]:
    """The graph ORT CPU runs at this optimization level and its order (``ort_optimized``);
    an explicit ``file``/``openvino`` schedule is kept on the graph as written."""
    if level == "disable" or sched not in ("ort_default", "ort_priority"):
        return view.graph, order, ["graph as written (no ORT graph optimizations emulated)"]
    opt = optimize(view.graph, level=level)
    notes = [
        f"ORT graph optimizations emulated (level {level}, NCHWc block {opt.block} from this "
        f"host's CPU flags): {opt.counts}; order taken on the rewritten graph"
    ]
    return opt.graph, make_schedule(opt.graph, sched), notes


def _openvino(
    view: ModelView, order: list[int], opts: Mapping[str, Any], sched: str
) -> BackendPrediction:
    """OpenVINO CPU: the rules and their constants live in ``estimate/openvino.py``."""
    from memshrink.estimate import openvino

    ov_keys = {k: v for k, v in CALIBRATION.items() if k.startswith("ov_")}
    return openvino.predict(view, order, opts, sched, calibration=ov_keys)


def _cuda(
    view: ModelView, order: list[int], opts: Mapping[str, Any], sched: str
) -> BackendPrediction:
    from memshrink.estimate.cuda import predict

    return predict(view, order, opts, sched)


def _ort_openvino(
    view: ModelView, order: list[int], opts: Mapping[str, Any], sched: str
) -> BackendPrediction:
    """ORT's OpenVINO EP: native OpenVINO's rules plus ORT's copies (``ort_openvino.py``)."""
    from memshrink.estimate.ort_openvino import predict

    return predict(view, order, opts, sched)


PREDICTORS = {
    "ort": _ort_cpu,
    "openvino": _openvino,
    "cuda": _cuda,
    "ort-openvino": _ort_openvino,
}
DEFAULT_SCHEDULE = {
    "ort": "ort_default",
    "openvino": "openvino",
    "cuda": "ort_default",
    "ort-openvino": "openvino",
}
# The verifier's backend names (``memshrink verify --backends``) accepted by ``estimate`` too.
BACKEND_ALIASES = {"cpu": "ort"}

_ORT_VERIFY_STAGES = {"session_creation": "session", "run_1": "run1", "steady_state": "run3"}
VERIFY_STAGES: dict[str, dict[str, str]] = {
    "cpu": _ORT_VERIFY_STAGES,
    "ort-openvino": _ORT_VERIFY_STAGES,
    "cuda": _ORT_VERIFY_STAGES,
    "openvino": {
        "read_model": "read",
        "compile_model": "compile",
        "run_1": "infer1",
        "steady_state": "infer3",
    },
}
"""Each estimated stage -> the stage ``verify`` measures for it, per verifier backend name.

Benches and tests compare a prediction with a measurement stage by stage; the two sides name
stages differently (the estimator after the runtime's API, the verifier's child after what it
times: ``verify/child.py``), so the pairing lives here once instead of in every script. Every
ORT-based backend (CPU, the OpenVINO EP, CUDA) runs in the verifier's ORT child, hence one map.
``steady_state`` is the last of ``verify``'s default three runs; with ``runs=N`` it is
``runN`` / ``inferN``. Checked against both sides by ``tests/estimate/test_estimate_verify_stages.py``.
"""

CALIBRATION.update(OV_CALIBRATION)
