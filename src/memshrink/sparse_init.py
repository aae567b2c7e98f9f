"""Sparse initializers become dense ones at load: onnx_ir does not keep them.

``GraphProto.sparse_initializer`` is a constant like any initializer (ONNX: "a list of sparse
initializers, each of which is a constant"), but onnx_ir 1.1 drops the field: a node reading
one then reads an undefined value and the written model is broken. Densifying keeps the
meaning exactly (values at their indices, zeros elsewhere); the cost is the dense size, which
the external-data writer moves out of the .onnx like any other weight.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from memshrink.protowalk import all_graphs


def _dense(sp: onnx.SparseTensorProto, base_dir: str) -> onnx.TensorProto:
    values = numpy_helper.to_array(sp.values, base_dir)
    indices = numpy_helper.to_array(sp.indices, base_dir).astype(np.int64)
    shape = tuple(int(d) for d in sp.dims)
    dense = np.zeros(shape, dtype=values.dtype)
    if indices.ndim == 2:  # [NNZ, rank] coordinates
        dense[tuple(indices.T)] = values
    else:  # [NNZ] linearized (row-major) indices
        dense.reshape(-1)[indices] = values
    return numpy_helper.from_array(dense, sp.values.name)


def densify(proto: onnx.ModelProto, base_dir: str = "") -> int:
    """Turn every graph's (subgraphs too) sparse initializers into dense ones; return how many."""
    count = 0
    for g in all_graphs(proto):
        if len(g.sparse_initializer):
            g.initializer.extend(_dense(sp, base_dir) for sp in g.sparse_initializer)
            count += len(g.sparse_initializer)
            del g.sparse_initializer[:]
    return count


def has_sparse(proto: onnx.ModelProto) -> bool:
    return any(len(g.sparse_initializer) for g in all_graphs(proto))
