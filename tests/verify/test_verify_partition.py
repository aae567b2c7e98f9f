"""A partition folder is accepted wherever a model is (kind ``partition`` in ``kinds.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memshrink.verify import EXIT_MISMATCH, EXIT_OK, verify


def _partition(src: Path, out: Path, parts: int) -> Path:
    manager = pytest.importorskip("memshrink.manager")
    from memshrink.model import load
    from memshrink.writer import save_model

    try:
        model, _ = manager.PassManager(["partition"], options={"partition": {"parts": parts}}).run(
            load(src), manager.PassContext()
        )
    except Exception as exc:  # the partition pass is another issue's; skip if it is not there
        pytest.skip(f"partition pass unavailable: {exc}")
    save_model(model, out)
    return out


def test_model_vs_its_partition_folder(tmp_path: Path, embed_mlp) -> None:  # type: ignore[no-untyped-def]
    src = embed_mlp(tmp_path / "m.onnx")
    folder = _partition(src, tmp_path / "parts", parts=2)
    assert (folder / "manifest.json").is_file()
    report = verify(src, folder, backends=("cpu",), dims={"batch": 2}, runs=2)
    assert report.exit_code == EXIT_OK, report.format_table()
    run = report.run("rewritten", "cpu")
    assert run is not None and run.child["runtime"]["name"].endswith("PartitionedSession")
    assert [s["name"] for s in run.stages] == ["session", "run1", "run2"]
    # and a partitioned model with a planted change is caught
    bad = _partition(embed_mlp(tmp_path / "bad.onnx", perturb=1e-2), tmp_path / "badparts", parts=2)
    assert verify(src, bad, dims={"batch": 2}, runs=1).exit_code == EXIT_MISMATCH
