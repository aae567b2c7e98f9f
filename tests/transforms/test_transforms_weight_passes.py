"""prune, dedup-weights, external-data: stats, invariants, bit-identical outputs under ORT."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from fixtures_onnx import assert_bit_identical, build_mlp, mlp_feeds, run_ort
from onnx import TensorProto, helper, numpy_helper

from memshrink.checks import check_model
from memshrink.manager import PassContext, PassManager
from memshrink.transforms import get_pass
from memshrink.writer import save_model


def _run(path: Path, names: str, tmp_path: Path, **options):  # noqa: ANN003
    model, report = PassManager(names, options=options).run(path)
    check_model(model)
    out = tmp_path / f"out_{names.replace(',', '_')}.onnx"
    save_model(model, out)
    return model, report, out


@pytest.mark.parametrize("pipeline", ["prune", "dedup-weights", "external-data", "safe", "all"])
def test_outputs_bit_identical(mlp_path: Path, tmp_path: Path, pipeline: str) -> None:
    _, _, out = _run(mlp_path, pipeline, tmp_path)
    assert_bit_identical(run_ort(mlp_path, mlp_feeds()), run_ort(out, mlp_feeds()))


def test_prune_removes_dead_code_only(mlp_path: Path, tmp_path: Path) -> None:
    model, report, _ = _run(mlp_path, "prune", tmp_path)
    stats = report.passes[0].stats
    assert stats["nodes_removed"] == 2  # Sigmoid -> Neg dead branch
    assert stats["initializers_removed"] == 1 and stats["bytes_removed"] == 64 * 64 * 4
    assert [v.name for v in model.graph.inputs] == ["x"]
    assert [v.name for v in model.graph.outputs] == ["y", "z"]
    # Second run finds nothing: idempotent.
    again = get_pass("prune")().run(model, PassContext())
    assert not again.modified


def test_prune_counts_a_dropped_unused_output_as_a_change(tmp_path: Path) -> None:
    # Zoo SqueezeNet's Dropout has an unread mask output; onnx_ir's pass drops it, and
    # the pass manager trusts ``modified`` to invalidate its cached analyses.
    g = helper.make_graph(
        [helper.make_node("Dropout", ["x"], ["y", "mask"], ratio=0.5)],
        "g",
        [helper.make_tensor_value_info("x", 1, [2, 3])],
        [helper.make_tensor_value_info("y", 1, [2, 3])],
    )
    path = tmp_path / "dropout.onnx"
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)]), path)
    model, report, out = _run(path, "prune", tmp_path)
    assert report.passes[0].modified
    assert report.passes[0].stats["node_outputs_removed"] == 1
    assert [v.name for v in next(iter(model.graph)).outputs] == ["y"]
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    assert_bit_identical(run_ort(path, feeds), run_ort(out, feeds))


def test_prune_keeps_inputs_outputs_and_subgraph_uses(tmp_path: Path) -> None:
    then_g = helper.make_graph(
        [helper.make_node("Add", ["x", "outer_w"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", 1, [2])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Sub", ["x", "outer_w"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", 1, [2])],
    )
    g = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
            helper.make_node("Greater", ["s", "zero"], ["cond"]),
            helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", 1, [2]),
            helper.make_tensor_value_info("unused_in", 1, [2]),
        ],
        [helper.make_tensor_value_info("y", 1, [2])],
        [
            numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "outer_w"),
            numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
        ],
    )
    path = tmp_path / "if.onnx"
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    model, report, out = _run(path, "prune", tmp_path)
    assert report.passes[0].stats["nodes_removed"] == 0
    assert "outer_w" in model.graph.initializers  # used only inside the subgraphs
    assert [v.name for v in model.graph.inputs] == ["x", "unused_in"]
    feeds = {"x": np.array([1.0, -3.0], np.float32), "unused_in": np.zeros(2, np.float32)}
    assert_bit_identical(run_ort(path, feeds), run_ort(out, feeds))


def test_dedup_merges_identical_and_keeps_different(mlp_path: Path, tmp_path: Path) -> None:
    model, report, _ = _run(mlp_path, "dedup-weights", tmp_path)
    stats = report.passes[0].stats
    assert stats["merged"] == 1 and stats["bytes_saved"] == 128 * 128 * 4
    assert "W1_copy" not in model.graph.initializers and "W2" in model.graph.initializers


def test_dedup_same_shape_different_bytes_not_merged(tmp_path: Path) -> None:
    proto = build_mlp(extras=False)
    w = numpy_helper.to_array(proto.graph.initializer[0]).copy()
    w.flat[-1] += 1.0  # differs in the last element only
    proto.graph.initializer[1].CopyFrom(numpy_helper.from_array(w, "W2"))
    path = tmp_path / "near.onnx"
    onnx.save_model(proto, path)
    _, report, _ = _run(path, "dedup-weights", tmp_path)
    assert report.passes[0].stats["merged"] == 0


def test_dedup_streaming_compare_across_chunks() -> None:
    from memshrink.transforms.dedup_weights import iter_tensor_chunks, tensors_equal

    a = ir.Tensor(np.arange(1000, dtype=np.float32))
    b = ir.Tensor(np.arange(1000, dtype=np.float32))
    c = ir.Tensor(np.arange(1000, dtype=np.float32) * 2)
    assert tensors_equal(a, b) and not tensors_equal(a, c)
    assert sum(len(p) for p in iter_tensor_chunks(a, chunk=7)) == 4000


def test_external_data_moves_constants_and_sets_policy(mlp_path: Path, tmp_path: Path) -> None:
    # threshold 1 KiB (the default is 4 KiB): bias_c, a 1 KiB Constant, moves out too
    model, report, out = _run(
        mlp_path, "external-data", tmp_path, **{"external-data": {"threshold": "1KiB"}}
    )
    stats = report.passes[0].stats
    assert stats["constants_to_initializers"] == 1
    assert "bias_c" in model.graph.initializers
    proto = onnx.load(out, load_external_data=False)
    external = [t for t in proto.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    assert len(external) == stats["tensors_external"] == 5
    for t in external:
        entry = {e.key: e.value for e in t.external_data}
        step = 65536 if int(entry["length"]) >= 65536 else 4096  # writer.tensor_offset
        assert int(entry["offset"]) % step == 0


def test_external_data_threshold_option(mlp_path: Path, tmp_path: Path) -> None:
    _, report, out = _run(
        mlp_path, "external-data", tmp_path, **{"external-data": {"threshold": "32KiB"}}
    )
    proto = onnx.load(out, load_external_data=False)
    external = [t.name for t in proto.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    assert sorted(external) == ["W1", "W1_copy", "W2"]  # 64 KiB each; the 16 KiB ones stay inline
    assert_bit_identical(run_ort(mlp_path, mlp_feeds()), run_ort(out, mlp_feeds()))


def test_external_data_on_already_external_input(mlp_external_path: Path, tmp_path: Path) -> None:
    _, _, out = _run(mlp_external_path, "safe", tmp_path)
    assert Path(str(out) + ".data").exists()
    assert_bit_identical(run_ort(mlp_external_path, mlp_feeds()), run_ort(out, mlp_feeds()))
