"""Map-typed values (skl2onnx's ZipMap output) load, optimize, save and verify."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from memshrink.manager import PassContext, PassManager
from memshrink.model import load
from memshrink.verify.child import _as_array
from memshrink.writer import save_model
from models.fixtures import zipmap_classifier


def _zipmap_model() -> onnx.ModelProto:
    return zipmap_classifier(features=4)


def test_zipmap_model_round_trips_through_the_safe_pipeline(tmp_path: Path) -> None:
    src = tmp_path / "skl.onnx"
    onnx.save_model(_zipmap_model(), src)
    model, _ = PassManager("safe").run(load(src), PassContext())
    dst = tmp_path / "out.onnx"
    save_model(model, dst)
    out = onnx.load(dst)
    assert out.graph.output[1].type == _zipmap_model().graph.output[1].type
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    ref = ort.InferenceSession(str(src)).run(None, {"X": x})
    got = ort.InferenceSession(str(dst)).run(None, {"X": x})
    np.testing.assert_array_equal(got[0], ref[0])  # atol=0: safe passes are exact
    assert got[1] == ref[1]


def test_load_from_a_proto_leaves_the_callers_proto_alone() -> None:
    proto = _zipmap_model()
    load(proto)
    assert proto.graph.output[1].type.HasField("sequence_type")


def test_verify_child_turns_maps_and_ragged_sequences_into_arrays() -> None:
    rows = _as_array([{1: 0.5, 0: 0.25}, {0: 0.75, 1: 0.125}])
    np.testing.assert_array_equal(rows, [[0.25, 0.5], [0.75, 0.125]])  # values by key
    ragged = _as_array([np.ones(2, np.float32), np.zeros(3, np.float32)])
    assert ragged.shape == (5,) and ragged.dtype == np.float32
    assert _as_array([]).shape == (0,)
    assert _as_array(np.array(["a", "bc"], dtype=object)).dtype.kind == "U"
