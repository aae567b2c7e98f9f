"""What the verifier needs to treat a partition folder as a model: its inputs and outputs.

Returns the verifier's own ``ModelIO`` (names, ONNX element types, dims, and the valid index
range of inputs that feed a ``Gather``), read from the manifest and — for index bounds — from
the parts that read original inputs, without loading any weight.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx

from memshrink.partition.manifest import TensorSpec, read_manifest


def _elem_type(dtype: str) -> int:
    try:
        return int(onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    except TypeError:
        return int(getattr(onnx.TensorProto, dtype.upper(), 0))


def read_partition_io(folder: str | os.PathLike):  # noqa: ANN201 - verify.modelinfo.ModelIO
    """The folder's inputs/outputs as ``memshrink.verify.modelinfo.ModelIO``."""
    from memshrink.verify.modelinfo import ModelIO, TensorInfo, read_model_io

    manifest = read_manifest(folder)

    def info(t: TensorSpec) -> TensorInfo:
        return TensorInfo(t.name, _elem_type(t.dtype), list(t.shape or []))

    bounds: dict[str, int] = {}
    originals = {t.name for t in manifest.inputs}
    for part in manifest.parts:
        if any(t.source == "input" for t in part.inputs):
            io = read_model_io(Path(folder) / part.file)
            for name, bound in io.index_bounds.items():
                if name in originals:
                    bounds[name] = min(bound, bounds.get(name, bound))
    return ModelIO(
        inputs=[info(t) for t in manifest.inputs],
        outputs=[info(t) for t in manifest.outputs],
        index_bounds=bounds,
    )
