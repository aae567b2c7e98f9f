"""Which weights ``external-data`` writes to the folded-weights file (``ov_folded``), and that
the two-file model runs as the original.

Why a file of their own: OpenVINO folds a following BN / Mul-by-constant into a Conv's or an
FC's weights and keeps only the new Constant; with the originals alone in their file, that
file's mapping goes after ``compile_model`` (docs/optimize.md, "External data on OpenVINO").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.manager import PassManager
from memshrink.model import load
from memshrink.transforms.ov_folded import folded_weights
from memshrink.writer import save_model

RNG = np.random.default_rng(0)


def _w(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32), name)


def _graph() -> onnx.ModelProto:
    """Conv(cw1) -> Mul(Constant node)    folded
    Conv(cw2) -> Relu                      not: the plugin keeps the original
    Conv(cw3) -> BatchNormalization        folded
    MatMul(fw1) -> Add(bias) -> Mul(ls)    folded (per-channel scale, through the bias)
    MatMul(fw2) -> Mul([8, 1] scale)       not: a per-row scale cannot fold into W
    MatMul(fw3) -> Mul(ls3), MatMul(fw3)   not: its second reader keeps the original"""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Constant", [], ["k"], value=_w("kv", 16, 1, 1)),
        helper.make_node("Conv", ["x", "cw1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["c1", "k"], ["m1"]),
        helper.make_node("Conv", ["m1", "cw2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "cw3"], ["c3"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c3", "g", "b", "mu", "var"], ["n3"]),
        helper.make_node("Reshape", ["n3", "shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "fw1"], ["a1"]),
        helper.make_node("Add", ["a1", "bias"], ["ab1"]),
        helper.make_node("Mul", ["ab1", "ls"], ["s1"]),
        helper.make_node("MatMul", ["s1", "fw2"], ["a2"]),
        helper.make_node("Mul", ["a2", "rows"], ["s2"]),
        helper.make_node("MatMul", ["s2", "fw3"], ["a3"]),
        helper.make_node("Mul", ["a3", "ls3"], ["s3"]),
        helper.make_node("MatMul", ["s3", "fw3"], ["y"]),
    ]
    inits = [
        _w("cw1", 16, 16, 3, 3), _w("cw2", 16, 16, 3, 3), _w("cw3", 16, 16, 3, 3),
        _w("g", 16), _w("b", 16), _w("mu", 16),
        numpy_helper.from_array(np.ones(16, np.float32), "var"),
        numpy_helper.from_array(np.array([8, 16 * 64], np.int64), "shape"),
        _w("fw1", 1024, 64), _w("bias", 64), _w("ls", 64),
        _w("fw2", 64, 64), _w("rows", 8, 1), _w("fw3", 64, 64), _w("ls3", 64),
    ]  # fmt: skip
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", f, [8, 16, 8, 8])],
        [helper.make_tensor_value_info("y", f, [8, 64])], inits,
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_the_folded_weights_are_the_conv_and_fc_weights_a_fusion_rewrites() -> None:
    assert folded_weights(ir.from_proto(_graph()).graph) == {"cw1", "cw3", "fw1"}
    # the estimator's rules (conv_fused, fc_fused) name the same weights (and it predicts)
    estimate(_graph(), backend="openvino")
    from memshrink.estimate.openvino import weight_rules

    # (and fw3: it classifies a weight by its first reader, so its fc_fused takes one FC of
    # two; a superset is safe for the released file: only these three are written there)
    assert weight_rules(build_view(_graph())).folded == {"cw1", "cw3", "fw1", "fw3"}


def test_two_data_files_run_as_the_original(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save_model(_graph(), src)
    model, report = PassManager(["external-data"]).run(load(src))
    st = report.passes[0].stats
    assert st["tensors_folded_file"] == 3
    assert st["bytes_folded_file"] == (2 * 16 * 16 * 9 + 1024 * 64) * 4
    out = tmp_path / "o.onnx"
    info = save_model(model, out)
    assert info.folded_path == str(tmp_path / "o.onnx.folded.data")
    assert info.folded_file_bytes >= st["bytes_folded_file"]
    x = RNG.standard_normal((8, 16, 8, 8)).astype(np.float32)

    def run(p: Path) -> np.ndarray:
        s = ort.InferenceSession(str(p), providers=["CPUExecutionProvider"])
        return s.run(None, {"x": x})[0]

    np.testing.assert_allclose(run(out), run(src), atol=0, rtol=0)  # same bytes, same graph
    off, _ = PassManager(["external-data"], options={"external-data": {"folded_file": False}}).run(
        load(src)
    )
    one = save_model(off, tmp_path / "one.onnx")
    assert one.folded_path is None and not (tmp_path / "one.onnx.folded.data").exists()


def test_a_weight_given_a_keeping_reader_after_the_pass_stays_in_the_main_file(
    tmp_path: Path,
) -> None:
    """The names are the pass's; the save drops those no longer folded (a later pass made
    cw1 also read by a Conv followed by Relu): the folded file stays free of kept weights."""
    src = tmp_path / "m.onnx"
    onnx.save_model(_graph(), src)
    model, _ = PassManager(["external-data"]).run(load(src))
    g = model.graph
    x = g.inputs[0]
    extra = ir.node("Conv", [x, g.initializers["cw1"]], attributes={"pads": [1, 1, 1, 1]})
    relu = ir.node("Relu", [extra.outputs[0]])
    g.extend([extra, relu])
    relu.outputs[0].name = "z"
    relu.outputs[0].shape, relu.outputs[0].type = (
        ir.Shape([8, 16, 8, 8]),
        ir.TensorType(ir.DataType.FLOAT),
    )
    g.outputs.append(relu.outputs[0])
    save_model(model, tmp_path / "o.onnx")
    proto = onnx.load(tmp_path / "o.onnx", load_external_data=False)
    where = {
        t.name: next(e.value for e in t.external_data if e.key == "location")
        for t in proto.graph.initializer
        if t.external_data
    }
    assert where["cw1"] == "o.onnx.data"
    assert where["cw3"] == where["fw1"] == "o.onnx.folded.data"
