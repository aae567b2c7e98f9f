"""Which nodes quantize values at run time, and which weights are int4 for a MatMul.

Why a module: passes that claim exactness or a float tolerance (``simplify``, ``ep-compat``)
must know where a runtime quantizes: a float ulp there can move an output by a whole step.
"""

from __future__ import annotations

import onnx_ir as ir

#: com.microsoft ops that quantize their float input at run time (dynamic quantization).
_DYNAMIC_QUANT = frozenset(
    {"DynamicQuantizeLinear", "DynamicQuantizeMatMul", "DynamicQuantizeLSTM", "QAttention"}
)
_INT4 = frozenset({ir.DataType.INT4, ir.DataType.UINT4})


def _is_constant(v: ir.Value | None, model: ir.Model) -> bool:
    if v is None:
        return True
    if v.name in model.graph.initializers or v.const_value is not None:
        return True
    producer = v.producer()
    return producer is not None and producer.op_type == "Constant"


def int4_into_matmul(node: ir.Node) -> bool:
    """An int4 / uint4 ``DequantizeLinear`` read by a ``MatMul``: ORT fuses the pair."""
    x = node.inputs[0] if node.inputs else None
    return (
        x is not None
        and x.dtype in _INT4
        and any(use.op_type == "MatMul" for use, _ in node.outputs[0].uses())
    )


def quantizes_activations(model: ir.Model) -> str | None:
    """The first node (``op 'name'``) that quantizes a value computed at run time, or None.

    Why: rounding to an integer grid is discontinuous, so a rewrite that moves a float value
    by one ulp (reassociation, a fused Gelu) can move the quantized value by a whole step and
    the model's output by far more than an f32 tolerance. ORT quantizes activations in
    ``DynamicQuantizeLinear`` (and the com.microsoft dynamic ops), in ``QuantizeLinear`` of an
    activation (static QDQ), in ``MatMulNBits`` at ``accuracy_level`` 4 (int8 compute), and
    in the ``MatMulNBits`` it fuses from an int4 ``DequantizeLinear`` of a weight feeding a
    ``MatMul`` (ORT's ``session.qdq_matmulnbits_accuracy_level``, 4 unless set): measured on
    ``MatMulNBitsQuantizer``'s QDQ output of BERT, onnxsim's Gelu fusion moved ORT CPU's output
    by 4.2e-4, 1e-6 with that accuracy level set to 0 (docs/reliability.md, session 15)."""
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        op, dom = node.op_type, node.domain
        label = f"{op} {node.name or ''!r}"
        if dom in ("", "ai.onnx"):
            if op == "DynamicQuantizeLinear":
                return label
            if op == "QuantizeLinear" and not _is_constant(node.inputs[0], model):
                return label
            if op == "DequantizeLinear" and int4_into_matmul(node):
                return label
        elif dom == "com.microsoft":
            if op in _DYNAMIC_QUANT:
                return label
            level = node.attributes.get("accuracy_level")
            if op == "MatMulNBits" and level is not None and level.as_int() == 4:
                return label
    return None
