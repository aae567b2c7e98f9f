"""Inputs/outputs are read from the wire format without reading weights."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from memshrink.errors import ModelLoadError
from memshrink.verify.modelinfo import read_model_io


def test_embedded_and_external_agree(tmp_path: Path, embed_mlp, vocab: int) -> None:  # type: ignore[no-untyped-def]
    for external in (False, True):
        io = read_model_io(embed_mlp(tmp_path / f"m{external}.onnx", external=external))
        assert [(i.name, i.dtype, i.dims) for i in io.inputs] == [("ids", "int64", ["batch", 8])]
        assert [o.name for o in io.outputs] == ["y"]
        assert io.index_bounds == {"ids": vocab}


def test_initializers_listed_as_inputs_are_not_inputs(tmp_path: Path) -> None:
    w = numpy_helper.from_array(__import__("numpy").ones((2, 2), "float32"), "W")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2]),
            helper.make_tensor_value_info("W", TensorProto.FLOAT, [2, 2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w],
    )
    path = tmp_path / "ir3.onnx"
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    io = read_model_io(path)
    assert [i.name for i in io.inputs] == ["x"]
    assert io.inputs[0].dims == [None, 2]


@pytest.mark.parametrize("keep", [0.5, 0.9])
def test_a_truncated_file_is_a_load_error(tmp_path: Path, embed_mlp, keep: float) -> None:  # type: ignore[no-untyped-def]
    # the shared wire reader (``protowire``) bounds every field by its message: a file cut
    # inside the graph raises the loader's message, never an IndexError or a partial result
    data = embed_mlp(tmp_path / "m.onnx").read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ModelLoadError, match="truncated or not an ONNX model"):
        read_model_io(cut)


def test_only_gather_nodes_are_parsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forest's node (10^5-element attribute lists) is skipped by its op_type; the Gather
    after it still bounds its index input."""
    import numpy as np

    from memshrink.verify import modelinfo

    n = 100_000
    table = numpy_helper.from_array(np.zeros((7, 3), np.float32), "table")
    nodes = [
        helper.make_node(
            "TreeEnsembleRegressor", ["x"], ["t"], domain="ai.onnx.ml", nodes_values=[0.5] * n
        ),
        helper.make_node("Gather", ["table", "ids"], ["y"], axis=0),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [table],
    )
    path = tmp_path / "forest_gather.onnx"
    onnx.save_model(helper.make_model(g), path)
    seen: list[bytes] = []
    real = modelinfo._op_type

    def spy(buf, s, e):  # type: ignore[no-untyped-def]
        seen.append(real(buf, s, e))
        return seen[-1]

    monkeypatch.setattr(modelinfo, "_op_type", spy)
    io = read_model_io(path)
    assert seen == [b"TreeEnsembleRegressor", b"Gather"]
    assert io.index_bounds == {"ids": 7}
