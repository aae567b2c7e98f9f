"""``MatMul(x, Transpose(W))`` on a shared weight, rewritten as ``Transpose(MatMul(W, xᵀ))``.

Why: a tied embedding / LM head (GPT-2: ``Gather(W)`` in, ``x @ Wᵀ`` out, W 147 MiB) leaves a
``Transpose`` of a weight that another node also reads, so folding it stores the weight twice.
Left as it is, ONNX Runtime constant-folds it at session creation into a heap copy (ORT CPU then
prepacks that copy as MatMul's B: two more W-sized buffers) and ships it to the OpenVINO EP in a
serialized proto. With W as MatMul's *first* input no runtime folds or prepacks anything: the
transposes move to activations (xᵀ, and the product back), one output-sized buffer more at run
time. GPT-2 `--passes all`, measured process peaks (MiB, one process each, session 12,
docs/compare.md): ORT CPU 633 → 579, OpenVINO 1005 → 959, ORT OpenVINO EP 1351 → 987 (folded
copy: 1256). Each logit is the same dot product; only the GEMM's blocking changes, so rounding
moves by a few ulp (GPT-2: max abs 1.5e-6 on logits of magnitude ~10), inside ``verify``'s 1e-5.
"""

from __future__ import annotations

import onnx_ir as ir


def _swap_perm(rank: int) -> list[int]:
    return [*range(rank - 2), rank - 1, rank - 2]


def a_rank(matmul: ir.Node) -> int | None:
    """Rank of the MatMul's input A: its own shape's, else its output's (B is 2-D here, so
    the product has A's rank whenever A has rank >= 2)."""
    a, out = matmul.inputs[0], matmul.outputs[0]
    if a is not None and a.shape is not None:
        return len(a.shape)
    return None if out.shape is None else len(out.shape)


def matmul_readers(value: ir.Value) -> list[ir.Node] | None:
    """The MatMul nodes reading ``value`` as input B, or None if any reader is something else
    (or reads it as A), or a reader's A has no known rank >= 2."""
    readers: list[ir.Node] = []
    for use in value.uses():
        node, idx = use.node, use.idx
        if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx") or idx != 1:
            return None
        rank = a_rank(node)
        if node.inputs[0] is None or rank is None or rank < 2:
            return None
        readers.append(node)
    return readers or None


def swap_tied_matmul(graph: ir.Graph, transpose: ir.Node, weight: ir.Value) -> int:
    """Rewrite every ``MatMul(x, transpose(weight))`` as ``Transpose(MatMul(weight, xᵀ))``.

    ``transpose`` must be a 2-D ``Transpose`` (perm [1, 0]) of the initializer ``weight``. Returns
    the number of MatMuls rewritten (0: nothing changed, the pattern did not hold).
    """
    out, dtype = transpose.outputs[0], weight.dtype
    if out.is_graph_output() or dtype is None:
        return 0
    readers = matmul_readers(out)
    if readers is None or any(mm.graph is not graph for mm in readers):
        return 0  # a reader inside a subgraph: left as it is
    for k, mm in enumerate(readers):
        a, rank = mm.inputs[0], a_rank(mm)
        assert a is not None and rank is not None  # matmul_readers checked both
        perm = _swap_perm(rank)
        old = mm.outputs[0]
        base = old.name or f"{transpose.name}_{k}"
        a_t = ir.node("Transpose", [a], attributes={"perm": perm}, name=f"{base}__xT")
        a_t.outputs[0].name = f"{base}__xT"
        a_t.outputs[0].dtype = dtype  # MatMul: A and B share T
        if a.shape is not None:
            a_t.outputs[0].shape = ir.Shape([a.shape[i] for i in perm])
        prod = ir.node("MatMul", [weight, a_t.outputs[0]], name=f"{base}__WxT")
        prod.outputs[0].name = f"{base}__WxT"
        prod.outputs[0].dtype = dtype
        back = ir.node("Transpose", [prod.outputs[0]], attributes={"perm": perm}, name=base)
        back.outputs[0].dtype = dtype
        if old.shape is not None and len(old.shape) == rank:
            prod.outputs[0].shape = ir.Shape([old.shape[i] for i in perm])
            back.outputs[0].shape = old.shape
        ir.convenience.replace_nodes_and_values(
            graph, mm, [mm], [a_t, prod, back], [old], [back.outputs[0]]
        )
    graph.remove(transpose, safe=True)
    return len(readers)
