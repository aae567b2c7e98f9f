"""Partition plans (shapes only) and the folder writer: layout, alignment, shared weights."""

from __future__ import annotations

import json
import os
from pathlib import Path

import onnx
import pytest
from partition.partgraphs import (
    build_branchy,
    build_control_flow,
    partition_to,
    save,
)

import memshrink
from memshrink.errors import UsageError
from memshrink.partition import read_manifest
from memshrink.partition.plan import plan_partition


def test_plan_balances_weights_and_never_reads_them(tmp_path: Path) -> None:
    path = save(build_branchy(layers=8), tmp_path / "b.onnx", external=True)
    model = memshrink.load(path)
    data = path.with_name("b.onnx.data")
    data.rename(tmp_path / "away")  # reading a weight would now fail (even as root)
    plan = plan_partition(model, parts=4)
    assert plan.num_parts == 4
    assert plan.bounds[0] == 0 and plan.bounds[-1] == len(model.graph)
    assert plan.bounds == sorted(set(plan.bounds))
    # 9 weights of 16 KiB (W_shared counted in both parts using it): no part holds > half.
    assert max(plan.part_weight_bytes) <= 4 * 16384
    for cut in plan.cuts:
        assert 1 <= len(cut["tensors"]) <= 3, cut


def test_budget_picks_the_number_of_parts(tmp_path: Path) -> None:
    model = memshrink.load(save(build_branchy(layers=8), tmp_path / "b.onnx"))
    plan = plan_partition(model, part_budget=40000)
    assert plan.num_parts >= 4
    assert max(plan.part_weight_bytes) <= 40000
    with pytest.raises(UsageError, match="parts"):
        plan_partition(model)


def test_folder_layout_alignment_and_shared_weights(tmp_path: Path) -> None:
    src = save(build_branchy(), tmp_path / "b.onnx")
    info, _ = partition_to(src, tmp_path / "out", parts=3)
    out = tmp_path / "out"
    assert info.parts == 3 and Path(info.path) == out
    names = sorted(p.name for p in out.iterdir())
    assert "manifest.json" in names and not [n for n in names if n.startswith(".")]
    manifest = read_manifest(out)
    shared = {s["name"]: s for s in manifest.shared_weights}
    assert shared["W_shared"]["parts"] == [0, 2]
    # stored once: in part 0's data file, and part 2's onnx points there
    assert shared["W_shared"]["file"] == "part_000.data"
    last = onnx.load(out / "part_002.onnx", load_external_data=False)
    locs = {
        t.name: {e.key: e.value for e in t.external_data}
        for t in last.graph.initializer
        if t.data_location == onnx.TensorProto.EXTERNAL
    }
    assert locs["W_shared"]["location"] == "part_000.data"
    for part in manifest.parts:
        for _fname, offset, length in part.weight_ranges:
            assert offset % (65536 if length >= 65536 else 4096) == 0  # writer.tensor_offset
    total_stored = sum(
        os.path.getsize(out / f) for f in {r[0] for p in manifest.parts for r in p.weight_ranges}
    )
    assert total_stored == 7 * 16384  # 7 weights of 16 KiB, each once, page-aligned: no gaps


def test_each_part_is_a_valid_standalone_model(tmp_path: Path) -> None:
    src = save(build_control_flow(), tmp_path / "c.onnx")
    partition_to(src, tmp_path / "out", parts=3)
    manifest = read_manifest(tmp_path / "out")
    if_parts = []
    for part in manifest.parts:
        proto = onnx.load(tmp_path / "out" / part.file, load_external_data=False)
        onnx.checker.check_model(str(tmp_path / "out" / part.file))  # data files resolve
        if any(n.op_type == "If" for n in proto.graph.node):
            if_parts.append(part.index)
            inits = {t.name for t in proto.graph.initializer}
            assert "C" in inits  # read only inside the If's branch: still carried by the part
    assert len(if_parts) == 1  # control flow kept whole in one part


def test_refuses_to_overwrite_files_and_foreign_folders(tmp_path: Path) -> None:
    src = save(build_branchy(), tmp_path / "b.onnx")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UsageError, match="is a file"):
        partition_to(src, tmp_path / "afile", parts=2)
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="not a partition folder"):
        partition_to(src, other, parts=2)
    assert (other / "keep.txt").read_text() == "mine"
    # an existing partition folder is replaced atomically
    partition_to(src, tmp_path / "p", parts=2)
    partition_to(src, tmp_path / "p", parts=3)
    assert len(read_manifest(tmp_path / "p").parts) == 3
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]


def test_manifest_records_chain_and_symbolic_dims(tmp_path: Path) -> None:
    src = save(build_branchy(), tmp_path / "b.onnx")
    partition_to(src, tmp_path / "out", parts=3)
    doc = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [t["name"] for t in doc["inputs"]] == ["x", "bias_in"]
    assert doc["inputs"][0]["shape"] == ["batch", 64]
    assert [t["name"] for t in doc["outputs"]] == ["y", "early", "side"]
    sources = [t["source"] for p in doc["parts"] for t in p["inputs"]]
    assert "input" in sources and 0 in sources
    early = [t for p in doc["parts"] for t in p["outputs"] if t["name"] == "early"]
    assert early and early[0]["graph_output"] is True


def test_commit_interrupted_during_the_swap_keeps_the_new_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C during the folder swap is raised after it (QA session 11): the new folder is in
    place, the earlier one is removed, and the error says the save is whole, not "nothing
    written"."""
    import signal

    from memshrink.atomic import SaveInterrupted
    from memshrink.partition import save as psave

    tmp, final = tmp_path / ".new", tmp_path / "out.parts"
    tmp.mkdir()
    (tmp / "manifest.json").write_text("new")
    final.mkdir()
    (final / "manifest.json").write_text("old")
    real = os.replace

    def replace(a: Path, b: Path) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # held until the swap is done
        real(a, b)

    monkeypatch.setattr(psave.os, "replace", replace)
    with pytest.raises(SaveInterrupted, match="saved whole") as info:
        psave._commit(tmp, final)
    assert info.value.exit_code == 130
    assert (final / "manifest.json").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["out.parts"]
