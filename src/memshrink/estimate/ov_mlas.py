"""Which FCs the OpenVINO CPU plugin runs on oneDNN at f32, and so which graphs load its FC code.

At f32 (the plugin's choice on hosts without bf16, and the ORT OpenVINO EP's always) an FC
without a fused activation, and a MatMul of two activations, runs through MLAS, not oneDNN: a
graph whose FCs are all like that touches only the element-wise code base (``ov_lib_eltwise``),
not oneDNN's FC code (``ov_lib``, 5 MiB more). An FC with a fused post-op (Relu, GELU, SiLU via
the plugin's SwishFusion), a quantized FC, an FC inside an If / Loop / Scan body, or any Conv
keeps oneDNN's code. Measured with native OpenVINO and the EP, docs/estimate.md, EP rule 15 and
"Session 11: native OpenVINO at f32". Shared by ``openvino`` (native) and ``ort_openvino``.
"""

from __future__ import annotations

from collections.abc import Mapping

from memshrink.estimate import openvino, ov_kinds
from memshrink.estimate.graph import GraphInfo, NodeInfo

# Quantized FCs (int8 MatMulInteger / QDQ, 4-bit MatMulNBits) take oneDNN's or the plugin's own
# kernels at any precision: the sweep's dynamically quantized BERT and 4-bit Llama measured
# 5-8 MiB above the MLAS figure (EP session 72.2 / 63.2 MiB; -5.9 / -10 % with the saving).
# So do the recurrent sequences (oneDNN's RNN primitive on its GEMM code): a forward LSTM
# 400 x 64 x 64 at f32 measured compile file pages 4.0 MiB above the MLAS figure (session 13).
ONEDNN_FC_OPS = frozenset(
    {"MatMulInteger", "MatMulNBits", "QLinearMatMul", "DynamicQuantizeLinear", "DequantizeLinear"}
    | {"LSTM", "GRU", "RNN"}
)


def swish_reader(g: GraphInfo, out: str) -> bool:
    """Is ``out`` (an FC's output, after its bias Add) read only by ``out * Sigmoid(out)``? The
    plugin's SwishFusion makes that a Swish, fused into the FC as a post-op, as Relu is (the
    same match as ``openvino.swish_pairs``, for one tensor)."""
    t = g.tensors.get(out)
    if t is None or t.is_output or len(set(t.consumers)) != 2:
        return False
    readers = [g.nodes[c] for c in set(t.consumers)]
    sig = [r.outputs[0] for r in readers if r.op_type == "Sigmoid" and r.outputs]
    return len(sig) == 1 and any(
        r.op_type == "Mul" and sorted(r.inputs) == sorted([out, sig[0]]) for r in readers
    )


def swish_fcs(g: GraphInfo) -> int:
    """FCs (MatMul / Gemm by a weight, bias Add skipped) whose output feeds ``x * Sigmoid(x)``
    (``swish_reader``). Llama's MLP gate is one (4 x MatMul 256^2 + SiLU: EP file peak 68.9
    MiB, as with Relu 68.3, against 60.5 without an activation)."""
    n = 0
    for node in g.nodes:
        if node.op_type not in ("MatMul", "Gemm") or len(node.inputs) < 2 or not node.outputs:
            continue
        w = g.tensors.get(node.inputs[1])
        if w is None or w.kind != "initializer":
            continue
        out = node.outputs[0]
        t = g.tensors.get(out)
        if t is not None and len(set(t.consumers)) == 1:  # a bias Add between
            nxt = g.nodes[t.consumers[0]]
            if nxt.op_type == "Add" and nxt.outputs:
                out = nxt.outputs[0]
        n += swish_reader(g, out)
    return n


def body_has_fc(n: NodeInfo) -> bool:
    """An If / Loop / Scan body (nested ones too) with an FC whose only reader is an activation:
    bodies compile as inner graphs, and their post-op FCs take oneDNN's code as the main
    graph's do (native ``fc_postop`` counts main-graph weights only). torch.cond with Gemm ->
    Relu / Tanh branches: native compile file 55 / 56 MiB at f32 / bf16, no MLAS saving; a
    Scan body's MatMul -> Add(x_t) -> Tanh keeps it (sweep: +9.9 -> +0.6 %)."""
    for sub in n.subgraphs:
        for m in sub.nodes:
            if body_has_fc(m):
                return True
            if m.op_type not in ("MatMul", "Gemm") or not m.outputs:
                continue
            t = sub.tensors.get(m.outputs[0])
            readers = sorted(set(t.consumers)) if t is not None else []
            if len(readers) == 1 and sub.nodes[readers[0]].op_type in openvino.ACTIVATIONS:
                return True
    return False


def fcs_on_mlas(compiled: GraphInfo, g: GraphInfo, fc_postop_bytes: int) -> bool:
    """At f32: does ``compiled`` (the nodes OpenVINO compiles; ``g`` the whole graph) load no
    oneDNN FC / Conv code? True when it has no Conv kind, no FC with a fused post-op
    (``fc_postop_bytes`` from ``openvino.weight_rules``, or a SiLU gate), no quantized FC and
    no post-op FC in a control-flow body."""
    return not (
        ov_kinds.node_kinds(compiled) & ov_kinds.CONV_KINDS
        or fc_postop_bytes
        or swish_fcs(g)
        or any(n.op_type in ONEDNN_FC_OPS or body_has_fc(n) for n in compiled.nodes)
    )


def f32_lib_pages(
    compiled: GraphInfo, g: GraphInfo, fc_postop_bytes: int, c: Mapping[str, float]
) -> int:
    """``openvino.lib_pages`` of ``compiled`` at f32: the element-wise base in place of oneDNN's
    FC code where every FC runs on MLAS (``fcs_on_mlas``; native 4 x MatMul 256^2, compile
    file 29.1 MiB at bf16, 23.5 at f32)."""
    if not fcs_on_mlas(compiled, g, fc_postop_bytes):
        return openvino.lib_pages(compiled, c)
    return openvino.lib_pages(compiled, {**c, "ov_lib": c["ov_lib_eltwise"]})
