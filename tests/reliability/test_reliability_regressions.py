"""Regression tests for foundation bugs the reliability sweep found (one test per bug)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import onnx.parser
import pytest
import reliability_repros as repros
from fixtures_onnx import build_mlp

from memshrink.checks import check_model
from memshrink.manager import PassContext, PassManager
from memshrink.model import load
from memshrink.writer import save_model


def test_check_model_ir3_initializers_listed_as_inputs(tmp_path: Path) -> None:
    """IR < 4 models list every initializer as a graph input too (ONNX suite: test_Conv3d_*).
    With weights external, ``check_model`` turned them into inputs a second time and
    onnx.checker failed with "not in SSA form" after every pass."""
    model = build_mlp(extras=False)
    model.graph.input.extend(
        onnx.helper.make_tensor_value_info(i.name, i.data_type, list(i.dims))
        for i in model.graph.initializer
    )
    model.ir_version = 3
    model.opset_import[0].version = 8
    path = tmp_path / "ir3.onnx"
    onnx.save_model(model, path, save_as_external_data=True, location="w.bin", size_threshold=0)
    check_model(load(path))  # raised PassError before the fix


def _strings_model() -> onnx.ModelProto:
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["a"], ["y"])],
        "strings",
        [onnx.helper.make_tensor_value_info("a", onnx.TensorProto.STRING, [2])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.STRING, [2])],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 20)])
    model.ir_version = 9
    return model


def _run_and_check(pipeline: str, model: Any) -> None:
    rewritten, _ = PassManager(pipeline).run(load(model), PassContext())
    check_model(rewritten)


def test_fixed_reorder_keeps_producers_before_consumers() -> None:
    # fails: "node 'Add' reads 'const7' before it is produced"
    _run_and_check("reorder", onnx.parser.parse_model(repros.REORDER_CONSTANTS))


@pytest.mark.parametrize("pass_name", ["partition", "inplace", "recompute", "reorder"])
def test_fixed_string_tensors(pass_name: str) -> None:
    _run_and_check(pass_name, _strings_model())  # TypeError: Bitwidth ... STRING


@pytest.mark.parametrize("pass_name", ["inplace", "recompute"])
def test_fixed_empty_output_names(pass_name: str) -> None:
    _run_and_check(
        pass_name, onnx.parser.parse_model(repros.ATTENTION_EMPTY_OUTPUTS)
    )  # KeyError ''


def test_fixed_chunk_after_the_other_passes() -> None:
    _run_and_check("all", onnx.parser.parse_model(repros.ATTENTION_EXPANDED))  # clone_graph


def test_fixed_chunk_on_ir3_opset9_models() -> None:
    light = Path(onnx.__file__).parent / "backend/test/data/light/light_squeezenet.onnx"
    _run_and_check("chunk", light)  # initializer not in graph input / Slice-1 with 4 inputs


def test_partition_saves_sequence_outputs(tmp_path: Path) -> None:
    """Was a known bug (the sweep's test_split_to_sequence_*, test_sequence_map_*): the writer
    refused a declared sequence output as "element type unknown"; fixed in d782e31."""
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("SplitToSequence", ["x"], ["seq"], axis=0)],
        "sequences",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 2])],
        [onnx.helper.make_tensor_sequence_value_info("seq", onnx.TensorProto.FLOAT, None)],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18)])
    model.ir_version = 8
    rewritten, _ = PassManager("partition").run(load(model), PassContext())
    save_model(rewritten, tmp_path / "parts")
