"""Model builders and runners shared by tests (importable: pytest puts tests/ on sys.path)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def weight_chain(
    op: str,
    n: int,
    weight_shape: tuple[int, ...],
    x_shape: list[int],
    out_shape: list[int] | None = None,
) -> onnx.ModelProto:
    """``n`` ``op`` nodes (MatMul, Conv) in a chain, each reading its own seeded random weight
    ``W{i}``: a graph whose session memory is weights and per-node state, little else."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(n):
        w = rng.standard_normal(weight_shape).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"W{i}"))
        nodes.append(helper.make_node(op, [x, f"W{i}"], [f"y{i}"]))
        x = f"y{i}"
    g = helper.make_graph(
        nodes,
        f"{op.lower()}_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, out_shape)],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def build_mlp(seed: int = 0, hidden: int = 128, extras: bool = True) -> onnx.ModelProto:
    """A two-layer MLP with the export habits the weight passes target.

    With ``extras``: a duplicate of W1 used by a second branch, a dead branch, an unused
    initializer and a large Constant node.
    """
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((hidden, hidden)).astype(np.float32)
    w2 = rng.standard_normal((hidden, hidden)).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2")]
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["a1"]),
        helper.make_node("MatMul", ["a1", "W2"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, hidden])]
    if extras:
        inits += [
            numpy_helper.from_array(w1.copy(), "W1_copy"),
            numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "unused"),
        ]
        bias = numpy_helper.from_array(rng.standard_normal((4, hidden)).astype(np.float32), "bias")
        nodes += [
            helper.make_node("Constant", [], ["bias_c"], value=bias),
            helper.make_node("MatMul", ["x", "W1_copy"], ["h2"]),
            helper.make_node("Add", ["h2", "bias_c"], ["z"]),
            helper.make_node("Sigmoid", ["h1"], ["dead1"]),
            helper.make_node("Neg", ["dead1"], ["dead2"]),
        ]
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, hidden]))
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, hidden])],
        outputs,
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def erf_gelu_constants() -> list[onnx.TensorProto]:
    """The scalars :func:`erf_gelu` reads: ``gelu_half`` 0.5, ``gelu_one`` 1, ``gelu_sqrt2``."""
    return [
        numpy_helper.from_array(np.array(v, np.float32), name)
        for name, v in (("gelu_half", 0.5), ("gelu_one", 1.0), ("gelu_sqrt2", 1.4142135))
    ]


def erf_gelu(x: str, y: str, form: int = 1) -> list[onnx.NodeProto]:
    """``y = GELU(x)`` as the exporters write it, five nodes reading :func:`erf_gelu_constants`.

    The runtimes fuse these chains only in some forms (ORT's GeluFusion takes 1 and 2, not 3),
    so tests of their emulation need the exact ones: form 1, the legacy exporter,
    ``Mul(Mul(x, 1 + erf(x / s)), 0.5)``; form 2 ``Mul(Mul(x, 0.5), 1 + erf(x / s))``; form 3,
    dynamo's ``Mul(x, Mul(0.5, 1 + erf(x / s)))``. Intermediates are named after ``y``.
    """
    d, e, a, p = (f"{y}_{s}" for s in ("div", "erf", "plus1", "mul"))
    nodes = [
        helper.make_node("Div", [x, "gelu_sqrt2"], [d]),
        helper.make_node("Erf", [d], [e]),
        helper.make_node("Add", [e, "gelu_one"], [a]),
    ]
    if form == 1:
        return nodes + [
            helper.make_node("Mul", [x, a], [p]),
            helper.make_node("Mul", [p, "gelu_half"], [y]),
        ]
    if form == 2:
        return nodes + [
            helper.make_node("Mul", [x, "gelu_half"], [p]),
            helper.make_node("Mul", [p, a], [y]),
        ]
    assert form == 3, form
    return nodes + [
        helper.make_node("Mul", ["gelu_half", a], [p]),
        helper.make_node("Mul", [x, p], [y]),
    ]


def run_ort(path: Path | str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Run a model file (by path, as users do) in ONNX Runtime CPU."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]).run(
        None, feeds
    )


def mlp_feeds(hidden: int = 128, seed: int = 1) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((4, hidden)).astype(np.float32)}


def assert_bit_identical(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    """Exact equality (atol=0, rtol=0): the weight passes promise bit-identical outputs."""
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.array_equal(x, y, equal_nan=True)


def conv_bn_conv() -> onnx.ModelProto:
    """Conv(cw1) -> BatchNormalization -> Conv(cw2) -> Relu, x and y [2, 16, 8, 8].

    The two-data-files fixture: OpenVINO folds cw1 into its BN (``OUT.onnx.folded.data``),
    cw2 stays as stored (``OUT.onnx.data``)."""
    rng = np.random.default_rng(0)

    def w(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "cw1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "g", "b", "mu", "var"], ["n1"]),
        helper.make_node("Conv", ["n1", "cw2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["y"]),
    ]
    inits = [
        w("cw1", 16, 16, 3, 3), w("cw2", 16, 16, 3, 3), w("g", 16), w("b", 16), w("mu", 16),
        numpy_helper.from_array(np.ones(16, np.float32), "var"),
    ]  # fmt: skip
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 16, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 16, 8, 8])], inits,
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def fc_chain(post: str | None, batch: int | str = 8, n: int = 4, k: int = 256) -> onnx.ModelProto:
    """``n`` MatMul k x k on [batch, 128, k], each followed by ``post`` (None, Relu, SiLU):
    OpenVINO runs plain FCs at f32 on MLAS and fused ones on oneDNN (estimate/ov_mlas.py)."""
    rng = np.random.default_rng(0)
    nodes, inits, cur = [], [], "x"
    for i in range(n):
        w = (rng.standard_normal((k, k)) * 0.01).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [cur, f"w{i}"], [f"m{i}"]))
        cur = f"m{i}"
        if post == "Relu":
            nodes.append(helper.make_node("Relu", [cur], [f"r{i}"]))
            cur = f"r{i}"
        elif post == "SiLU":
            nodes.append(helper.make_node("Sigmoid", [cur], [f"s{i}"]))
            nodes.append(helper.make_node("Mul", [cur, f"s{i}"], [f"r{i}"]))
            cur = f"r{i}"
    nodes.append(helper.make_node("Identity", [cur], ["y"]))
    vi = [helper.make_tensor_value_info(v, TensorProto.FLOAT, [batch, 128, k]) for v in "xy"]
    graph = helper.make_graph(nodes, "g", vi[:1], vi[1:], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def save_model_as(model: onnx.ModelProto, folder: Path | str, name: str, external: bool) -> str:
    """Save ``model`` as ``NAME_ext.onnx`` (weights over 1 KiB in ``NAME.data``) or
    ``NAME_emb.onnx`` (embedded): the two layouts whose weight residency the estimator
    predicts differently."""
    path = str(Path(folder) / f"{name}_{'ext' if external else 'emb'}.onnx")
    if external:
        onnx.save(model, path, save_as_external_data=True, location=f"{name}.data",
                  size_threshold=1024)  # fmt: skip
    else:
        onnx.save(model, path)
    return path
