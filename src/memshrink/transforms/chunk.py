"""``chunk``: compute an activation-heavy region in K chunks that reuse each other's buffers.

Why: a runtime holds a region's intermediate tensors at full size. Cut the region's input into
K pieces (along the batch axis, or along a spatial axis with the halo its convolutions need),
compute the region once per piece with the same weights, and concatenate the outputs: each
piece's intermediates are 1/K as big and die before the next piece starts, so the peak drops
towards the region's largest band. Regions are found automatically (``chunking.region``); an
op is included only when its rule proves it row-independent along the chunk axis
(``chunking.rules``), so the rewrite computes the same numbers up to floating-point
summation order. K is ranked by the estimator (ORT steady state), under an optional budget,
and the ranking is walked for a layout that CUDA's GPU (guarded) and OpenVINO and its EP
(preferred) are predicted to take without a rise (``chunking.choice``).
The ``channels`` mode then splits inverted bottlenecks (expand → per-channel ops → reduce)
along their hidden channels and sums the partial reduces (``chunking.channels``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import onnx_ir as ir

from memshrink.manager import Pass, PassContext, PassResult
from memshrink.transforms import register
from memshrink.transforms.chunking import cone as cones
from memshrink.transforms.chunking import rules
from memshrink.transforms.chunking import weightless as cores
from memshrink.transforms.chunking.channel_choice import choose_channels
from memshrink.transforms.chunking.channels import find_blocks
from memshrink.transforms.chunking.choice import CAP_BYTES, PREFER_CAP, Chooser, rank
from memshrink.transforms.chunking.layout import distinct_edges
from memshrink.transforms.chunking.nested import band_end_names, nest
from memshrink.transforms.chunking.overlap import ends, overlap_plans
from memshrink.transforms.chunking.partial import prefix
from memshrink.transforms.chunking.region import Region, discover_best
from memshrink.transforms.chunking.region import cut as end_at
from memshrink.transforms.chunking.region import cuts as boundaries
from memshrink.transforms.chunking.rewrite import META_KEY, RewriteStats, rewrite
from memshrink.transforms.chunking.rules import Refuse
from memshrink.transforms.chunking.specialize import specialize
from memshrink.transforms.predicted import backend_names, guarded, pipeline_bindings
from memshrink.transforms.saved_layout import clone_with_meta, saved_embedded

MODES = ("batch", "spatial", "channels")
#: Band-size steps tried per mode (0 = equal chunks); see ``chunking.region.bands``.
#: Query pieces: equal only. Stagger 1 was predicted worse at every count on every model tried
#: (SAM ×8 142 -> 228 MB, the ViT stack, GPT-2 at 1024): pieces run one after another, and
#: equal shapes let each reuse the last one's buffers.
STAGGERS = {"batch": (0, 1), "spatial": (0, 4, 8, 12, 16, 20), "queries": (0,)}
#: Distinct-shape layouts tried per mode: 1/d of a chunk's largest tensor is the smallest
#: shape kept apart between chunks (``chunking.layout``); 0 = none.
DISTINCT = {"batch": (), "spatial": (4, 16)}
#: Region cuts tried per mode (0 = the whole forward closure; t = outputs >= input extent / t).
#: A cut region is tried with equal bands and the distinct-shape layouts only (fewer trials).
TRIMS = {"batch": (0,), "spatial": (0, 4, 8)}
#: Prefix cuts tried per mode (0 = the whole region; c = up to the last op with an output of
#: at least 1/c of the largest, ``chunking.partial``): fewer copied Conv/FC nodes, which
#: OpenVINO compiles one primitive each for.
CUTS = {"batch": (0, 1, 2, 4), "spatial": (0,)}
#: Sub-band splits tried (``chunking.nested``): inside the NESTED_OUTER best overlapping-band
#: layouts, every shallow block boundary x these counts.
NESTED_OUTER = 2
#: Band layouts tried per cone region (``chunking.cone``), (stagger, distinct): fewer than a
#: whole-input region's, as each graph may have several cones (fpn-800: 2, the chunk pass
#: 31.6 -> 48.5 s with every layout); the picks measured (fpn-800's best p2 at stagger 16, the
#: FPN-like test graph's p2 x 2 at stagger 4) are kept.
CONE_LAYOUTS = ((0, 0), (4, 0), (8, 0), (16, 0), (0, 4))
NESTED_COUNTS = (2, 4)
#: Query pieces tried inside each piece of the best heads layout (``weightless.queries``)
QUERY_PIECES = (2, 4, 8)


def _predict(model: ir.Model, context: PassContext) -> tuple[int, Any]:
    """Predicted steady-state activation bytes (and the estimate, for its shapes), with the
    weights stored as the pipeline will save them (``saved_layout``): ORT CPU's, except under
    ``optimize --backend cuda`` for a model ORT CPU cannot run (``ranks_by_cuda``)."""
    from memshrink.estimate import estimate

    est = estimate(
        model, backend="ort", embedded=saved_embedded(model), **pipeline_bindings(model, context)
    )
    if ranks_by_cuda(context, est):
        return _cuda_activations(model, context)
    stage = next(s for s in est.prediction.stages if s.name == "steady_state")
    return int(stage.activations), est


def ranks_by_cuda(context: PassContext, ort_est: Any) -> bool:
    """Whether layouts are ranked by the CUDA EP's plan instead of ORT CPU's: deploying on CUDA
    only (``optimize --backend cuda``) a model ORT CPU has no kernels for (bfloat16 compute,
    ``estimate/ort_bf16.py``). Why: ORT CPU's figure then describes a session that never
    exists, with CPU-only rules (its fusion chains, the Where scratch, NCHWc blocks), while
    the CUDA EP runs the model (a bf16 Llama, session 14, H200); its own plan ranks the layouts.
    """
    return bool(
        context.deploy_only
        and context.backend == "cuda"
        and ort_est.prediction.details.get("ort_cpu_refuses")
    )


def _cuda_activations(model: ir.Model, context: PassContext) -> tuple[int, Any]:
    """The CUDA EP's planned activation peak (``cuda_plan_peak``: one best-fit block of every
    planned buffer of a run, graph inputs and outputs included) and its estimate: a smooth
    figure to rank by, where the arena's power-of-two regions move in steps."""
    from memshrink.estimate import estimate
    from memshrink.estimate.cuda import guard_options

    est = estimate(
        model, backend="cuda", embedded=saved_embedded(model), session_options=guard_options(),
        **pipeline_bindings(model, context),
    )  # fmt: skip
    return int(est.prediction.planners["cuda_plan_peak"]), est


def _act_and_peak(model: ir.Model, context: PassContext, base_unknowns: int = 0) -> tuple[int, int]:
    """Predicted ORT steady-state activations and whole-process peak (highest stage); a layout
    whose estimate knows fewer sizes than the original's is refused (``lost_sizes``)."""
    act, est = _predict(model, context)
    if lost := lost_sizes(est, base_unknowns):
        raise Refuse(lost)
    return act, max(est.stage_peaks().values())


def lost_sizes(est: Any, base_unknowns: int) -> str:
    """Why a rewritten layout's prediction cannot be trusted ('' if it can): tensors whose size
    the estimate does not know count as 0 bytes, so a rewrite that loses sizes looks like a gain
    (ORT's fp16 GPT-2 split x2 along its past lost 74 behind com.microsoft ops: predicted
    33 -> 9 MiB on the CUDA EP, where it measured 30 MiB at run 3; session 14, H200)."""
    lost = len(est.unknowns) - base_unknowns
    if lost <= 0:
        return ""
    return (
        f"the rewrite leaves {lost} more tensor(s) of unknown size (e.g. {est.unknowns[-1]}): "
        "its prediction would count them as 0"
    )


def _peak_figures(model: ir.Model, context: PassContext, backend: str) -> dict[str, int]:
    """The channel split's guard figures: the predicted whole-process peak (the highest stage)
    on ``backend``, saved layout, as ``steady_state``; on CUDA also the host's highest stage
    (``host``), which the GPU + host total of ``optimize --backend cuda`` needs
    (``Chooser.total``), as ``guard_figures`` gives the row modes."""
    from memshrink.estimate import estimate
    from memshrink.estimate.cuda import guard_options

    est = estimate(
        model, backend=backend, embedded=saved_embedded(model),
        session_options=guard_options() if backend == "cuda" else None,
        **pipeline_bindings(model, context),
    )  # fmt: skip
    out = {"steady_state": int(max(est.stage_peaks().values()))}
    if backend == "cuda":
        out["host"] = int(max(est.prediction.details["host"].values()))
    return out


def _ir_shapes(model: ir.Model) -> dict[str, tuple[int, ...] | None]:
    """Static shapes declared on the graph's values (the chunk rewrite declares every one)."""
    out: dict[str, tuple[int, ...] | None] = {}
    values = list(model.graph.inputs) + [y for n in model.graph for y in n.outputs]
    for v in values:
        if v.shape is not None and all(isinstance(d, int) for d in v.shape):
            out[v.name or ""] = tuple(int(d) for d in v.shape)  # type: ignore[arg-type]
    return out


def _shapes(est: Any) -> dict[str, tuple[int, ...] | None]:
    """Static shapes to rewrite with: a data-dependent size at its upper bound is no static
    shape (slicing it by the bound would be wrong whenever the run has fewer)."""
    g = est.view.graph
    return {name: None if name in g.bounded else t.shape for name, t in g.tensors.items()}


def _opset(model: ir.Model) -> int:
    return int(model.opset_imports.get("", model.opset_imports.get("ai.onnx", 1)))


def entries_for(
    model: ir.Model, shapes: dict[str, tuple[int, ...] | None], mode: str, axis: int
) -> dict[ir.Value, int]:
    """The graph inputs a region of this mode starts from, with their chunk axis."""
    out: dict[ir.Value, int] = {}
    g = model.graph
    if mode == "batch":
        cands = [(v, batch_axis(v), shapes.get(v.name or ""))
                 for v in g.inputs if v.name not in g.initializers]  # fmt: skip
        sizes = [s[a] for _, a, s in cands if s and len(s) > a and s[a] >= 2]
        if not sizes:
            return {}
        n = max(set(sizes), key=sizes.count)
        return {v: a for v, a, s in cands if s and len(s) > a and s[a] == n}
    for v in g.inputs:
        s = shapes.get(v.name or "")
        if v.name not in g.initializers and s and len(s) == 4 and s[axis] >= 2:
            out[v] = axis
    return out


def batch_axis(v: ir.Value) -> int:
    """The batch axis of graph input ``v``: 1 where every reader is a recurrent op that takes it
    as X, ``initial_h`` or ``initial_c`` in ONNX's default layout 0 (``[seq, batch, in]``,
    ``[dirs, batch, hidden]``: a torch ``LSTM(batch_first=False)`` export) and recurrent ops
    may be split (``rules.RECURRENT_OK``, ``optimize --backend ort``); else 0.

    Why: batch mode entered every input at axis 0, which for a seq-first input is the
    sequence: the region stopped at the LSTM, which runs its recurrence along that axis."""
    uses = list(v.uses())
    if not uses or not rules.RECURRENT_OK.get():
        return 0
    for u in uses:
        n = u.node
        seq_first = n.op_type in rules.RECURRENT and not n.attributes.get_int("layout", 0)
        if not seq_first or u.idx not in (0, 5, 6):
            return 0
    return 1


def _largest(region: Region) -> int:
    """Elements of the region's largest tensor (whole, before chunking)."""
    return max(
        (n_elems(s) for f in region.facts.values() for s in f.out_shapes if s is not None),
        default=1,
    )


def n_elems(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def chunk_counts(mode: str, extent: int, max_chunks: int, min_rows: int) -> list[int]:
    if mode == "batch":
        return [k for k in range(2, min(extent, max_chunks) + 1) if extent % k == 0]
    ks, k = [], 2
    while k <= max_chunks and extent // k >= min_rows:
        ks.append(k)
        k *= 2
    return ks


def apply(
    model: ir.Model,
    shapes: dict[str, tuple[int, ...] | None],
    mode: str,
    count: int,
    axis: int,
    stagger: int = 0,
    trim: int = 0,
    distinct: int = 0,
    cut: int = 0,
    seen: set[tuple] | None = None,
    end: str = "",
    overlap: bool = False,
    inner: tuple[str, int] | None = None,
    cone: str = "",
    weightless: bool = False,
    heads: bool = False,
    queries: bool = False,
    query_chunks: int = 0,
    scaled: bool = False,
) -> tuple[Region, RewriteStats]:
    """Find the region of ``mode`` in ``model`` and rewrite it in ``count`` chunks (in place).

    ``trim`` > 0 keeps only ops whose output extent is at least the input's / ``trim``: the
    deep, low-resolution end of a CNN has halos as big as its maps, so chunking it costs
    compute and saves nothing; the region then ends at the cut and is concatenated there.
    ``distinct`` > 0 replaces the stagger by band edges whose chunks share no tensor shape of
    at least 1/``distinct`` of a chunk's largest tensor (``chunking.layout``). ``cut`` > 0
    keeps only the region's first ops (``chunking.partial.prefix``). ``seen`` (the search's
    keys so far) raises ``Duplicate`` before rewriting a region and layout already tried (a
    trim or cut that removed nothing): the rewrite is the costly step. ``inner`` = (value,
    count) then splits every overlapping band again, from its input to its copy of that value,
    into ``count`` sub-bands (``chunking.nested``). ``cone`` (a value's name) replaces the
    region grown from the graph inputs by that value's cone, entered at the interior tensors
    it reads (``chunking.cone``; exact bands only). ``weightless`` (batch mode) chunks only the
    batch region's weight-free cores (attention: Q, K, V outputs to the output projection's
    input), one rewrite per core, so no weight gets a second reader (``chunking.weightless``).
    ``queries`` cuts those cores along their query rows instead, Kᵀ and V read whole by every
    piece (``weightless.queries``; no batch axis needed); with ``heads`` along their heads
    instead (batch 1: no batch region needed), with ``scaled`` each core its own count
    (``weightless.piece_counts``). ``query_chunks`` > 0 (with ``heads``, not ``queries``) then
    cuts every heads piece along its query rows into that many pieces.
    """
    spec = specialize(model, shapes)
    if queries:
        if end or cut or trim or overlap or distinct or cone or inner:
            raise Refuse("a query split is a split of the attention cores only")
        return _apply_queries(model, shapes, count, stagger, seen, spec, scaled, heads)
    if cone:
        end_v = next((y for n in model.graph for y in n.outputs if y.name == cone), None)
        if end_v is None or mode != "spatial" or overlap or trim:
            raise Refuse(f"no spatial cone region ending at {cone}")
        region = cones.region(model.graph, shapes, _opset(model), end_v, axis,
                              f"cone{count}", min_extent=count)  # fmt: skip
    else:
        entries = entries_for(model, shapes, mode, axis)
        if not entries:
            raise Refuse(f"no graph input to chunk along the {mode} axis")
        extent = min(shapes[v.name or ""][a] for v, a in entries.items())  # type: ignore[index]
        # a heads split cuts the cores along their heads, not the batch: any batch region
        floor = 2 if heads else max(count, extent // trim if trim else 0)
        region = discover_best(
            model.graph, shapes, _opset(model), entries, f"{mode}{count}", min_extent=floor
        )
    if weightless:
        if mode != "batch" or end or cut or trim or overlap or distinct:
            raise Refuse("weightless cores are batch chunks of the whole region only")
        if query_chunks and not heads:
            raise Refuse("query pieces inside cores need the heads split")
        return region, _apply_cores(
            model, shapes, region, count, stagger, seen, spec, heads, query_chunks
        )
    if end:  # end the region at this value (a block boundary, ``region.cuts``)
        v = next((x for x in boundaries(region) if x.name == end), None)
        if v is None:
            raise Refuse(f"{end} cannot end the region alone")
        region = end_at(region, v)
    if not region.nodes:
        raise Refuse(f"no op can be chunked along the {mode} axis")
    if cut:
        region = prefix(region, cut)
    edges = None
    shape = (len(region.nodes), tuple(v.name or "" for v in region.outputs))
    if seen is not None and distinct:  # the edge search is costly too: same inputs, same edges
        if (mode, count, "distinct", distinct, shape) in seen:
            raise Duplicate(f"distinct {distinct} on the same region")
        seen.add((mode, count, "distinct", distinct, shape))
    if distinct:
        edges = distinct_edges(region, count, max(1, _largest(region) // (count * distinct)))
        if edges is None:
            raise Refuse(f"no band edges keep chunk shapes distinct (1/{distinct})")
    if seen is not None:
        key = (mode, count, stagger, tuple(edges or ()), shape, overlap, inner, cone)
        if key in seen:
            raise Duplicate(str(key))
        seen.add(key)
    plans = overlap_plans(region, count, stagger, edges) if overlap else None
    st = rewrite(model.graph, region, count, stagger, edges, plans)
    if inner:  # a Refuse here leaves the bands written: the search applies it to clones first
        if not overlap:
            raise Refuse("sub-bands need overlapping bands")
        ist = nest(model.graph, st, axis, inner[0], inner[1], _opset(model), region.label)
        st.flops_after += ist.flops_after - ist.flops_before
        st.nodes_after += ist.nodes_after - ist.nodes_before
        st.reblocked += ist.reblocked
    st.edges = edges
    st.specialized = spec
    return region, st


class Duplicate(Refuse):
    """A candidate whose rewrite equals one already tried."""


def _apply_cores(
    model: ir.Model, shapes: dict[str, tuple[int, ...] | None], batch: Region, count: int,
    stagger: int, seen: set[tuple] | None, spec: dict[str, int], heads: bool = False,
    query_chunks: int = 0,
) -> RewriteStats:  # fmt: skip
    """Rewrite every weightless core of ``batch`` in ``count`` chunks (``heads``: each core's
    stretch along its attention heads, ``weightless.heads``; ``query_chunks``: then each heads
    piece along its query rows, ``weightless.queries``, its Kᵀ and V slices read whole by
    every query piece); their stats summed."""
    graph = model.graph
    found = cores.cores(batch, graph)
    if not found:
        raise Refuse("no weightless core (weight-free MatMul/Softmax between weighted nodes)")
    if heads:
        found = [cores.heads(r, graph, shapes, _opset(model), f"{r.label}h") for r in found]
        ext = {s[r.axes[v]] for r in found for v in r.axes if (s := shapes.get(v.name or ""))}
        if any(e % count for e in ext):
            raise Refuse(f"chunk-axis extents {sorted(ext)} not all divisible by {count}")
    if seen is not None:
        key = ("weightless", heads, count, stagger, tuple(len(r.nodes) for r in found),
               query_chunks)  # fmt: skip
        if key in seen:
            raise Duplicate(str(key))
        seen.add(key)
    total = RewriteStats(count, 0, 0, 0, 0, 0, specialized=spec)
    for r in found:
        total.add(rewrite(graph, r, count, stagger))
        if query_chunks:
            total.nodes_after += _query_pieces(model, shapes, r.label, count, query_chunks)
    return total


def _query_pieces(model: ir.Model, shapes: dict[str, tuple[int, ...] | None], label: str,
                  count: int, pieces: int) -> int:  # fmt: skip
    """Cut each of the ``count`` heads pieces of core ``label`` (its nodes carry
    ``memshrink.chunk = chunk_<label>/<k>``) along its query rows into ``pieces``; the nodes
    added. Exact: each heads piece is an attention core of its own (its Q, Kᵀ, V slices)."""
    graph = model.graph
    added = 0
    for k in range(count):
        tag = f"chunk_{label}/{k}"
        nodes = [n for n in graph if n.metadata_props.get(META_KEY) == tag]
        r = cores.queries(nodes, graph, shapes, _opset(model), f"{label}k{k}q")
        if cores.query_rows(r) % pieces:
            raise Refuse(f"query rows {cores.query_rows(r)} not divisible by {pieces}")
        added += rewrite(graph, r, pieces).nodes_after - len(r.nodes)
    return added


def _apply_queries(
    model: ir.Model, shapes: dict[str, tuple[int, ...] | None], count: int, stagger: int,
    seen: set[tuple] | None, spec: dict[str, int], scaled: bool = False, heads: bool = False,
) -> tuple[Region, RewriteStats]:  # fmt: skip
    """Rewrite the query stretch of every core with large scores (``weightless.query_regions``)
    in ``count`` pieces; their stats summed, the first region returned (for its stops).

    ``scaled``: each core its own count (``weightless.piece_counts``), every core considered.
    A count that does not divide a core's rows gives it a shorter last piece
    (``weightless.piece_edges``). ``heads``: the cores cut along their heads instead
    (``weightless.heads_of``; equal pieces only)."""
    graph = model.graph
    along = "heads" if heads else "queries"
    share = 0 if scaled else cores.QUERY_SHARE
    found = cores.query_regions(graph, shapes, _opset(model), f"q{count}", share, along)
    if not found:
        raise Refuse(f"no attention core can be cut along its {along}")
    counts = cores.piece_counts(found, count, scaled)
    if heads and any(cores.query_rows(r) % k for r, k in zip(found, counts, strict=True)):
        raise Refuse(f"heads {sorted({cores.query_rows(r) for r in found})} not all "
                     f"divisible by {count}")  # fmt: skip
    if seen is not None:
        # the cores cut and their counts: a scaled layout that cuts the same cores alike is the
        # uniform one (SAM: its windows get 1 piece either way)
        cut = tuple((r.label, k) for r, k in zip(found, counts, strict=True) if k >= 2)
        key = (along, stagger, cut)
        if key in seen:
            raise Duplicate(str(key))
        seen.add(key)
    total = RewriteStats(count, 0, 0, 0, 0, 0, specialized=spec)
    pieces: list[int] = []
    for r, k in zip(found, counts, strict=True):
        if k < 2:
            continue
        total.add(rewrite(graph, r, k, stagger, edges=cores.piece_edges(r, k)))
        pieces.append(k)
    if not pieces:
        raise Refuse(f"no attention core is cut at {count}")
    total.pieces = pieces
    return found[0], total


def _trial(model: ir.Model, shapes: dict[str, tuple[int, ...] | None], c: dict[str, Any],
           axis: int) -> ir.Model:  # fmt: skip
    """A clone of ``model`` with candidate ``c`` applied (for the backend guard)."""
    trial = clone_with_meta(model)
    apply(trial, shapes, c["mode"], c["chunks"], axis, c["stagger"], c["trim"], c["distinct"],
          c.get("cut", 0), end=c.get("end", ""), overlap=c.get("overlap", False),
          inner=_inner(c), cone=c.get("cone", ""), weightless=c.get("weightless", False),
          heads=c.get("heads", False), queries=c.get("queries", False),
          query_chunks=c.get("query_chunks", 0), scaled=c.get("scaled", False))  # fmt: skip
    return trial


def _inner(c: dict[str, Any]) -> tuple[str, int] | None:
    """A candidate's sub-band split (value name, count), if any."""
    i = c.get("inner")
    return (str(i[0]), int(i[1])) if i else None


def _inner_ends(
    model: ir.Model, shapes: dict[str, tuple[int, ...] | None], c: dict[str, Any], axis: int
) -> list[str]:
    """Names (in the original graph) of the values candidate ``c``'s bands may split their
    shallow layers up to (``nested.inner_ends`` of its first band), its own end excluded."""
    trial = clone_with_meta(model)
    try:
        _, st = apply(trial, shapes, c["mode"], c["chunks"], axis, end=c["end"], overlap=True)
        return [n for n in band_end_names(trial.graph, st, axis, _opset(trial)) if n != c["end"]]
    except Refuse:
        return []


def _overlap_ends(
    model: ir.Model, shapes: dict[str, tuple[int, ...] | None], axis: int
) -> list[str]:
    """Names of the values an overlapping-band spatial region may end at (``overlap.ends``)."""
    trial = clone_with_meta(model)
    specialize(trial, shapes)
    entries = entries_for(trial, shapes, "spatial", axis)
    if not entries:
        return []
    region = discover_best(trial.graph, shapes, _opset(trial), entries, "ends")
    return [v.name or "" for v in ends(region)]


def _cone_ends(
    model: ir.Model, shapes: dict[str, tuple[int, ...] | None], axis: int
) -> list[tuple[str, int]]:
    """(name, extent) of the values whose cone may be a region (``chunking.cone.ends``)."""
    trial = clone_with_meta(model)
    specialize(trial, shapes)
    return [
        (v.name or "", shapes[v.name or ""][axis])  # type: ignore[index]
        for v in cones.ends(trial.graph, shapes, axis)
    ]


def _query_rows(model: ir.Model, shapes: dict[str, tuple[int, ...] | None],
                along: str = "queries") -> int:  # fmt: skip
    """The query rows (``along="heads"``: the heads) every large-scores core can be cut along
    evenly (their gcd), or 0 when no core can be cut so (``weightless.query_regions``)."""
    trial = clone_with_meta(model)
    specialize(trial, shapes)
    found = cores.query_regions(trial.graph, shapes, _opset(trial), "q", along=along)
    rows = [cores.query_rows(r) for r in found]
    return math.gcd(*rows) if rows else 0


def _query_largest_rows(model: ir.Model, shapes: dict[str, tuple[int, ...] | None]) -> int:
    """The output rows of the core with the largest scores (0: none can be cut): the most
    pieces a query split can have."""
    trial = clone_with_meta(model)
    specialize(trial, shapes)
    found = cores.query_regions(trial.graph, shapes, _opset(trial), "q")
    if not found:
        return 0
    return cores.out_rows(max(found, key=cores.scores_elems))


def query_counts(rows: int, largest: int, max_chunks: int) -> list[int]:
    """Query-split counts tried: the divisors of ``rows`` (equal pieces) and the powers of two
    (a shorter last piece where they do not divide: ViT's 197 tokens), up to ``max_chunks``
    and the largest core's rows."""
    top = min(max_chunks, largest)
    even = {k for k in range(2, top + 1) if rows and rows % k == 0}
    return sorted(even | {2**i for i in range(1, top.bit_length()) if 2**i <= top})


def _weightless_layouts(
    model: ir.Model, shapes: dict[str, tuple[int, ...] | None]
) -> tuple[bool, int]:
    """(whether the batch region has a weightless core, the heads every core can be cut
    along or 0) from one clone and one region discovery (``chunking.weightless``)."""
    trial = clone_with_meta(model)
    specialize(trial, shapes)
    entries = entries_for(trial, shapes, "batch", 0)
    if not entries:
        return False, 0
    batch = discover_best(trial.graph, shapes, _opset(trial), entries, "w")
    found = cores.cores(batch, trial.graph)
    if not found:
        return False, 0
    try:
        cut = [cores.heads(r, trial.graph, shapes, _opset(trial), "h") for r in found]
    except Refuse:
        return True, 0
    # the smallest extent along the chunk axis of any value (the heads, not head × dim)
    ext = [s[r.axes[v]] for r in cut for v in r.axes if (s := shapes.get(v.name or ""))]
    return True, min(ext) if ext else 0


@register
class ChunkPass(Pass):
    _base_unknowns = 0  # tensors of unknown size in the original's estimate (``_run``)
    name = "chunk"
    summary = (
        "Compute activation-heavy regions in K chunks (batch, or spatial bands with halos) "
        "that reuse each other's buffers."
    )
    targets = ("activations",)
    exact = "atol 1e-4, rtol 1e-4"
    tolerance = (1e-4, 1e-4)
    # spatial_axis: H or W of an NCHW tensor (axis 7 was an IndexError inside the pass)
    option_choices: ClassVar[dict[str, Any]] = {"modes": MODES, "cuts": int, "spatial_axis": (2, 3)}

    @dataclass
    class Options:
        activation_budget: int = 0  # bytes of predicted ORT steady-state activations; 0 = lowest
        modes: str = "batch,spatial,channels"
        max_chunks: int = 16
        spatial_axis: int = 2  # NCHW height
        min_rows: int = 16  # smallest spatial band (input rows) worth a chunk
        max_extra_flops: float = 1.0  # halo recompute cap, as a fraction of the region's FLOPs
        min_gain: float = 0.05  # smallest predicted drop worth the rewrite
        # smallest predicted drop in bytes: the added Slice/Concat nodes cost runtime memory
        # too (OpenVINO compile +5 MiB for 19 nodes on a tiny CNN that saved 0.12 MiB)
        min_saving: int = 0
        specialize: bool = True  # bind symbolic input dims (from the bindings) to chunk them
        # backends whose predicted steady-state peak the chosen layout must not raise (CUDA:
        # GPU memory; the predicted CUDA host change is reported in stats["guard"]); the
        # pipeline's target (optimize --backend) is always added when it is not ORT CPU
        guard_backends: str = "cuda"
        # backends whose predicted whole-process peak a channel split must not raise, on top
        # of guard_backends (e.g. "openvino": its CPU plugin spends ~0.1-0.25 MiB per Conv/FC
        # primitive, and a split multiplies them)
        channel_guard: str = ""
        # optimize --backend cuda: a layout must not raise CUDA's predicted GPU + host total
        # (each copied Conv keeps its cuDNN state on the host); without --backend that total
        # may rise by prefer_cap / prefer_cap_bytes (a GPU drop pays for host; U-Net measured
        # GPU -516 MiB, host +34); false: CUDA's GPU alone, as before session 11
        cuda_total: bool = True
        # backends whose predicted process peak the layout should not raise (by more than 5 %
        # and 2 MiB): the ranking on ORT CPU is walked for the best layout that keeps them,
        # else ORT CPU's pick is kept (transforms/chunking/choice.py); "" = ORT CPU only.
        # Ignored when the user names the one runtime they deploy on (optimize --backend)
        prefer_backends: str = "openvino,ort-openvino"
        # ... and a hard cap: a layout raising one's predicted saved peak by more than this
        # fraction (OpenVINO: divided by CAP_MARGIN) and prefer_cap_bytes is never kept; the
        # best on ORT CPU within it is, else no chunk (stats["guard"]["refused"]). 0 = no cap
        # (ORT CPU's pick kept, as before). 5 % / 2 MiB: at 25 % / 8 MiB the default measured
        # OpenVINO +15-19 % on ResNet-50 b16 and EfficientFormer (docs/chunk.md, "The default cap")
        prefer_cap: float = PREFER_CAP
        prefer_cap_bytes: int = CAP_BYTES
        # batch-mode prefix cuts tried (0 = whole region; c = up to the last op with an output
        # of >= 1/c of the largest): fewer copied Conv/FC nodes for OpenVINO. Only the whole
        # region by default: on ResNet-50 b16 no cut kept OpenVINO and met ORT CPU's 0.5x
        # (x8 cut 4: 0.53x, OpenVINO +21 MiB measured), and each cut adds a trial per layout
        cuts: str = "0"
        # also try splitting the shallow layers of the best overlapping-band layouts' bands
        # again (chunking.nested). Off by default: on ResNet-50 960² it measured 0.35x instead
        # of 0.44x, but for +53 % FLOPs (not 13 %), OpenVINO +24 MiB, and a prediction 20 %
        # low (the glibc-hole credit of run 1's arena regions; docs/chunk.md)
        nested: bool = False
        # also try batch chunks of the weight-free cores only (attention between its
        # projections, ``chunking.weightless``): no weight read by two nodes, so OpenVINO at
        # bf16 converts no FC weight twice. BERT b4x512: ORT CPU 0.47x (with channels x4)
        # where the batch splits raise OpenVINO's predicted peak by 24-94 % (docs/chunk.md).
        # The same cores are also tried cut along their attention heads (``weightless.heads``;
        # BERT b4x512 heads x12 + reversed channels x4: measured 0.48x)
        weightless: bool = True
        # also try the cores cut along their query rows, Kᵀ and V whole (``weightless.queries``):
        # at batch 1 with long sequences (SAM's global attention, ViT at high resolution) the
        # [heads, S, S] scores are the peak and no batch axis exists to cut
        queries: bool = True
        # ... also where the model has a batch axis (the whole cores, and inside the best heads
        # layout's pieces). Off by default: on BERT b4x512 `all` then took queries x16 + channels
        # (ORT CPU run 3 -40 MiB against the heads split) but OpenVINO measured +38 MiB over the
        # original where its estimate predicted -48 (docs/chunk.md, "Query rows")
        queries_batched: bool = False

    def run(self, model: ir.Model, context: PassContext) -> PassResult:
        ok = rules.RECURRENT_OK.set(context.deploy_only and context.backend == "ort")
        try:
            return self._run(model, context)
        finally:
            rules.RECURRENT_OK.reset(ok)

    def _run(self, model: ir.Model, context: PassContext) -> PassResult:
        o = self.options
        modes = [m.strip() for m in o.modes.split(",") if m.strip()]
        bad = [m for m in modes if m not in MODES]
        if bad:
            return PassResult(False, {"reason": f"unknown mode(s) {', '.join(bad)}"})
        opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0))
        if model.ir_version < 4 or opset < 13:
            # The rewrite emits Slice/Split with tensor inputs and initializers that aren't
            # graph inputs: forms older IR/opsets reject.
            return PassResult(
                False,
                {
                    "reason": f"IR {model.ir_version} / opset {opset}: chunking needs IR >= 4 and opset >= 13"
                },
            )
        symbolic = any(
            not isinstance(d, int)
            for v in model.graph.inputs
            if v.name not in model.graph.initializers and v.shape is not None
            for d in v.shape
        )
        if symbolic and not o.specialize:
            return PassResult(
                False,
                {"reason": "symbolic input dims and specialize=false: chunking needs static "
                 "input shapes"},
            )  # fmt: skip
        try:
            base, est = context.analysis("chunk.estimate", lambda: _predict(model, context))
        except Exception as exc:  # noqa: BLE001 - no estimate, no decision
            return PassResult(False, {"reason": f"estimator failed: {exc}"})
        refused = est.prediction.details.get("ort_cpu_refuses")
        if refused and not (context.deploy_only and context.backend != "ort"):
            # every layout is ranked by ORT CPU's prediction: for a session that cannot be
            # made there is nothing to gain, only OpenVINO's per-chunk kernels to pay (a bf16
            # Llama: compile 44 -> 55 MiB measured after a batch x4 split, docs/chunk.md)
            return PassResult(
                False,
                {"reason": "ONNX Runtime CPU cannot run this model (no bfloat16 kernel for "
                 f"{', '.join(sorted(refused))}): no layout to rank by its prediction"},
            )  # fmt: skip
        shapes = _shapes(est)
        # a layout whose estimate knows fewer sizes than the original's is refused (lost_sizes)
        self._base_unknowns = len(est.unknowns)
        ranked = "cuda" if est.backend == "cuda" else "ort"
        if o.activation_budget and base <= o.activation_budget:
            return PassResult(
                False,
                {"reason": "predicted activations already within activation_budget",
                 "predicted_activations_before": base},
            )  # fmt: skip
        row_modes = [m for m in modes if m != "channels"]
        stats, applied, after = self._rows(model, context, row_modes, base, shapes)
        if ranked == "cuda":
            stats["ranked_by"] = "cuda: ONNX Runtime CPU cannot run this model (bfloat16)"
        # the shapes the IR declares suffice to find blocks: no estimate when there is none
        # (a weightless-core split declares only its new values: the rest keep the estimate's)
        blocks = "channels" in modes and bool(
            find_blocks(model.graph, {**shapes, **_ir_shapes(model)} if applied else shapes)
        )
        if "channels" in modes and not blocks:
            stats["channels"] = {"reason": "no expand -> per-channel ops -> reduce block"}
        elif "channels" in modes and not (
            o.activation_budget and applied and after <= o.activation_budget
        ):
            if applied:
                try:
                    after, est = _predict(model, context)
                except Exception as exc:  # noqa: BLE001
                    stats["channels"] = {"reason": f"estimator failed: {exc}"}
                    return PassResult(True, stats)
                shapes = _shapes(est)
            chooser = self._chooser(model, context, shapes, o.channel_guard)
            if applied:  # the row layout's figures, predicted by its choice
                chooser.known = dict(stats.get("guard", {}).get("after", {}))
                # ... and the original's: the cap bounds the whole pass, not each step
                chooser.origin = {
                    b: f
                    for b, f in stats.get("guard", {}).get("before", {}).items()
                    if b in chooser.prefer and "peak" in f
                }
            chooser.figures = _peak_figures  # CUDA host: only with chooser.total or total_capped
            ch = choose_channels(
                model, lambda m: _act_and_peak(m, context, self._base_unknowns), shapes, after,
                base_peak=max(est.stage_peaks().values()),
                budget=o.activation_budget, min_gain=o.min_gain, min_saving=o.min_saving,
                max_chunks=o.max_chunks,
                progress=context.progress, chooser=chooser,
            )  # fmt: skip
            stats["channels"] = ch
            if ch.get("chunks"):
                if not applied:
                    stats.pop("reason", None)
                applied = True
        return PassResult(applied, stats)

    def _chooser(
        self,
        model: ir.Model,
        context: PassContext,
        shapes: dict[str, tuple[int, ...] | None],
        extra_guard: str = "",
    ) -> Chooser:
        """The cross-runtime choice over ranked candidates (``chunking.choice``)."""
        from memshrink.estimate.openvino import OV_CALIBRATION

        o = self.options
        guard = guarded(f"{o.guard_backends},{extra_guard}", context)
        prefer = backend_names(o.prefer_backends)
        if context.deploy_only:  # optimize --backend X: only X (guarded above) counts
            prefer = []
        return Chooser(
            model, context, guard, [b for b in prefer if b not in guard],
            lambda c: _trial(model, shapes, c, o.spatial_axis),
            per_kernel=int(OV_CALIBRATION["ov_per_kernel"]), cap=o.prefer_cap,
            cap_bytes=o.prefer_cap_bytes,
            total=context.deploy_only and context.backend == "cuda" and o.cuda_total,
            total_capped=not context.deploy_only and o.cuda_total,
        )  # fmt: skip

    def _try(
        self,
        model: ir.Model,
        context: PassContext,
        shapes: dict[str, tuple[int, ...] | None],
        candidates: list[dict[str, Any]],
        seen: set[tuple],
        mode: str,
        count: int,
        stagger: int,
        distinct: int,
        trim: int,
        cut: int,
        end: str = "",
        inner: tuple[str, int] | None = None,
        cone: str = "",
        weightless: bool = False,
        heads: bool = False,
        queries: bool = False,
        query_chunks: int = 0,
        scaled: bool = False,
    ) -> None:
        """Rewrite one candidate layout on a clone and predict it; appended to ``candidates``
        (with ``refused`` when it cannot apply or costs over ``max_extra_flops``)."""
        o = self.options
        context.progress(
            f"chunk: trying {mode} x{count} (stagger {stagger}, distinct {distinct}, "
            f"trim {trim}, cut {cut}"
            + (f", overlapping bands ending at {end}" if end else "")
            + (f", sub-bands x{inner[1]} to {inner[0]}" if inner else "")
            + (f", the cone of {cone}" if cone else "")
            + (", weightless cores" if weightless else "")
            + (" along the heads" if heads else "")
            + (", attention cores along the query rows" if queries else "")
            + (f", each heads piece in {query_chunks} query pieces" if query_chunks else "")
            + (", each core its own count" if scaled else "")
            + ")"
        )
        cand: dict[str, Any] = {
            "mode": mode, "chunks": count, "stagger": stagger, "distinct": distinct,
            "trim": trim, "cut": cut,
        }  # fmt: skip
        if end:
            cand.update(end=end, overlap=True)
        if inner:
            cand["inner"] = list(inner)
        if cone:
            cand["cone"] = cone
        if weightless:
            cand["weightless"] = True
        if heads:
            cand["heads"] = True
        if queries:
            cand["queries"] = True
        if query_chunks:
            cand["query_chunks"] = query_chunks
        if scaled:
            cand["scaled"] = True
        trial = clone_with_meta(model)
        try:
            region, st = apply(
                trial, shapes, mode, count, o.spatial_axis, stagger, trim, distinct, cut,
                seen, end=end, overlap=bool(end), inner=inner, cone=cone, weightless=weightless,
                heads=heads, queries=queries, query_chunks=query_chunks, scaled=scaled,
            )  # fmt: skip
            cand.update(
                extra_flops=round(st.extra_flops, 4),
                region_nodes=st.nodes_before,
                region_outputs=st.outputs,
                shape_classes=st.shape_classes,
            )
            if st.edges:
                cand["edges"] = st.edges
            if st.pieces:
                cand["pieces"] = st.pieces
            if st.extra_flops > o.max_extra_flops:  # refused: no estimate needed
                cand["refused"] = (
                    f"extra compute {st.extra_flops:.0%} over max_extra_flops "
                    f"{o.max_extra_flops:.0%}"
                )
                candidates.append(cand)
                return
            cand["predicted_activations"], trial_est = _predict(trial, context)
            if lost := lost_sizes(trial_est, self._base_unknowns):
                cand["refused"] = lost
        except Duplicate:  # a trim that cut nothing: same rewrite as before
            return
        except Refuse as exc:
            cand["refused"] = str(exc)
        except Exception as exc:  # noqa: BLE001 - a candidate that fails is skipped
            cand["refused"] = f"{type(exc).__name__}: {exc}"
        candidates.append(cand)

    def _rows(
        self,
        model: ir.Model,
        context: PassContext,
        modes: list[str],
        base: int,
        shapes: dict[str, tuple[int, ...] | None],
    ) -> tuple[dict[str, Any], bool, int]:
        """The batch/spatial search: (stats, applied, predicted activations after)."""
        o = self.options
        if o.min_saving and base < o.min_saving:
            # a layout's predicted activations are >= 0, so it saves at most ``base``: every
            # trial would end in the min_saving refusal below (a 5,000-node graph with 1.8 MB
            # of activations spent 31 CPU-s and +260 MiB on trials that could not win)
            reason = (
                f"the predicted activations ({base} B) are under min_saving ({o.min_saving} B):"
                " no layout can save that much"
            )
            return {"predicted_activations_before": base, "reason": reason}, False, base
        candidates: list[dict[str, Any]] = []
        seen: set[tuple] = set()
        cuts = [int(c) for c in o.cuts.split(",") if c.strip()]
        for mode in modes:
            entries = entries_for(model, shapes, mode, o.spatial_axis)
            if not entries:
                candidates.append({"mode": mode, "refused": f"no input with a {mode} axis"})
                continue
            extent = min(shapes[v.name or ""][a] for v, a in entries.items())  # type: ignore[index]
            layouts = [(s, 0) for s in STAGGERS[mode]] + [(0, d) for d in DISTINCT[mode]]
            grid = [
                (count, stagger, distinct, trim, cut)
                for cut in CUTS[mode]
                if cut in cuts or mode != "batch"
                for trim in TRIMS[mode]
                for count in chunk_counts(mode, extent, o.max_chunks, o.min_rows)
                for stagger, distinct in (layouts if not trim else layouts[:1] + layouts[-2:])
                if stagger * (count - 1) < extent // count
            ]
            grid6 = [(c, s, d, t, k, "") for c, s, d, t, k in grid] + [
                (count, 0, 0, 0, 0, end)
                for end in (_overlap_ends(model, shapes, o.spatial_axis) if mode == "spatial" else [])
                for count in chunk_counts(mode, extent, o.max_chunks, o.min_rows)
            ]  # fmt: skip
            for count, stagger, distinct, trim, cut, end in grid6:
                self._try(model, context, shapes, candidates, seen, mode, count, stagger,
                          distinct, trim, cut, end)  # fmt: skip
            # weight-free cores only (attention between the projections)
            has_cores, heads = (
                _weightless_layouts(model, shapes) if mode == "batch" and o.weightless
                else (None, 0)
            )  # fmt: skip
            if has_cores is False:  # one refused row, instead of a refused trial per K
                candidates.append(
                    {"mode": "batch", "weightless": True, "refused": "no weightless core"}
                )
            if has_cores:
                for count in chunk_counts(mode, extent, o.max_chunks, o.min_rows):
                    for stagger in STAGGERS[mode]:
                        self._try(model, context, shapes, candidates, seen, mode, count,
                                  stagger, 0, 0, 0, weightless=True)  # fmt: skip
                # the same cores cut along their attention heads (``weightless.heads``)
                for count in chunk_counts(mode, heads, o.max_chunks, 1):
                    self._try(model, context, shapes, candidates, seen, mode, count, 0, 0, 0,
                              0, weightless=True, heads=True)  # fmt: skip
                # ... and the best heads layout's pieces along their query rows
                top = min(
                    (c for c in candidates if c.get("heads") and "predicted_activations" in c),
                    key=lambda c: c["predicted_activations"], default=None,
                )  # fmt: skip
                hk = 0 if top is None or not o.queries_batched else int(top["chunks"])
                for q in QUERY_PIECES if hk else ():
                    self._try(model, context, shapes, candidates, seen, mode, hk, 0, 0, 0, 0,
                              weightless=True, heads=True, query_chunks=q)  # fmt: skip
            if mode == "spatial":  # regions entered at interior tensors (``chunking.cone``)
                for name, ext in _cone_ends(model, shapes, o.spatial_axis):
                    for count in chunk_counts(mode, ext, o.max_chunks, o.min_rows):
                        for stagger, distinct in CONE_LAYOUTS:
                            if stagger * (count - 1) < ext // count:
                                self._try(model, context, shapes, candidates, seen, mode,
                                          count, stagger, distinct, 0, 0, cone=name)  # fmt: skip
            if mode == "spatial" and o.nested:
                # sub-bands inside the best overlapping-band layouts (``chunking.nested``)
                best = sorted(
                    (c for c in candidates if c.get("overlap") and "predicted_activations" in c),
                    key=lambda c: c["predicted_activations"],
                )[:NESTED_OUTER]
                for c in best:
                    for iend in _inner_ends(model, shapes, c, o.spatial_axis):
                        for ik in NESTED_COUNTS:
                            self._try(model, context, shapes, candidates, seen, mode,
                                      c["chunks"], 0, 0, 0, 0, c["end"], (iend, ik))  # fmt: skip
        batched = bool(entries_for(model, shapes, "batch", 0))
        if "batch" in modes and o.weightless and o.queries and (o.queries_batched or not batched):
            # attention cores cut along their query rows, Kᵀ/V whole (batch 1; with
            # queries_batched at any batch)
            rows = _query_rows(model, shapes)
            if not rows:
                candidates.append(
                    {"mode": "queries", "queries": True, "refused": "no query-row split"}
                )
            largest = _query_largest_rows(model, shapes) if rows else 0
            # each count once for the large cores alike, once for every core its own count
            # (``weightless.piece_counts``; a duplicate where the cores are all alike)
            for count in query_counts(rows, largest, o.max_chunks) if rows else []:
                for stagger in STAGGERS["queries"]:
                    for scaled in (False, True):
                        self._try(model, context, shapes, candidates, seen, "queries", count,
                                  stagger, 0, 0, 0, queries=True, scaled=scaled)  # fmt: skip
            # ... and along their heads (batch 1: no batch region for ``weightless.heads``),
            # only where the query rows cannot give max_chunks pieces (a decoder step, a short
            # query over long keys): a heads piece holds as many scores as a query piece but
            # slices Q, Kᵀ and V, and was predicted higher at every count on ViT-B/16 @224,
            # CLIP B/16 @384 and a Whisper decoder (docs/chunk.md, "Uneven pieces")
            few = not rows or largest < o.max_chunks
            nheads = 0 if batched or not few else _query_rows(model, shapes, along="heads")
            for count in chunk_counts("batch", nheads, o.max_chunks, 1) if nheads else []:
                self._try(model, context, shapes, candidates, seen, "queries", count, 0, 0, 0,
                          0, heads=True, queries=True)  # fmt: skip
        stats: dict[str, Any] = {"predicted_activations_before": base, "candidates": candidates}
        ok = [c for c in candidates if "refused" not in c]
        if not ok:
            stats["reason"] = "no region could be chunked" + (
                f" ({candidates[0]['refused']})" if candidates else ""
            )
            return stats, False, base
        ranking = rank(
            ok, o.activation_budget, lambda c: (c["chunks"], c["extra_flops"], c["stagger"]),
            lambda c: (c["extra_flops"], c["chunks"]),
        )  # fmt: skip
        pick = ranking[0]
        if o.activation_budget and pick["predicted_activations"] > o.activation_budget:
            stats["budget"] = "not met: chose as without a budget"
        if o.min_saving and base - pick["predicted_activations"] < o.min_saving:
            stats["reason"] = (
                f"best candidate ({pick['mode']} x{pick['chunks']}) lowers the predicted "
                f"activations by {base - pick['predicted_activations']} B, under min_saving "
                f"{o.min_saving} B"
            )
            return stats, False, base
        if pick["predicted_activations"] > base * (1 - o.min_gain):
            stats["reason"] = (
                f"best candidate ({pick['mode']} x{pick['chunks']}) lowers the predicted "
                f"activations by less than {o.min_gain:.0%}"
            )
            return stats, False, base
        # Then the others that still gain enough, lowest prediction first.
        gain = max(o.min_saving, o.min_gain * base)
        ranking = [pick] + [c for c in ranking[1:] if base - c["predicted_activations"] >= gain]
        chooser = self._chooser(model, context, shapes)
        what = "steady state" + (" (CUDA: GPU + host)" if chooser.total else "")
        chosen = chooser.choose_into(ranking, stats, f"every layout tried raises the {what}")
        if chosen is None:
            return stats, False, base
        pick = chosen
        region, st = apply(
            model, shapes, pick["mode"], pick["chunks"], o.spatial_axis, pick["stagger"],
            pick["trim"], pick["distinct"], pick.get("cut", 0), end=pick.get("end", ""),
            overlap=pick.get("overlap", False), inner=_inner(pick), cone=pick.get("cone", ""),
            weightless=pick.get("weightless", False), heads=pick.get("heads", False),
            queries=pick.get("queries", False), query_chunks=pick.get("query_chunks", 0),
            scaled=pick.get("scaled", False),
        )  # fmt: skip
        stats.update(
            mode=pick["mode"],
            chunks=pick["chunks"],
            stagger=pick["stagger"],
            edges=st.edges,
            trim=pick["trim"],
            cut=pick.get("cut", 0),
            predicted_activations_after=pick["predicted_activations"],
            extra_flops=round(st.extra_flops, 4),
            region_nodes=st.nodes_before,
            nodes_added=st.nodes_after,
            region_outputs=st.outputs,
            shape_classes=st.shape_classes,
            halo_rows=st.halo_rows,
            specialized=st.specialized,
            stopped_at=region.stops,
            reblocked=st.reblocked,
        )
        if pick.get("end"):
            stats.update(end=pick["end"], overlap=True)
        if pick.get("inner"):
            stats["inner"] = pick["inner"]
        if pick.get("cone"):
            stats["cone"] = pick["cone"]
        if pick.get("weightless"):
            stats["weightless"] = True
        if pick.get("heads"):
            stats["heads"] = True
        if pick.get("queries"):
            stats["queries"] = True
        if pick.get("query_chunks"):
            stats["query_chunks"] = pick["query_chunks"]
        if pick.get("scaled"):
            stats["scaled"] = True
        if st.pieces:
            stats["pieces"] = st.pieces
        return stats, True, pick["predicted_activations"]
