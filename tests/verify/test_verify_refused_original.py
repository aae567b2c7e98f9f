"""A rewrite that runs where the original was refused is judged against original@cpu.

Native OpenVINO refuses every model-local function; ``inline-functions`` makes it run. The gate
must compare that rewrite with ORT CPU's original outputs, not fail because the original failed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import memshrink
from memshrink.manager import PassContext, PassManager

pytest.importorskip("openvino")


def _with_function(path: Path, scale: float = 0.5) -> Path:
    """x[2, 16] -> MatMul W -> my.fn.Act (Relu then Mul by ``scale``) -> y; seeded weights."""
    act = helper.make_function(
        "my.fn",
        "Act",
        ["x"],
        ["y"],
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Constant", [], ["s"], value_float=scale),
            helper.make_node("Mul", ["r", "s"], ["y"]),
        ],
        [helper.make_opsetid("", 18)],
    )
    w = np.random.default_rng(3).standard_normal((16, 16)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["h"]),
            helper.make_node("Act", ["h"], ["y"], domain="my.fn"),
        ],
        "fn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])],
        [numpy_helper.from_array(w, "W")],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("my.fn", 1)],
        functions=[act],
    )
    model.ir_version = 9
    onnx.save(model, path)
    return path


def _inline(src: Path, dst: Path) -> None:
    model, _ = PassManager(["inline-functions"]).run(memshrink.load(src), PassContext())
    memshrink.save(model, dst)


def test_refused_original_is_replaced_by_the_cpu_reference(tmp_path: Path) -> None:
    src = _with_function(tmp_path / "fn.onnx")
    dst = tmp_path / "inl.onnx"
    _inline(src, dst)
    report = memshrink.verify(
        str(src), str(dst), backends="cpu,openvino", runs=1, atol=1e-5, rtol=1e-5
    )
    orig_ov = report.run("original", "openvino")
    assert orig_ov is not None and orig_ov.status == "failed"  # OpenVINO refuses the function
    ov = next(c for c in report.comparisons if c.backend == "openvino")
    assert ov.reference == "original@cpu" and ov.status == "match", ov.note
    assert "did not run on openvino" in (ov.note or "")
    assert report.exit_code == 0 and report.failed_runs == []


def test_a_wrong_rewrite_still_fails_against_the_cpu_reference(tmp_path: Path) -> None:
    src = _with_function(tmp_path / "fn.onnx")
    wrong_src = _with_function(tmp_path / "wrong.onnx", scale=0.55)  # a planted 10 % change
    dst = tmp_path / "inl.onnx"
    _inline(wrong_src, dst)
    report = memshrink.verify(
        str(src), str(dst), backends="cpu,openvino", runs=1, atol=1e-5, rtol=1e-5
    )
    ov = next(c for c in report.comparisons if c.backend == "openvino")
    assert ov.reference == "original@cpu" and ov.status == "mismatch"
    assert report.exit_code == 3


def test_without_cpu_there_is_no_reference_and_the_gate_fails(tmp_path: Path) -> None:
    src = _with_function(tmp_path / "fn.onnx")
    dst = tmp_path / "inl.onnx"
    _inline(src, dst)
    report = memshrink.verify(str(src), str(dst), backends="openvino", runs=1, atol=1e-5, rtol=1e-5)
    assert report.exit_code == 5  # original@openvino failed and nothing can stand in for it
