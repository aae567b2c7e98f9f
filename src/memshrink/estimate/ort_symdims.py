"""Named dims ONNX Runtime's own shape inference loses: no buffer reuse on them.

The allocation planner reuses a freed buffer only for a tensor of the same shape, dim by dim
equal values or equal non-empty ``dim_param`` names (``ort._same_size``). The estimator's
shapes come from ONNX's inference with data propagation, which carries a symbolic dim
(``batch``) through every shape computation. ORT 1.32's session-time inference does not
carry it through ``Slice``: a ``Reshape`` to ``Concat(Slice(Shape(x)), ...)`` has unnamed
dims in ORT, and so has everything computed from it, while ``Concat(Unsqueeze(Gather(
Shape(x))), ...)`` keeps ``batch``. Measured (x = [batch, 196, 64] bound to 2, MatMul ->
Add(bias [4, 196, 196]) -> 4 elementwise ops on [2, 4, 196, 196], arena off, run 1's
memaligns of 1,229,312 B): 2 with Gather + Unsqueeze (the chain reuses), 6 with Slice (none);
LeViT-128S fp16 (its first Reshape is ``Concat(Slice(Shape), -1)``): 12 such allocations in
ORT where the planner with ``batch`` kept predicted 6, and its memory-pattern block
3,879,936 B measured against 5,723,712 B predicted; with a static batch ORT reuses (2
allocations, block 6,523,904 B).

With the Slice giving the concrete dims and ``batch`` from Gather, ORT loses them too (6): it
does not carry shape data through ``Slice`` at all. A shape the file declares (``value_info``)
is kept: dynamo exports declare every Reshape output (BERT-base, GPT-2, ViT-B/16: 72 / 159 / 73
of 72 / 159 / 73, each with 36 ``Slice(Shape)``), and their memory-pattern blocks were predicted
to the byte with the names kept; LeViT's legacy export declares none.

A declaration names only what it writes: dynamo's wav2vec2 declares the attention Reshape's
output ``[?, ?, ?, ?]`` and the scores ``[?, 4, S, ?]`` (dims left empty), and ORT keeps them
unnamed (its ``optimized_model_filepath`` dump): run 1 allocates the scores, the Softmax and
the ``Where`` fresh (no in-place, no reuse), and its memory-pattern block is 18,307,328 B,
against 15,711,296 predicted with the names kept and 18,306,368 with them lost. BERT-base's
identical chain ran 48 fresh [1, 12, 128, 128] buffers, as lost names predict (2 kept).

``ort_view`` renames those dims ``unk__ort`` (``ort._unnamed``), for ORT CPU only: the output
of a ``Reshape`` whose shape derives from a lost shape value (a ``Slice`` of shape data, and
what shape data is computed from it, or a ``Shape`` of a renamed tensor), then every tensor
computed from a renamed one, except through ``Shape``/``Size``. A declared tensor keeps the
dims its declaration names (a value or a name) and loses only the ones it leaves empty
(``GraphInfo.declared_empty``); one declared in full stops the renaming.

**A computed target read twice.** ORT carries names through a ``Reshape`` only because its
level-1 ``ReshapeFusion`` turns a ``Concat`` target of constants and ``Unsqueeze(Gather(Shape))``
chains into a constant (0 = copy that dim); a target the fusion leaves computed gives an output
of unknown dims (no ``dim_param``), so no buffer reuse. The fusion needs the ``Concat`` read by
that Reshape alone, and CSE (before it) merges equal targets into one with several readers: the
TorchScript exporter's q / k / v ``view`` targets. ORT's inferred shapes (tensors added as graph
outputs, its ``optimized_model_filepath`` dump), x = [batch, seq, 256] -> two Reshapes to
``Concat(Unsqueeze(Gather(Shape(x), 0)), Unsqueeze(Gather(Shape(x), 1)), [4, 64])``: one Reshape
``[batch, seq, 4, 64]``; two Reshapes with one target each (CSE merges them), one target shared
by both, or one target also read by an ``Identity``: ``[?, ?, ?, ?]``; the same two with
``CommonSubexpressionElimination`` disabled: named again. On a TorchScript 4-block transformer
(b8 x 256, h 256) this is the memory-pattern block: 37,750,528 B in ORT's arena log, 56,623,488
predicted with the names kept, 37,749,184 with them lost (``shared_targets``).
"""

from __future__ import annotations

import dataclasses

from memshrink.estimate.graph import GraphInfo, NodeInfo

LOST = "unk__ort"
_SHAPE_OPS = frozenset({"Shape", "Size"})


def _visit(g: GraphInfo, n: NodeInfo, shape_data: set[str], lost_data: set[str],
           unnamed: set[str], shared: frozenset[str] = frozenset()) -> None:  # fmt: skip
    ins = [x for x in n.inputs if x]
    outs = [o for o in n.outputs if o]
    if n.op_type in _SHAPE_OPS:
        shape_data.update(outs)
        if ins and ins[0] in unnamed:
            lost_data.update(outs)
        return
    consts = [x for x in ins if x not in shape_data]
    if len(consts) < len(ins) and all(g.tensors[x].kind == "initializer" for x in consts):
        shape_data.update(outs)  # a shape computation: shape values and constants only
        if (n.op_type == "Slice" and ins[0] in shape_data) or any(x in lost_data for x in ins):
            lost_data.update(outs)
        return
    if (
        n.op_type == "Reshape"
        and len(ins) > 1
        and (ins[1] in lost_data or (ins[1] in shared and ins[1] in shape_data))
    ) or any(x in unnamed for x in ins if x not in shape_data):
        # a declared shape is kept, but for the dims it leaves empty
        unnamed.update(o for o in outs if o not in g.declared or o in g.declared_empty)


def ort_view(g: GraphInfo) -> GraphInfo | None:
    """``g`` with the named dims ORT cannot name renamed ``unk__ort``; None when none."""
    nodes = [n for n in g.nodes if n.index not in g.folded]
    shape_data: set[str] = set()  # values computed from Shape / Size
    lost_data: set[str] = set()  # shape values ORT's inference does not know
    unnamed: set[str] = set()  # tensors whose named dims ORT does not know
    shared = shared_targets(g, nodes)
    size = -1
    while size != len(shape_data) + len(lost_data) + len(unnamed):  # index order is not
        size = len(shape_data) + len(lost_data) + len(unnamed)  # topological (appended nodes)
        for n in nodes:
            _visit(g, n, shape_data, lost_data, unnamed, shared)
    renamed = {}
    for name in unnamed:
        t = g.tensors.get(name)
        if t is None or t.sym_shape is None:
            continue
        empty = g.declared_empty.get(name) if name in g.declared else None
        sym = tuple(
            LOST
            if isinstance(d, str)
            and d
            and not d.startswith("unk__")
            and (empty is None or i in empty)
            else d
            for i, d in enumerate(t.sym_shape)
        )
        if sym != t.sym_shape:
            renamed[name] = dataclasses.replace(t, sym_shape=sym)
    if not renamed:
        return None
    return dataclasses.replace(g, tensors={**g.tensors, **renamed})


def _key(g: GraphInfo, name: str, prod: dict[str, NodeInfo], memo: dict[str, object]) -> object:
    """What ORT's CSE sees of a shape computation's tensor: a tiny constant by value (after
    ``ConstantSharing``), a ``Shape`` by the tensor it reads, another node by (op, attributes,
    its inputs' keys); anything else by name."""
    if name in memo:
        return memo[name]
    memo[name] = ("n", name)  # a cycle guard; replaced below
    t = g.tensors.get(name)
    n = prod.get(name)
    key: object
    if t is not None and t.small is not None:
        key = ("v", t.elem_type, t.small)
    elif n is None or n.domain not in ("", "ai.onnx") or n.subgraphs:
        key = ("n", name)
    elif n.op_type in _SHAPE_OPS:
        key = (n.op_type, tuple(sorted((k, repr(v)) for k, v in n.attrs.items())), tuple(n.inputs))
    else:
        attrs = tuple(sorted((k, repr(v)) for k, v in n.attrs.items()))
        ins = tuple(_key(g, i, prod, memo) if i else "" for i in n.inputs)
        key = (n.op_type, attrs, ins, n.outputs.index(name))
    memo[name] = key
    return key


def shared_targets(g: GraphInfo, nodes: list[NodeInfo]) -> frozenset[str]:
    """The Reshape targets ``ReshapeFusion`` leaves computed because more than one node reads
    them once CSE has merged equal targets (module docstring)."""
    prod = {o: n for n in nodes for o in n.outputs if o}
    targets = {n.inputs[1] for n in nodes if n.op_type == "Reshape" and len(n.inputs) > 1}
    targets = {t for t in targets if t in prod and g.tensors.get(t) is not None}
    if not targets:
        return frozenset()
    memo: dict[str, object] = {}
    readers: dict[object, int] = {}
    keys = {t: _key(g, t, prod, memo) for t in targets}
    for t, k in keys.items():
        live = [c for c in g.tensors[t].consumers if c not in g.folded]
        readers[k] = readers.get(k, 0) + len(live) + (1 if g.tensors[t].is_output else 0)
    return frozenset(t for t, k in keys.items() if readers[k] > 1)
