"""Function ops ORT CPU inlines at load (``estimate.ort_inline``) and the NCHWc Conv's fused
HardSwish (``ort_optimized``), against ONNX Runtime 1.32's own optimized graphs."""

from __future__ import annotations

import platform

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate.api import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.ort_inline import inline
from memshrink.estimate.ort_optimized import NCHWC_DOMAIN, optimize
from memshrink.estimate.ort_weights import nchwc_block_size

x86 = pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64"), reason="kernels differ off x86-64"
)


def _ort_ops(m: onnx.ModelProto, tmp_path, level: ort.GraphOptimizationLevel) -> list:
    src, dst = str(tmp_path / "m.onnx"), str(tmp_path / "m_opt.onnx")
    onnx.save(m, src)
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.optimized_model_filepath = dst
    so.log_severity_level = 3
    ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    return [
        (n.op_type, n.domain, {a.name: helper.get_attribute_value(a) for a in n.attribute})
        for n in onnx.load(dst).graph.node
    ]


def _relu_then(op: str, tp: int, opset: int) -> onnx.ModelProto:
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node(op, ["r"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", tp, [4, 8])],
        [helper.make_tensor_value_info("y", tp, [4, 8])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize(
    ("op", "tp", "opset", "body"),
    [
        ("HardSwish", TensorProto.FLOAT, 17, ["HardSigmoid", "Mul"]),
        ("Softmax", TensorProto.FLOAT16, 13, ["ReduceMax", "Sub", "Exp", "ReduceSum", "Div"]),
        ("LogSoftmax", TensorProto.FLOAT16, 13,
         ["ReduceMax", "Sub", "Exp", "ReduceSum", "Log", "Sub"]),
        ("Softmax", TensorProto.FLOAT, 13, None),
        ("Softmax", TensorProto.FLOAT16, 11, None),
    ],
)  # fmt: skip
def test_inlined_bodies_are_orts(tmp_path, op, tp, opset, body):
    """Known answer: ORT's dump at ORT_DISABLE_ALL (no optimizer, only the load) has the
    body's ops in place of the op exactly when the CPU provider has no kernel for it."""
    m = _relu_then(op, tp, opset)
    theirs = [o for o, _, _ in _ort_ops(m, tmp_path, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)]
    theirs = [o for o in theirs if o != "Cast"]  # fp16's Casts are ort_fp16's business
    view = build_view(m)
    done = inline(view.graph, list(range(len(view.graph.nodes))))
    if body is None:
        assert done is None and theirs == ["Relu", op]
        return
    assert done is not None
    g, order = done
    assert theirs == ["Relu", *body]
    assert [g.nodes[i].op_type for i in order] == ["Relu", *body]  # the body where op was
    assert g.tensors["y"].producer == order[-1] and not g.tensors["y"].consumers
    if op == "HardSwish":
        hs = g.nodes[order[1]]
        assert hs.attrs == {"alpha": pytest.approx(1 / 6, abs=1e-9), "beta": 0.5}
        assert g.tensors[hs.outputs[0]].shape == (4, 8)
    else:
        assert g.tensors[g.nodes[order[1]].outputs[0]].shape == (4, 1)  # ReduceMax keeps dims


def _attention(tp: int) -> onnx.ModelProto:
    """LeViT's attention at fp16: q, k from a Reshape to a computed shape, then
    MatMul -> Mul(scale) -> Add(bias [4, 196, 196]) -> Softmax -> MatMul(v) -> Relu."""
    dt = np.float16 if tp == TensorProto.FLOAT16 else np.float32
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(np.array(0.5, dt), "s"),
        numpy_helper.from_array(rng.random((4, 196, 196)).astype(dt), "b"),
        numpy_helper.from_array(np.array(0, np.int64), "i0"),
        numpy_helper.from_array(np.array([0], np.int64), "ax"),
        numpy_helper.from_array(np.array([196, 4, 16], np.int64), "tail"),
    ]
    mk = helper.make_node
    nodes = [
        mk("Shape", ["x"], ["sh"]), mk("Gather", ["sh", "i0"], ["b0"], axis=0),
        mk("Unsqueeze", ["b0", "ax"], ["b1"]), mk("Concat", ["b1", "tail"], ["shp"], axis=0),
        mk("Reshape", ["x", "shp"], ["r"]), mk("Transpose", ["r"], ["q"], perm=[0, 2, 1, 3]),
        mk("Transpose", ["r"], ["k"], perm=[0, 2, 3, 1]), mk("MatMul", ["q", "k"], ["mm"]),
        mk("Mul", ["mm", "s"], ["m"]), mk("Add", ["m", "b"], ["a"]),
        mk("Softmax", ["a"], ["p"], axis=-1), mk("MatMul", ["p", "q"], ["o"]),
        mk("Relu", ["o"], ["y"]),
    ]  # fmt: skip
    g = helper.make_graph(
        nodes, "att", [helper.make_tensor_value_info("x", tp, ["batch", 196, 64])],
        [helper.make_tensor_value_info("y", tp, None)], inits,
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@x86
@pytest.mark.parametrize(
    ("tp", "measured"), [(TensorProto.FLOAT16, 2_709_504), (TensorProto.FLOAT, 2_659_328)]
)
def test_attention_pattern_block_is_orts(tp, measured):
    """Known answers measured on ORT 1.32 (x = [2, 196, 64], arena off, run 2's one
    memalign under docs/bench/malloc_trace.c): the memory-pattern block. At fp16 the
    inlined Softmax body runs out of place (Sub, Exp, Div each a [2, 4, 196, 196] f32
    tensor): 2,709,504 B, where a Softmax kernel written over its input predicted
    2,759,680 B; at f32 the kernel runs in place."""
    e = estimate(_attention(tp), backend="ort", shapes={"x": [2, 196, 64]})
    assert abs(e.prediction.planners["ort_mem_pattern_block"] - measured) <= 0  # atol 0 B


def _conv_hswish(alpha: float = 1 / 6, extra_reader: bool = False) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.random((32, 16, 3, 3)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.random((32, 32, 3, 3)).astype(np.float32), "W2"),
    ]
    mk = helper.make_node
    nodes = [
        mk("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
        mk("HardSigmoid", ["c"], ["s"], alpha=alpha, beta=0.5),
        mk("Mul", ["s", "c"], ["a"]),
        mk("Conv", ["a", "W2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 16, 16])]
    if extra_reader:
        nodes.append(mk("Relu", ["c"], ["z"]))
        outs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 32, 16, 16]))
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 16, 16])],
        outs, inits,
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@x86
@pytest.mark.parametrize(
    ("model", "fused"),
    [(_conv_hswish(), True), (_conv_hswish(alpha=0.2), False),
     (_conv_hswish(extra_reader=True), False)],
)  # fmt: skip
def test_nchwc_conv_fuses_hard_swish_as_ort_does(tmp_path, model, fused):
    """ORT's dump at level all: ``x * HardSigmoid(x, 1/6, 0.5)`` after an NCHWc Conv is the
    Conv's HardSwish activation, not with another alpha or another reader of x; the
    emulated graph has the same ops and the same activation."""
    theirs = _ort_ops(model, tmp_path, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    ours = optimize(build_view(model).graph, level="all", block=nchwc_block_size()).graph
    acts = [n.attrs.get("activation") for n in ours.nodes if n.domain == NCHWC_DOMAIN]
    their_acts = [a.get("activation") for _, d, a in theirs if d == NCHWC_DOMAIN]
    assert sorted(n.op_type for n in ours.nodes) == sorted(o for o, _, _ in theirs)
    assert sorted(map(str, acts)) == sorted(
        str(a.decode() if isinstance(a, bytes) else a) for a in their_acts
    )
    assert ("HardSwish" in acts) is fused


def test_an_fp16_twin_gets_its_own_tensor_types():
    """The shape-inference cache's fingerprint counts the graph inputs' dtypes: the fp16
    twin of an f32 graph (same names and shapes) was served the f32 graph's types."""
    f32 = build_view(_relu_then("Softmax", TensorProto.FLOAT, 13)).graph
    f16 = build_view(_relu_then("Softmax", TensorProto.FLOAT16, 13)).graph
    assert f32.tensors["r"].elem_type == TensorProto.FLOAT
    assert f16.tensors["r"].elem_type == TensorProto.FLOAT16
