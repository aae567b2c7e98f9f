"""MLAS-side kernel temporaries on ORT CPU (``ort_scratch``): Conv's working buffer and
BiasGelu's temporary, by formula and in ORT 1.32's own arena log."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate.graph import build_view
from memshrink.estimate.ort_scratch import (
    bias_gelu_bytes,
    conv_working_bytes,
    cpu_kernel_scratch,
    physical_cores,
)


def _conv(
    c_in: int, c_out: int, k: list[int], x: list[int], group: int = 1, **attrs: object
) -> onnx.ModelProto:
    w = np.ones([c_out, c_in // group, *k], np.float32)
    node = helper.make_node("Conv", ["x", "W"], ["y"], group=group, **attrs)
    g = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "W")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _bytes(m: onnx.ModelProto, threads: int) -> int:
    g = build_view(m).graph
    return conv_working_bytes(g, g.nodes[0], threads)


def test_conv_working_buffer_formula():
    """``MlasConvPrepare``: pointwise -> 0; filters > output size -> the whole im2col
    (``OutputSize x K`` floats); else ``T`` threads x a 128 x 128 float tile, ``T`` from the
    work (1 + F x N x K / 65536, at most 16) capped by the pool and the 16-aligned N stride."""
    # pointwise 1x1, stride 1, no padding: GEMM on the input
    assert _bytes(_conv(8, 16, [1, 1], [1, 8, 32, 32]), 2) == 0
    # 64 filters on a 4x4 output, 3x3 pad 1, 4 channels: 4 * 16 * 36 floats
    assert _bytes(_conv(4, 64, [3, 3], [1, 4, 4, 4], pads=[1, 1, 1, 1]), 2) == 4 * 16 * 36
    # HuBERT's first feature conv (1 -> 32, k 10, stride 5, 8000 samples): 1599 outputs,
    # F x N x K = 511,680 -> 8 threads wanted, 2 in the pool: 2 tiles (131,072 B, ORT's trace)
    hub = _conv(1, 32, [10], [2, 1, 8000], strides=[5])
    assert _bytes(hub, 2) == 2 * 128 * 128 * 4
    assert _bytes(hub, 1) == 128 * 128 * 4
    assert _bytes(hub, 16) == 8 * 128 * 128 * 4
    # a small conv: 1 + 8 * 64 * 9 / 65536 = 1 thread whatever the pool
    assert _bytes(_conv(1, 8, [3, 3], [1, 1, 10, 10], pads=[1, 1, 1, 1]), 8) == 128 * 128 * 4
    # stride 1 but padded: not pointwise even with a 1x1 kernel
    assert _bytes(_conv(8, 4, [1, 1], [1, 8, 4, 4], pads=[1, 1, 1, 1]), 2) == 128 * 128 * 4


def _bias_gelu(shape: list[int]) -> onnx.ModelProto:
    b = np.zeros(shape[-1], np.float32)
    node = helper.make_node("BiasGelu", ["x", "B"], ["y"], domain="com.microsoft")
    g = helper.make_graph(
        [node],
        "bg",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(b, "B")],
    )
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    m.ir_version = 8
    return m


def test_bias_gelu_temporary_is_the_input_size():
    """``bias_gelu.cc``: ``x + bias`` halves go to a temporary of the input's size."""
    g = build_view(_bias_gelu([2, 399, 128])).graph
    assert bias_gelu_bytes(g, g.nodes[0]) == 2 * 399 * 128 * 4
    assert cpu_kernel_scratch(g, g.nodes[0]) == [2 * 399 * 128 * 4]


_ARENA = r"""
import sys, re, numpy as np, onnxruntime as ort
ort.set_default_logger_severity(0)
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
s = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
i = s.get_inputs()[0]
s.run(None, {i.name: np.ones([int(d) for d in sys.argv[2].split(",")], np.float32)})
"""


@pytest.mark.parametrize(
    "model, shape",
    [
        # a 1 -> 32 conv whose 896,000 B output takes the first 1 MiB region whole (no split
        # under twice the request): the working buffer opens the next region
        (_conv(1, 32, [3], [1, 1, 7002]), "1,1,7002"),
        # a 1 MiB BiasGelu output fills the first region; the temporary opens the next
        (_bias_gelu([1, 64, 4096]), "1,64,4096"),
    ],
    ids=["conv1d", "bias_gelu"],
)
def test_temporaries_are_arena_requests(tmp_path, model, shape):
    """ORT's verbose arena log names the request that extends the arena: after the output,
    the next extension is the temporary, of exactly the predicted size (this host's pool)."""
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    g = build_view(model).graph
    want = cpu_kernel_scratch(g, g.nodes[0], physical_cores())
    out = subprocess.run(
        [sys.executable, "-c", _ARENA, path, shape], capture_output=True, text=True, check=True
    )
    asked = [int(x) for x in re.findall(r"\(requested\) num_bytes: (\d+)", out.stderr + out.stdout)]
    assert len(asked) == 2, asked
    assert asked[1:] == want, (asked, want)  # exact: the kernel's own Alloc size
