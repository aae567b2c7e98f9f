"""OpenVINO: the copies a heads split of attention forces, and the wide MHA kernel's cost.

docs/estimate.md, "Session 9: the heads split's copies" (Q/K/V graph inputs [4, 12, 512, 64],
one core whole vs 12 cores; runtime graphs: 3 Split, 51 Reorder at bf16; N-block slopes).
Known answers built from small graphs; the sizes follow from the shapes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.backends import CALIBRATION
from memshrink.estimate.graph import build_view
from memshrink.estimate.openvino import (
    OV_CALIBRATION,
    mha_count,
    mha_folded_transposes,
    mha_internal,
    mha_wide_count,
    ov_buffers,
    precision_tail,
)
from memshrink.estimate.ov_slices import f32_concat_inputs, split_input_copies, split_inputs

MiB = 1 << 20
F = TensorProto.FLOAT
B, H, S, D = 2, 4, 64, 32  # one [B, H, S, D] f32 tensor: 64 KiB
T = B * H * S * D * 4


def _core(q: str, k: str, v: str, t: int) -> list[onnx.NodeProto]:
    return [
        helper.make_node("Transpose", [k], [f"kt{t}"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", [q, f"kt{t}"], [f"sc{t}"]),
        helper.make_node("Softmax", [f"sc{t}"], [f"p{t}"], axis=-1),
        helper.make_node("MatMul", [f"p{t}", v], [f"o{t}"]),
    ]


def _attention(n: int, cut: str = "split") -> onnx.ModelProto:
    """Q/K/V graph inputs; one core (n = 1) or n cores along the heads, cut by one ``Split``
    or by n ``Slice`` nodes per input, joined by a ``Concat`` that makes the output."""
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    if n == 1:
        nodes += _core("q", "k", "v", 0)
        out = "o0"
    else:
        step = H // n
        inits.append(numpy_helper.from_array(np.array([1], np.int64), "ax"))
        for i in range(n):
            inits.append(numpy_helper.from_array(np.array([i * step], np.int64), f"s{i}"))
            inits.append(numpy_helper.from_array(np.array([(i + 1) * step], np.int64), f"e{i}"))
        for c in "qkv":
            if cut == "split":
                outs = [f"{c}{i}" for i in range(n)]
                nodes.append(helper.make_node("Split", [c], outs, axis=1, num_outputs=n))
            else:
                for i in range(n):
                    nodes.append(
                        helper.make_node("Slice", [c, f"s{i}", f"e{i}", "ax"], [f"{c}{i}"])
                    )
        for i in range(n):
            nodes += _core(f"q{i}", f"k{i}", f"v{i}", i)
        nodes.append(helper.make_node("Concat", [f"o{i}" for i in range(n)], ["y"], axis=1))
        out = "y"
    g = helper.make_graph(
        nodes,
        "att",
        [helper.make_tensor_value_info(c, F, [B, H, S, D]) for c in "qkv"],
        [helper.make_tensor_value_info(out, F, [B, H, S, D])],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _graph(model: onnx.ModelProto):  # type: ignore[no-untyped-def]
    return build_view(model).graph


@pytest.mark.parametrize("cut", ["split", "slice"])
def test_split_inputs_found_by_split_or_several_slices(cut: str) -> None:
    g = _graph(_attention(4, cut))
    assert sorted(split_inputs(g)) == ["k", "q", "v"]
    assert split_inputs(_graph(_attention(1))) == {}


@pytest.mark.parametrize(("half", "want"), [(False, T), (True, T // 2)])
def test_whole_copy_lives_until_the_last_slice_reader(half: bool, want: int) -> None:
    """Each split input: one copy of its bytes (half at bf16) from the Split to the last core
    that reads a slice, and the slices are views of it."""
    g = _graph(_attention(4))
    order = list(range(len(g.nodes)))
    copies, views = split_input_copies(g, {i: i for i in order}, half)
    assert {name: size for name, size, _, _ in copies} == {"q": want, "k": want, "v": want}
    last = {}
    for name in "qkv":
        readers = [c for i in range(4) for c in g.tensors[f"{name}{i}"].consumers]
        last[name] = max(readers)
    assert {name: end for name, _, _, end in copies} == last
    assert views == {f"{c}{i}" for c in "qkv" for i in range(4)}


def test_bf16_core_outputs_stay_f32_before_a_tail_concat() -> None:
    """The Concat making the graph output is in the f32 tail: each core's output is converted
    back to f32 and held until it (12 Reorders in the runtime graph), so it is not halved."""
    g = _graph(_attention(4))
    tail = precision_tail(g)
    assert "y" in tail
    assert f32_concat_inputs(g, tail) == {f"o{i}" for i in range(4)}
    bufs = ov_buffers(g, list(range(len(g.nodes))), False, "bf16")
    sizes = {b.tensors[0]: b.size for b in bufs if b.tensors}
    assert all(sizes[f"o{i}"] == T // 4 for i in range(4))  # f32, not T // 8
    assert all(sizes.get(f"q{i}", 0) == 0 for i in range(4))  # views of the copy
    assert sizes["q/split_copy"] == T // 2


def test_k_transpose_is_folded_into_the_mha_matmul() -> None:
    """Runtime graph of the whole core: no Transpose node (``transpose_b``): K^T has no buffer."""
    g = _graph(_attention(1))
    assert mha_folded_transposes(g, mha_internal(g)) == {"kt0"}
    bufs = ov_buffers(g, list(range(len(g.nodes))), False, "f32")
    assert all(b.size == 0 for b in bufs if "kt0" in b.tensors)


@pytest.mark.parametrize(("precision", "want"), [("f32", 240), ("bf16", 160)])
def test_split_plan_holds_the_whole_copies(tmp_path: Path, precision: str, want: int) -> None:
    """The plugin's plan (``ov_memory_solver``), KiB. Whole: the output alone (64). Split by 4
    at f32: at the fourth core's first MatMul the three 64 KiB copies and three 16 KiB core
    outputs are alive (240); at bf16 the copies are 32 KiB and the outputs stay f32 (live
    144, placed by greedy-by-size in 160). Main gave the slices' own buffers, freed one by one."""
    for n, kib in ((1, 64), (4, want)):
        p = tmp_path / f"a{n}.onnx"
        onnx.save(_attention(n), str(p))
        est = estimate(str(p), backend="openvino",
                       session_options={"INFERENCE_PRECISION_HINT": precision})  # fmt: skip
        assert est.prediction.planners["ov_memory_solver"] == kib * 1024


def test_wide_scores_cost_the_wide_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Scores' last dim 64 (> 32): ``ov_per_mha_wide``; 32: ``ov_per_mha`` (measured 0.63 /
    0.365 MiB per block at bf16). Compile overhead difference of 4 blocks, wide vs narrow,
    with everything else equal but the shapes: the kernels' difference exactly."""
    g = _graph(_attention(4))
    assert mha_count(g) == 4
    assert mha_wide_count(g, 32) == 4
    assert mha_wide_count(g, 64) == 0
    hint = {"INFERENCE_PRECISION_HINT": "bf16"}
    est = {}
    for name, narrow_dim in (("wide", 32), ("narrow", 64)):
        p = tmp_path / f"{name}.onnx"  # a file each: estimates are cached per file
        onnx.save(_attention(4), str(p))
        monkeypatch.setitem(CALIBRATION, "ov_mha_narrow_dim", narrow_dim)
        est[name] = estimate(str(p), backend="openvino", session_options=hint)
    wide, narrow = est["wide"], est["narrow"]
    assert wide.prediction.details["mha_wide"] == 4
    cw = {s.name: s for s in wide.prediction.stages}["compile_model"].overhead
    cn = {s.name: s for s in narrow.prediction.stages}["compile_model"].overhead
    want = 4 * (OV_CALIBRATION["ov_per_mha_wide"] - OV_CALIBRATION["ov_per_mha"])
    assert cw - cn == pytest.approx(want, abs=0.001 * MiB, rel=0)
