"""ORT contrib ops get output shapes by their documented semantics (``contrib_shapes``), and
the estimator's view carries them on through the standard ops after them."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import contrib_shapes
from memshrink.estimate.graph import build_view

F, F16, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64
MS = "com.microsoft"


def _one(op: str, ins: dict[str, tuple[int, tuple]], n_out: int = 1, domain: str = MS, **attrs):
    """``infer`` on one node whose inputs are typed as given (name -> (dtype, shape))."""
    node = helper.make_node(op, list(ins), [f"y{i}" for i in range(n_out)], domain=domain, **attrs)
    graph = helper.make_graph([node], "g", [], [])
    return contrib_shapes.infer(graph, {k: v for k, v in ins.items() if k})


@pytest.mark.parametrize("op", ["BiasGelu", "FastGelu", "Gelu", "QuickGelu"])
def test_elementwise_ops_keep_input_shape(op: str) -> None:
    got = _one(op, {"x": (F16, ("B", 7, 64)), "b": (F16, (64,))})
    assert got == {"y0": (F16, ("B", 7, 64))}


def test_fused_matmul_transposes_and_broadcasts() -> None:
    # A [2, 4, 7, 16] @ B^T with B [1, 4, 9, 16] (transB) -> [2, 4, 7, 9]
    got = _one("FusedMatMul", {"a": (F, (2, 4, 7, 16)), "b": (F, (1, 4, 9, 16))}, transB=1)
    assert got == {"y0": (F, (2, 4, 7, 9))}
    got = _one("FusedMatMul", {"a": (F, (16, 7)), "b": (F, (16,))}, transA=1)
    assert got == {"y0": (F, (7,))}
    # a batch-dims permutation is not typed (left unknown, as before)
    assert _one("FusedMatMul", {"a": (F, (2, 7, 16)), "b": (F, (16, 9))}, transBatchA=1) == {}


def test_fused_gemm() -> None:
    got = _one("FusedGemm", {"a": (F, (8, 64)), "b": (F, (32, 64)), "c": (F, (32,))}, transB=1)
    assert got == {"y0": (F, (8, 32))}


def test_skip_layer_norm_outputs() -> None:
    ins = {"x": (F16, (8, 128, 64)), "s": (F16, (8, 128, 64)), "g": (F16, (64,))}
    for op in ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization"):
        got = _one(op, ins, n_out=4)
        assert got == {
            "y0": (F16, (8, 128, 64)),
            "y1": (F, (8, 128, 1)),  # saved statistics: float
            "y2": (F, (8, 128, 1)),
            "y3": (F16, (8, 128, 64)),  # input + skip + bias
        }


def test_layer_norm_below_opset_17_and_its_statistics() -> None:
    got = _one("LayerNormalization", {"x": (F, (2, 3, 5))}, n_out=3, domain="", axis=1)
    assert got == {"y0": (F, (2, 3, 5)), "y1": (F, (2, 1, 1)), "y2": (F, (2, 1, 1))}


def test_matmul_nbits_output_is_a_rows_times_n() -> None:
    ins = {"a": (F, ("B", 128, 64)), "w": (TensorProto.UINT8, (96, 2, 16)), "s": (F, (192,))}
    got = _one("MatMulNBits", ins, K=64, N=96, bits=4, block_size=32)
    assert got == {"y0": (F, ("B", 128, 96))}


def test_integer_matmul_to_float() -> None:
    ins = {"a": (F, (8, 128, 64)), "b": (TensorProto.INT8, (64, 32)), "s": (F, (1,))}
    assert _one("DynamicQuantizeMatMul", ins) == {"y0": (F, (8, 128, 32))}


def test_attention_output_and_present() -> None:
    ins = {"x": (F, (8, 128, 64)), "w": (F, (64, 192)), "bias": (F, (192,))}
    got = _one("Attention", ins, n_out=2, num_heads=4)
    assert got == {"y0": (F, (8, 128, 64)), "y1": (F, (2, 8, 4, 128, 16))}
    got = _one("Attention", ins, num_heads=4, qkv_hidden_sizes=[64, 64, 32])
    assert got == {"y0": (F, (8, 128, 32))}


def test_group_query_attention_output() -> None:
    got = _one(
        "GroupQueryAttention",
        {"q": (F16, (1, 5, 256)), "k": (F16, (1, 5, 64))},
        num_heads=8,
        kv_num_heads=2,
    )
    assert got == {"y0": (F16, (1, 5, 256))}
    # packed QKV: 8 query heads + 2 * 2 kv heads of 32 -> 8 * 32
    got = _one(
        "GroupQueryAttention", {"q": (F16, (1, 5, 384)), "": (0, ())}, num_heads=8, kv_num_heads=2
    )
    assert got == {"y0": (F16, (1, 5, 256))}


def test_embed_layer_norm() -> None:
    ins = {"ids": (I64, (8, 128)), "seg": (I64, (8, 128)), "we": (F, (400, 64))}
    got = _one("EmbedLayerNormalization", ins, n_out=2)
    assert got == {"y0": (F, (8, 128, 64)), "y1": (TensorProto.INT32, (8,))}


def _chain_model() -> onnx.ModelProto:
    """x [B, S, 64] -> FusedMatMul (64 -> 96) -> Relu -> SkipLayerNormalization -> Relu -> y,
    with y declared under an exporter's own dim names, as ORT's saved models do."""
    w = numpy_helper.from_array(np.zeros((64, 96), np.float32), "w")
    g = numpy_helper.from_array(np.ones((96,), np.float32), "g")
    nodes = [
        helper.make_node("FusedMatMul", ["x", "w"], ["mm"], domain=MS, alpha=0.5),
        helper.make_node("Relu", ["mm"], ["r"]),
        helper.make_node("SkipLayerNormalization", ["r", "mm", "g"], ["ln"], domain=MS),
        helper.make_node("Relu", ["ln"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", F, ["B", "S", 64])],
        [helper.make_tensor_value_info("y", F, ["Addy_dim_0", "Addy_dim_1", 96])],
        [w, g],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 14), helper.make_opsetid(MS, 1)]
    )


def test_view_carries_contrib_shapes_through_standard_ops() -> None:
    view = build_view(_chain_model(), shapes={"x": (8, 128, 64)})
    t = view.graph.tensors
    for name in ("mm", "r", "ln", "y"):
        assert t[name].shape == (8, 128, 96), name
        assert t[name].elem_type == F, name
    assert t["y"].nbytes == 8 * 128 * 96 * 4
    # the session-creation view keeps the input's symbols
    assert t["r"].sym_shape == ("B", "S", 96)


def test_shape_value_beats_stale_unk_value_info() -> None:
    """A quantizer's saved ``value_info`` (``unk__N``) must not hide a computed size: the
    Range's length is the bound sequence length."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shp"]),
        helper.make_node("Gather", ["shp", "one"], ["s"], axis=0),
        helper.make_node("Range", ["zero", "s", "step"], ["rng"]),
        helper.make_node("Unsqueeze", ["rng", "ax"], ["u"]),
        helper.make_node("Add", ["x", "u"], ["y"]),
    ]
    consts = [
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(1, np.int64), "step"),
        numpy_helper.from_array(np.array([0], np.int64), "ax"),
    ]
    graph = helper.make_graph(
        nodes,
        "rng",
        [helper.make_tensor_value_info("x", I64, ["B", "S"])],
        [helper.make_tensor_value_info("y", I64, None)],
        consts,
        value_info=[helper.make_tensor_value_info("rng", I64, ["unk__4"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    t = build_view(model, shapes={"x": (8, 128)}).graph.tensors
    assert t["rng"].shape == (128,)
    assert t["u"].shape == (1, 128)
    assert t["y"].shape == (8, 128)


def test_contrib_rounds_are_capped_by_graph_size() -> None:
    """Each round re-infers the whole graph: a big contrib-heavy graph gets fewer rounds (what
    stays untyped is reported unknown), a small one as many as it needs."""
    from memshrink.estimate.graph import CONTRIB_NODE_ROUNDS, MAX_CONTRIB_ROUNDS, contrib_rounds

    assert contrib_rounds(10) == MAX_CONTRIB_ROUNDS
    assert contrib_rounds(1_200) == CONTRIB_NODE_ROUNDS // 1_200 == 20
    assert contrib_rounds(100_000) == 4
