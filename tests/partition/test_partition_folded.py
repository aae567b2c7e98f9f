"""A part's weights OpenVINO folds into new Constants go to ``part_NNN.folded.data``, but only
where the Conv and its scale run in the same part; the folder still runs and matches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from partition.partgraphs import OV_F32, partition_to, save

import memshrink
from memshrink.partition import read_manifest
from memshrink.partition.folded import folded_in_parts
from memshrink.runtime import PartitionedSession


def _model() -> onnx.ModelProto:
    """Conv(cw1) -> Mul by a per-channel constant (OpenVINO folds cw1);
    Conv(cw2) -> Relu (cw2 kept)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, 16, 3, 3)).astype(np.float32), "cw1"),
        numpy_helper.from_array(rng.standard_normal((16, 16, 3, 3)).astype(np.float32), "cw2"),
        numpy_helper.from_array(rng.standard_normal((1, 16, 1, 1)).astype(np.float32), "s"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "cw1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["c1", "s"], ["m1"]),
        helper.make_node("Conv", ["m1", "cw2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["y"]),
    ]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])], inits,
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_folded_only_where_the_conv_and_its_scale_share_a_part(tmp_path: Path) -> None:
    graph = memshrink.load(save(_model(), tmp_path / "m.onnx")).graph
    nodes = list(graph)
    together = {id(n): 0 for n in nodes}
    assert folded_in_parts(graph, together) == {"cw1"}
    apart = {id(n): (0 if i == 0 else 1) for i, n in enumerate(nodes)}  # cut after the Conv
    assert folded_in_parts(graph, apart) == set()
    assert folded_in_parts(graph, {}) == set()  # a reader outside the top level: never


def test_part_writes_the_folded_file_and_runs_the_same(tmp_path: Path) -> None:
    src = save(_model(), tmp_path / "m.onnx")
    out = tmp_path / "m.parts"
    info, _ = partition_to(src, out, parts=1)
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json", "part_000.data", "part_000.folded.data", "part_000.onnx",
    ]  # fmt: skip
    part = read_manifest(out).parts[0]
    assert part.data == "part_000.data"
    assert {r[0] for r in part.weight_ranges} == {"part_000.data", "part_000.folded.data"}
    proto = onnx.load(out / "part_000.onnx", load_external_data=False)
    where = {
        t.name: {e.key: e.value for e in t.external_data}["location"]
        for t in proto.graph.initializer
        if t.data_location == TensorProto.EXTERNAL
    }
    assert where["cw1"] == "part_000.folded.data" and where["cw2"] == "part_000.data"
    assert info.data_file_bytes == sum(
        (out / f).stat().st_size for f in ("part_000.data", "part_000.folded.data")
    )

    x = np.random.default_rng(1).standard_normal((1, 16, 8, 8)).astype(np.float32)
    import onnxruntime as ort

    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for backend, opts in (("cpu", None), ("openvino", OV_F32)):
        got = PartitionedSession(out, backend=backend, session_options=opts).run(None, {"x": x})
        np.testing.assert_allclose(got[0], ref[0], atol=1e-4, rtol=1e-5)


def test_folded_file_off_keeps_one_file_per_part(tmp_path: Path) -> None:
    src = save(_model(), tmp_path / "m.onnx")
    partition_to(src, tmp_path / "p", parts=1, folded_file=False)
    assert not (tmp_path / "p" / "part_000.folded.data").exists()
    assert (tmp_path / "p" / "part_000.data").is_file()
