"""Re-block a concatenated spatial region output: an identity depthwise 1×1 Conv after it.

Why: ONNX Runtime's CPU NCHWc transformer keeps a CNN's tensors in its blocked layout from
Conv to Conv, and fuses a residual ``Add`` into the Conv before it (``Sum``). A Concat along a
spatial (or the batch) axis has no blocked kernel, so the region's concatenated output is
plain NCHW; a residual block reading it then adds in plain layout, and its Conv's output is
reordered back to plain for that Add (``ReorderOutput``), block after block, until the next
projection block. On ResNet-50 at 960² (bands ending at stage 3's first block) that kept three
14 MiB tensors alive through stage 3: 49 MiB against 28 MiB with the stage in NCHWc. One
depthwise 1×1 Conv with weight 1 and no bias starts the blocked chain again (ORT reorders its
input once, as it would for the Conv that reads it anyway). Measured on ResNet-50 960²,
ORT CPU steady state: 118.8 → 106.3 MiB (the original: 229.9).

Exact: ``x * 1.0`` accumulated onto zero is ``x`` (signed zeros and NaN payloads aside).
Only added where a reader is not a window op (a Conv or pool reads the plain tensor through
one reorder either way) and the channels fill whole blocks (16 covers ORT's 8 and 16).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

#: Readers that reorder a plain input themselves: no gain from re-blocking for them alone.
_WINDOW_READERS = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}
_BLOCK = 16


def wanted(v: ir.Value, shape: tuple[int, ...], axis: int, inside: set[ir.Node]) -> bool:
    """Whether the concatenation of ``v`` (``shape``, along ``axis``) should be re-blocked:
    some reader outside the region (``inside``) is not a window op."""
    if len(shape) != 4 or axis == 1 or shape[1] % _BLOCK or v.is_graph_output():
        return False
    if v.type is None or v.type.dtype != ir.DataType.FLOAT:
        return False
    return any(u.node.op_type not in _WINDOW_READERS for u in v.uses() if u.node not in inside)


def weight(name: str, channels: int) -> ir.Value:
    """The identity depthwise filter: ``channels`` × 1 × 1 × 1 ones."""
    arr = np.ones((channels, 1, 1, 1), dtype=np.float32)
    return ir.Value(
        name=name,
        shape=ir.Shape(list(arr.shape)),
        type=ir.TensorType(ir.DataType.FLOAT),
        const_value=ir.tensor(arr, name=name),
    )


def attrs(channels: int) -> list[ir.Attr]:
    return [
        ir.Attr("group", ir.AttributeType.INT, channels),
        ir.Attr("kernel_shape", ir.AttributeType.INTS, [1, 1]),
    ]
