"""bfloat16 compute on ONNX Runtime CPU: which nodes the provider has no kernel for.

ORT 1.32's CPU provider registers bfloat16 kernels for data movement and a few others
(Cast, Transpose, Reshape, LayerNormalization load), not for the compute ops a bf16 export is
made of, and unlike float16 (``ort_fp16``) it inserts no Casts around them: creating the
session fails ("Could not find an implementation for MatMul(13) node"). A model cast to
``torch.bfloat16`` before export (the session-13 Llama row) therefore cannot run on ORT CPU
nor on the ORT OpenVINO EP (whose fallback nodes are ORT CPU's), while OpenVINO runs it.
``estimate`` says so instead of printing a prediction for a session that never exists.

Measured 2026-11-27, ORT 1.32, one node with bfloat16 inputs: no kernel for ``BF16_MISSING``
(Softmax through its ReduceMax, Gelu through its Sqrt, Conv refused at type check); a
session loads for Cast, Transpose, Reshape, LayerNormalization.
"""

from __future__ import annotations

from memshrink.estimate.graph import GraphInfo

BFLOAT16 = 16
BF16_MISSING = frozenset(
    {
        "MatMul",
        "Gemm",
        "Conv",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Softmax",
        "Relu",
        "Gelu",
        "Sigmoid",
        "Tanh",
        "ReduceMean",
        "Sqrt",
    }
)


def bf16_unsupported(g: GraphInfo) -> dict[str, int]:
    """{op type: count} of standard-domain nodes in ``BF16_MISSING`` reading a bfloat16 input:
    nodes ORT CPU has no kernel for (empty: the session can be created, as far as this goes)."""
    out: dict[str, int] = {}
    for node in g.nodes:
        if node.op_type not in BF16_MISSING or node.domain not in ("", "ai.onnx"):
            continue
        if any(
            (t := g.tensors.get(i)) is not None and t.elem_type == BFLOAT16
            for i in node.inputs
            if i
        ):
            out[node.op_type] = out.get(node.op_type, 0) + 1
    return out
