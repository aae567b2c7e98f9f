"""The partition pass through the pipeline, the writer and the CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from partition.partgraphs import assert_close, branchy_feeds, build_branchy, run_original, save

import memshrink
from memshrink.cli import main
from memshrink.manager import PassContext, PassManager
from memshrink.partition import read_manifest
from memshrink.runtime import PartitionedSession
from memshrink.writer import save_model


def test_cli_optimize_writes_a_folder(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    src = save(build_branchy(), tmp_path / "b.onnx")
    out = tmp_path / "parts"
    rc = main(["optimize", str(src), str(out), "--passes", "partition", "-O", "partition.parts=3"])
    assert rc == 0
    assert "partition" in capsys.readouterr().out
    assert len(read_manifest(out).parts) == 3
    feeds = branchy_feeds()
    got = PartitionedSession(out, "cpu", "streamed").run(None, feeds)
    assert_close(run_original(src, feeds), got, atol=1e-5)  # atol absolute, rtol 0


def test_stream_preset_and_budget(tmp_path: Path) -> None:
    src = save(build_branchy(layers=8), tmp_path / "b.onnx")
    out = tmp_path / "parts"
    rc = main(
        [
            "optimize",
            str(src),
            str(out),
            "--passes",
            "stream",
            "-O",
            "partition.part_budget=40KiB",
            "-q",
        ]
    )
    assert rc == 0
    manifest = read_manifest(out)
    assert len(manifest.parts) >= 4
    assert max(p.weight_bytes for p in manifest.parts) <= 40 * 1024


def test_pass_reports_plan_and_replans_after_later_changes(tmp_path: Path) -> None:
    """A pass that changes the graph after partition: the writer re-plans with the same options."""
    rng = np.random.default_rng(0)
    w = [rng.standard_normal((32, 32)).astype(np.float32) for _ in range(4)]
    nodes, prev = [], "x"
    for i in range(4):
        nodes += [
            helper.make_node("Transpose", [f"W{i}"], [f"T{i}"], perm=[1, 0]),
            helper.make_node("MatMul", [prev, f"T{i}"], [f"h{i}"]),
        ]
        prev = f"h{i}"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [2, 32])],
        [numpy_helper.from_array(a, f"W{i}") for i, a in enumerate(w)],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    src = tmp_path / "t.onnx"
    onnx.save_model(proto, src)
    model, report = PassManager(
        ["partition", "fold-weight-transforms"], options={"partition": {"parts": 2}}
    ).run(memshrink.load(src), PassContext())
    stats = report.passes[0].stats
    assert stats["parts"] == 2 and stats["plan"]["bounds"][0] == 0
    assert "notes" not in stats  # no empty ``notes=`` in the table (QA session 14)
    assert report.passes[1].modified  # the graph changed after planning
    save_model(model, tmp_path / "parts")
    manifest = read_manifest(tmp_path / "parts")
    assert len(manifest.parts) == 2
    feeds = {"x": rng.standard_normal((2, 32)).astype(np.float32)}
    got = PartitionedSession(tmp_path / "parts", "cpu", "resident").run(None, feeds)
    assert_close(run_original(src, feeds), got, atol=1e-5)


def test_passes_listing_names_the_new_passes(capsys) -> None:  # noqa: ANN001
    assert main(["passes"]) == 0
    text = capsys.readouterr().out
    for name in ("partition", "flush-subnormals", "fold-weight-transforms", "stream"):
        assert name in text
