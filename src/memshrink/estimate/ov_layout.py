"""Layout Reorders of the OpenVINO CPU plugin between a Conv's layout and a planar op.

Why: a Conv writes channels-last (``acdb``, bf16 / f32 brgconv) and the ops that keep a
layout (element-wise, pooling, Resize, Concat) pass it on, but a rank-changing Reshape /
Flatten reads planar (``abcd``). The plugin inserts a ``Reorder`` edge of the tensor's full
size on each such boundary: one before the Reshape (the Conv's own output stays alive for its
other readers, e.g. a residual), and one before a Conv whose input was made planar (a
Reshape, Transpose, MatMul, InstanceNormalization, then element-wise ops). GroupNorm exported
as Reshape -> InstanceNormalization -> Reshape between Convs makes two per block: runtime model
of the SD-style VAE decoder, ``Conv (acdb) -> Reorder (abcd) -> Reshape -> MVN -> Reshape ->
Eltwise -> Reorder (acdb) -> Conv``, 80 Reorders for 22 GroupNorms (docs/estimate.md, "Session
12: layout Reorders"). A static plan fits these short boxes in holes (the VAE's 24 MiB
workspace is the same with or without them); a dynamic plan gives them their own growing sets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from memshrink.estimate.graph import GraphInfo
from memshrink.estimate.lifetimes import Buffer
from memshrink.estimate.weights import FLOAT

CONVS = frozenset({"Conv", "ConvTranspose"})
#: Ops whose 4-D / 5-D output is channels-last whatever their input's layout, and which read
#: a planar input through a channels-last copy: Conv, and ``Interpolate`` (ONNX ``Resize``),
#: whose first implementation on an AVX-512 host is the ``nspc`` JIT kernel (runtime model of
#: SegFormer's decode head, native f32: ``Reshape -> Reorder abcd_acdb -> Interpolate ->
#: Concat -> Conv``, no Reorder between the Concat and the Conv).
CL_MAKERS = CONVS | {"Resize", "Upsample"}
#: Rank-changing views: the plugin runs them on the planar layout only.
PLANAR_READERS = frozenset({"Reshape", "Flatten"})
#: Ops whose 4-D / 5-D output the plugin writes planar.
PLANAR_MAKERS = frozenset({"Reshape", "Flatten", "Transpose", "InstanceNormalization", "MatMul"})


def _first_activation(g: GraphInfo, node: int) -> str | None:
    for i in g.nodes[node].inputs:
        t = g.tensors.get(i) if i else None
        if t is not None and t.kind == "activation":
            return i
    return None


def _concat_layout(g: GraphInfo, idx: int, known: Mapping[str, str]) -> str | None:
    """``Concat::selectOptimalPrimitiveDescriptor``: the layout most of its parents' outputs and
    its readers' inputs have (a Conv / Resize reader wants channels-last, a planar maker or
    reader planar); a tie goes to channels-last. tf2onnx's NHWC CNN concatenates a planar
    ``Transpose`` with a Conv's output before a Conv: runtime model ``Transpose -> Reorder
    (abcd_acdb) -> Concatenation -> Convolution``."""
    node = g.nodes[idx]
    votes = [known[i] for i in node.inputs if i and i in known]
    for o in node.outputs[:1]:
        for c in g.tensors[o].consumers if o in g.tensors else []:
            op = g.nodes[c].op_type
            if op in CL_MAKERS:
                votes.append("cl")
            elif op in PLANAR_MAKERS or op in PLANAR_READERS:
                votes.append("planar")
    if not votes:
        return None
    return "cl" if votes.count("cl") >= votes.count("planar") else "planar"


def layouts(g: GraphInfo, order: list[int], keeps: frozenset[str]) -> dict[str, str]:
    """Tensor -> ``"cl"`` (a Conv's channels-last layout) or ``"planar"``, for the 4-D / 5-D
    tensors whose layout follows from their producer; others are absent (unknown)."""
    out: dict[str, str] = {}
    for idx in order:
        node = g.nodes[idx]
        if node.op_type in CL_MAKERS:
            lay: str | None = "cl"
        elif node.op_type in PLANAR_MAKERS:
            lay = "planar"
        elif node.op_type == "Concat":
            lay = _concat_layout(g, idx, out)
        elif node.op_type in keeps:
            src = _first_activation(g, idx)
            lay = out.get(src) if src else None
        else:
            lay = None
        if lay is None:
            continue
        for o in node.outputs:
            t = g.tensors.get(o) if o else None
            if t is not None and t.shape and len(t.shape) in (4, 5):
                out[o] = lay
    return out


def _views(g: GraphInfo, name: str, aliases: frozenset[str]) -> list[str]:
    """``name`` and the views made of it by alias ops (Reshape chains share one buffer)."""
    out: list[str] = []
    stack = [name]
    while stack:
        cur = stack.pop()
        if cur in out or cur not in g.tensors:
            continue
        out.append(cur)
        for c in g.tensors[cur].consumers:
            node = g.nodes[c]
            if node.op_type in aliases and node.inputs and node.inputs[0] == cur:
                stack.extend(o for o in node.outputs[:1] if o)
    return out


def layout_copies(
    g: GraphInfo,
    order: list[int],
    pos: Mapping[int, int],
    half: bool,
    tail: set[str],
    keeps: frozenset[str],
    aliases: frozenset[str],
    bufs: Sequence[Buffer] = (),
    dynamic: bool = True,
) -> list[Buffer]:
    """One Buffer per layout Reorder (see the module doc): a channels-last tensor read by a
    Reshape / Flatten gets a planar copy alive from that reader to the last reader of its
    view; a Conv's planar-made input (not a graph input: ``ov_buffers`` has those) gets a
    channels-last copy alive from its producer to the Conv. Float edges take the inference
    precision outside the f32 ``tail``. The reads a copy takes over no longer hold the
    original's buffer in ``bufs`` (ended earlier, never later): the Reorder runs right after
    the producer / before the Reshape, and the Conv or the view reads the copy. A static
    graph's ``Shape`` nodes are constant-folded: their reads hold nothing there."""
    lay = layouts(g, order, keeps)
    out: list[Buffer] = []
    moved: set[tuple[str, int]] = set()  # (tensor, reader) pairs that now read a copy

    def size(name: str, reader: str) -> int:
        # the copy is written in its reader's precision: a Conv + Sum over an f32 tensor
        # writes f32, its Reorder to a bf16 Reshape -> MVN converts (runtime model:
        # ``c0_f32_acdb_bf16_abcd``)
        t = g.tensors[name]
        n = t.nbytes or 0
        return n // 2 if half and t.elem_type == FLOAT and reader not in tail else n

    for name, kind in lay.items():
        t = g.tensors[name]
        if kind == "cl":
            for c in t.consumers:
                node = g.nodes[c]
                if node.op_type in PLANAR_READERS and c in pos and node.inputs[0] == name:
                    view = _views(g, node.outputs[0], aliases)
                    end = max(
                        [pos[c]]
                        + [pos[r] for v in view for r in g.tensors[v].consumers if r in pos]
                    )
                    moved.update((v, r) for v in view for r in g.tensors[v].consumers)
                    out.append(
                        Buffer(0, size(name, node.outputs[0]), pos[c], end, [name + "/to_planar"])
                    )
        elif t.producer is not None and t.producer in pos:
            convs = [
                pos[c]
                for c in t.consumers
                if c in pos
                and (
                    (g.nodes[c].op_type in CL_MAKERS and g.nodes[c].inputs[0] == name)
                    or _cl_concat(g, c, lay)
                )
            ]
            if convs:
                out.append(
                    Buffer(0, size(name, name), pos[t.producer], max(convs), [name + "/to_cl"])
                )
                moved.update(
                    (name, c)
                    for c in t.consumers
                    if g.nodes[c].op_type in CL_MAKERS or _cl_concat(g, c, lay)
                )
    if moved:
        if not dynamic:
            copied = {t for t, _ in moved} | {b.tensors[0].rsplit("/", 1)[0] for b in out}
            moved.update(
                (t, c)
                for t in copied
                for c in g.tensors[t].consumers
                if g.nodes[c].op_type == "Shape"
            )
        _shorten(g, pos, bufs, moved)
    return out


def _cl_concat(g: GraphInfo, node: int, lay: Mapping[str, str]) -> bool:
    """A Concat that runs channels-last: its planar inputs are reordered before it."""
    out = g.nodes[node].outputs
    return g.nodes[node].op_type == "Concat" and bool(out) and lay.get(out[0]) == "cl"


def _shorten(
    g: GraphInfo, pos: Mapping[int, int], bufs: Sequence[Buffer], moved: set[tuple[str, int]]
) -> None:
    """End each buffer at its last read that was not moved to a layout copy (never later)."""
    for b in bufs:
        if b.is_output or not b.tensors or not any(t in g.tensors for t in b.tensors):
            continue
        if not any(
            (t, c) in moved for t in b.tensors if t in g.tensors for c in g.tensors[t].consumers
        ):
            continue
        steps = [b.start]
        for t in b.tensors:
            ti = g.tensors.get(t)
            if ti is None:
                continue
            if ti.producer is not None and ti.producer in pos:
                steps.append(pos[ti.producer])
            steps += [pos[c] for c in ti.consumers if c in pos and (t, c) not in moved]
        b.end = min(b.end, max(steps))
