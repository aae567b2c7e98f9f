"""fc-weight-first: FC weights read as MatMul's first input (``fc_first``), so no runtime packs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from interpreters import NO_OVEP, ovep_python
from onnx import TensorProto, helper, numpy_helper

import memshrink
from memshrink import tolerance
from memshrink.estimate import estimate
from memshrink.estimate import openvino as ov_est
from memshrink.manager import PassContext, PassManager
from memshrink.transforms.fc_first import weights_first

MiB = 1 << 20


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
           outputs: list[onnx.ValueInfoProto], arrays: dict[str, np.ndarray]) -> onnx.ModelProto:  # fmt: skip
    g = helper.make_graph(
        nodes, "g", inputs, outputs, [numpy_helper.from_array(a, n) for n, a in arrays.items()]
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


def _run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def _mixed(rng: np.random.Generator) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x [batch, 3, 8] -> two MatMuls of W1 [8, 6] (one shared transpose of x) -> Add ->
    Reshape [-1, 6] -> Gemm(W2 [5, 6], b2, transB=1) -> Gemm(W3 [5, 4]) -> y [batch*3, 4]."""
    arrays = {
        "W1": rng.standard_normal((8, 6)).astype(np.float32),
        "W2": rng.standard_normal((5, 6)).astype(np.float32),
        "b2": rng.standard_normal(5).astype(np.float32),
        "W3": rng.standard_normal((5, 4)).astype(np.float32),
        "shp": np.array([-1, 6], np.int64),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["a"]),
        helper.make_node("MatMul", ["x", "W1"], ["a2"]),
        helper.make_node("Add", ["a", "a2"], ["s"]),
        helper.make_node("Reshape", ["s", "shp"], ["f"]),
        helper.make_node("Gemm", ["f", "W2", "b2"], ["g"], transB=1),
        helper.make_node("Gemm", ["g", "W3"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    return _model(nodes, [x], [y], arrays), arrays


def test_every_fc_reads_its_weight_first_with_the_known_answer(tmp_path: Path) -> None:
    proto, w = _mixed(np.random.default_rng(0))
    src = tmp_path / "m.onnx"
    onnx.save_model(proto, src)
    model = memshrink.load(src)
    done = weights_first(model.graph)
    assert (done.weights, done.readers) == (3, 4)
    ops = [n.op_type for n in model.graph]
    # x transposed once for both W1 readers; each FC: MatMul(W, xᵀ) -> Transpose (+ Add)
    assert ops == ["Transpose", "MatMul", "Transpose", "MatMul", "Transpose", "Add", "Reshape",
                   "Transpose", "MatMul", "Transpose", "Add",
                   "Transpose", "MatMul", "Transpose"]  # fmt: skip
    assert done.nodes_added == len(ops) - 6
    for n in model.graph:
        if n.op_type == "MatMul":
            assert n.inputs[0] is not None and n.inputs[0].is_initializer()
    # W1 and W3 were [K, N]: stored transposed; W2 was read with transB=1: as it is
    assert sorted(model.graph.initializers) == ["W1__nk", "W2", "W3__nk", "b2", "shp"]
    out = tmp_path / "out.onnx"
    memshrink.save(model, out)
    saved = {t.name: numpy_helper.to_array(t) for t in onnx.load(out).graph.initializer}
    np.testing.assert_allclose(saved["W1__nk"], w["W1"].T, atol=0, rtol=0)  # exactly Wᵀ
    np.testing.assert_allclose(saved["W3__nk"], w["W3"].T, atol=0, rtol=0)
    onnx.checker.check_model(onnx.load(out), full_check=True)
    for batch in (1, 2):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 8)).astype(np.float32)
        ref = ((2 * (x @ w["W1"])).reshape(-1, 6) @ w["W2"].T + w["b2"]) @ w["W3"]
        got = _run(out, {"x": x})[0]
        assert got.shape == (batch * 3, 4)
        # the same dot products in another GEMM blocking: a few ulp (atol 1e-4, rtol 1e-5)
        np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-5)
        np.testing.assert_allclose(got, _run(src, {"x": x})[0], atol=1e-4, rtol=1e-5)


def test_weights_another_op_reads_or_a_scaled_gemm_are_left_alone() -> None:
    rng = np.random.default_rng(1)
    arrays = {
        "E": rng.standard_normal((8, 8)).astype(np.float32),  # also a Gather's table
        "Ws": rng.standard_normal((8, 8)).astype(np.float32),  # Gemm alpha=0.5
        "Wm": rng.standard_normal((8, 8)).astype(np.float32),  # MatMul B and Gemm transB=1
    }
    nodes = [
        helper.make_node("MatMul", ["x", "E"], ["a"]),
        helper.make_node("Gather", ["E", "ids"], ["e"]),
        helper.make_node("Gemm", ["a", "Ws"], ["b"], alpha=0.5),
        helper.make_node("MatMul", ["b", "Wm"], ["c"]),
        helper.make_node("Gemm", ["c", "Wm"], ["y"], transB=1),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8]),
              helper.make_tensor_value_info("ids", TensorProto.INT64, [2])]  # fmt: skip
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8]),
               helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 8])]  # fmt: skip
    model = memshrink.load(_model(nodes, inputs, outputs, arrays))
    assert weights_first(model.graph).weights == 0
    assert [n.op_type for n in model.graph] == ["MatMul", "Gather", "Gemm", "MatMul", "Gemm"]


def _big_mlp(seq: int = 16) -> onnx.ModelProto:
    """Three 1024x1024 f32 FC weights (4 MiB each) on x [batch, seq, 1024]."""
    rng = np.random.default_rng(4)
    arrays = {n: rng.standard_normal((1024, 1024)).astype(np.float32) * 0.03
              for n in ("Wq", "Wk", "Wo")}  # fmt: skip
    nodes = [
        helper.make_node("MatMul", ["x", "Wq"], ["q"]),
        helper.make_node("MatMul", ["x", "Wk"], ["k"]),
        helper.make_node("Add", ["q", "k"], ["h"]),
        helper.make_node("MatMul", ["h", "Wo"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", seq, 1024])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", seq, 1024])
    return _model(nodes, [x], [y], arrays)


def _anon(model: object, backend: str) -> dict[str, int]:
    est = estimate(model, backend=backend, dims={"batch": 1}, embedded=False)
    return {s.name: s.weights_anon for s in est.prediction.stages}


def test_kept_for_the_ep_whose_packed_f32_copies_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ov_est, "ov_default_precision", lambda: "bf16")
    src = tmp_path / "m.onnx"
    onnx.save_model(_big_mlp(), src)
    model, report = PassManager(["fc-weight-first"]).run(
        memshrink.load(src), PassContext(dims={"batch": 1})
    )
    stats = report.passes[0].stats
    assert (stats["weights"], stats["readers"]) == (3, 3), stats
    assert set(stats["guard"]) == {"ort", "openvino", "ort-openvino"}
    stated = tolerance.from_metadata(model.metadata_props)  # not bit-exact: verify's tolerance
    assert stated is not None and "fc-weight-first" in str(model.metadata_props[tolerance.KEY])
    # known answer of the estimator (saved with external data, steady state): the EP packs
    # each f32 FC weight (3 x 4 MiB), OpenVINO at bf16 each [K, N] weight as a transposed and
    # a packed bf16 copy (3 x (2 + 2) MiB), ORT CPU prepacks B (3 x 4 MiB); read as MatMul's
    # first input, none of them does (ORT CPU reads them mapped at the run instead)
    before, after = memshrink.load(src), model
    assert _anon(before, "ort-openvino")["steady_state"] == 12 * MiB
    assert _anon(after, "ort-openvino")["steady_state"] == 0
    assert _anon(before, "openvino")["steady_state"] == 12 * MiB
    assert _anon(after, "openvino")["steady_state"] == 0
    assert _anon(before, "ort")["session_creation"] >= 12 * MiB  # + the arena's rounding
    assert _anon(after, "ort")["session_creation"] == 0
    pred = stats["predicted"]["ort-openvino"]
    assert pred["before"] - pred["after"] > 11 * MiB  # the packed copies, at least


def test_refused_where_the_transposed_activations_raise_ort_cpu(tmp_path: Path) -> None:
    # 12 MiB of weights against x [1, 8192, 1024] (32 MiB): the transposes of x and of the
    # products add tens of MiB to ORT CPU's plan, over the 1 % / 2 MiB cap
    src = tmp_path / "m.onnx"
    onnx.save_model(_big_mlp(seq=8192), src)
    model, report = PassManager(["fc-weight-first"]).run(
        memshrink.load(src), PassContext(dims={"batch": 1})
    )
    stats = report.passes[0].stats
    assert stats["weights"] == 0
    assert stats["why"].startswith("kept the packed layout: ort: predicted peak"), stats["why"]
    assert [n.op_type for n in model.graph] == ["MatMul", "MatMul", "Add", "MatMul"]


def test_not_tried_under_backend_cuda(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save_model(_big_mlp(), src)
    ctx = PassContext(backend="cuda", deploy_only=True, dims={"batch": 1})
    model, report = PassManager(["fc-weight-first"]).run(memshrink.load(src), ctx)
    assert report.passes[0].stats["why"].startswith("not tried under --backend cuda")
    assert [n.op_type for n in model.graph].count("MatMul") == 3


def test_under_backend_ort_only_ort_cpu_is_judged(tmp_path: Path) -> None:
    # external weights: ORT CPU maps them and prepacks each (session creation peaks with the
    # packing's transient: 16 MiB anon); read first, the session holds none and the run reads
    # the mapped 12 MiB: its process peak drops (measured on 4 x 2048²: 89.7 -> 78.6 MiB)
    src = tmp_path / "m.onnx"
    onnx.save_model(_big_mlp(), src, save_as_external_data=True, location="m.onnx.data")
    ctx = PassContext(backend="ort", deploy_only=True, dims={"batch": 1})
    model, report = PassManager(["fc-weight-first"]).run(memshrink.load(src), ctx)
    stats = report.passes[0].stats
    assert stats["weights"] == 3 and set(stats["predicted"]) == {"ort"}
    assert "guard" not in stats  # deploying on ORT CPU alone: the others are not spared
    assert _anon(memshrink.load(src), "ort")["session_creation"] > 16 * MiB
    assert _anon(model, "ort")["session_creation"] == 0


def test_the_real_ep_drops_its_packed_copies(tmp_path: Path) -> None:
    """The EP on the 3 x 4 MiB MLP, MatMul form vs the pass's output (external data, one
    child each): steady state drops by most of the weights (OpenVINO's packed f32 copies, 12
    MiB; measured 74.5 -> 65.8 MiB, the plain MatMul's code pages take back some), and both
    files are predicted within 10 % (4 x 2048², 64 MiB: 182.6 -> 122.3 measured)."""
    py = ovep_python()
    if py is None:
        pytest.skip(NO_OVEP)
    from memshrink.verify import profile

    src, out = tmp_path / "m.onnx", tmp_path / "first.onnx"
    onnx.save_model(_big_mlp(), src, save_as_external_data=True, location="m.onnx.data")
    model, _ = PassManager(["fc-weight-first"]).run(
        memshrink.load(src), PassContext(dims={"batch": 1})
    )
    memshrink.save(model, out)
    steady = {}
    for path in (src, out):
        run = profile(str(path), backends=("ort-openvino",), runs=2, dims={"batch": 1},
                      python={"ort-openvino": py}).runs[0].to_dict()  # fmt: skip
        assert run["status"] == "ok", run["error"]
        steady[path] = next(s["peak_delta"] for s in run["stages"] if s["name"] == "run2")
        pred = estimate(str(path), backend="ort-openvino", dims={"batch": 1}).stage_peaks()
        assert pred["steady_state"] == pytest.approx(steady[path], rel=0.10, abs=0)
    assert steady[src] - steady[out] > 7 * MiB, {str(k): v / MiB for k, v in steady.items()}
