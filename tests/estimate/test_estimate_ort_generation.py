"""ORT CPU: BeamSearch / GreedySearch's decoder step loop replayed through the arena
(``ort_generation``).

The model is built here: a com.microsoft GreedySearch / BeamSearch over a tiny GPT-style body
(``present_i = Concat(past_i, kv(ids))`` on the past axis, ``logits = emb(ids) @ Wout``).
Measured on it (fresh processes, batch 2, prompt 6; docs/estimate.md, "Session 13:
weights inside bodies"): run 1 over an empty process, 1 beam max_length 32 / 128: 10.9 /
11.7 MiB (predicted 11.4 / 12.1); 4 beams: 12.2 / 15.6 (12.2 / 15.1); without the loop every
run was predicted at the session + 1.0 MiB.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.ort_generation import OPTION, parse_option, replay


def _model(
    beams: int = 1, layers: int = 2, heads: int = 4, hd: int = 16, vocab: int = 64
) -> onnx.ModelProto:
    """A com.microsoft GreedySearch (beams 1) / BeamSearch over a tiny GPT-style decoder body:
    present_i = Concat(past_i, kv(ids)) on the past axis, logits = emb(ids) @ Wout."""
    d = 2 * heads * hd
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((vocab, d)).astype(np.float32), "E"),
        numpy_helper.from_array(rng.standard_normal((d, vocab)).astype(np.float32), "Wout"),
        numpy_helper.from_array(np.array([0, 0, 2, heads, hd], np.int64), "kvshape"),
    ]
    nodes = [
        helper.make_node("Gather", ["E", "input_ids"], ["emb"]),
        helper.make_node("MatMul", ["emb", "Wout"], ["lg"]),
        helper.make_node("Cast", ["position_ids"], ["pos_i"], to=T.FLOAT),
        helper.make_node("Unsqueeze", ["pos_i", "ax2"], ["pos_f"]),
        helper.make_node("Add", ["lg", "pos_f"], ["logits"]),
        helper.make_node("Reshape", ["emb", "kvshape"], ["kv5"]),
        helper.make_node("Transpose", ["kv5"], ["kv"], perm=[2, 0, 3, 1, 4]),
    ]
    inits.append(numpy_helper.from_array(np.array([2], np.int64), "ax2"))
    ins = [
        helper.make_tensor_value_info("input_ids", T.INT32, ["batch_size", "seq_len"]),
        helper.make_tensor_value_info("position_ids", T.INT32, ["batch_size", "seq_len"]),
        helper.make_tensor_value_info("attention_mask", T.INT32, ["batch_size", "total_seq_len"]),
    ]
    outs = [helper.make_tensor_value_info("logits", T.FLOAT, ["batch_size", "seq_len", vocab])]
    for i in range(layers):
        ins.append(
            helper.make_tensor_value_info(
                f"past_{i}", T.FLOAT, [2, "batch_size", heads, "past_seq_len", hd]
            )
        )
        outs.append(
            helper.make_tensor_value_info(
                f"present_{i}", T.FLOAT, [2, "batch_size", heads, "total_seq_len", hd]
            )
        )
        nodes.append(helper.make_node("Concat", [f"past_{i}", "kv"], [f"present_{i}"], axis=3))
    body = helper.make_graph(nodes, "decoder", ins, outs, inits)
    op = "BeamSearch" if beams > 1 else "GreedySearch"
    names = ["input_ids", "max_length", "min_length"] + (
        ["num_beams", "num_return_sequences", "length_penalty", "repetition_penalty"]
        if beams > 1
        else ["repetition_penalty"]
    )
    attrs = dict(eos_token_id=1, pad_token_id=1, model_type=0, decoder=body)
    if beams > 1:
        attrs.update(no_repeat_ngram_size=0, early_stopping=0)
    node = helper.make_node(op, names, ["sequences"], domain="com.microsoft", **attrs)
    gi = [
        helper.make_tensor_value_info("input_ids", T.INT32, ["batch_size", "sequence_length"]),
        helper.make_tensor_value_info("max_length", T.INT32, [1]),
        helper.make_tensor_value_info("min_length", T.INT32, [1]),
    ]
    ginit = []
    if beams > 1:
        gi += [
            helper.make_tensor_value_info("num_beams", T.INT32, [1]),
            helper.make_tensor_value_info("num_return_sequences", T.INT32, [1]),
        ]
        ginit += [numpy_helper.from_array(np.array([1.0], np.float32), "length_penalty")]
    ginit += [numpy_helper.from_array(np.array([1.0], np.float32), "repetition_penalty")]
    g = helper.make_graph(
        [node], "g", gi, [helper.make_tensor_value_info("sequences", T.INT32, None)], ginit
    )
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    m.ir_version = 10
    return m


def _stages(path: str, gen: str | None) -> tuple[dict, list[str]]:
    opts = {OPTION: gen} if gen else {}
    est = estimate(path, backend="ort", shapes={"input_ids": (2, 6)}, session_options=opts)
    return {s.name: s for s in est.prediction.stages}, est.prediction.assumptions


def test_parse_option():
    assert parse_option("max_length=32,num_beams=4") == {"max_length": 32, "num_beams": 4}
    assert parse_option({"max_length": "8"}) == {"max_length": 8}
    assert parse_option(None) == {}


def test_replay_runs_one_step_per_new_token():
    body = next(a.g for a in _model().graph.node[0].attribute if a.name == "decoder")
    bm = helper.make_model(body, opset_imports=[helper.make_opsetid("", 17)])
    assert replay(bm, 2, 6, 32, False).steps == 32 - 6
    assert replay(bm, 2, 6, 7, False).steps == 1  # the prompt's step only
    short, long_ = replay(bm, 2, 6, 16, False), replay(bm, 2, 6, 128, False)
    assert long_.touched > short.touched  # the past grows: the arena with it


def test_loop_is_added_only_with_the_lengths(tmp_path):
    path = str(tmp_path / "greedy.onnx")
    onnx.save(_model(), path)
    plain, notes = _stages(path, None)
    assert any(OPTION in n for n in notes)  # says how to set it
    assert plain["run_1"].overhead - plain["session_creation"].overhead == pytest.approx(
        1 << 20, abs=1 << 20
    )  # ort_run, less the session transient (<= 1 MiB on this file)
    looped, _ = _stages(path, "max_length=128")
    grown = looped["run_1"].peak - plain["run_1"].peak
    assert 0.5 * (1 << 20) < grown < 4 * (1 << 20)  # measured +0.8 MiB over max_length 32
    assert looped["session_creation"].peak == plain["session_creation"].peak


def test_beams_pick_their_past_into_new_buffers(tmp_path):
    one, four = str(tmp_path / "g1.onnx"), str(tmp_path / "g4.onnx")
    onnx.save(_model(), one)
    onnx.save(_model(beams=4), four)
    greedy, _ = _stages(one, "max_length=128")
    beam, _ = _stages(four, "max_length=128,num_beams=4")
    # 4x the rows and a copy of every kept present: measured 15.6 vs 11.7 MiB run 1
    assert beam["run_1"].peak - greedy["run_1"].peak > 2 * (1 << 20)
