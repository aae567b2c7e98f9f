"""fc-weight-layout: FC weights stored [N, K] and read by Gemm(transB=1) (``fc_nk``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import memshrink
from memshrink.estimate import estimate
from memshrink.estimate import openvino as ov_est
from memshrink.manager import PassContext, PassManager
from memshrink.transforms.fc_nk import matmul_to_gemm

SMALL = {"fc-weight-layout": {"min_bytes": "0"}}


def _save(proto: onnx.ModelProto, path: Path) -> Path:
    onnx.save_model(proto, path)
    return path


def _run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def _gemm_model(rng: np.random.Generator) -> tuple[onnx.ModelProto, np.ndarray]:
    w = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "b"], ["y"], alpha=0.5)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, w


def test_gemm_weight_is_stored_transposed(tmp_path: Path) -> None:
    proto, w = _gemm_model(np.random.default_rng(0))
    src = _save(proto, tmp_path / "g.onnx")
    model, report = PassManager(["fc-weight-layout"], options=SMALL).run(
        memshrink.load(src), PassContext()
    )
    assert report.passes[0].stats["gemm_weights"] == 1
    (node,) = list(model.graph)
    assert node.op_type == "Gemm" and node.attributes["transB"].value == 1
    assert node.attributes["alpha"].value == pytest.approx(0.5, rel=0, abs=0)
    assert sorted(model.graph.initializers) == ["W__nk", "b"]  # the [K, N] copy is gone
    out = tmp_path / "out.onnx"
    memshrink.save(model, out)
    stored = numpy_helper.to_array(
        next(t for t in onnx.load(out).graph.initializer if t.name == "W__nk")
    )
    np.testing.assert_allclose(stored, w.T, atol=0, rtol=0)  # known answer: Wᵀ, exactly
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    # bit-identical on ORT CPU: the same GEMM reads the same packed weight (atol 0, rtol 0)
    np.testing.assert_allclose(_run(out, {"x": x})[0], _run(src, {"x": x})[0], atol=0, rtol=0)


def test_gemm_left_alone_under_backend_cuda(tmp_path: Path) -> None:
    src = _save(_gemm_model(np.random.default_rng(0))[0], tmp_path / "g.onnx")
    ctx = PassContext(backend="cuda", deploy_only=True)
    model, report = PassManager(["fc-weight-layout"], options=SMALL).run(memshrink.load(src), ctx)
    assert report.passes[0].stats["gemm_weights"] == 0
    assert sorted(model.graph.initializers) == ["W", "b"]


def _mlp(rng: np.random.Generator, k: int = 64, n: int = 48, opset: int = 17,
         tied: bool = False) -> onnx.ModelProto:  # fmt: skip
    """x [2, 5, K] -> MatMul Wq, MatMul Wk (both read x) -> Add -> MatMul Wo [N, K] -> y.
    ``tied``: Wq is also read by a Gather (an embedding)."""
    arrays = {
        "Wq": rng.standard_normal((k, n)).astype(np.float32) * 0.1,
        "Wk": rng.standard_normal((k, n)).astype(np.float32) * 0.1,
        "Wo": rng.standard_normal((n, k)).astype(np.float32) * 0.1,
    }
    nodes = [
        helper.make_node("MatMul", ["x", "Wq"], ["q"]),
        helper.make_node("MatMul", ["x", "Wk"], ["kk"]),
        helper.make_node("Add", ["q", "kk"], ["h"]),
        helper.make_node("MatMul", ["h", "Wo"], ["y"]),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 5, k])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5, k])]
    if tied:
        nodes.append(helper.make_node("Gather", ["Wq", "ids"], ["e"]))
        inputs.append(helper.make_tensor_value_info("ids", TensorProto.INT64, [3]))
        outputs.append(helper.make_tensor_value_info("e", TensorProto.FLOAT, [3, n]))
    g = helper.make_graph(
        nodes, "g", inputs, outputs, [numpy_helper.from_array(a, nm) for nm, a in arrays.items()]
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


@pytest.mark.parametrize("opset", [17, 13])
def test_matmul_becomes_reshaped_gemm_sharing_the_input_reshape(tmp_path: Path, opset: int) -> None:
    src = _save(_mlp(np.random.default_rng(2), opset=opset), tmp_path / "m.onnx")
    model = memshrink.load(src)
    done = matmul_to_gemm(model.graph, opset)
    assert (done.weights, done.readers) == (3, 3)
    ops = [n.op_type for n in model.graph]
    # x (read by 2 MatMuls, same N): one flatten, one lead shape, one Concat; h: its own
    lead = ["Shape"] if opset >= 15 else ["Shape", "Slice"]
    shared = ["Reshape", *lead, "Concat"]
    assert ops == [*shared, "Gemm", "Reshape", "Gemm", "Reshape", "Add",
                   *shared, "Gemm", "Reshape"]  # fmt: skip
    assert done.nodes_added == 2 * len(shared) + 3
    assert all(n.attributes["transB"].value == 1 for n in model.graph if n.op_type == "Gemm")
    assert {"Wk__nk", "Wo__nk", "Wq__nk"} <= set(model.graph.initializers)
    assert not {"Wq", "Wk", "Wo"} & set(model.graph.initializers)
    out = tmp_path / "out.onnx"
    memshrink.save(model, out)
    onnx.checker.check_model(onnx.load(out), full_check=True)
    for batch in (1, 3):  # the leading dims are read at run time
        x = np.random.default_rng(batch).standard_normal((batch, 5, 64)).astype(np.float32)
        got, ref = _run(out, {"x": x})[0], _run(src, {"x": x})[0]
        assert got.shape == (batch, 5, 64)
        # ORT CPU: the same GEMM on the same packed weight (atol 0, rtol 0)
        np.testing.assert_allclose(got, ref, atol=0, rtol=0)


def test_a_weight_another_op_reads_is_left_alone(tmp_path: Path) -> None:
    src = _save(_mlp(np.random.default_rng(3), tied=True), tmp_path / "m.onnx")
    model = memshrink.load(src)
    assert matmul_to_gemm(model.graph, 17).weights == 2  # Wk, Wo; Wq is the Gather's too
    assert "Wq" in model.graph.initializers and "Wq__nk" not in model.graph.initializers
    assert [n.op_type for n in model.graph].count("MatMul") == 1


def test_a_rank_2_input_needs_no_reshape(tmp_path: Path) -> None:
    w = np.random.default_rng(5).standard_normal((64, 32)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])],
        [numpy_helper.from_array(w, "W")],
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    src = _save(m, tmp_path / "m.onnx")
    model = memshrink.load(src)
    done = matmul_to_gemm(model.graph, 17)
    assert (done.weights, done.nodes_added) == (1, 0)
    assert [n.op_type for n in model.graph] == ["Gemm"]
    out = tmp_path / "out.onnx"
    memshrink.save(model, out)
    x = np.random.default_rng(6).standard_normal((4, 64)).astype(np.float32)
    np.testing.assert_allclose(_run(out, {"x": x})[0], x @ w, atol=1e-5, rtol=1e-5)


def _big_mlp(rng: np.random.Generator) -> onnx.ModelProto:
    """Two 1024x1024 f32 MatMuls (4 MiB each) on x [1, 16, 1024]: at bf16 OpenVINO keeps a
    2 MiB transposed copy of each, 4 MiB in all."""
    return _mlp(rng, k=1024, n=1024)


def test_kept_where_openvino_computes_in_bf16(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ov_est, "ov_default_precision", lambda: "bf16")
    src = _save(_big_mlp(np.random.default_rng(4)), tmp_path / "m.onnx")
    ctx = PassContext(dims={"batch": 1})
    model, report = PassManager(["fc-weight-layout"]).run(memshrink.load(src), ctx)
    stats = report.passes[0].stats
    assert stats["matmul_weights"] == 3, stats
    pred = stats["openvino_predicted"]
    # 3 x 2 MiB of transposed bf16 copies saved, less the new node kinds' frontend pages
    assert 4 << 20 < pred["before"] - pred["after"] < 6 << 20
    assert set(stats["guard"]) == {"ort", "ort-openvino"}
    # known answer of the estimator: at run time the [K, N] weights cost their bf16 packed
    # copy and a bf16 transposed Constant (2 + 2 MiB each), the [N, K] ones the pack alone
    before = estimate(memshrink.load(src), backend="openvino", dims={"batch": 1})
    after = estimate(model, backend="openvino", dims={"batch": 1})
    anon = [{s.name: s.weights_anon for s in e.prediction.stages} for e in (before, after)]
    assert (anon[0]["steady_state"], anon[1]["steady_state"]) == (12 << 20, 6 << 20)
    assert (anon[0]["compile_model"], anon[1]["compile_model"]) == (6 << 20, 0)


def test_refused_where_openvino_computes_in_f32(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ov_est, "ov_default_precision", lambda: "f32")
    src = _save(_big_mlp(np.random.default_rng(4)), tmp_path / "m.onnx")
    model, report = PassManager(["fc-weight-layout"]).run(
        memshrink.load(src), PassContext(dims={"batch": 1})
    )
    stats = report.passes[0].stats
    assert "matmul_weights" not in stats or stats["matmul_weights"] == 0
    assert "less than min_saving" in stats["matmul"]
    assert [n.op_type for n in model.graph] == ["MatMul", "MatMul", "Add", "MatMul"]


def test_not_tried_when_deploying_on_another_runtime(tmp_path: Path) -> None:
    src = _save(_big_mlp(np.random.default_rng(4)), tmp_path / "m.onnx")
    ctx = PassContext(backend="ort", deploy_only=True, dims={"batch": 1})
    model, report = PassManager(["fc-weight-layout"]).run(memshrink.load(src), ctx)
    assert report.passes[0].stats["matmul"].startswith("not tried: only OpenVINO gains")
    assert [n.op_type for n in model.graph].count("MatMul") == 3


def test_a_weight_in_the_openvino_folded_file_is_left_alone(tmp_path: Path) -> None:
    # external-data's folded file holds weights the plugin rewrites into new Constants (a
    # scaled FC); a renamed copy would land in the mapped file instead (ov_folded)
    from memshrink.model import META_SAVE

    src = _save(_gemm_model(np.random.default_rng(0))[0], tmp_path / "g.onnx")
    model = memshrink.load(src)
    model.meta[META_SAVE] = {"folded": ["W"]}
    model, report = PassManager(["fc-weight-layout"], options=SMALL).run(model, PassContext())
    assert report.passes[0].stats["gemm_weights"] == 0
    assert sorted(model.graph.initializers) == ["W", "b"]
