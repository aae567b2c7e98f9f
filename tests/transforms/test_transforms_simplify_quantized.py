"""simplify on models that quantize run-time values: float changes ahead of them are refused.

Found on ``MatMulNBitsQuantizer``'s QDQ output of BERT (docs/reliability.md, session 15):
onnxsim's Gelu fusion moved ORT CPU's output by 4.2e-4 (rtol 1e-4 stated; verify: WRONG),
because ORT fuses int4 ``DequantizeLinear -> MatMul`` into ``MatMulNBits`` that quantizes the
activations to int8: one float ulp moved a value across a rounding step.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from memshrink.manager import PassContext
from memshrink.model import load
from memshrink.transforms import get_pass
from memshrink.transforms.quantized import quantizes_activations

F = TensorProto.FLOAT


def _save(tmp_path: Path, nodes: list, inits: list, opset: int = 17, ms: bool = False) -> Path:
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, ["n", 32])],
        [helper.make_tensor_value_info("y", F, ["n", 32])],
        inits,
    )
    ops = [helper.make_opsetid("", opset)] + (
        [helper.make_opsetid("com.microsoft", 1)] if ms else []
    )
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = 10
    path = tmp_path / "q.onnx"
    onnx.save_model(m, path)
    return path


def _w(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.random.default_rng(0).random(shape, np.float32), name)


def _dynamic_quant(tmp_path: Path) -> Path:
    """x * (c1 + c2) -> DynamicQuantizeLinear -> MatMulInteger -> scaled back: the folded Add
    is float arithmetic ahead of a run-time quantization."""
    i8 = numpy_helper.from_array(
        np.random.default_rng(1).integers(-8, 8, (32, 32)).astype(np.int8), "wq"
    )
    nodes = [
        helper.make_node("Add", ["c1", "c2"], ["c3"]),
        helper.make_node("Mul", ["x", "c3"], ["h"]),
        helper.make_node("DynamicQuantizeLinear", ["h"], ["hq", "hs", "hz"]),
        helper.make_node("MatMulInteger", ["hq", "wq", "hz"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["accf"], to=F),
        helper.make_node("Mul", ["accf", "hs"], ["y"]),
    ]
    return _save(tmp_path, nodes, [_w("c1", 32), _w("c2", 32), i8])


def test_float_folds_ahead_of_dynamic_quantization_are_refused(tmp_path: Path) -> None:
    path = _dynamic_quant(tmp_path)
    result = get_pass("simplify")().run(load(path), PassContext())
    if "onnxsim unavailable" in str(result.stats.get("reason", "")):
        return
    assert not result.modified
    assert "DynamicQuantizeLinear" in str(result.stats["reason"])
    # the option restores the fold
    p = get_pass("simplify")()
    p.options.runtime_quantized = True
    result = p.run(load(path), PassContext())
    assert result.modified and result.model is not None and not result.exact
    assert "Add" not in [n.op_type for n in result.model.graph]


def test_which_nodes_quantize_run_time_values(tmp_path: Path) -> None:
    """Known answers: constants quantized offline are not run-time quantization; activations
    are, and so are MatMulNBits at accuracy level 4 and int4 DequantizeLinear into MatMul."""
    assert quantizes_activations(load(_dynamic_quant(tmp_path))).startswith("DynamicQuantizeLinear")
    s = numpy_helper.from_array(np.array(0.05, np.float32), "s")
    z = numpy_helper.from_array(np.array(0, np.int8), "z")
    qdq_weight = [
        helper.make_node("QuantizeLinear", ["w", "s", "z"], ["wq"]),
        helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["wd"]),
        helper.make_node("MatMul", ["x", "wd"], ["y"]),
    ]
    assert quantizes_activations(load(_save(tmp_path, qdq_weight, [_w("w", 32, 32), s, z]))) is None
    qdq_act = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
        helper.make_node("MatMul", ["xd", "w"], ["y"]),
    ]
    got = quantizes_activations(load(_save(tmp_path, qdq_act, [_w("w", 32, 32), s, z])))
    assert got is not None and got.startswith("QuantizeLinear")
    w4 = helper.make_tensor("w4", TensorProto.INT4, [32, 32], np.zeros(32 * 32, np.int8).tolist())
    s4 = numpy_helper.from_array(np.full((1, 32), 0.1, np.float32), "s4")
    int4 = [
        helper.make_node("DequantizeLinear", ["w4", "s4"], ["wd"], axis=0, block_size=32),
        helper.make_node("MatMul", ["x", "wd"], ["y"]),
    ]
    got = quantizes_activations(load(_save(tmp_path, int4, [w4, s4], opset=21)))
    assert got is not None and got.startswith("DequantizeLinear")
    for level, expected in ((4, True), (0, False)):
        nbits = [
            helper.make_node(
                "MatMulNBits",
                ["x", "b", "sc"],
                ["y"],
                domain="com.microsoft",
                K=32,
                N=32,
                bits=4,
                block_size=32,
                accuracy_level=level,
            )
        ]
        b = numpy_helper.from_array(np.zeros((32, 1, 16), np.uint8), "b")
        sc = numpy_helper.from_array(np.ones(32, np.float32), "sc")
        got = quantizes_activations(load(_save(tmp_path, nbits, [b, sc], ms=True)))
        assert (got is not None) is expected
