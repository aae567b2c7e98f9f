"""OpenVINO CPU: a LayerNormalization over the last axis of a 4-D tensor runs decomposed.

Why: the plugin's MVN node normalizes a 4-D tensor over axes ``[1, 2, 3]`` or ``[2, 3]`` only,
so an MVN over ``[3]`` (what ConvNeXt's channels-last ``LayerNorm`` is) is decomposed:
``ReduceMean -> Subtract -> Power -> ReduceMean (+ eps, Sqrt) -> Eltwise (divide, scale,
shift)``. The centred ``Subtract`` output, full size, lives beside the input and the ``Power``
output, then beside the result. Runtime model of ConvNeXt-V2 blocks (native OpenVINO 2025.4.1,
f32, static and dynamic batch alike): ``ReduceMean, Subtract, Power, ReduceMean, MVN`` per
``LayerNorm``; a 3-D one (a transformer's ``[b, s, h]``) stays one ``MVN`` node (SegFormer).
The estimator planned the normalization as one op; a full-size box at its step is what the
decomposition adds to a dynamic plan (``nonoverlapping_sets``): 3 ConvNeXt blocks without GRN
at [8, 40, 56, 56], native f32 infer 1, measured 85 MiB, predicted 107 -> 84.
"""

from __future__ import annotations

from collections.abc import Mapping

from memshrink.estimate.graph import GraphInfo
from memshrink.estimate.lifetimes import Buffer
from memshrink.estimate.weights import FLOAT


def decomposed_layer_norms(
    g: GraphInfo, pos: Mapping[int, int], half: bool, first_id: int
) -> list[Buffer]:
    """One full-size Buffer at the step of each LayerNormalization over the last axis of a
    4-D input (the centred copy), in the inference precision (``half``: bf16 / f16)."""
    out: list[Buffer] = []
    for node in g.nodes:
        if node.op_type != "LayerNormalization" or node.index not in pos or not node.inputs:
            continue
        t = g.tensors.get(node.inputs[0])
        if t is None or not t.shape or len(t.shape) != 4:
            continue
        if int(node.attrs.get("axis", -1)) not in (-1, 3):
            continue
        size = (t.nbytes or 0) // (2 if half and t.elem_type == FLOAT else 1)
        p = pos[node.index]
        out.append(Buffer(first_id + len(out), size, p, p, [node.inputs[0] + "/ln_centered"]))
    return out
