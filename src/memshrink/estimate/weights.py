"""Which weights each runtime keeps as file-backed pages, and which it copies into the heap.

ONNX Runtime CPU (``tensorprotoutils.cc``, ``session_state.cc``): external initializers are
memory-mapped and used in place; embedded ones are copied out of the ModelProto. Kernels that
prepack a constant input copy it into anonymous memory in their own layout: MatMul/Gemm B,
quantized MatMul B, ConvTranspose and fp16 Conv weights, LSTM/GRU/RNN W and R, Attention weights.
The byte counts ORT really keeps (NCHWc filters, fusions, freed copies) are in ``ort_weights``.

OpenVINO CPU: ``read_model`` maps external weights and copies embedded ones; ``compile_model``
reorders Conv/MatMul weights into private blocked copies and clones the rest unless aligned
and free of f32 subnormals (the estimator cannot see subnormals without reading values, so it
assumes none and says so).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memshrink.estimate.graph import GraphInfo

# op type -> input positions a CPU kernel prepacks when they are constant.
ORT_PREPACK = {
    "MatMul": (1,),
    "Gemm": (1,),
    "MatMulInteger": (1,),
    "DynamicQuantizeMatMul": (1,),
    "MatMulIntegerToFloat": (1,),
    "QLinearMatMul": (3,),
    "MatMulNBits": (1,),
    "ConvTranspose": (1,),
    "LSTM": (1, 2),
    "GRU": (1, 2),
    "RNN": (1, 2),
    "Attention": (1,),
    "QAttention": (1,),
}
FLOAT = 1  # TensorProto.FLOAT
FP16 = 10  # TensorProto.FLOAT16
OV_REORDER = {"Conv", "ConvTranspose", "MatMul", "Gemm", "ConvInteger", "MatMulInteger"}


@dataclass
class WeightSplit:
    total: int = 0
    external: int = 0
    prepacked: int = 0  # ORT CPU: copied into anon memory by kernel prepacking
    prepacked_only: int = 0  # ... and used by nothing else (the original is released)
    ov_reordered: int = 0  # OpenVINO CPU: Conv/FC weights reordered into private copies
    fp16: int = 0
    gather_tables: int = 0  # read row by row (embeddings): only touched pages count
    folded_anon: int = 0  # constant-folded results kept as weights (anon), not prepacked
    largest_prepacked: int = 0
    names: dict[str, str] = field(default_factory=dict)


def split_weights(g: GraphInfo) -> WeightSplit:
    w = WeightSplit()
    for name in g.initializers:
        t = g.tensors[name]
        nb = t.nbytes or 0
        if t.folded and not t.consumers:
            continue  # an intermediate of constant folding: freed once folding is done
        w.total += nb
        if t.external and not t.inline:
            w.external += nb
        if t.elem_type == FP16:
            w.fp16 += nb
        uses = [
            (g.nodes[c], [i for i, n in enumerate(g.nodes[c].inputs) if n == name])
            for c in sorted(set(t.consumers))
        ]
        packed = [
            any(i in ORT_PREPACK.get(n.op_type, ()) for i in pos)
            or (n.op_type == "Conv" and t.elem_type == FP16 and 1 in pos)
            for n, pos in uses
        ]
        if uses and any(packed):
            w.prepacked += nb
            w.largest_prepacked = max(w.largest_prepacked, nb)
            if all(packed):
                w.prepacked_only += nb
            w.names[name] = "prepacked"
        elif t.inline:
            pass  # a heap copy (``ort_weights.creation_blocks``), not pages of a mapped file
        elif uses and all(n.op_type == "Gather" and 0 in pos for n, pos in uses):
            w.gather_tables += nb
            w.names[name] = "gather"
        elif t.folded:
            w.folded_anon += nb
        if any(n.op_type in OV_REORDER and 1 in pos for n, pos in uses):
            w.ov_reordered += nb
    return w
