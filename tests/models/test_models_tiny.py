"""Tiny variants through the real exporter: sidecars, ORT runs, determinism across processes.

Skipped cleanly when the ``models`` extra (torch, transformers, onnxscript) is absent.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxscript")

import models  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TINY = [n for n in models.names(tag="tiny")]
# Rebuilt in a fresh process: a transformer with its external-data twin, and a CNN.
DETERMINISM = ["bert-tiny", "bert-tiny-ext", "unet-tiny"]


@pytest.fixture(scope="module")
def rebuild(tmp_path_factory: pytest.TempPathFactory):
    """A second build in a fresh process, started first so it overlaps the in-process builds."""
    out = tmp_path_factory.mktemp("rebuild")
    proc = subprocess.Popen(
        [sys.executable, "-m", "models", "build", *DETERMINISM, "--out", str(out)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    yield proc, out
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory, rebuild) -> Path:
    out = tmp_path_factory.mktemp("suite")
    models.build_many(TINY, out, log=False)
    return out


def test_tiny_set_covers_every_architecture() -> None:
    archs = {models.get_spec(n).extra["architecture"].split(",")[0].split(" ")[0] for n in TINY}
    assert {"BERT", "GPT-2", "ViT", "ResNet", "MobileNetV2", "U-Net", "multi-branch"} <= archs


@pytest.mark.parametrize("name", TINY)
def test_tiny_sidecar_matches_graph_and_runs_in_ort(
    name: str, tiny_dir: Path, feeds_for, check_sidecar
) -> None:
    path = tiny_dir / f"{name}.onnx"
    sidecar = check_sidecar(path)
    spec = models.get_spec(name)
    assert sidecar["opset"] == 18
    assert sidecar["external_data"] is spec.external_data
    assert 0 < sidecar["weight_bytes"] < 8 * 2**20  # a few MiB at most
    assert (
        path.stat().st_size
        + (Path(str(path) + ".data").stat().st_size if spec.external_data else 0)
        >= sidecar["weight_bytes"]
    )
    for feed in sidecar["inputs"]:
        if feed["name"] == "input_ids":
            assert feed["range"] == [0, sidecar["vocab_size"]]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    outs = session.run(None, feeds_for(path))
    assert [o.name for o in session.get_outputs()] == sidecar["outputs"]
    for out in outs:
        assert np.isfinite(out).all(), name
    if spec.family == "transformer" and spec.feeds[0].name == "input_ids":
        batch, seq = spec.feeds[0].shape
        assert outs[0].shape[:2] == (batch, seq)


@pytest.mark.parametrize("name", ["bert-tiny", "gpt2-tiny", "vit-tiny"])
def test_external_twin_is_same_graph_with_weights_outside(
    name: str, tiny_dir: Path, feeds_for
) -> None:
    emb, ext = tiny_dir / f"{name}.onnx", tiny_dir / f"{name}-ext.onnx"
    ext_proto = onnx.load(str(ext), load_external_data=False)
    big = [t for t in ext_proto.graph.initializer if onnx.numpy_helper.to_array is not None]
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in big)
    for t in ext_proto.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            assert {e.key: e.value for e in t.external_data}["location"] == f"{name}-ext.onnx.data"
    feeds = feeds_for(emb)
    a = ort.InferenceSession(str(emb), providers=["CPUExecutionProvider"]).run(None, feeds)
    b = ort.InferenceSession(str(ext), providers=["CPUExecutionProvider"]).run(None, feeds)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, rtol=0, atol=0)  # same weights, same graph: exact


def test_transformer_graphs_have_exporter_patterns(tiny_dir: Path) -> None:
    proto = onnx.load(str(tiny_dir / "bert-tiny.onnx"))
    ops = {n.op_type for n in proto.graph.node}
    assert {"Shape", "Gather", "Concat", "Reshape"} <= ops  # dynamic-shape plumbing
    dims = [d.dim_param for d in proto.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", "sequence"]


def test_multibranch_file_order_puts_all_expansions_first(tiny_dir: Path) -> None:
    """The order-sensitive net is written 'all big tensors first' within each cell."""
    proto = onnx.load(str(tiny_dir / "multibranch-tiny.onnx"))
    convs = [n for n in proto.graph.node if n.op_type == "Conv"]
    groups = [next((a.i for a in n.attribute if a.name == "group"), 1) for n in convs]
    # In the first cell, the 4 branch expansions (group 1) precede every depthwise conv.
    first_dw = groups.index(next(g for g in groups if g > 1))
    assert groups[:first_dw].count(1) >= 4 + 2  # stem + 2 preprocessing convs + 4 expansions


@pytest.mark.parametrize("name", ["bert-tiny", "resnet50-tiny"])
def test_no_source_paths_in_built_files(name: str, tiny_dir: Path) -> None:
    """Stack traces with absolute paths would make bytes depend on the checkout folder."""
    data = (tiny_dir / f"{name}.onnx").read_bytes()
    assert str(REPO).encode() not in data
    assert b"site-packages" not in data


def test_builds_are_byte_identical_across_processes(tiny_dir: Path, rebuild) -> None:
    proc, tmp_path = rebuild
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    for name in DETERMINISM:
        for suffix in (".onnx", ".onnx.json", ".onnx.data"):
            a, b = tiny_dir / (name + suffix), tmp_path / (name + suffix)
            assert a.exists() == b.exists(), a
            if a.exists():
                assert a.read_bytes() == b.read_bytes(), f"{name}{suffix} differs"
    sidecar = json.loads((tmp_path / "bert-tiny.onnx.json").read_text())
    assert sidecar["seed"] == 0
