"""An onnxscript-authored model for ``real_models_build.py``'s ``onnxscript-opset18-ops`` row.

Its own module because onnxscript's ``@script`` reads the function's source and resolves the
names it uses (``op``, the tensor types) from the module's globals: a function defined inside
the builder does not compile.
"""

from __future__ import annotations

from onnxscript import FLOAT, INT64, script
from onnxscript import opset18 as op


@script(default_opset=op)
def net(
    cols: FLOAT["batch", 144, 1024],  # noqa: UP037, F821 (onnxscript dim names)
    where: INT64["batch", 8, 1024],  # noqa: UP037, F821
    w: FLOAT[16, 16, 3, 3],
) -> FLOAT["batch", 8, 1024]:  # noqa: UP037, F821
    """Col2Im (patch columns back to a 32 × 32 image), ReduceMean with axes as an input, a
    Conv, Split with num_outputs into a gated half, ScatterElements with reduction max."""
    img = op.Col2Im(
        cols,
        op.Constant(value_ints=[32, 32]),
        op.Constant(value_ints=[3, 3]),
        pads=[1, 1, 1, 1],
    )
    mu = op.ReduceMean(img, op.Constant(value_ints=[2, 3]), keepdims=1)
    h = op.Conv(img - mu, w, pads=[1, 1, 1, 1])
    a, g = op.Split(h, axis=1, num_outputs=2)
    z = op.Reshape(a * op.Sigmoid(g), op.Constant(value_ints=[0, 8, 1024]))
    s = op.ScatterElements(z, where, z * 2.0, axis=2, reduction="max")
    return s - op.ReduceMean(s, op.Constant(value_ints=[2]), keepdims=1)
