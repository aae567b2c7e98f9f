"""ORT CPU session creation as the heap sees it (``ort_fp16.lower``,
``ort_weights.creation_blocks`` and ``embedded_mode``): which fp16 weights ORT converts, the
order of the copies and of constant folding's blocks, and which glibc mode an embedded model is
predicted in."""

from __future__ import annotations

import platform

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate.graph import build_view
from memshrink.estimate.ort_fp16 import lower
from memshrink.estimate.ort_weights import creation_blocks, embedded_mode
from memshrink.estimate.weights import split_weights

x86 = pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64"), reason="fp16 kernels differ off x86-64"
)


def _shared_bias(d: int = 64) -> onnx.ModelProto:
    """x @ w + b -> Relu -> + b at fp16: ``w`` has one reader, ``b`` two."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((d, d)) * 0.02).astype(np.float16), "w")
    b = numpy_helper.from_array(rng.standard_normal(d).astype(np.float16), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Add", ["r", "b"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "shared",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [8, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [8, d])],
        [w, b],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _mlp16(n: int, d: int) -> onnx.ModelProto:
    """n x (MatMul by a d x d fp16 weight, Relu), embedded."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(n):
        w = (rng.standard_normal((d, d)) * 0.02).astype(np.float16)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes += [
            helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
            helper.make_node("Relu", [f"m{i}"], [f"r{i}"]),
        ]
        x = f"r{i}"
    g = helper.make_graph(
        nodes,
        "mlp16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [8, d])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT16, [8, d])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_a_weight_with_two_readers_keeps_its_cast():
    """Known answer (FuseInitializersTransformer fuses a Cast with one output edge only): ``w``
    becomes an f32 copy, ``b`` stays fp16 and a Cast node reads it at every run."""
    g = lower(build_view(_shared_bias()).graph)
    assert g is not None
    assert g.fp16_cast == {"w"}
    assert g.tensors["w"].elem_type == TensorProto.FLOAT
    assert g.tensors["b"].elem_type == TensorProto.FLOAT16
    (cast,) = [n for n in g.nodes if n.op_type == "Cast" and n.inputs == ["b"]]
    out = g.tensors[cast.outputs[0]]
    assert out.kind == "activation" and out.elem_type == TensorProto.FLOAT
    assert sorted(g.nodes[c].op_type for c in out.consumers) == ["Add", "Add"]


@x86
def test_shared_weight_cast_matches_ort_optimized_dump(tmp_path):
    """ORT 1.32's own optimized graph: ``FusedBack_w`` (f32) and ``b`` (fp16) with a Cast."""
    path = str(tmp_path / "s.onnx")
    onnx.save(_shared_bias(), path)
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    so.log_severity_level = 3
    ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    opt = onnx.load(str(tmp_path / "opt.onnx"))
    kinds = sorted((t.name.startswith("FusedBack_"), t.data_type) for t in opt.graph.initializer)
    assert kinds == [(False, TensorProto.FLOAT16), (True, TensorProto.FLOAT)]
    assert [list(n.input) for n in opt.graph.node if n.op_type == "Cast" and "b" in n.input]


def _ops(events: list[tuple[str, str, int]]) -> list[str]:
    return [f"{op[0]} {key}" for op, key, _ in events if not key.startswith("fields:")]


def test_embedded_fp16_creation_follows_orts_sequence():
    """Known answer (LD_PRELOAD trace of embedded LeViT-128S fp16 in the verifier's child,
    docs/estimate.md): every string, then session state's copy of each weight as stored (fp16)
    with the string's free, then per weight in topological order the fp16 source read (``h``),
    the f32 copy kept and the source freed; the fp16 copies are released together; last the
    packing frees each f32 copy."""
    g = lower(build_view(_mlp16(2, 64)).graph)
    assert g is not None
    w = split_weights(g)
    b = creation_blocks(g, w, [], embedded=True)
    assert _ops(b.events) == [
        "a read",
        "a str:w0",
        "a str:w1",
        "f read",
        "a copy16:w0",
        "f str:w0",
        "a copy16:w1",
        "f str:w1",
        "a h:w0",
        "a copy:w0",
        "f h:w0",
        "a h:w1",
        "a copy:w1",
        "f h:w1",
        "f copy16:w0",
        "f copy16:w1",
        "a pack:w0",
        "f copy:w0",
        "a pack:w1",
        "f copy:w1",
    ]
    size = {key: n for op, key, n in b.events if op == "alloc"}
    stored = 64 * 64 * 2
    assert size["copy16:w0"] - size["h:w0"] == 0  # both the stored fp16 bytes (+ header)
    assert size["copy:w0"] - size["copy16:w0"] == stored  # the f32 copy: twice the bytes
    assert b.copies == {"copy16:w0", "copy16:w1"}  # the copies freed together (the coin)


def test_external_fp16_converts_without_session_copies():
    """External data: no strings and no fp16 copies, only the conversions (h, f32, free h)."""
    g = lower(build_view(_mlp16(2, 64)).graph)
    assert g is not None
    b = creation_blocks(g, split_weights(g), [], embedded=False)
    assert _ops(b.events)[:6] == ["a h:w0", "a copy:w0", "f h:w0", "a h:w1", "a copy:w1", "f h:w1"]
    assert not b.copies


def test_embedded_fp16_model_is_predicted_copies_merged():
    """Its session copies are the fp16 ones, freed together after the transformers, as
    rewritten Conv weights' are: ``copies_merged`` (LeViT-128S fp16's copies: one merged hole in
    3 of 3 heap walks). The same net at f32 frees each copy at its packing: ``pinned``."""
    g = lower(build_view(_mlp16(2, 64)).graph)
    assert g is not None
    assert embedded_mode(g, split_weights(g), []) == "copies_merged"
    f32 = _mlp16(2, 64)
    for t in f32.graph.initializer:
        arr = numpy_helper.to_array(t).astype(np.float32)
        t.CopyFrom(numpy_helper.from_array(arr, t.name))
    for v in [*f32.graph.input, *f32.graph.output]:
        v.type.tensor_type.elem_type = TensorProto.FLOAT
    g32 = build_view(f32).graph
    assert embedded_mode(g32, split_weights(g32), []) == "pinned"


def _folded_chain(d: int = 128) -> onnx.ModelProto:
    """y = x @ Relu(C + B) with C, B weights: ORT folds Add and Relu at session creation."""
    rng = np.random.default_rng(0)
    c = numpy_helper.from_array(rng.standard_normal((d, d)).astype(np.float32), "C")
    b = numpy_helper.from_array(rng.standard_normal((d, d)).astype(np.float32), "B")
    nodes = [
        helper.make_node("Add", ["C", "B"], ["s"]),
        helper.make_node("Relu", ["s"], ["w"]),
        helper.make_node("MatMul", ["x", "w"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "folded",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, d])],
        [c, b],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_constant_folding_keeps_its_intermediates_to_the_end_of_the_pass():
    """Known answer (trace of embedded Swin-V2, docs/estimate.md): per folded node the weights
    it reads copied, its output kept, the copies freed; after the pass the intermediate ``s``
    and the copies of ``C`` and ``B`` (read only by folded nodes) are freed together; the
    folded ``w`` stays until its packing."""
    g = build_view(_folded_chain()).graph
    b = creation_blocks(g, split_weights(g), [], embedded=True)
    ops = _ops(b.events)
    start = ops.index("f str:B") + 1
    assert ops[start:] == [
        "a fin:0:C",
        "a fin:0:B",
        "a copy:s",
        "f fin:0:C",
        "f fin:0:B",
        "a fin:1:s",
        "a copy:w",
        "f fin:1:s",
        "f copy:s",
        "f copy:C",
        "f copy:B",
        "a pack:w",
        "f copy:w",
    ]
    size = {key: n for op, key, n in b.events if op == "alloc"}
    assert size["copy:s"] == size["copy:w"] == size["fin:0:C"]  # 128 x 128 f32 (+ header)


def test_folding_intermediates_count_as_freed_together():
    """An embedded model whose folding intermediates outweigh its prepacked copies is
    predicted ``copies_merged`` (freed together, as rewritten Conv weights), one with none
    ``pinned``."""
    g = build_view(_folded_chain()).graph
    assert embedded_mode(g, split_weights(g), []) == "copies_merged"
    plain = _folded_chain()
    plain.graph.node[2].input[1] = "C"
    del plain.graph.node[:2]
    g2 = build_view(plain).graph
    assert embedded_mode(g2, split_weights(g2), []) == "pinned"
