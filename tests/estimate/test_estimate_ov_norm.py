"""OpenVINO CPU: LayerNormalization over the last axis of a 4-D tensor runs decomposed
(``estimate/ov_norm.py``; docs/estimate.md, "ORT OpenVINO EP", rule 30).

Known answers on ConvNeXt blocks as HF exports write them (depthwise Conv 7x7 -> Transpose to
channels-last -> LayerNorm -> MLP -> Transpose back -> residual Add), and the real EP on three
of them (skips without the EP's venv).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from interpreters import NO_OVEP, measured_ep_stages, ovep_python
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.lifetimes import positions
from memshrink.estimate.ov_norm import decomposed_layer_norms
from memshrink.estimate.schedule import schedule


def _blocks(n: int = 1, c: int = 8, hw: int = 8, batch: int | str = 2) -> onnx.ModelProto:
    """n ConvNeXt blocks (no GRN) on [batch, c, hw, hw], MLP 4c wide, GELU as erf."""
    rng = np.random.default_rng(0)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def arr(name: str, *shape: int) -> str:
        inits.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name))
        return name

    for name, v in (("r2", 1.4142135), ("one", 1.0), ("half", 0.5)):
        inits.append(numpy_helper.from_array(np.array(v, np.float32), name))
    cur = "x"
    for i in range(n):
        p = f"b{i}_"
        nodes += [
            helper.make_node(
                "Conv", [cur, arr(p + "dw", c, 1, 7, 7)], [p + "c"], group=c, pads=[3] * 4
            ),
            helper.make_node("Transpose", [p + "c"], [p + "t"], perm=[0, 2, 3, 1]),
            helper.make_node(
                "LayerNormalization", [p + "t", arr(p + "s", c), arr(p + "b", c)], [p + "ln"]
            ),
            helper.make_node("MatMul", [p + "ln", arr(p + "w1", c, 4 * c)], [p + "a"]),
            helper.make_node("Div", [p + "a", "r2"], [p + "g1"]),
            helper.make_node("Erf", [p + "g1"], [p + "g2"]),
            helper.make_node("Add", [p + "g2", "one"], [p + "g3"]),
            helper.make_node("Mul", [p + "a", p + "g3"], [p + "g4"]),
            helper.make_node("Mul", [p + "g4", "half"], [p + "g"]),
            helper.make_node("MatMul", [p + "g", arr(p + "w2", 4 * c, c)], [p + "m"]),
            helper.make_node("Transpose", [p + "m"], [p + "tb"], perm=[0, 3, 1, 2]),
            helper.make_node("Add", [cur, p + "tb"], [p + "out"]),
        ]
        cur = p + "out"
    shape = [batch, c, hw, hw]
    g = helper.make_graph(
        nodes, "convnext", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(cur, TensorProto.FLOAT, shape)], inits,
    )  # fmt: skip
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def test_a_4d_layer_norm_over_its_last_axis_gets_its_centred_copy() -> None:
    g = build_view(_blocks(2)).graph
    pos = positions(schedule(g, "openvino"))
    extra = decomposed_layer_norms(g, pos, False, 100)
    size = 2 * 8 * 8 * 8 * 4  # the LayerNorm's input [2, 8, 8, 8] in f32
    assert [(b.tensors[0], b.size, b.id) for b in extra] == [
        ("b0_t/ln_centered", size, 100),
        ("b1_t/ln_centered", size, 101),
    ]
    for b, node in zip(extra, ("b0_t", "b1_t"), strict=True):
        step = pos[g.tensors[node].consumers[0]]
        assert b.start == b.end == step  # alive only while the LayerNorm runs
    assert [b.size for b in decomposed_layer_norms(g, pos, True, 0)] == [size // 2] * 2  # bf16


def test_a_3d_layer_norm_stays_one_mvn() -> None:
    """A transformer's LayerNorm on [b, s, h] is one MVN node in the runtime model."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16, 8])
    inits = [
        numpy_helper.from_array(np.ones(8, np.float32), "s"),
        numpy_helper.from_array(np.zeros(8, np.float32), "b"),
    ]
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"])
    model = helper.make_model(
        helper.make_graph([node], "ln", [x], [y], inits),
        opset_imports=[helper.make_opsetid("", 18)],
    )
    g = build_view(model).graph
    assert decomposed_layer_norms(g, positions(schedule(g, "openvino")), False, 0) == []


def test_convnext_blocks_match_the_real_ep(tmp_path: Path) -> None:
    """Three blocks at [8, 40, 56, 56], dynamic batch (15.3 MiB MLP tensors): EP run 1 measured
    97 MiB; predicted 121.3 with the LayerNorm as one op (+25 %), 98.3 now."""
    py = ovep_python()
    if py is None:
        pytest.skip(NO_OVEP)
    path = tmp_path / "convnext.onnx"
    onnx.save(_blocks(3, 40, 56, "batch"), path)
    shapes = {"x": (8, 40, 56, 56)}
    meas = measured_ep_stages(path, py, shapes=shapes)
    pred = estimate(str(path), backend="ort-openvino", shapes=shapes).stage_peaks()
    assert pred["run_1"] == pytest.approx(meas["run1"], rel=0.08, abs=0)
