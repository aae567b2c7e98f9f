"""fold-weight-transforms: Cast/Transpose/Reshape of weights and Conv+BN folded ahead of time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import memshrink
from memshrink.manager import PassContext, PassManager


def _build(rng: np.random.Generator) -> onnx.ModelProto:
    arrays = {
        "W": rng.standard_normal((64, 32)).astype(np.float32),
        "W16": rng.standard_normal((64, 32)).astype(np.float16),
        "R": rng.standard_normal((32 * 32,)).astype(np.float32),
        "rs": np.array([32, 32], np.int64),
        "CW": rng.standard_normal((8, 3, 3, 3)).astype(np.float32),
        "CB": rng.standard_normal((8,)).astype(np.float32),
        "sc": rng.standard_normal(8).astype(np.float32),
        "bi": rng.standard_normal(8).astype(np.float32),
        "mu": rng.standard_normal(8).astype(np.float32),
        "va": (rng.random(8) + 0.5).astype(np.float32),
    }
    nodes = [
        helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
        helper.make_node("MatMul", ["x", "Wt"], ["h"]),
        helper.make_node("Cast", ["W16"], ["W32"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["h", "W32"], ["h2"]),
        helper.make_node("Reshape", ["R", "rs"], ["Rr"]),
        helper.make_node("MatMul", ["h2", "Rr"], ["y"]),
        helper.make_node("Conv", ["img", "CW", "CB"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "sc", "bi", "mu", "va"], ["bn"], epsilon=1e-3),
        helper.make_node("Relu", ["bn"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32]),
            helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 3, 8, 8]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8, 8, 8]),
        ],
        [numpy_helper.from_array(a, n) for n, a in arrays.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _run(path: Path, feeds: dict) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )  # compare graphs as written
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def test_folds_and_keeps_outputs(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    src = tmp_path / "m.onnx"
    onnx.save_model(_build(rng), src)
    model, report = PassManager(["fold-weight-transforms"]).run(memshrink.load(src), PassContext())
    stats = report.passes[0].stats
    assert (stats["transpose"], stats["cast"], stats["reshape_like"], stats["conv_bn"]) == (
        1,
        1,
        1,
        1,
    )
    assert [n.op_type for n in model.graph] == ["MatMul", "MatMul", "MatMul", "Conv", "Relu"]
    assert set(model.graph.initializers) >= {"Wt", "W32", "Rr"}
    assert not {"W", "W16", "R", "sc", "bi", "mu", "va"} & set(model.graph.initializers)
    out = tmp_path / "out.onnx"
    memshrink.save(model, out)
    feeds = {
        "x": rng.standard_normal((2, 32)).astype(np.float32),
        "img": rng.standard_normal((1, 3, 8, 8)).astype(np.float32),
    }
    (y0, z0), (y1, z1) = _run(src, feeds), _run(out, feeds)
    assert np.array_equal(y0, y1)  # Cast/Transpose/Reshape: bit-exact (atol 0, rtol 0)
    np.testing.assert_allclose(z1, z0, atol=1e-5, rtol=1e-5)  # Conv+BN: rounding only


def test_reshape_of_external_weight_reads_nothing(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    r = rng.standard_normal(64 * 64).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Reshape", ["R", "rs"], ["Rr"]),
            helper.make_node("MatMul", ["x", "Rr"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])],
        [
            numpy_helper.from_array(r, "R"),
            numpy_helper.from_array(np.array([64, 64], np.int64), "rs"),
        ],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    src = tmp_path / "m.onnx"
    onnx.save_model(proto, src, save_as_external_data=True, location="m.data", size_threshold=1024)
    model = memshrink.load(src)
    (tmp_path / "m.data").rename(tmp_path / "away")  # any read of the weight would fail
    model, report = PassManager(["fold-weight-transforms"]).run(model, PassContext())
    folded = model.graph.initializers["Rr"].const_value
    assert isinstance(folded, ir.ExternalTensor) and tuple(folded.shape) == (64, 64)
    assert report.passes[0].stats["reshape_like"] == 1


def test_shared_weight_folds_only_when_allowed(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    emb = rng.standard_normal((50, 16)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["E", "ids"], ["h"]),
            helper.make_node("Transpose", ["E"], ["Et"], perm=[1, 0]),
            helper.make_node("MatMul", ["h", "Et"], ["logits"]),
        ],
        "tied",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [3, 50])],
        [numpy_helper.from_array(emb, "E")],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    src = tmp_path / "tied.onnx"
    onnx.save_model(proto, src)
    # the fold alone (tied_matmul, tried first, is off here: test_tied_matmul_* below)
    no_swap = {"tied_matmul": "false"}
    opts = {"fold-weight-transforms": {"fold_shared": "false", **no_swap}}
    _, report = PassManager(["fold-weight-transforms"], options=opts).run(
        memshrink.load(src), PassContext(backend="ort-openvino", deploy_only=True)
    )
    assert report.passes[0].modified is False
    # targeting OpenVINO: its FC takes the transpose itself, so the tied copy is never folded
    opts = {"fold-weight-transforms": no_swap}
    _, report = PassManager(["fold-weight-transforms"], options=opts).run(
        memshrink.load(src), PassContext(backend="openvino")
    )
    assert report.passes[0].modified is False
    # deploy anywhere (no --backend): a trade the unfolded model wins (GPT-2: OpenVINO +221
    # MiB folded, its EP +95 unfolded, ORT CPU equal), so the tied copy is not folded either
    _, report = PassManager(["fold-weight-transforms"], options=opts).run(
        memshrink.load(src), PassContext()
    )
    assert report.passes[0].modified is False
    # one named runtime that needs it (CUDA: the GPU reads the folded copy instead of ORT
    # building it; tied_matmul is not tried there)
    model, report = PassManager(["fold-weight-transforms"]).run(
        memshrink.load(src), PassContext(backend="cuda", deploy_only=True)
    )
    assert report.passes[0].stats["transpose"] == 1
    assert report.passes[0].stats["bytes_added"] == emb.nbytes
    assert {"E", "Et"} <= set(model.graph.initializers)
    out = tmp_path / "out.onnx"
    memshrink.save(model, out)
    feeds = {"ids": np.array([1, 7, 49], np.int64)}
    assert np.array_equal(_run(src, feeds)[0], _run(out, feeds)[0])


def _tied(rng: np.random.Generator, readers: str = "matmul") -> tuple[onnx.ModelProto, np.ndarray]:
    """Tied embedding: Gather(E) in, logits = h @ Transpose(E) out (``gemm``: a Gemm reads
    the transpose too). ``h`` carries no shape: the pass takes A's rank from the output."""
    emb = rng.standard_normal((50, 16)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["E", "ids"], ["h"]),
        helper.make_node("Transpose", ["E"], ["Et"], perm=[1, 0]),
        helper.make_node("MatMul", ["h", "Et"], ["logits"]),
    ]
    outs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 3, 50])]
    if readers == "gemm":
        nodes.append(helper.make_node("Gemm", ["h2", "Et"], ["g"]))
        nodes.insert(1, helper.make_node("Gather", ["E", "one"], ["h2"]))
        outs.append(helper.make_tensor_value_info("g", TensorProto.FLOAT, [1, 50]))
    graph = helper.make_graph(
        nodes,
        "tied",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])],
        outs,
        [numpy_helper.from_array(emb, "E"), numpy_helper.from_array(np.array([4]), "one")],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    return proto, emb


def test_tied_matmul_reads_the_weight_as_a(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    proto, emb = _tied(rng)
    src = tmp_path / "tied.onnx"
    onnx.save_model(proto, src)
    small_ok = {"fold-weight-transforms": {"tied_matmul_min_bytes": "0"}}  # E is 3.2 KB
    for ctx in (PassContext(), PassContext(backend="openvino", deploy_only=True),
                PassContext(backend="ort", deploy_only=True)):  # fmt: skip
        model, report = PassManager(["fold-weight-transforms"], options=small_ok).run(
            memshrink.load(src), ctx
        )
        stats = report.passes[0].stats
        assert (stats["tied_matmul"], stats["transpose"], stats["bytes_added"]) == (1, 0, 0)
        assert list(model.graph.initializers) == ["E", "one"]  # no second copy of E
        ops = [(n.op_type, [v.name for v in n.inputs]) for n in model.graph]
        assert ops == [
            ("Gather", ["E", "ids"]),
            ("Transpose", ["h"]),
            ("MatMul", ["E", "logits__xT"]),
            ("Transpose", ["logits__WxT"]),
        ]
        assert [o.name for o in model.graph.outputs] == ["logits"]
    out = tmp_path / "out.onnx"
    memshrink.save(model, out)
    onnx.checker.check_model(onnx.load(out), full_check=True)
    ids = np.array([[1, 7, 49], [0, 3, 3]], np.int64)
    got = _run(out, {"ids": ids})[0]
    # known answer: each logit is one dot product of two rows of E (atol 1e-5, rtol 1e-5)
    np.testing.assert_allclose(got, emb[ids] @ emb.T, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(got, _run(src, {"ids": ids})[0], atol=1e-5, rtol=1e-5)


def test_tied_matmul_leaves_a_small_weight_alone(tmp_path: Path) -> None:
    # the default floor (4 MiB): a 3.2 KB tied head is neither swapped nor folded twice
    proto, _ = _tied(np.random.default_rng(3))
    src = tmp_path / "tied.onnx"
    onnx.save_model(proto, src)
    model, report = PassManager(["fold-weight-transforms"]).run(memshrink.load(src), PassContext())
    assert report.passes[0].stats["tied_matmul"] == 0
    assert [n.op_type for n in model.graph] == ["Gather", "Transpose", "MatMul"]
    assert list(model.graph.initializers) == ["E", "one"]


def test_tied_matmul_left_alone_when_another_op_reads_the_transpose(tmp_path: Path) -> None:
    proto, _ = _tied(np.random.default_rng(4), readers="gemm")
    src = tmp_path / "tied.onnx"
    onnx.save_model(proto, src)
    model, report = PassManager(["fold-weight-transforms"]).run(memshrink.load(src), PassContext())
    assert report.passes[0].stats["tied_matmul"] == 0
    assert "Transpose" in [n.op_type for n in model.graph]
    # under --backend cuda the tied copy is folded as before, never swapped
    _, report = PassManager(["fold-weight-transforms"]).run(
        memshrink.load(src), PassContext(backend="cuda", deploy_only=True)
    )
    assert report.passes[0].stats["tied_matmul"] == 0
