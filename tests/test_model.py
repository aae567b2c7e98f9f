"""Loading: weights stay on disk, every accepted input type converts, bad input fails clearly."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from fixtures_onnx import build_mlp

from memshrink.errors import ExternalDataError, ModelLoadError, UsageError
from memshrink.model import META_SOURCE, load, weight_bytes


def test_embedded_weights_become_lazy_references(mlp_path: Path) -> None:
    model = load(mlp_path)
    w1 = model.graph.initializers["W1"].const_value
    assert isinstance(w1, ir.ExternalTensor)
    assert Path(w1.path).resolve() == mlp_path.resolve()
    expected = onnx.numpy_helper.to_array(
        next(t for t in onnx.load(mlp_path).graph.initializer if t.name == "W1")
    )
    np.testing.assert_array_equal(w1.numpy(), expected)  # exact: same bytes, atol=rtol=0
    source = model.meta[META_SOURCE]
    assert source["external"] is False and source["lifted_tensors"] >= 4


def test_constant_node_payload_is_lifted_too(mlp_path: Path) -> None:
    model = load(mlp_path)
    const = next(n for n in model.graph if n.op_type == "Constant")
    assert isinstance(const.attributes["value"].value, ir.ExternalTensor)


def test_external_data_model_loads_with_base_dir(mlp_external_path: Path) -> None:
    model = load(mlp_external_path)
    t = model.graph.initializers["W2"].const_value
    assert isinstance(t, ir.ExternalTensor)
    assert os.path.basename(t.path) == "mlp_ext.weights"
    assert model.meta[META_SOURCE]["external"] is True
    assert weight_bytes(model) > 0


def test_accepts_proto_ir_and_graphsurgeon() -> None:
    proto = build_mlp()
    m1 = load(proto)
    assert load(m1) is m1
    gs = pytest.importorskip("onnx_graphsurgeon")
    m2 = load(gs.import_onnx(proto))
    assert {n.op_type for n in m2.graph} == {n.op_type for n in m1.graph}


def test_rejects_unsupported_type() -> None:
    with pytest.raises(UsageError, match="cannot load a model from int"):
        load(42)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty"),
        (b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", "truncated or not an ONNX model"),
    ],
)
def test_garbage_is_a_clear_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    with pytest.raises(ModelLoadError, match=message):
        load(path)


def test_truncated_model(tmp_path: Path, mlp_path: Path) -> None:
    data = mlp_path.read_bytes()
    for cut in (7, len(data) // 2, len(data) - 3):
        bad = tmp_path / f"cut{cut}.onnx"
        bad.write_bytes(data[:cut])
        with pytest.raises(ModelLoadError):
            load(bad)


def test_random_bytes(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    for i in range(20):
        bad = tmp_path / f"rand{i}.onnx"
        bad.write_bytes(rng.bytes(4096))
        with pytest.raises(ModelLoadError):
            load(bad)


def test_missing_file_and_folder(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="no such file"):
        load(tmp_path / "nope.onnx")
    with pytest.raises(ModelLoadError, match="is a folder"):
        load(tmp_path)


def test_missing_external_data_file(mlp_external_path: Path) -> None:
    (mlp_external_path.parent / "mlp_ext.weights").unlink()
    with pytest.raises(ExternalDataError, match="missing"):
        load(mlp_external_path)


def test_short_external_data_file(mlp_external_path: Path) -> None:
    data = mlp_external_path.parent / "mlp_ext.weights"
    data.write_bytes(data.read_bytes()[:1000])
    with pytest.raises(ExternalDataError, match="shorter than its reference"):
        load(mlp_external_path)


@pytest.mark.parametrize("location", ["../outside.bin", "/etc/passwd"])
def test_escaping_location_is_refused(tmp_path: Path, location: str) -> None:
    proto = build_mlp(extras=False)
    init = proto.graph.initializer[0]
    nbytes = len(init.raw_data)
    init.ClearField("raw_data")
    init.data_location = onnx.TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", str(nbytes))):
        entry = init.external_data.add()
        entry.key, entry.value = k, v
    folder = tmp_path / "m"
    folder.mkdir()
    (tmp_path / "outside.bin").write_bytes(b"\0" * nbytes)
    path = folder / "escape.onnx"
    onnx.save_model(proto, path)
    with pytest.raises(ExternalDataError, match="escapes|outside"):
        load(path)


def test_unsorted_graph_is_sorted_at_load_and_sorted_one_kept(tmp_path: Path) -> None:
    """onnxruntime.transformers.float16 appends its Cast nodes at the end of the graph (ORT
    runs any order); ``all --dim`` then crashed in chunk (clone: "outer-scope value")."""
    import numpy as np
    import onnx_ir as ir
    from onnx import TensorProto, helper, numpy_helper

    from memshrink.checks import check_topological
    from memshrink.manager import PassContext
    from memshrink.transforms.chunk import ChunkPass

    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    nodes = [
        helper.make_node("Relu", ["c16"], ["y16"]),
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Cast", ["c"], ["c16"], to=TensorProto.FLOAT16),  # appended, used above
    ]
    g = helper.make_graph(
        nodes,
        "unsorted",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 32, 32])],
        [helper.make_tensor_value_info("y16", TensorProto.FLOAT16, [2, 4, 32, 32])],
        [w],
    )
    path = tmp_path / "u.onnx"
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)
    model = load(path)
    check_topological(model.graph)
    assert [n.op_type for n in model.graph] == ["Conv", "Cast", "Relu"]
    ChunkPass(min_gain=-1.0).run(model.clone(), PassContext())  # must not raise
    sorted_model = ir.from_proto(
        helper.make_model(
            helper.make_graph(nodes[1:] + nodes[:1], "s", g.input, g.output, [w]),
            opset_imports=[helper.make_opsetid("", 18)],
        )
    )
    onnx.save_model(ir.to_proto(sorted_model), tmp_path / "s.onnx")
    assert [n.op_type for n in load(tmp_path / "s.onnx").graph] == ["Conv", "Cast", "Relu"]


@pytest.mark.parametrize("where", ["graph", "function", "subgraph"])
def test_an_op_the_standard_domain_does_not_define_is_refused(tmp_path: Path, where: str) -> None:
    """QA session 14: a local function whose body calls ``Reluu`` was inlined and written out
    with exit 0; ONNX Runtime refuses the model at load."""
    from onnx import TensorProto, helper

    bad = helper.make_node("Reluu", ["x"], ["y"], name="typo")
    nodes, functions = [bad], []
    if where == "function":
        functions = [helper.make_function("local", "F", ["x"], ["y"], [bad],
                                          [helper.make_opsetid("", 18)])]  # fmt: skip
        nodes = [helper.make_node("F", ["x"], ["y"], domain="local")]
    elif where == "subgraph":
        branch = helper.make_graph([bad], "b", [], [helper.make_tensor_value_info("y", 1, [2])])
        nodes = [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)]
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("local", 1)]
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, functions=functions, opset_imports=opsets), path)
    with pytest.raises(ModelLoadError, match="calls 'Reluu', which the ai.onnx domain does not"):
        load(path)


def test_onnx_runtimes_own_op_in_the_standard_domain_loads(tmp_path: Path) -> None:
    """ORT's transformers optimizer writes ``SimplifiedLayerNormalization`` in ``ai.onnx`` and
    ORT runs it; the session-14 unknown-op check refused real Llama-style exports for it."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    scale = helper.make_tensor("scale", TensorProto.FLOAT, [4], [1.0, 2.0, 0.5, 1.0])
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y"], name="rms",
                            axis=-1, epsilon=1e-5)  # fmt: skip
    g = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [scale],
    )  # fmt: skip
    path = tmp_path / "rms.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": x})  # the runtime runs it ...
    rms = np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, x / rms * np.array([1.0, 2.0, 0.5, 1.0]), rtol=1e-5, atol=1e-6)
    model = load(path)  # ... so memshrink loads it
    assert [n.op_type for n in model.graph] == ["SimplifiedLayerNormalization"]
