"""OpenVINO: attention is tokenized into a Snippets MHA subgraph with a symbolic sequence too,
and its kernel, compiled for dynamic shapes, costs more than a static one.

docs/estimate.md, "Session 9: T5 / Whisper compile" (runtime graphs of T5, Whisper, BERT,
RoBERTa, DistilBERT; per-block cost from 8 -> 64 heads).
"""

from __future__ import annotations

import onnx
import pytest
from estimate.test_estimate_openvino import _attention
from onnx import TensorProto, helper

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.openvino import OV_CALIBRATION, mha_count, mha_dynamic_count

F32 = {"INFERENCE_PRECISION_HINT": "f32"}
BF16 = {"INFERENCE_PRECISION_HINT": "bf16"}


def _heads(n: int, softmax: bool, seq: str | int = "S") -> onnx.ModelProto:
    """n x (MatMul(x, xT) -> [Softmax] -> MatMul(., x)) on [1, seq, 32]."""
    nodes, x = [], "x"
    for i in range(n):
        nodes.append(helper.make_node("Transpose", [x], [f"t{i}"], perm=[0, 2, 1]))
        nodes.append(helper.make_node("MatMul", [x, f"t{i}"], [f"q{i}"]))
        s = f"q{i}"
        if softmax:
            nodes.append(helper.make_node("Softmax", [s], [f"s{i}"], axis=-1))
            s = f"s{i}"
        nodes.append(helper.make_node("MatMul", [s, x], [f"y{i}"]))
        x = f"y{i}"
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, 32])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_symbolic_sequence_attention_is_tokenized() -> None:
    """The runtime graph of the symbolic-sequence block has a Subgraph and no Softmax."""
    import openvino as ov

    model = _attention("seq")  # type: ignore[arg-type]
    core = ov.Core()
    compiled = core.compile_model(core.read_model(model.SerializeToString(), b""), "CPU")
    kinds = [op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ordered_ops()]  # fmt: skip
    assert "Softmax" not in kinds and "Subgraph" in kinds
    g = build_view(model, dims={"batch": 2, "seq": 64}).graph
    assert mha_count(g) == 1
    assert mha_dynamic_count(g) == 1


def test_static_sequence_blocks_are_not_dynamic() -> None:
    g = build_view(_attention(64), dims={"batch": 2}).graph
    assert mha_count(g) == 1
    assert mha_dynamic_count(g) == 0


@pytest.mark.parametrize(
    ("opts", "key"), [(F32, "ov_per_mha_dyn_f32"), (BF16, "ov_per_mha_dyn")]
)  # fmt: skip
def test_dynamic_mha_kernel_cost_at_compile(tmp_path, opts, key) -> None:  # type: ignore[no-untyped-def]
    """4 heads with the Softmax against the same MatMuls without it: the difference at compile
    is 4 dynamic MHA kernels plus the 4 Softmax nodes' ov.Model share and one more op type's
    library pages."""
    peaks = {}
    for sm in (True, False):
        p = tmp_path / f"h{int(sm)}.onnx"
        onnx.save(_heads(4, sm), str(p))
        est = estimate(str(p), backend="openvino", dims={"S": 128}, session_options=opts)
        assert est.prediction.details["mha_subgraphs"] == (4 if sm else 0)
        peaks[sm] = {s.name: s for s in est.prediction.stages}["compile_model"].overhead
    want = 4 * (OV_CALIBRATION[key] + OV_CALIBRATION["ov_read_per_op"])
    want += OV_CALIBRATION["ov_lib_per_op_type"]
    assert peaks[True] - peaks[False] == pytest.approx(want, abs=0.01 * (1 << 20), rel=0)
