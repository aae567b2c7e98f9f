"""Weight-only data movement (``Identity(weight)``, a ``Cast`` / ``Transpose`` of a weight)
floats like a Constant: each part that reads it gets its own copy of the node and the weight,
instead of the value crossing a cut as a part output, which OpenVINO folds to a constant and
then has no output by that name (session 13: Qwen2-MoE streamed in 4 parts, torch's legacy
exporter writes ``m.model.norm.weight = Identity(m.model.layers.0.input_layernorm.weight)``;
"OpenVINO model has no output named 'm.model.norm.weight'")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from partition.partgraphs import (
    assert_close,
    backend_options,
    partition_to,
    run_original,
    save,
)

from memshrink.partition import read_manifest
from memshrink.runtime import PartitionedSession

H = 64


def _aliased(layers: int = 6) -> onnx.ModelProto:
    """A MatMul chain whose last layer reads ``alias = Identity(W0)`` and ``wt =
    Transpose(Cast(W0h))`` (a float16 copy cast back): both made at the top, read at the end."""
    rng = np.random.default_rng(0)
    w = [(rng.standard_normal((H, H)) / 8).astype(np.float32) for _ in range(layers)]
    inits = [numpy_helper.from_array(a, f"W{i}") for i, a in enumerate(w)]
    inits.append(numpy_helper.from_array(w[0].astype(np.float16), "W0h"))
    nodes = [
        helper.make_node("Identity", ["W0"], ["alias"]),
        helper.make_node("Cast", ["W0h"], ["w0f"], to=TensorProto.FLOAT),
        helper.make_node("Transpose", ["w0f"], ["wt"]),
    ]
    prev = "x"
    for i in range(layers):
        nodes += [
            helper.make_node("MatMul", [prev, f"W{i}"], [f"m{i}"]),
            helper.make_node("Tanh", [f"m{i}"], [f"t{i}"]),
        ]
        prev = f"t{i}"
    nodes += [
        helper.make_node("MatMul", [prev, "alias"], ["a"]),
        helper.make_node("MatMul", ["a", "wt"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "aliased",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", H])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", H])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_weight_aliases_float_into_the_parts_that_read_them(tmp_path: Path) -> None:
    src = save(_aliased(), tmp_path / "a.onnx")
    partition_to(src, tmp_path / "parts", parts=3)
    manifest = read_manifest(tmp_path / "parts")
    assert len(manifest.parts) >= 2
    crossing = {o.name for p in manifest.parts for o in p.outputs}
    assert not crossing & {"alias", "w0f", "wt"}  # never a part output
    last = onnx.load(tmp_path / "parts" / manifest.parts[-1].file, load_external_data=False)
    ops = [n.op_type for n in last.graph.node]
    assert ops.count("Identity") == 1 and ops.count("Cast") == 1 and ops.count("Transpose") == 1
    assert {"W0", "W0h"} <= {t.name for t in last.graph.initializer}
    feeds = {"x": np.random.default_rng(1).standard_normal((3, H)).astype(np.float32)}
    ref = run_original(src, feeds, "openvino")  # the runtime that lost the output by name
    opts = backend_options("openvino")
    with PartitionedSession(tmp_path / "parts", "openvino", "streamed", session_options=opts) as s:
        assert_close(ref, s.run(None, feeds), atol=1e-5)  # atol 1e-5, rtol 0 (f32 hint)
