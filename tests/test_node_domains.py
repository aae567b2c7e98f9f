"""A graph node whose domain the model's ``opset_import`` lacks: exit 6 where ORT refuses it.

QA session 15: ``optimize`` and ``estimate`` took a ``my.ops`` node without an import of
``my.ops`` with exit 0; ONNX Runtime refuses the model at load ("No opset import for domain"),
custom-op library or not. ORT's own domains (``com.microsoft``) load without one and stay.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from memshrink.cli import main

F32 = TensorProto.FLOAT


def _model(node: onnx.NodeProto, domains: list[str]) -> onnx.ModelProto:
    g = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", F32, [2, 3])],
        [helper.make_tensor_value_info("y", F32, [2, 3])],
    )  # fmt: skip
    ops = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(g, opset_imports=ops)


def _in_if(node: onnx.NodeProto) -> onnx.NodeProto:
    """``node`` in both branches of an If (a subgraph node)."""
    out = [helper.make_tensor_value_info("y", F32, [2, 3])]
    branch = helper.make_graph([node], "b", [], out)
    return helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)


def _if_model(node: onnx.NodeProto) -> onnx.ModelProto:
    c = helper.make_tensor("c", TensorProto.BOOL, [], [True])
    g = helper.make_graph(
        [_in_if(node)], "g", [helper.make_tensor_value_info("x", F32, [2, 3])],
        [helper.make_tensor_value_info("y", F32, [2, 3])], [c],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("where", ["graph", "subgraph"])
@pytest.mark.parametrize("command", ["optimize", "estimate"])
def test_a_custom_domain_without_opset_import_is_exit_6(
    where: str, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import onnxruntime as ort

    node = helper.make_node("Foo", ["x"], ["y"], domain="my.ops", name="foo")
    model = _model(node, []) if where == "graph" else _if_model(node)
    src = tmp_path / "in.onnx"
    onnx.save(model, src)
    with pytest.raises(Exception, match="No opset import for domain 'my.ops'"):
        ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    before = src.read_bytes()
    args = [str(src), str(tmp_path / "out.onnx")] if command == "optimize" else [str(src)]
    assert main([command, *args, "-q"] if command == "optimize" else [command, *args]) == 6
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no opset_import for the domain 'my.ops'" in err[0], err
    assert src.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx"]


def test_runtime_domains_load_without_opset_import(tmp_path: Path) -> None:
    """ORT registers com.microsoft itself: no import needed, the model runs and optimizes."""
    import onnxruntime as ort

    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(_model(helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft"), []), src)
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    sess = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": x})
    assert main(["optimize", str(src), str(dst), "--passes", "safe", "-q"]) == 0
    sess = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], y, atol=0, rtol=0)
