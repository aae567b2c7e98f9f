"""The verifier-child driver for partition folders, driven exactly as ``child.main`` would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from partition.partgraphs import (
    assert_close,
    backend_options,
    branchy_feeds,
    build_branchy,
    partition_to,
    run_original,
    save,
)

from memshrink.partition.verify_support import read_partition_io
from memshrink.runtime.child_driver import run_partitioned
from memshrink.verify.child import Child


@pytest.mark.parametrize(("backend", "mode"), [("cpu", "streamed"), ("openvino", "resident")])
def test_child_driver_measures_stages_and_matches(tmp_path: Path, backend: str, mode: str) -> None:
    src = save(build_branchy(), tmp_path / "b.onnx")
    partition_to(src, tmp_path / "parts", parts=3)
    io = read_partition_io(tmp_path / "parts")
    assert [t.name for t in io.inputs] == ["x", "bias_in"]
    assert io.inputs[0].elem_type == 1 and io.inputs[0].dims == ["batch", 64]
    feeds = branchy_feeds()
    np.savez(tmp_path / "feeds.npz", **{f"i{k}": feeds[t.name] for k, t in enumerate(io.inputs)})
    spec = {
        "model": {"kind": "partition", "path": str(tmp_path / "parts")},
        "backend": backend,
        "label": "partitioned",
        "feeds": str(tmp_path / "feeds.npz"),
        "feed_names": [t.name for t in io.inputs],
        "output_names": [t.name for t in io.outputs],
        "runs": 2,
        "partition_mode": mode,
        "session_options": backend_options(backend) or {},
        "result": str(tmp_path / "result.json"),
    }
    child = Child(spec)
    outs = run_partitioned(child)
    child.save()
    result = json.loads((tmp_path / "result.json").read_text())
    assert [s["name"] for s in result["stages"]] == ["session", "run1", "run2"]
    assert all(s["peak"] >= s["before"] > 0 for s in result["stages"])
    assert result["assumptions"]["partition_mode"] == mode
    assert_close(run_original(src, feeds, backend), outs, atol=1e-5)


def test_index_bounds_of_an_exported_model(tmp_path: Path) -> None:
    models = pytest.importorskip("models")
    try:
        src = models.build("bert-tiny")
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"cannot build bert-tiny: {exc}")
    partition_to(src, tmp_path / "parts", ("partition",), parts=3)
    io = read_partition_io(tmp_path / "parts")
    assert io.index_bounds.get("input_ids") == 1024  # the tiny config's vocabulary


def test_runtime_is_loaded_before_the_baseline(tmp_path: Path, monkeypatch: Any) -> None:
    """Why: the single-model children import the runtime (OpenVINO: create its Core) before
    their baseline; the partition driver loaded it inside ``run1``, so a 1-part stream folder
    of a Keras MobileNetV3 measured OpenVINO 74 -> 103 MiB over the file (a WORSE that was the
    library pages) while its absolute anon and file peaks equalled the `safe` output's."""
    from memshrink.runtime import backends as rb

    src = save(build_branchy(), tmp_path / "b.onnx")
    partition_to(src, tmp_path / "parts", parts=2)
    io = read_partition_io(tmp_path / "parts")
    feeds = branchy_feeds()
    np.savez(tmp_path / "feeds.npz", **{f"i{k}": feeds[t.name] for k, t in enumerate(io.inputs)})
    spec = {
        "model": {"kind": "partition", "path": str(tmp_path / "parts")},
        "backend": "openvino",
        "label": "partitioned",
        "feeds": str(tmp_path / "feeds.npz"),
        "feed_names": [t.name for t in io.inputs],
        "output_names": [t.name for t in io.outputs],
        "runs": 1,
        "partition_mode": "streamed",
        "session_options": {},
        "result": str(tmp_path / "result.json"),
    }
    monkeypatch.setattr(rb.OpenVinoRunner, "_core", None)
    child = Child(spec)
    seen: list[bool] = []
    real = child.start_meter

    def start_meter(*a: Any, **k: Any) -> Any:
        seen.append(rb.OpenVinoRunner._core is not None)
        return real(*a, **k)

    monkeypatch.setattr(child, "start_meter", start_meter)
    run_partitioned(child)
    assert seen == [True]
