"""Malformed model-local functions are refused with one line (exit 6) and no output; a function
named like an op of its domain keeps its calls, so ONNX Runtime's outputs (the op's) stay."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from fixtures_onnx import assert_bit_identical, run_ort
from onnx import TensorProto, helper

from memshrink.cli import main

n = helper.make_node
F32 = TensorProto.FLOAT
X = np.array([[-1, 2, -3, 4], [5, -6, 7, -8]], np.float32)


def _fn(domain: str, name: str, nodes, attrs=(), inner: bool = False) -> onnx.FunctionProto:  # noqa: ANN001
    opsets = [helper.make_opsetid("", 18)] + ([helper.make_opsetid(domain, 1)] if inner else [])
    return helper.make_function(domain, name, ["a"], ["b"], nodes, opsets, list(attrs))


def _model(
    call: onnx.NodeProto, functions, domain: str = "my", version: int = 1
) -> onnx.ModelProto:  # noqa: ANN001
    g = helper.make_graph(
        [call], "g", [helper.make_tensor_value_info("x", F32, [2, 4])],
        [helper.make_tensor_value_info("y", F32, [2, 4])],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 18)]
    if domain not in ("", "ai.onnx"):
        opsets.append(helper.make_opsetid(domain, version))
    m = helper.make_model(g, opset_imports=opsets, functions=functions)
    m.ir_version = 9
    return m


def _leaky_ref() -> onnx.NodeProto:
    node = n("LeakyRelu", ["a"], ["b"])
    ref = onnx.AttributeProto(name="alpha", ref_attr_name="alpha")
    ref.type = onnx.AttributeProto.FLOAT
    node.attribute.append(ref)
    return node


def _cases() -> dict[str, tuple[onnx.ModelProto, str]]:
    relu = _fn("my", "F", [n("Relu", ["a"], ["b"])])
    calls_b = _fn("my", "A", [n("B", ["a"], ["b"], domain="my")], inner=True)
    calls_a = _fn("my", "B", [n("A", ["a"], ["b"], domain="my")], inner=True)
    missing = _fn("my", "G", [n("Missing", ["a"], ["b"], domain="my")], inner=True)
    leaky = _fn("my", "L", [_leaky_ref()], attrs=["alpha"])
    ml = _fn("ai.onnx.ml", "Mine", [n("Neg", ["a"], ["b"])])
    return {
        "output_not_produced": (
            _model(n("P", ["x"], ["y"], domain="my"), [_fn("my", "P", [n("Relu", ["a"], ["c"])])]),
            "'b' is used but never defined",
        ),
        "body_reads_undefined": (
            _model(
                n("U", ["x"], ["y"], domain="my"), [_fn("my", "U", [n("Add", ["a", "z"], ["b"])])]
            ),
            "reads 'z', which the function never defines",
        ),
        "too_many_inputs": (
            _model(n("F", ["x", "x"], ["y"], domain="my"), [relu]),
            "calls my.F with 2 inputs / 1 outputs; the function has 1 / 1",
        ),
        "missing_top": (_model(n("Missing", ["x"], ["y"], domain="my"), [relu]), "my.Missing"),
        "missing_nested": (_model(n("G", ["x"], ["y"], domain="my"), [missing]), "my.Missing"),
        "cycle": (_model(n("A", ["x"], ["y"], domain="my"), [calls_b, calls_a]), "my.A, my.B"),
        "attr_int": (
            _model(n("L", ["x"], ["y"], domain="my", alpha=3), [leaky]),
            "attribute 'alpha' as INT",
        ),
        "attr_string": (
            _model(n("L", ["x"], ["y"], domain="my", alpha="s"), [leaky]),
            "attribute 'alpha' as STRING",
        ),
        "standard_domain": (
            _model(n("Mine", ["x"], ["y"], domain="ai.onnx.ml"), [ml], "ai.onnx.ml", 3),
            "ai.onnx.ml.Mine is in a standard ONNX domain",
        ),
        **_import_and_duplicate_cases(),
    }


def _import_and_duplicate_cases() -> dict[str, tuple[onnx.ModelProto, str]]:
    """QA session 14: ORT refuses each of these at load; optimize wrote a "repaired" model."""
    relu = _fn("my", "F", [n("Relu", ["a"], ["b"])])
    neg = _fn("my", "F", [n("Neg", ["a"], ["b"])])
    bare = helper.make_function("my", "F", ["a"], ["b"], [n("Relu", ["a"], ["b"])], [])
    outer = _fn("my", "A", [n("F", ["a"], ["b"], domain="my")])  # no import of "my" inside
    call = n("F", ["x"], ["y"], domain="my")
    return {
        "call_domain_not_imported": (
            _model(call, [relu], domain=""),
            "node 'F' in the graph calls my.F, but the graph has no opset_import for the domain 'my'",
        ),
        "body_domain_not_imported": (
            _model(call, [bare]),
            "function my.F has no opset_import for the domain 'ai.onnx'",
        ),
        "nested_call_not_imported": (
            _model(n("A", ["x"], ["y"], domain="my"), [relu, outer]),
            "in function my.A calls my.F, but function my.A has no opset_import for the domain 'my'",
        ),
        "duplicate_same_body": (_model(call, [relu, relu]), "two model-local functions are my.F"),
        "duplicate_other_body": (_model(call, [relu, neg]), "two model-local functions are my.F"),
    }


@pytest.mark.parametrize("case", sorted(_import_and_duplicate_cases()))
def test_ort_refuses_what_the_loader_refuses(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The known answer: ONNX Runtime refuses each model at load; estimate says exit 6 too."""
    import onnxruntime as ort

    model, message = _import_and_duplicate_cases()[case]
    with pytest.raises(Exception, match="[Oo]pset|Duplicate model-local function"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    onnx.save(model, tmp_path / "in.onnx")
    assert main(["estimate", str(tmp_path / "in.onnx")]) == 6
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("case", sorted(_cases()))
@pytest.mark.parametrize("passes", ["inline-functions", "all"])
def test_malformed_functions_are_one_line_exit_6(
    case: str, passes: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, message = _cases()[case]
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    before = src.read_bytes()
    assert main(["optimize", str(src), str(dst), "--passes", passes]) == 6
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("memshrink: error:")]
    assert len(lines) == 1 and message in lines[0], err
    assert "Traceback" not in err
    assert src.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx"]


@pytest.mark.parametrize(
    ("domain", "name", "expected"),
    [
        ("", "Relu", np.maximum(X, 0)),  # ORT runs Relu, not the function's Neg
        ("com.microsoft", "Gelu", None),  # ORT's contrib Gelu, not Neg
    ],
)
def test_a_function_named_like_an_op_keeps_its_calls(
    domain: str, name: str, expected: np.ndarray | None, tmp_path: Path
) -> None:
    fn = _fn(domain, name, [n("Neg", ["a"], ["b"])])
    model = _model(n(name, ["x"], ["y"], domain=domain), [fn], domain)
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    assert main(["optimize", str(src), str(dst), "--passes", "inline-functions"]) == 0
    out = onnx.load(dst)
    assert [(x.domain, x.op_type) for x in out.graph.node] == [(domain, name)]
    (y_in,) = run_ort(src, {"x": X})
    (y_out,) = run_ort(dst, {"x": X})
    assert_bit_identical([y_out], [y_in])
    if expected is not None:
        assert_bit_identical([y_in], [expected])
    assert not np.array_equal(y_out, -X)  # the function's body never ran
