"""The tool's own memory: analyses never read weights, weight passes stream and keep no maps.

Real files, no mocks: the analyses run with the model's data file moved away (any weight read
would fail), and after the weight passes ``/proc/self/maps`` must show no mapping of it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from fixtures_onnx import assert_bit_identical, run_ort
from onnx import TensorProto, helper, numpy_helper

import memshrink
from memshrink.estimate import estimate
from memshrink.hooks import EstimateHook
from memshrink.manager import PassContext, PassManager
from memshrink.transforms import weight_io

VOCAB, HIDDEN, SEQ = 300, 64, 8


def _tied_lm() -> onnx.ModelProto:
    """A tied embedding / LM head (Transpose of a tall weight, shared with a Gather), a
    Transpose of a wide weight, a Cast of an f16 weight and a Reshape: every weight read the
    fold pass does, in both transpose layouts."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32), "E"),
        numpy_helper.from_array(rng.standard_normal((32, HIDDEN)).astype(np.float32), "U"),
        numpy_helper.from_array(rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float16), "W16"),
        numpy_helper.from_array(np.array([SEQ, HIDDEN], np.int64), "flat"),
    ]
    nodes = [
        helper.make_node("Gather", ["E", "ids"], ["h"]),
        helper.make_node("Reshape", ["h", "flat"], ["h2"]),
        helper.make_node("Cast", ["W16"], ["W"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["h2", "W"], ["h3"]),
        helper.make_node("Relu", ["h3"], ["h4"]),
        helper.make_node("Transpose", ["E"], ["Et"], perm=[1, 0]),
        helper.make_node("MatMul", ["h4", "Et"], ["logits"]),
        helper.make_node("Transpose", ["U"], ["Ut"], perm=[1, 0]),
        helper.make_node("MatMul", ["h4", "Ut"], ["side"]),
    ]
    g = helper.make_graph(
        nodes,
        "tied_lm",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [SEQ])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [SEQ, VOCAB]),
            helper.make_tensor_value_info("side", TensorProto.FLOAT, [SEQ, 32]),
        ],
        inits,
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture
def tied_lm(tmp_path: Path) -> Path:
    path = tmp_path / "lm.onnx"
    onnx.save_model(
        _tied_lm(), path, save_as_external_data=True, location="lm.data", size_threshold=1024
    )
    return path


def _maps_of(path: Path) -> list[str]:
    target = str(path.resolve())
    with open("/proc/self/maps") as f:
        return [line for line in f if line.rstrip().endswith(target)]


def test_weight_passes_stream_and_leave_no_mapping(
    tied_lm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(weight_io, "BLOCK", 4096)  # several blocks per weight, both layouts
    model = memshrink.load(tied_lm)
    passes = "prune,dedup-weights,fold-weight-transforms,flush-subnormals,external-data"
    # a named runtime that folds the tied LM head too (elsewhere its MatMul reads E as A:
    # tied_matmul, test_transforms_fold_weight_transforms.py)
    model, report = PassManager(passes).run(model, PassContext(backend="cuda", deploy_only=True))
    stats = {r.name: r.stats for r in report.passes}
    assert stats["fold-weight-transforms"]["transpose"] == 2
    assert stats["fold-weight-transforms"]["cast"] == 1
    assert _maps_of(tied_lm.with_name("lm.data")) == []  # no weight left memory-mapped
    out = tmp_path / "out.onnx"
    memshrink.save(model, out)
    feeds = {"ids": np.arange(SEQ, dtype=np.int64) * 37 % VOCAB}
    assert_bit_identical(run_ort(tied_lm, feeds), run_ort(out, feeds))  # atol=0, rtol=0


def test_analyses_never_read_weights(tied_lm: Path) -> None:
    model = memshrink.load(tied_lm)
    data = tied_lm.with_name("lm.data")
    data.rename(data.with_name("gone.data"))  # any weight read now fails
    est = estimate(model)
    assert est.to_dict()
    analyses = "prune,dedup-weights,external-data,inplace,reorder,chunk,recompute"
    _, report = PassManager(analyses, hooks=[EstimateHook()]).run(model)
    assert all(r.estimate for r in report.passes)


def test_read_helpers_match_numpy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    for shape, dtype in [((37, 11), np.float32), ((11, 37), np.float16), ((3, 500), np.int64)]:
        a = rng.standard_normal(shape).astype(dtype)
        path = tmp_path / "w.data"
        path.write_bytes(b"x" * 100 + a.tobytes())
        t = ir.ExternalTensor(
            "w.data", 100, a.nbytes, ir.DataType.from_numpy(a.dtype), shape=ir.Shape(shape),
            name="w", base_dir=str(tmp_path),
        )  # fmt: skip
        for block in (8, 64, 1 << 20):
            monkeypatch.setattr(weight_io, "BLOCK", block)
            got = weight_io.transpose_2d_to_spill(t, "wt").numpy()
            assert got.shape == a.T.shape and np.array_equal(got, a.T)  # atol=0, rtol=0
            assert np.array_equal(np.concatenate(list(weight_io.iter_blocks(t, block))), a.ravel())
        assert np.array_equal(weight_io.read_array(t), a)
