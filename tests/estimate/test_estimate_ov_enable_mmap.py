"""OpenVINO with ``ENABLE_MMAP=NO``: external weights read into memory, the folded originals freed.

Why: with the data file mapped, compile reads every weight and the mapping stays while any
Constant points into it, so the pages of a Conv weight that a following Mul folds into a new
Constant stay resident; read per tensor, that original goes with the ov.Model, as when the
weights are embedded. Measured on this model (c = 2048, 2026-11-27, bf16 host, RSS over the
baseline after infer 3): embedded 93.1 MiB, external 108.6 (the data file's 32.0 MiB
mapped), external with ENABLE_MMAP=NO 92.1 (docs/optimize.md, "External data on OpenVINO").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from memshrink.commands import _other_backends
from memshrink.estimate import estimate
from memshrink.manager import PassManager
from memshrink.model import load
from memshrink.runtime.backends import ov_split_config
from memshrink.writer import save_model

MiB = 1 << 20


def conv_mul_conv(c: int, path: Path, folded_file: bool = False) -> Path:
    """Conv(w1) -> Mul(per-channel scale, folded into w1 by the plugin) -> Conv(w2), 1x1,
    each weight c*c*4 bytes; saved embedded at ``path``, external at ``path``.ext.onnx (one
    data file, or w1 and s in their own with ``folded_file``)."""
    rng = np.random.default_rng(0)
    f = TensorProto.FLOAT
    g = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w1"], ["a"]),
            helper.make_node("Mul", ["a", "s"], ["b"]),
            helper.make_node("Conv", ["b", "w2"], ["y"]),
        ],
        "cmc",
        [helper.make_tensor_value_info("x", f, [1, c, 8, 8])],
        [helper.make_tensor_value_info("y", f, [1, c, 8, 8])],
        [
            numpy_helper.from_array(rng.standard_normal((c, c, 1, 1)).astype(np.float32), "w1"),
            numpy_helper.from_array(rng.standard_normal((c, 1, 1)).astype(np.float32), "s"),
            numpy_helper.from_array(rng.standard_normal((c, c, 1, 1)).astype(np.float32), "w2"),
        ],
    )
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    opts = {"external-data": {"folded_file": folded_file}}
    model, _ = PassManager(["external-data"], options=opts).run(load(path))
    ext = path.with_suffix(".ext.onnx")
    save_model(model, ext)
    return ext


def _steady(path: Path, **opts: str) -> tuple[int, int]:
    st = next(
        s
        for s in estimate(str(path), backend="openvino", session_options=opts).prediction.stages
        if s.name == "steady_state"
    )
    return int(st.peak), int(st.weights_file)


def test_enable_mmap_no_frees_the_folded_original(tmp_path: Path) -> None:
    c = 512  # 1 MiB per weight
    ext = conv_mul_conv(c, tmp_path / "m.onnx")
    embedded, _ = _steady(tmp_path / "m.onnx")
    mapped, pages = _steady(ext)
    unmapped, no_pages = _steady(ext, ENABLE_MMAP="NO")
    assert no_pages == 0 and pages >= 2 * c * c * 4  # both weights' pages while mapped
    # read per tensor: as the embedded model (atol 4 KiB: the .onnx's structure bytes differ)
    assert abs(unmapped - embedded) <= 4096, (unmapped, embedded)
    # mapped: w1's folded original stays resident (its c*c*4 bytes, + s within 64 KiB)
    assert abs(mapped - unmapped - c * c * 4) <= 64 * 1024, (mapped, unmapped)


def test_optimize_names_the_mapped_pages_and_enable_mmap(tmp_path: Path) -> None:
    ext = conv_mul_conv(1024, tmp_path / "m.onnx")
    result: dict = {}
    note = _other_backends(result, tmp_path / "m.onnx", ext, "ort", {}, {}, rise=0.0,
                           min_bytes=MiB)  # fmt: skip
    ov = result["other_backends_predicted_peak"]["openvino"]
    assert note is not None and "ENABLE_MMAP" in note
    # the no-mmap prediction: the embedded original's peak (atol 4 KiB: structure bytes)
    assert abs(ov["after_enable_mmap_no"] - ov["before"]) <= 4096 and ov["before"] < ov["after"]


def test_read_model_properties_are_split_from_compile_options() -> None:
    read, comp = ov_split_config({"ENABLE_MMAP": "NO", "INFERENCE_PRECISION_HINT": "f32"})
    assert read == {"ENABLE_MMAP": False} and comp == {"INFERENCE_PRECISION_HINT": "f32"}
    assert ov_split_config({"enable_mmap": "yes"})[0] == {"ENABLE_MMAP": True}
    assert ov_split_config({}) == ({}, {})


def test_verify_gives_enable_mmap_to_read_model(tmp_path: Path) -> None:
    """``--provider-option openvino:ENABLE_MMAP=NO`` reaches ``read_model`` (compile_model
    would accept and ignore it), and the report says so."""
    from memshrink.verify import verify

    ext = conv_mul_conv(64, tmp_path / "m.onnx")
    rep = verify(tmp_path / "m.onnx", ext, backends=["openvino"], runs=1,
                 provider_options={"openvino": {"ENABLE_MMAP": "NO"}})  # fmt: skip
    assert rep.ok, rep.format_table()
    for run in rep.runs:
        got = run.to_dict()["assumptions"]
        assert got["read_config"] == {"ENABLE_MMAP": False} and got["compile_config"] == {}


def test_the_folded_weights_file_is_unmapped_after_compile(tmp_path: Path) -> None:
    """``external-data``'s default: w1 (folded by the Mul) in OUT.folded.data, w2 in OUT.data; the folded file's mapping goes with the ov.Model, so the steady state is the
    embedded model's. Measured (c = 2048, infer 3): 91.8 MiB against 108.6 with one file,
    93.1 embedded; predicted 92.9."""
    c = 512
    ext = conv_mul_conv(c, tmp_path / "m.onnx", folded_file=True)
    folded = ext.with_name(ext.name + ".folded.data")
    assert folded.stat().st_size == c * c * 4  # w1 alone, at offset 0
    proto = onnx.load(ext, load_external_data=False)
    where = {
        t.name: next((e.value for e in t.external_data if e.key == "location"), None)
        for t in proto.graph.initializer
    }
    # s (the Mul's scale, 2 KiB) is under the 4 KiB threshold: embedded, never folded out
    assert where == {"w1": folded.name, "s": None, "w2": ext.name + ".data"}
    embedded, _ = _steady(tmp_path / "m.onnx")
    two, pages = _steady(ext)
    assert pages >= c * c * 4  # w2's pages stay mapped
    # atol 64 KiB: the .onnx's structure bytes and the folded file's alignment padding
    assert abs(two - embedded) <= 64 * 1024, (two, embedded)


def test_the_ep_prediction_does_not_change_with_the_folded_file(tmp_path: Path) -> None:
    """ORT maps each tensor itself and hands them to the EP: one data file or two measured the
    same there (EfficientFormer after ``safe``, run 3 +178 / +175 MiB), so the EP's
    prediction does not take native OpenVINO's released file."""
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one = conv_mul_conv(512, tmp_path / "one" / "m.onnx")
    two = conv_mul_conv(512, tmp_path / "two" / "m.onnx", folded_file=True)

    def ep(p: Path) -> int:
        return int(max(estimate(str(p), backend="ort-openvino").stage_peaks().values()))

    assert abs(ep(one) - ep(two)) <= 64 * 1024  # atol 64 KiB: the folded file's padding
    assert _steady(two)[0] < _steady(one)[0] - 512 * 512 * 4 + 64 * 1024  # native: released
