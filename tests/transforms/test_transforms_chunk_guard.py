"""``chunk`` keeps the predicted CUDA GPU steady state from rising and reports the host change.

Why a guard: the chunk layout is chosen on ORT CPU's prediction; on the CUDA EP the BFC arena
grows in power-of-two regions and every Conv node keeps its own cuDNN state on the host
(0.87 MiB a node, measured on an H200): ResNet-50 b16 went 715 -> 1376 MiB of host RSS.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import cuda
from memshrink.manager import PassContext
from memshrink.transforms.chunk import ChunkPass
from memshrink.transforms.chunking.choice import Chooser

MiB = 1 << 20


def _chain(n: int) -> onnx.ModelProto:
    """x[1, n] -> Relu -> Neg -> ReduceSum: a GPU plan of about 2 x n floats."""
    f = TensorProto.FLOAT
    g = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Neg", ["r"], ["m"]),
            helper.make_node("ReduceSum", ["m"], ["y"], keepdims=0),
        ],
        "chain",
        [helper.make_tensor_value_info("x", f, [1, n])],
        [helper.make_tensor_value_info("y", f, [])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _cnn(batch: int = 8, hw: int = 64) -> onnx.ModelProto:
    """Two 3x3 convolutions with Relu, then a global pool: batch-chunkable."""
    rng = np.random.default_rng(0)
    f = TensorProto.FLOAT
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), "w2"),
    ]
    g = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c1"], ["r1"]),
            helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c2"], ["r2"]),
            helper.make_node("GlobalAveragePool", ["r2"], ["y"]),
        ],
        "cnn",
        [helper.make_tensor_value_info("x", f, [batch, 3, hw, hw])],
        [helper.make_tensor_value_info("y", f, [batch, 8, 1, 1])],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_rewrite_that_raises_the_gpu_steady_state_is_skipped() -> None:
    base = ir.from_proto(_chain(1 << 20))  # 4 MiB tensors
    bigger = ir.from_proto(_chain(64 << 20))  # 256 MiB: new arena regions on the GPU
    same = ir.from_proto(_chain(1 << 20))
    trials = {"bigger": bigger, "same": same}

    def chooser() -> Chooser:
        return Chooser(base, PassContext(), ["cuda"], [], lambda c: trials[c["name"]])

    first = chooser()
    chosen = first.choose([{"name": "bigger", "chunks": 2}, {"name": "same", "chunks": 2}])
    assert chosen is not None and chosen["name"] == "same"
    report = first.report
    tried = [t["cuda"]["steady_state"] for t in report["tried"]]
    assert tried[0] > report["before"]["cuda"]["steady_state"] >= tried[1]
    assert report["change"]["cuda"]["steady_state"] <= 0
    assert chooser().choose([{"name": "bigger", "chunks": 2}]) is None


def test_chunk_reports_the_cuda_guard_and_host_change() -> None:
    model = ir.from_proto(_cnn())
    res = ChunkPass().run(model, PassContext())
    st = res.stats
    assert res.modified, st
    g = st["guard"]
    assert g["after"]["cuda"]["steady_state"] <= g["before"]["cuda"]["steady_state"]
    # Each added Conv node costs its cuDNN state on the host; the configurations are shared;
    # the Slice/Concat the chunks add load their small kernel families once (<= 5 MiB).
    c = cuda.CUDA_CALIBRATION
    added = sum(n.op_type == "Conv" for n in model.graph) - 2
    assert added > 0
    conv_nodes = added * c["cuda_host_conv_node"]
    assert conv_nodes <= g["change"]["cuda"]["host"] <= conv_nodes + 6 * MiB
    off = ChunkPass(guard_backends="", prefer_backends="").run(ir.from_proto(_cnn()), PassContext())
    assert "guard" not in off.stats and off.stats["chunks"] == st["chunks"]


def test_guarded_adds_the_pipelines_target() -> None:
    from memshrink.manager import PassContext
    from memshrink.transforms.predicted import guarded

    assert guarded("cuda", PassContext()) == ["cuda"]
    assert guarded("cuda", PassContext(backend="cpu")) == ["cuda"]
    assert guarded("cuda", PassContext(backend="openvino")) == ["cuda", "openvino"]
    assert guarded(" cuda, ,cuda", PassContext(backend="cuda")) == ["cuda"]
    assert guarded("", PassContext(backend="ort-openvino")) == ["ort-openvino"]
