"""``ort_optimized``'s value -> readers map is built once per graph version.

Why: each fusion asked for it, most find nothing to fuse, and a forced ``chunk`` search on the
5,000-node graph rebuilt it 240 times (2.2 of 48.5 process CPU-s). A cached map must still
equal a rebuild after every fusion that rewrites the graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
from onnx import numpy_helper

from memshrink.estimate.graph import build_view
from memshrink.estimate.ort_optimized import _Rewriter

F = onnx.TensorProto.FLOAT


def _conv_bn_relu(path: Path) -> Path:
    """x -> Conv -> BatchNormalization -> Relu -> y: ORT folds the BN into the Conv."""
    c = np.ones(4, np.float32)
    g = oh.make_graph(
        [
            oh.make_node("Conv", ["x", "w"], ["c"]),
            oh.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
            oh.make_node("Relu", ["n"], ["y"]),
        ],
        "g",
        [oh.make_tensor_value_info("x", F, [1, 4, 8, 8])],
        [oh.make_tensor_value_info("y", F, [1, 4, 8, 8])],
        [numpy_helper.from_array(np.ones((4, 4, 1, 1), np.float32), "w")]
        + [numpy_helper.from_array(c, k) for k in "sbmv"],
    )
    onnx.save_model(oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)]), path)
    return path


def _rebuilt(rw: _Rewriter) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for n in rw.nodes.values():
        for i in rw._reads(n):
            out.setdefault(i, []).append(n.idx)
    return out


def test_consumers_is_rebuilt_only_when_the_graph_changes(tmp_path: Path) -> None:
    rw = _Rewriter(build_view(_conv_bn_relu(tmp_path / "m.onnx")).graph, 16)
    first = rw.consumers()
    assert first == {"x": [0], "w": [0], "c": [1], "s": [1], "b": [1], "m": [1], "v": [1], "n": [2]}
    rw.eliminate_dropout()  # no Dropout: nothing changes
    assert rw.consumers() is first
    rw.conv_const_fusions()  # Conv+BN: the BN goes, the Conv writes "n"
    assert rw.counts == {"Conv+BatchNormalization": 1}
    after = rw.consumers()
    assert after == _rebuilt(rw) == {"x": [0], "w": [0], "n": [2]}
