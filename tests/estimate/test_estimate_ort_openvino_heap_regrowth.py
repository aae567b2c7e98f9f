"""Dynamic dims, embedded weights on the ORT OpenVINO EP: OpenVINO's outgrown workspace blocks
stay on the heap once the freed proto has raised glibc's mmap threshold
(``ort_openvino.heap_regrowth``, docs/estimate.md rule 25; off by default, option
``memshrink.ovep_heap_regrowth``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.lifetimes import Buffer
from memshrink.estimate.openvino import block_events, set_blocks
from memshrink.estimate.ort_openvino import HEAP_REGROWTH, heap_regrowth

MiB = 1 << 20


def _upsampler(table_mib: float) -> onnx.ModelProto:
    """3 x (Conv 3x3 32 -> 32, Relu, ConvTranspose 2x2 stride 2) on [1, 32, h, w], then a Conv
    to 3 channels; beside it a Gather from a ``table_mib`` embedded table (sizes the proto)."""
    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "x"
    for i in range(3):
        inits.append(
            numpy_helper.from_array(
                (rng.standard_normal((32, 32, 3, 3)) * 0.02).astype(np.float32), f"w{i}"
            )
        )
        inits.append(
            numpy_helper.from_array(
                (rng.standard_normal((32, 32, 2, 2)) * 0.05).astype(np.float32), f"t{i}"
            )
        )
        nodes += [
            helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], pads=[1] * 4),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
            helper.make_node("ConvTranspose", [f"r{i}", f"t{i}"], [f"u{i}"], strides=[2, 2]),
        ]
        x = f"u{i}"
    inits.append(
        numpy_helper.from_array(
            (rng.standard_normal((3, 32, 3, 3)) * 0.02).astype(np.float32), "wl"
        )
    )
    rows = int(table_mib * MiB / 4 / 32)
    inits.append(numpy_helper.from_array(np.zeros((rows, 32), np.float32), "table"))
    nodes += [
        helper.make_node("Conv", [x, "wl"], ["y"], pads=[1] * 4),
        helper.make_node("Gather", ["table", "idx"], ["g"], axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "up",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, "h", "w"]),
            helper.make_tensor_value_info("idx", TensorProto.INT64, [4]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("g", TensorProto.FLOAT, None),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_set_blocks_record_what_each_block_grew_through() -> None:
    """Known answer: boxes (start, end, MiB) 1@0-0, 2@1-1, 4@2-2 share one block that grows
    1 -> 2 -> 4; a box alive beside them (8@0-2) is its own block."""
    bufs = [
        Buffer(0, 1 * MiB, 0, 0),
        Buffer(1, 2 * MiB, 1, 1),
        Buffer(2, 4 * MiB, 2, 2),
        Buffer(3, 8 * MiB, 0, 2),
    ]
    assert set_blocks(bufs) == [[1 * MiB, 2 * MiB, 4 * MiB], [8 * MiB]]
    assert block_events(bufs) == [
        (1 * MiB, 0),
        (8 * MiB, 0),
        (2 * MiB, 1 * MiB),
        (4 * MiB, 2 * MiB),
    ]


def test_freed_blocks_under_the_raised_threshold_stay_unless_reused() -> None:
    """Known answers, MiB. At h = w = 64 the plan's two blocks grow 0.5 -> 2 -> 8 (-> 32 for
    one; the activations quadruple at each ConvTranspose): freed 0.5, 0.5, 2, 2, 8, and every
    later allocation is larger. An 8 MiB table makes the proto ~8.1 MiB, over every freed
    size: 13 stay; with a 1 MiB table only the 0.5 MiB ones are heap: 1. Off by default.
    Measured (EP, 8 MiB table): run 1 127.4 MiB, 115.5 with glibc's threshold pinned low."""
    dims, shapes = {"h": 64, "w": 64}, {"idx": (4,)}
    opts = {HEAP_REGROWTH: "1"}
    est = estimate(_upsampler(8), backend="ort-openvino", dims=dims, shapes=shapes)
    events = est.prediction.details["workspace_block_events"]
    assert sorted(old for _, old in events if old) == [MiB // 2] * 2 + [2 * MiB] * 2 + [8 * MiB]
    view = build_view(_upsampler(8), dims=dims, shapes=shapes)
    assert heap_regrowth(view, events) == 13 * MiB
    assert heap_regrowth(build_view(_upsampler(1), dims=dims, shapes=shapes), events) == 1 * MiB
    assert not any("outgrown" in n for n in est.prediction.stages[1].notes)
    on = estimate(
        _upsampler(8), backend="ort-openvino", dims=dims, shapes=shapes, session_options=opts
    )
    assert on.stage_peaks()["run_1"] - est.stage_peaks()["run_1"] == 13 * MiB


def test_a_freed_block_is_reused_by_a_later_smaller_one() -> None:
    """Known answer: blocks grow 4 -> 8 (4 freed), then a new 3 MiB block takes 3 of the freed 4
    (best fit, split): 1 MiB stays. Threshold 16 MiB (a 16 MiB embedded table)."""
    view = build_view(_upsampler(16), dims={"h": 8, "w": 8}, shapes={"idx": (4,)})
    events = [(4 * MiB, 0), (8 * MiB, 4 * MiB), (3 * MiB, 0)]
    assert heap_regrowth(view, events) == 1 * MiB


def test_no_regrowth_with_external_weights(tmp_path: Path) -> None:
    """External weights: no proto of weights is freed, the threshold stays low."""
    path = tmp_path / "up.onnx"
    onnx.save(_upsampler(8), path, save_as_external_data=True, location="up.data")
    p = estimate(
        str(path),
        backend="ort-openvino",
        dims={"h": 64, "w": 64},
        shapes={"idx": (4,)},
        session_options={HEAP_REGROWTH: "1"},
    )
    assert not any("outgrown" in n for n in p.prediction.stages[1].notes)
    assert p.prediction.details["workspace_block_events"]  # the plan grows all the same
