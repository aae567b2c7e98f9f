"""OpenVINO CPU: the copies a split of a graph input forces (the ``chunk`` pass's cores).

Why: a graph input cut by a ``Split`` (or by several ``Slice`` nodes, which the plugin merges
into one ``Split``) into per-core slices is not read in place. At f32 the ``Split`` copies every
slice up front; under a bf16 / f16 inference precision the input is first converted whole to
a low-precision copy (a ``Reorder``) that the ``Split`` cuts in place. Either way the whole
input's bytes (in the inference precision) stay alive until the last slice reader has run,
not slice by slice. And each core's output that feeds a ``Concat`` kept in f32 (the graph's
f32 tail, ``openvino.precision_tail``) is converted back to f32 per core and held until the
``Concat``.

Measured 2026-11-27 (OpenVINO 2026.4, AMD EPYC AVX512-BF16, ``docs/bench/ov_split_copies_bench.py``;
docs/estimate.md, "Session 9: the heads split's copies"): Q/K/V graph inputs [4, 12, 512, 64]
f32, one attention core whole vs 12 cores along the heads, infer-3 activation growth (anon
over compile's): +12.0 MiB at bf16 (the 3 x 3 MiB bf16 copies, runtime graph: 51 ``Reorder``),
+18.5 at f32 (36 slices, 18 MiB, no ``Reorder``); 12 ``Slice`` per input measure the same as one
``Split`` (the runtime graph has 3 ``Split``). Inputs made inside the graph (Q/K/V from
MatMul projections) measured +3.1 (bf16) / +6.0 (f32), which the slice buffers already give.
"""

from __future__ import annotations

from collections.abc import Mapping

from memshrink.estimate.graph import GraphInfo
from memshrink.estimate.lifetimes import Buffer
from memshrink.estimate.weights import FLOAT

SLICERS = frozenset({"Split", "Slice"})


def split_inputs(g: GraphInfo) -> dict[str, list[int]]:
    """Graph inputs cut into slices: a ``Split`` reads them, or two or more ``Slice`` nodes
    do (the plugin merges those into one ``Split``). Maps the input to its slicing nodes."""
    out: dict[str, list[int]] = {}
    for name in g.inputs:
        t = g.tensors.get(name)
        if t is None:
            continue
        readers = sorted(set(t.consumers))
        cutters = [
            c for c in readers if g.nodes[c].op_type in SLICERS and g.nodes[c].inputs[0] == name
        ]
        splits = [c for c in cutters if g.nodes[c].op_type == "Split"]
        slices = [c for c in cutters if g.nodes[c].op_type == "Slice"]
        if splits or len(slices) >= 2:
            out[name] = cutters
    return out


def split_input_copies(
    g: GraphInfo, pos: Mapping[int, int], half: bool
) -> tuple[list[tuple[str, int, int, int]], set[str]]:
    """(input, bytes, first step, last step) of the whole copy each split graph input gets,
    and the slice tensors that are views of it (they take no buffer of their own)."""
    copies: list[tuple[str, int, int, int]] = []
    views: set[str] = set()
    for name, cutters in split_inputs(g).items():
        t = g.tensors[name]
        size = t.nbytes or 0
        if half and t.elem_type == FLOAT:
            size //= 2
        outs = [o for c in cutters for o in g.nodes[c].outputs if o and o in g.tensors]
        steps = [pos[c] for c in cutters if c in pos]
        steps += [pos[r] for o in outs for r in g.tensors[o].consumers if r in pos]
        if not size or not steps:
            continue
        copies.append((name, size, min(steps), max(steps)))
        views.update(outs)
    return copies, views


def f32_concat_inputs(g: GraphInfo, tail: set[str]) -> set[str]:
    """Tensors converted back to f32 for a ``Concat`` in the f32 tail (made outside it): each
    is held in f32 until the ``Concat`` runs, so its buffer is not halved."""
    out: set[str] = set()
    for n in g.nodes:
        if n.op_type != "Concat" or not n.outputs or n.outputs[0] not in tail:
            continue
        out.update(i for i in n.inputs if i in g.tensors and i not in tail)
    return out


def apply(g: GraphInfo, bufs: list[Buffer], pos: Mapping[int, int], half: bool) -> list[Buffer]:
    """Zero the slice views' buffers and append one buffer per split input's whole copy."""
    copies, views = split_input_copies(g, pos, half)
    for b in bufs:
        if b.tensors and all(t in views for t in b.tensors):
            b.size = 0
    for name, size, start, end in copies:
        bufs.append(Buffer(len(bufs), size, start, end, [name + "/split_copy"]))
    return bufs
