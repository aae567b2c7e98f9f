"""``SharedView``: one loaded, analysed file for several backends' predictions gives exactly
what a separate ``estimate(path, backend=...)`` per backend gives, in any order."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from fixtures_onnx import weight_chain

from memshrink.errors import UnboundDimensionError
from memshrink.estimate import estimate
from memshrink.estimate.api import SharedView
from memshrink.estimate.openvino import ENABLE_MMAP

BACKENDS = ["ort", "openvino", "ort-openvino", "cuda"]


def _dump(est: object) -> str:
    return json.dumps(est.to_dict(), sort_keys=True, default=str)  # type: ignore[attr-defined]


def _models(tmp_path: Path) -> list[Path]:
    conv = tmp_path / "conv.onnx"
    onnx.save_model(weight_chain("Conv", 6, (16, 16, 1, 1), [1, 16, 32, 32], [1, 16, 32, 32]), conv)
    ext = tmp_path / "mm.onnx"
    onnx.save_model(
        weight_chain("MatMul", 5, (256, 256), [8, 256], [8, 256]),
        ext,
        save_as_external_data=True,
        location="mm.onnx.data",
        size_threshold=1024,
    )
    return [conv, ext]


@pytest.mark.parametrize("order", [BACKENDS, BACKENDS[::-1]])
def test_shared_view_predicts_as_separate_estimates(tmp_path: Path, order: list[str]) -> None:
    for path in _models(tmp_path):
        shared = SharedView(str(path))
        got = {b: _dump(shared.estimate(b)) for b in order}
        got["mmap"] = _dump(shared.estimate("openvino", session_options={ENABLE_MMAP: "NO"}))
        want = {b: _dump(estimate(str(path), backend=b)) for b in BACKENDS}
        want["mmap"] = _dump(
            estimate(str(path), backend="openvino", session_options={ENABLE_MMAP: "NO"})
        )
        assert got == want, path.name


def test_a_view_that_cannot_be_built_fails_every_backend(tmp_path: Path) -> None:
    model = weight_chain("MatMul", 2, (8, 8), [4, 8], [4, 8])
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    path = tmp_path / "sym.onnx"
    onnx.save_model(model, path)
    shared = SharedView(str(path))
    for b in ("openvino", "ort-openvino"):
        with pytest.raises(UnboundDimensionError):
            shared.estimate(b)
    assert max(SharedView(str(path), dims={"batch": 4}).estimate("ort").stage_peaks().values()) > 0


def test_views_shared_builds_an_in_memory_models_view_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside ``views_shared`` the estimates of one ``onnx_ir.Model`` object give what separate
    estimates give, from one view per model and bindings; outside, each builds its own."""
    from memshrink.estimate import api
    from memshrink.model import load

    path = _models(tmp_path)[0]
    model, other = load(path), load(path)
    want = {b: _dump(estimate(model, backend=b)) for b in BACKENDS}
    builds = [0]
    real = api.build_view

    def counting(*a: object, **k: object) -> object:
        builds[0] += 1
        return real(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(api, "build_view", counting)
    with api.views_shared():
        got = {b: _dump(estimate(model, backend=b)) for b in BACKENDS}
        assert builds[0] == 1
        estimate(model, backend="ort", session_options={"enable_mem_pattern": False})
        estimate(other, backend="ort")  # another object: its own view
        estimate(model, backend="ort", shapes={"x": [1, 16, 32, 32]})  # other bindings
        assert builds[0] == 3
        import numpy as np  # an array binding: a key as its tuple, shared as the list's

        estimate(model, backend="ort", shapes={"x": np.array([1, 16, 32, 32])})
        assert builds[0] == 3
    assert got == want
    estimate(model, backend="ort")
    assert builds[0] == 4
