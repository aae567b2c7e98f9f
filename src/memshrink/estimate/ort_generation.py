"""ONNX Runtime CPU: the step loop of ``com.microsoft`` BeamSearch / GreedySearch / Sampling.

These kernels run their GPT-style ``decoder`` body once per generated token
(``contrib_ops/cpu/transformers/beam_search_impl_gpt.h``, ``greedy_search_impl_gpt.h``): the
first step on the prompt (``[B*beams, S]`` ids, empty past), then one token a step with the
past growing by one. Every step's feeds (ids, positions, mask), the body's own tensors and its
fetches (logits, ``present_i``) come from the session's CPU arena; after a step the previous
past is released, BeamSearch copies the presents it keeps into new past buffers
(``PickGptPastState``), and the logits are released. The arena never sees the same sizes
twice, so freed chunks rarely fit the next, larger request: it grows with the sequence.

The body is planned here at the step's shapes (``build_view`` on the body, ORT's planner
``ort.plan``; sizes between two planned steps interpolated linearly: a decoder's tensors are
affine in the past length) and the loop replayed through the BFC arena emulation
(``ort.BFCArena``); its pages written are the run's extra memory.

The loop's length and the beams are *values* of graph inputs (``max_length``, ``num_beams``):
the graph cannot say them; the estimator-only session option ``memshrink.generation``
(``max_length=32,num_beams=4``) gives them, as ``memshrink verify``'s ``--int-range`` feeds.
Without it the loop is not modelled and the assumptions say so.

Measured (docs/estimate.md, "Session 13: weights inside bodies", the step loop): a 2-layer
GPT-2 decoder (4 heads x 16, vocabulary 500), batch 2, prompt 6, max_length 8..128, 1 / 4 / 8 beams: run 1's
anon growth 0.14..11.0 MiB, this replay 0.6-0.8x of it (ORT extends its arena earlier than the
replay: ml 128, one beam, a 111,616-byte request takes a 2 MiB region at step ~103).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import onnx

from memshrink.estimate import ort as ortsim
from memshrink.estimate.graph import GraphInfo, build_view
from memshrink.estimate.schedule import schedule as make_schedule

GENERATION_OPS = frozenset({"BeamSearch", "GreedySearch", "Sampling"})
OPTION = "memshrink.generation"  # estimator-only: "max_length=N,num_beams=K"


@dataclasses.dataclass
class GenerationLoop:
    """The replayed step loop: arena pages written, regions reserved, decoder steps."""

    touched: int = 0
    reserved: int = 0
    steps: int = 0
    notes: list[str] = dataclasses.field(default_factory=list)


def parse_option(value: Any) -> dict[str, int]:
    """``"max_length=32,num_beams=4"`` (or a mapping) -> {"max_length": 32, "num_beams": 4}."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(k): int(v) for k, v in value.items()}
    out: dict[str, int] = {}
    for part in str(value).split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k.strip()] = int(v)
    return out


def generation_nodes(g: GraphInfo) -> list[int]:
    """Indices of GPT-style generation nodes (``model_type`` 0) with a ``decoder`` body."""
    return [
        i
        for i, n in enumerate(g.nodes)
        if n.op_type in GENERATION_OPS
        and n.domain == "com.microsoft"
        and int(n.attrs.get("model_type", 0)) == 0
        and n.subgraphs
    ]


def generation_loop(
    g: GraphInfo, model_path: str | None, opts: Mapping[str, Any]
) -> GenerationLoop:
    """The arena growth of every generation node's step loop (0 when none, or unknown)."""
    res = GenerationLoop()
    nodes = generation_nodes(g)
    if not nodes:
        return res
    values = parse_option(opts.get(OPTION))
    if "max_length" not in values or model_path is None:
        res.notes.append(
            "BeamSearch / GreedySearch step loop not modelled: its length is a graph input's "
            f"value (set the session option {OPTION}=max_length=N,num_beams=K"
            + (")" if model_path else "; and estimate a saved file)")
        )
        return res
    proto = onnx.load(model_path, load_external_data=False)
    for i in nodes:
        node = g.nodes[i]
        ids = g.tensors.get(node.inputs[0]) if node.inputs else None
        if ids is None or ids.shape is None or len(ids.shape) != 2:
            res.notes.append(f"{node.name}: input_ids' shape unknown; step loop not modelled")
            continue
        beams = values.get("num_beams", 1) if node.op_type == "BeamSearch" else 1
        body = next(a.g for a in proto.graph.node[i].attribute if a.name == "decoder")
        bm = onnx.helper.make_model(body, opset_imports=proto.opset_import)
        bm.ir_version = proto.ir_version
        one = replay(bm, ids.shape[0] * beams, ids.shape[1], values["max_length"], beams > 1)
        res.touched += one.touched
        res.reserved += one.reserved
        res.steps += one.steps
        res.notes.append(
            f"{node.op_type} {node.name}: {one.steps} decoder steps ({ids.shape[0]} x {beams} "
            f"beams, prompt {ids.shape[1]}, max_length {values['max_length']}) replayed "
            f"through the arena: {one.touched / 2**20:.1f} MiB of pages written "
            f"({one.reserved / 2**20:.0f} MiB reserved)"
        )
    return res


def _step_plan(bm: onnx.ModelProto, bb: int, s: int, t: int) -> tuple[ortsim.OrtPlan, int]:
    """ORT's plan of the decoder body for one step: ``s`` new tokens over a past of ``t``."""
    ins = [i for i in bm.graph.input]
    shapes: dict[str, tuple[int, ...]] = {
        ins[0].name: (bb, s),
        ins[1].name: (bb, s),
        ins[2].name: (bb, t + s),
    }
    for vi in ins[3:]:  # past_i: [2, batch, heads, past, head size] (subgraph_gpt.cc)
        d = [x.dim_value for x in vi.type.tensor_type.shape.dim]
        shapes[vi.name] = (d[0] or 2, bb, d[2], t, d[4])
    v = build_view(bm, shapes=shapes, allow_partial=True)
    order = make_schedule(v.graph, "ort_default")
    return ortsim.plan(v.graph, order, reuse=True, fusions=False), len(order)


def replay(
    bm: onnx.ModelProto, bb: int, prompt: int, max_length: int, pick: bool
) -> GenerationLoop:
    """Replay the step loop (``bb`` = batch x beams rows) through one BFC arena."""
    arena = ortsim.BFCArena()
    first = _step_plan(bm, bb, prompt, 0)
    later: tuple[ortsim.OrtPlan, int] | None = None
    last: dict[str, int] = {}
    lo, hi = prompt, max_length - 2  # the later steps' past lengths
    if hi >= lo:
        later = _step_plan(bm, bb, 1, lo)
    if hi > lo:
        last = {b.tensors[0]: b.size for b in _step_plan(bm, bb, 1, hi)[0].buffers}
    past: list[ortsim._Chunk] = []
    t, s, steps = 0, prompt, 0
    while True:
        plan_, n = first if t == 0 or later is None else later

        def size(b: Any, t: int = t) -> int:
            if t == 0 or b.tensors[0] not in last or hi == lo:
                return int(b.size)
            return int(b.size + (last[b.tensors[0]] - b.size) * (t - lo) / (hi - lo))

        feeds = [arena.alloc(ortsim._aligned(4 * bb * k)) for k in (s, s, t + s)]
        fetches = _run_step(arena, plan_, n, size)
        for c in feeds + past:
            arena.free(c)
        presents = [c for name, c in fetches if name.startswith("present")]
        if pick:  # BeamSearch copies the kept beams' presents into new past buffers
            picked = [arena.alloc(c.size) for c in presents]
            for c in presents:
                arena.free(c)
            presents = picked
        for name, c in fetches:
            if not name.startswith("present"):
                arena.free(c)
        past = presents
        steps += 1
        t, s = t + s, 1
        if t >= max_length - 1 or later is None:
            break
    return GenerationLoop(arena.resident, arena.reserved, steps)


def _run_step(
    arena: ortsim.BFCArena, plan_: ortsim.OrtPlan, n: int, size: Any
) -> list[tuple[str, ortsim._Chunk]]:
    """One body run in the arena, as ``ort.simulate``'s run 1; returns its fetches' chunks."""
    by_start: dict[int, list[Any]] = {}
    by_end: dict[int, list[Any]] = {}
    for b in plan_.buffers:
        by_start.setdefault(b.start, []).append(b)
        by_end.setdefault(b.end, []).append(b)
    chunks: dict[int, ortsim._Chunk] = {}
    fetches: list[tuple[str, ortsim._Chunk]] = []
    for st in range(n):
        temps = []
        for b in by_start.get(st, []):
            nb = size(b)
            if b.heap or not nb:
                continue
            c = arena.alloc(ortsim._aligned(nb))
            if b.scratch:
                temps.append(c)
            elif b.is_output:
                fetches.append((b.tensors[0], c))
            else:
                chunks[b.id] = c
        for c in temps:
            arena.free(c)
        for b in by_end.get(st, []):
            if b.id in chunks:
                arena.free(chunks.pop(b.id))
    return fetches
