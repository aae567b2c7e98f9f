"""Session-option recommendations: predicted by the estimator, checked on real ORT runs."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from memshrink.recommend import (
    Recommendation,
    check_commands,
    format_recommendations,
    recommend,
    session_options,
)

MiB = 1 << 20


def _chain(path, n: int = 12, width: int = 1 << 20) -> None:
    """x -> (Mul, Add) * n: 4 MiB activations, a long chain the arena plans several times."""
    nodes, inits = [], []
    prev = "x"
    for i in range(n):
        inits.append(helper.make_tensor(f"c{i}", TensorProto.FLOAT, [1], [1.0 + i / 100]))
        op = "Mul" if i % 2 else "Add"
        nodes.append(helper.make_node(op, [prev, f"c{i}"], [f"t{i}"], name=f"n{i}"))
        prev = f"t{i}"
    nodes.append(helper.make_node("ReduceSum", [prev], ["y"], keepdims=0, name="red"))
    g = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        inits,
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)


def test_recommendations_are_consistent(tmp_path):
    path = tmp_path / "chain.onnx"
    _chain(path)
    recs = recommend(str(path), backend="ort")
    peak = recs[0].baseline_peak if recs else None
    for r in recs:
        assert isinstance(r, Recommendation)
        assert r.saving >= 1 << 20
        assert r.predicted_peak == peak - r.saving
        peak = r.predicted_peak
    text = format_recommendations(recs)
    for r in recs:
        assert f"{r.key}={r.value}" in text
    assert set(session_options(recs)) == {r.key for r in recs}


def test_openvino_has_nothing_to_recommend(tmp_path):
    path = tmp_path / "chain.onnx"
    _chain(path)
    assert recommend(str(path), backend="openvino") == []
    assert "none" in format_recommendations([])


def _steady_growth(report) -> int:
    run = report.runs[0]
    stages = {s["name"]: s for s in run.stages}
    return int(stages["run3"]["peak"]) - int(stages["session"]["after"])


def test_recommended_options_lower_measured_steady_state(tmp_path):
    """The recommended settings, measured on ORT CPU, hold no more than the defaults."""
    from memshrink.verify import profile

    path = tmp_path / "chain.onnx"
    _chain(path)
    recs = recommend(str(path), backend="ort")
    if not recs:
        pytest.skip("the estimator predicts the defaults are best for this graph")
    opts = session_options(recs)
    default = _steady_growth(profile(str(path), backends=("cpu",), runs=3))
    tuned = _steady_growth(profile(str(path), backends=("cpu",), runs=3, session_options=opts))
    # Memory figures are stable to about 2 MiB (MEASURING.md): atol 2 MiB, rtol 0.
    assert tuned <= default + 2 * MiB


def test_accepts_an_in_memory_model(tmp_path):
    from memshrink.model import load

    path = tmp_path / "chain.onnx"
    _chain(path)
    by_path = recommend(str(path))
    in_memory = recommend(load(str(path)))
    assert [(r.key, r.value, r.saving) for r in in_memory] == [
        (r.key, r.value, r.saving) for r in by_path
    ]


def test_in_memory_model_is_predicted_as_the_file_the_save_writes(tmp_path):
    """``optimize`` recommends on the rewritten in-memory model: it must be predicted with the
    pipeline's save layout (external data), as the written file is, not as loaded (embedded)."""
    import onnx_ir as ir

    from memshrink import PassManager
    from memshrink.estimate import estimate
    from memshrink.writer import save_model

    src = tmp_path / "wide.onnx"
    _chain_with_weight(src)
    loaded = ir.serde.deserialize_model(onnx.load(str(src)))  # weights in memory
    model, _ = PassManager(["external-data"]).run(loaded)
    assert estimate(model).view.embedded  # as loaded; the save will write external data
    in_memory = recommend(model, backend="ort")
    out = tmp_path / "out.onnx"
    save_model(model, out)
    from_file = recommend(str(out), backend="ort")
    assert in_memory and from_file
    assert in_memory[0].baseline_peak == from_file[0].baseline_peak


def _chain_with_weight(path) -> None:
    """The activation chain behind a MatMul with a 16 MiB weight (embedded as built)."""
    import numpy as np
    from onnx import numpy_helper

    width = 1 << 20
    w = numpy_helper.from_array(np.full((4, width), 0.5, dtype=np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"], name="mm")]
    prev = "t"
    for i in range(8):
        op = "Mul" if i % 2 else "Add"
        nodes.append(helper.make_node(op, [prev, "k"], [f"t{i}"], name=f"n{i}"))
        prev = f"t{i}"
    nodes.append(helper.make_node("ReduceSum", [prev], ["y"], keepdims=0, name="red"))
    k = helper.make_tensor("k", TensorProto.FLOAT, [1], [1.01])
    g = helper.make_graph(
        nodes,
        "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        [w, k],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)


def test_check_commands_run_verify_and_estimate_with_the_recommended_settings() -> None:
    """Known answer: the printed commands parse with memshrink's own CLI and carry exactly the
    recommended settings and the shape bindings."""
    import shlex

    from memshrink.cli import build_parser

    recs = [
        Recommendation("ort", "enable_mem_pattern", False, 2 * MiB, 8 * MiB, 10 * MiB, "why"),
        Recommendation("ort", "execution_order", "PRIORITY_BASED", MiB, 7 * MiB, 10 * MiB, "w"),
    ]
    lines = check_commands(recs, "in dir/a.onnx", "b.onnx", ["--dim=batch=1"])
    assert check_commands([], "a", "b") == []
    assert len(lines) == 2 and all(": memshrink " in x for x in lines)
    text = format_recommendations(recs, lines)
    assert text.endswith(lines[1]) and lines[0] in text
    parser = build_parser()
    verify = parser.parse_args(shlex.split(lines[0].split(": memshrink ", 1)[1]))
    assert (verify.command, verify.original, verify.rewritten) == (
        "verify",
        "in dir/a.onnx",
        "b.onnx",
    )
    assert verify.session_option == ["enable_mem_pattern=False", "execution_order=PRIORITY_BASED"]
    assert verify.backends == "cpu" and verify.dim == ["batch=1"]
    est = parser.parse_args(shlex.split(lines[1].split(": memshrink ", 1)[1]))
    assert est.command == "estimate" and est.session_option == verify.session_option
