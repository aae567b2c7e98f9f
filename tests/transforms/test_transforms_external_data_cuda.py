"""``external-data`` under ``optimize --backend cuda``: weights stay embedded where the CUDA EP's
host is predicted to hold less that way.

Why: the CUDA EP copies every weight to the GPU, so a mapped data file saves the host nothing,
while ONNX Runtime's external loading costs a transient ~128 MiB at session creation
(``cuda_host_external_staging``; MobileNetV2 measured 290 -> 407 MiB, docs/compare.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate.cuda import CUDA_CALIBRATION
from memshrink.manager import PassContext
from memshrink.model import META_SAVE
from memshrink.transforms import external_data
from memshrink.transforms.external_data import ExternalDataPass

MiB = 1 << 20
CUDA = PassContext(backend="cuda", deploy_only=True)


def _conv(channels: int = 64) -> ir.Model:
    """One 3x3 Conv over a 1x64x32x32 input: 64 x 64 x 9 floats = 144 KiB per 64 channels."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((channels, 64, 3, 3)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 32, 32])],
        [numpy_helper.from_array(w, "w")],
    )
    return ir.from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_small_weights_stay_embedded_for_cuda() -> None:
    model = _conv(256)  # 576 KiB of weights
    res = ExternalDataPass().run(model, CUDA)
    assert model.meta[META_SAVE] == {"external": False}
    choice = res.stats["cuda_layout"]
    assert choice["embedded"] is True and res.stats["tensors_external"] == 0
    ext, emb = choice["host_session_mib"]
    # external: the 128 MiB staging; embedded: the weights once (under glibc's mmap threshold)
    staging = CUDA_CALIBRATION["cuda_host_external_staging"] / MiB
    assert ext - emb == pytest.approx(staging - 576 / 1024, abs=0.15)


@pytest.mark.parametrize("context", [PassContext(), PassContext(backend="cuda"),
                                     PassContext(backend="ort", deploy_only=True)])  # fmt: skip
def test_other_targets_keep_external_data(context: PassContext) -> None:
    model = _conv()
    res = ExternalDataPass().run(model, context)
    assert model.meta[META_SAVE]["external"] is True
    assert "cuda_layout" not in res.stats and res.stats["tensors_external"] == 1


def _figures(session: dict[bool, int], gpu: dict[bool, int], peak: dict[bool, int]) -> Any:
    def fake(model: ir.Model, context: PassContext, embedded: bool) -> dict[str, Any]:
        host = {"session_creation": session[embedded], "steady_state": peak[embedded]}
        return {"host": host, "gpu": {"session_creation": gpu[embedded]}}

    return fake


@pytest.mark.parametrize(
    ("session", "gpu", "peak", "embedded", "reason"),
    [
        ({False: 400, True: 300}, {False: 10, True: 10}, {False: 700, True: 707}, True, "lower"),
        ({False: 400, True: 400}, {False: 10, True: 10}, {False: 700, True: 600}, False, "no higher"),
        ({False: 400, True: 300}, {False: 10, True: 12}, {False: 700, True: 700}, False, "GPU"),
        # 700 MiB + 5 % = 735: a rise of 36 MiB is over both 5 % and 8 MiB
        ({False: 400, True: 300}, {False: 10, True: 10}, {False: 700, True: 736}, False, "process"),
    ],
)  # fmt: skip
def test_the_cuda_layout_rule(monkeypatch: pytest.MonkeyPatch, session: dict, gpu: dict,
                              peak: dict, embedded: bool, reason: str) -> None:  # fmt: skip
    import memshrink.transforms.predicted as predicted

    mib = {k: {e: v * MiB for e, v in d.items()} for k, d in
           {"session": session, "gpu": gpu, "peak": peak}.items()}  # fmt: skip
    monkeypatch.setattr(predicted, "cuda_layout_figures", _figures(**mib))
    choice = external_data.cuda_embedded_choice(_conv(), CUDA, 1 * MiB)
    assert choice["embedded"] is embedded and reason in choice["reason"]


def test_over_the_protobuf_limit_stays_external(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(external_data, "EMBED_LIMIT", 1024)
    model = _conv()
    res = ExternalDataPass().run(model, CUDA)
    assert model.meta[META_SAVE]["external"] is True
    assert "protobuf" in res.stats["cuda_layout"]["reason"]
