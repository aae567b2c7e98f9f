"""``inline-functions``: bodies replace calls, ONNX Runtime's outputs stay bit-identical, OpenVINO
runs what it refused, weights stay on disk, and the estimator sees the bodies either way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from fixtures_onnx import assert_bit_identical, run_ort
from onnx import TensorProto, helper, numpy_helper

import memshrink
from memshrink.errors import ModelLoadError
from memshrink.manager import PassContext, PassManager

n = helper.make_node
F32 = TensorProto.FLOAT


def _fn(domain: str, name: str, ins, outs, nodes, opsets=None, attrs=(), attr_protos=()):  # noqa: ANN001, ANN202
    f = helper.make_function(
        domain, name, ins, outs, nodes, opsets or [helper.make_opsetid("", 18)], list(attrs)
    )
    f.attribute_proto.extend(attr_protos)
    return f


def _ref(name: str, ref: str, kind: int) -> onnx.AttributeProto:
    """Attribute ``name`` bound to the function's attribute ``ref`` (``ref_attr_name``)."""
    a = onnx.AttributeProto(name=name, ref_attr_name=ref)
    a.type = kind
    return a


def nested_model() -> onnx.ModelProto:
    """Three levels (Block -> MLP -> Act), ``ref_attr_name`` bound at the call, a default
    attribute (``alpha`` 0.25 when the call gives none), an attribute no one gives (dropped:
    LeakyRelu's own 0.01), two domains, inner names equal to the caller's (``h``, ``t``),
    a function called twice and from an If branch, and a Loop body calling one."""
    act_node = n("LeakyRelu", ["x"], ["y"])
    act_node.attribute.append(_ref("alpha", "alpha", onnx.AttributeProto.FLOAT))
    act = _fn("my.act", "Act", ["x"], ["y"], [act_node], attrs=["alpha"])
    scale_node = n("Mul", ["x", "s"], ["y"])
    s_const = n("Constant", [], ["s"])
    s_const.attribute.append(_ref("value_float", "scale", onnx.AttributeProto.FLOAT))
    default = helper.make_attribute("scale", 0.25)
    scale = _fn("my.nn", "Scale", ["x"], ["y"], [s_const, scale_node], attr_protos=[default])
    mlp = _fn(
        "my.nn",
        "MLP",
        ["x", "w"],
        ["y"],
        [
            n("MatMul", ["x", "w"], ["h"]),
            n("Act", ["h"], ["t"], domain="my.act"),  # no alpha: LeakyRelu's default
            n("Scale", ["t"], ["y"], domain="my.nn"),  # the default 0.25
        ],
        [
            helper.make_opsetid("", 18),
            helper.make_opsetid("my.act", 1),
            helper.make_opsetid("my.nn", 1),
        ],
    )
    ln = n("LayerNormalization", ["x", "g", "b"], ["y_ln"], axis=-1)
    ln.attribute.append(_ref("epsilon", "eps", onnx.AttributeProto.FLOAT))
    block = _fn(
        "my.nn",
        "Block",
        ["x", "g", "b", "w"],
        ["y"],
        [
            ln,
            n("MLP", ["y_ln", "w"], ["t"], domain="my.nn"),
            n("Add", ["x", "t"], ["y"]),
        ],
        [helper.make_opsetid("", 18), helper.make_opsetid("my.nn", 1)],
        attrs=["eps"],
    )
    loop_body = helper.make_graph(
        [
            n("Identity", ["cond_in"], ["cond_out"]),
            n("Act", ["acc"], ["lt"], domain="my.act", alpha=0.5),
            n("Add", ["lt", "h"], ["acc_out"]),  # reads the outer h
        ],
        "loop_body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc", F32, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", F32, None),
        ],
    )
    then_g = helper.make_graph(
        [n("Scale", ["h2"], ["t_out"], domain="my.nn", scale=2.0)], "then", [],
        [helper.make_tensor_value_info("t_out", F32, None)],
    )  # fmt: skip
    else_g = helper.make_graph(
        [n("Neg", ["h2"], ["e_out"])],
        "else",
        [],
        [helper.make_tensor_value_info("e_out", F32, None)],
    )
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(np.ones(16, np.float32), "g"),
        numpy_helper.from_array(np.zeros(16, np.float32), "b"),
        numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), "w"),
        numpy_helper.from_array(np.array(2, np.int64), "trip"),
        numpy_helper.from_array(np.array(True), "cond"),
    ]
    g = helper.make_graph(
        [
            n("Block", ["x", "g", "b", "w"], ["h"], domain="my.nn", eps=1e-3),
            n("Block", ["h", "g", "b", "w"], ["t"], domain="my.nn", eps=1e-5),
            n("Loop", ["trip", "cond", "t"], ["h2"], body=loop_body),
            n("If", ["flag"], ["y"], then_branch=then_g, else_branch=else_g),
        ],
        "nested",
        [
            helper.make_tensor_value_info("x", F32, [3, 16]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", F32, [3, 16])],
        inits,
    )
    m = helper.make_model(
        g,
        opset_imports=[
            helper.make_opsetid("", 18),
            helper.make_opsetid("my.nn", 1),
            helper.make_opsetid("my.act", 1),
        ],
        functions=[act, scale, mlp, block],
    )
    m.ir_version = 9
    return m


def _feeds(flag: bool) -> dict[str, np.ndarray]:
    x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
    return {"x": x, "flag": np.array(flag)}


def _inline(src: Path, dst: Path) -> dict:
    model, report = PassManager(["inline-functions"]).run(memshrink.load(src), PassContext())
    memshrink.save(model, dst)
    return report.passes[0].stats


def test_nested_functions_inlined_bit_identical(tmp_path: Path) -> None:
    src, dst = tmp_path / "f.onnx", tmp_path / "o.onnx"
    onnx.checker.check_model(nested_model())  # (full_check: ONNX infers no default attrs)
    onnx.save(nested_model(), src)
    stats = _inline(src, dst)
    out = onnx.load(dst)
    onnx.checker.check_model(out, full_check=True)  # SSA across scopes, opsets, types
    assert len(out.functions) == 0
    assert {o.domain for o in out.opset_import} == {""}
    # 2 Blocks (each LayerNorm + MLP(+Act +Scale)) + Scale in If + Act in the Loop body
    assert stats["calls_inlined"] == 2 * 4 + 1 + 1
    ops = [x.op_type for x in out.graph.node]
    assert ops.count("LayerNormalization") == 2 and "Block" not in ops
    eps = [a.f for x in out.graph.node for a in x.attribute if a.name == "epsilon"]
    assert eps == pytest.approx([1e-3, 1e-5], rel=1e-6, abs=0)  # float32 attributes
    leaky = [x for x in out.graph.node if x.op_type == "LeakyRelu"]
    assert all(not x.attribute for x in leaky)  # no alpha given, no default: dropped
    for flag in (True, False):
        assert_bit_identical(run_ort(src, _feeds(flag)), run_ort(dst, _feeds(flag)))


def test_calls_are_not_reported_as_opaque_custom_ops() -> None:
    from memshrink.manager import custom_domain_ops

    assert custom_domain_ops(memshrink.load(nested_model())) == {}


def test_known_answer_of_the_inlined_model(tmp_path: Path) -> None:
    """The numbers themselves, computed here in numpy (not only equal to ORT's own inlining)."""
    src, dst = tmp_path / "f.onnx", tmp_path / "o.onnx"
    onnx.save(nested_model(), src)
    _inline(src, dst)
    w = numpy_helper.to_array(nested_model().graph.initializer[2])
    x = _feeds(True)["x"]

    def ln(v: np.ndarray, eps: float) -> np.ndarray:
        mu = v.mean(-1, keepdims=True)
        return (v - mu) / np.sqrt(((v - mu) ** 2).mean(-1, keepdims=True) + eps)

    def leaky(v: np.ndarray, a: float) -> np.ndarray:
        return np.where(v >= 0, v, a * v)

    def block(v: np.ndarray, eps: float) -> np.ndarray:
        return v + leaky(ln(v, eps) @ w, 0.01) * 0.25

    h = block(x, 1e-3)
    acc = block(h, 1e-5)
    for _ in range(2):
        acc = leaky(acc, 0.5) + h
    got = run_ort(dst, _feeds(True))[0]
    np.testing.assert_allclose(got, acc * 2.0, atol=1e-4, rtol=1e-4)


def test_openvino_runs_what_it_refused(tmp_path: Path) -> None:
    ov = pytest.importorskip("openvino")
    src, dst = tmp_path / "f.onnx", tmp_path / "o.onnx"
    onnx.save(nested_model(), src)
    _inline(src, dst)
    core = ov.Core()
    with pytest.raises(RuntimeError, match="No conversion rule"):
        core.read_model(str(src))
    compiled = core.compile_model(
        core.read_model(str(dst)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
    )
    for flag in (True, False):
        got = compiled(_feeds(flag))[0]
        np.testing.assert_allclose(got, run_ort(src, _feeds(flag))[0], atol=1e-5, rtol=1e-5)


def _single(fn: onnx.FunctionProto, call: onnx.NodeProto, model_opset: int = 18) -> onnx.ModelProto:
    g = helper.make_graph(
        [call], "g", [helper.make_tensor_value_info("x", F32, [2, 3])],
        [helper.make_tensor_value_info(o, F32, [2, 3]) for o in call.output if o],
    )  # fmt: skip
    m = helper.make_model(
        g,
        opset_imports=[helper.make_opsetid("", model_opset), helper.make_opsetid(fn.domain, 1)],
        functions=[fn],
    )
    m.ir_version = 9
    return m


def test_opset_versions_inline_only_where_the_ops_mean_the_same(tmp_path: Path) -> None:
    """Relu changed at opset 14: a body importing 13 into an 18 model keeps its call (ONNX's
    checker refuses it too); Neg is the same at 18 and 20, so that body is inlined."""
    relu = _fn("d", "R", ["x"], ["y"], [n("Relu", ["x"], ["y"])], [helper.make_opsetid("", 13)])
    m = _single(relu, n("R", ["x"], ["y"], domain="d"))
    model, report = PassManager(["inline-functions"]).run(memshrink.load(m), PassContext())
    stats = report.passes[0].stats
    assert not report.passes[0].modified and len(model.functions) == 1
    assert stats["left (Relu differs between ai.onnx 13 and 18)"] == 1
    neg = _fn("d", "N", ["x"], ["y"], [n("Neg", ["x"], ["y"])], [helper.make_opsetid("", 18)])
    m = _single(neg, n("N", ["x"], ["y"], domain="d"), model_opset=20)
    src, dst = tmp_path / "n.onnx", tmp_path / "o.onnx"
    onnx.save(m, src)
    assert _inline(src, dst)["calls_inlined"] == 1
    out = onnx.load(dst)
    assert [x.op_type for x in out.graph.node] == ["Neg"] and not out.functions
    assert [(o.domain, o.version) for o in out.opset_import] == [("", 20)]
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3) - 3}
    assert_bit_identical(run_ort(src, feeds), run_ort(dst, feeds))


def test_passthrough_and_unnamed_outputs(tmp_path: Path) -> None:
    """A function returning its input (and one value twice) gets Identity nodes, so the caller's
    values stay distinct; a trailing output the call leaves out is not produced. ORT refuses
    such a function ("failed validating the check: !(it.GetName().empty())"): the answer is
    computed here."""
    fn = _fn(
        "d", "P", ["x"], ["a", "b", "c", "e"],
        [n("Relu", ["x"], ["r"]), n("Neg", ["r"], ["a"]), n("Identity", ["r"], ["e"])],
    )  # fmt: skip
    fn.output[:] = ["a", "x", "a", "e"]  # the input itself, ``a`` twice, ``e`` left out
    m = _single(fn, n("P", ["x"], ["y1", "y2", "y3"], domain="d"))
    src, dst = tmp_path / "p.onnx", tmp_path / "o.onnx"
    onnx.save(m, src)
    _inline(src, dst)
    out = onnx.load(dst)
    onnx.checker.check_model(out, full_check=True)
    assert [o.name for o in out.graph.output] == ["y1", "y2", "y3"]
    # the body's Identity (its ``e``, unused: prune's job), then one for x, one for the second a
    assert [x.op_type for x in out.graph.node].count("Identity") == 3
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    y1, y2, y3 = run_ort(dst, {"x": x})
    assert_bit_identical([y1, y2, y3], [-np.maximum(x, 0), x, -np.maximum(x, 0)])


def test_a_function_calling_itself_is_refused() -> None:
    """ONNX forbids recursive functions and ORT refuses the model: one line, exit 6."""
    fn = _fn("d", "C", ["x"], ["y"], [n("C", ["x"], ["y"], domain="d")])
    fn.opset_import.append(helper.make_opsetid("d", 1))
    m = _single(fn, n("C", ["x"], ["y"], domain="d"))
    with pytest.raises(ModelLoadError, match=r"call themselves \(d\.C\)"):
        PassManager(["inline-functions"]).run(memshrink.load(m), PassContext())


def test_weights_stay_on_disk(tmp_path: Path) -> None:
    """External initializers are never read: they are still file references after the pass."""
    src = tmp_path / "f.onnx"
    onnx.save(nested_model(), src, save_as_external_data=True, size_threshold=0)
    model, report = PassManager(["inline-functions"]).run(memshrink.load(src), PassContext())
    assert report.passes[0].modified
    tensors = [v.const_value for v in model.graph.initializers.values()]
    assert tensors and all(isinstance(t, ir.ExternalTensor) for t in tensors)


def test_estimator_sees_the_bodies(tmp_path: Path) -> None:
    """ORT inlines local functions at load, so the estimate of the original equals the
    estimate of the inlined file (was: each call one opaque node, its body's tensors missing)."""
    src, dst = tmp_path / "f.onnx", tmp_path / "o.onnx"
    onnx.save(nested_model(), src)
    _inline(src, dst)
    a = memshrink.estimate(str(src), backend="ort").stage_peaks()
    assert a == memshrink.estimate(str(dst), backend="ort").stage_peaks()
    # the EP's copy of the proto holds the names: the inlined file's are longer (282 B here)
    a = memshrink.estimate(str(src), backend="ort-openvino").stage_peaks()
    b = memshrink.estimate(str(dst), backend="ort-openvino").stage_peaks()
    assert a.keys() == b.keys()
    assert all(abs(a[k] - b[k]) <= 1024 for k in a), (a, b)  # atol 1 KiB, rtol 0


def test_presets_inline_first_and_partition_says_why(tmp_path: Path) -> None:
    """``all``, ``safe`` and ``stream`` inline before anything reads the graph's nodes; a bare
    ``partition`` of a model with calls names the fix (it failed on an assertion before)."""
    from memshrink.errors import PassError
    from memshrink.pipeline import resolve_pipeline

    for preset in ("all", "safe", "stream"):
        assert resolve_pipeline(preset, {})[0].name == "inline-functions", preset
    model = memshrink.load(nested_model())
    with pytest.raises(PassError, match="run inline-functions before partition"):
        PassManager(["partition"]).run(model, PassContext())
    src, out = tmp_path / "f.onnx", tmp_path / "parts"
    onnx.save(nested_model(), src)
    model, _ = PassManager("stream", options={"partition": {"parts": 2}}).run(
        memshrink.load(src), PassContext()
    )
    memshrink.save(model, out)
    from memshrink.runtime import PartitionedSession

    for flag in (True, False):
        got = PartitionedSession(out, backend="cpu", mode="streamed").run(None, _feeds(flag))
        # partition's stated bound: fusions can't cross a cut (atol 1e-5, rtol 1e-5)
        np.testing.assert_allclose(got[0], run_ort(src, _feeds(flag))[0], atol=1e-5, rtol=1e-5)
