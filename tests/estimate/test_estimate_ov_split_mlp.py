"""OpenVINO: a transformer MLP split along its hidden channels (``chunk``'s channels mode).

The plugin makes a decomposed GELU one op fused into the FC before it (``ov_gelu``) and fuses
the split's chain of accumulating Adds into one Eltwise of at most 7 inputs that runs after the
last piece, so every partial sum is alive until then (``ov_eltwise``). docs/estimate.md,
"Session 13: split transformer MLPs" (runtime models and measurements on the bf16 host).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import ov_eltwise, ov_gelu
from memshrink.estimate.graph import build_view
from memshrink.estimate.lifetimes import positions
from memshrink.estimate.openvino import ov_buffers
from memshrink.transforms.chunking.channels import split_channels

N, S, H, F = 2, 64, 32, 128  # batch, seq, width, hidden width


def _mlp(gelu: str = "tanh", batch: int | str = "batch", seq: int | str = "seq") -> onnx.ModelProto:
    """LayerNorm -> MatMul + bias -> GELU (``tanh``: the TorchScript exporter's 8 ops with
    ``x * x * x``; ``erf``: ``x * 0.5 * (1 + erf(x / sqrt 2))``; ``swish``: x * Sigmoid(x))
    -> MatMul + bias -> residual Add."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(np.ones(H, np.float32), "ln_s"),
        numpy_helper.from_array(np.zeros(H, np.float32), "ln_b"),
        numpy_helper.from_array(rng.standard_normal((H, F)).astype(np.float32), "W1"),
        numpy_helper.from_array(rng.standard_normal(F).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal((F, H)).astype(np.float32), "W2"),
        numpy_helper.from_array(rng.standard_normal(H).astype(np.float32), "b2"),
    ]
    for name, val in (("c3", 0.044715), ("c1", 1.0), ("cs", 0.798), ("ch", 0.5), ("r2", 1.414)):
        inits.append(numpy_helper.from_array(np.array(val, np.float32), name))
    nodes = [
        helper.make_node("LayerNormalization", ["x", "ln_s", "ln_b"], ["n"], axis=-1),
        helper.make_node("MatMul", ["n", "W1"], ["a0"]),
        helper.make_node("Add", ["b1", "a0"], ["a"]),
    ]
    if gelu == "tanh":
        nodes += [
            helper.make_node("Mul", ["a", "a"], ["g0"]),
            helper.make_node("Mul", ["a", "g0"], ["g1"]),
            helper.make_node("Mul", ["c3", "g1"], ["g2"]),
            helper.make_node("Add", ["a", "g2"], ["g3"]),
            helper.make_node("Mul", ["cs", "g3"], ["g4"]),
            helper.make_node("Tanh", ["g4"], ["g5"]),
            helper.make_node("Add", ["c1", "g5"], ["g6"]),
            helper.make_node("Mul", ["a", "g6"], ["g7"]),
            helper.make_node("Mul", ["ch", "g7"], ["g"]),
        ]
    elif gelu == "erf":
        nodes += [
            helper.make_node("Div", ["a", "r2"], ["e0"]),
            helper.make_node("Erf", ["e0"], ["e1"]),
            helper.make_node("Add", ["e1", "c1"], ["e2"]),
            helper.make_node("Mul", ["a", "e2"], ["e3"]),
            helper.make_node("Mul", ["e3", "ch"], ["g"]),
        ]
    else:
        nodes += [
            helper.make_node("Sigmoid", ["a"], ["s"]),
            helper.make_node("Mul", ["a", "s"], ["g"]),
        ]
    nodes += [
        helper.make_node("MatMul", ["g", "W2"], ["r0"]),
        helper.make_node("Add", ["b2", "r0"], ["r"]),
        helper.make_node("Add", ["x", "r"], ["y"]),
    ]
    dims = [batch, seq, H]
    g = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)], inits,
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _shapes(proto: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    m = onnx.ModelProto()
    m.CopyFrom(proto)
    d = m.graph.input[0].type.tensor_type.shape.dim
    d[0].dim_value, d[1].dim_value = N, S
    m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    return {
        v.name: tuple(x.dim_value for x in v.type.tensor_type.shape.dim)
        for v in [*m.graph.value_info, *m.graph.input, *m.graph.output]
    }


def _split(k: int, tmp_path, gelu: str = "tanh") -> str:
    proto = _mlp(gelu)
    model = ir.serde.deserialize_model(proto)
    if k > 1:
        assert split_channels(model.graph, _shapes(proto), k).blocks == 1
    path = tmp_path / f"mlp_{gelu}_k{k}.onnx"
    onnx.save_model(ir.serde.serialize_model(model), path)
    return str(path)


def _graph(path: str):
    view = build_view(path, dims={"batch": N, "seq": S})
    return view.graph


def _alive(bufs, step: int) -> int:
    return sum(b.size for b in bufs if b.size and b.start <= step <= b.end)


def test_both_gelu_forms_are_one_op_and_swish_is_not(tmp_path) -> None:
    for form in ("tanh", "erf"):
        g = _graph(_split(1, tmp_path, form))
        found = ov_gelu.gelus(g)
        assert [(x.x, x.output) for x in found] == [("a", "g")], form
        assert len(found[0].inner) == (8 if form == "tanh" else 4)
    assert ov_gelu.gelus(_graph(_split(1, tmp_path, "swish"))) == []


def test_fc_gelu_holds_one_hidden_tensor(tmp_path) -> None:
    """The FC writes the GELU's result: at f32 no step holds more than one [N, S, F] tensor
    (the op-by-op plan held three: ``a``, ``g0``/``g1`` and the tail)."""
    g = _graph(_split(1, tmp_path))
    order = list(range(len(g.nodes)))
    bufs = ov_buffers(g, order, dynamic=True, precision="f32")
    hidden = N * S * F * 4
    hid = [b for b in bufs if b.size == hidden]
    assert len(hid) == 1 and set(hid[0].tensors) >= {"a0", "a", "g"}
    assert max(_alive(hid, s) for s in range(len(order))) == hidden


def test_split_partial_sums_alive_until_the_fused_add(tmp_path) -> None:
    """x4: the three accumulating Adds, the bias Add and the residual Add are one Eltwise
    (4 partials + bias + x = 6 edges); at its step all four [N, S, H] partials are alive."""
    g = _graph(_split(4, tmp_path))
    chains = [c for c in ov_eltwise.fused_eltwise(g) if c.output == "y"]
    assert len(chains) == 1
    assert len(chains[0].members) == 5
    partials = [i for i in chains[0].inputs if i != "x"]
    assert len(partials) == 4
    order = list(range(len(g.nodes)))
    bufs = ov_buffers(g, order, dynamic=True, precision="f32")
    last = positions(order)[chains[0].members[-1]]
    owner = {t: b for b in bufs for t in b.tensors}
    assert all(owner[p].end >= last and owner[p].size == N * S * H * 4 for p in partials)
    assert _alive([owner[p] for p in partials], last) == 4 * N * S * H * 4


def test_eight_pieces_make_two_eltwise_nodes(tmp_path) -> None:
    """x8: 8 partials + bias + x are 10 edges, over the plugin's 7: the first node takes 7
    partials (6 Adds), the second the rest (last Add, bias Add, residual Add)."""
    g = _graph(_split(8, tmp_path))
    chains = sorted(ov_eltwise.fused_eltwise(g), key=lambda c: c.members[0])
    sums = [c for c in chains if any(i.startswith("r0__ch") for i in c.inputs)]
    assert [len(c.members) for c in sums] == [6, 3]
    assert len(sums[0].inputs) == ov_eltwise.MAX_INPUTS


def test_bf16_partials_read_by_the_f32_tail_stay_f32(tmp_path) -> None:
    """Under bf16 the fused Add chain ends at the graph output (f32 tail): the plugin reorders
    each bf16 FC result to f32 for it, so the partials are planned at f32 size."""
    g = _graph(_split(4, tmp_path))
    order = list(range(len(g.nodes)))
    bufs = ov_buffers(g, order, dynamic=True, precision="bf16")
    owner = {t: b for b in bufs for t in b.tensors}
    chain = next(c for c in ov_eltwise.fused_eltwise(g) if c.output == "y")
    assert all(owner[p].size == N * S * H * 4 for p in chain.inputs if p != "x")


def test_channel_split_keeps_symbolic_dims(tmp_path) -> None:
    """The split declares what the original declared (symbolic dims kept, channel extent
    replaced), never the bound [2, 64, 32]: mixed static pieces in a symbolic model cost ORT
    CPU and the ORT OpenVINO EP memory (measured: docs/estimate.md, Session 13)."""
    proto = _mlp()
    vi = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", "seq", F])
    proto.graph.value_info.append(vi)
    model = ir.serde.deserialize_model(proto)
    split_channels(model.graph, _shapes(proto), 2)
    vals = {v.name: v for n in model.graph for v in n.outputs}
    assert [str(d) for d in vals["a__ch0"].shape] == ["batch", "seq", str(F // 2)]
    assert vals["g__ch1"].shape is None  # undeclared in the original: left to the runtime
    assert vals["r0__ch0"].shape is None


def test_channel_split_of_a_static_model_declares_the_bound_shapes() -> None:
    """Static inputs: the pieces declare their bound shapes, as before session 13."""
    proto = _mlp(batch=N, seq=S)
    model = ir.serde.deserialize_model(proto)
    split_channels(model.graph, _shapes(proto), 2)
    vals = {v.name: v for n in model.graph for v in n.outputs}
    assert list(vals["g__ch1"].shape) == [N, S, F // 2]
    assert list(vals["r0__ch0"].shape) == [N, S, H]
