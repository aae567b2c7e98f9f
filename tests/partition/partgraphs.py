"""Hand-built graphs for partition and runtime tests (importable as ``partition.partgraphs``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN = 64


def _w(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)


def build_branchy(seed: int = 0, layers: int = 6) -> onnx.ModelProto:
    """A chain of MatMul layers with skip connections crossing cuts, two inputs, three outputs
    (one early), a weight shared by the first and last layer, and a Constant read twice."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(_w(rng, HIDDEN, HIDDEN), "W_shared")]
    nodes = [
        helper.make_node(
            "Constant", [], ["scale"], value=numpy_helper.from_array(np.float32([0.5]), "scale_t")
        ),
        helper.make_node("MatMul", ["x", "W_shared"], ["h0"]),
        helper.make_node("Add", ["h0", "bias_in"], ["a0"]),
        helper.make_node("Relu", ["a0"], ["r0"]),
        helper.make_node("ReduceSum", ["r0"], ["early"], keepdims=0),
    ]
    prev, skip = "r0", "r0"
    for i in range(1, layers + 1):
        inits.append(numpy_helper.from_array(_w(rng, HIDDEN, HIDDEN), f"W{i}"))
        nodes += [
            helper.make_node("MatMul", [prev, f"W{i}"], [f"m{i}"]),
            helper.make_node("Tanh", [f"m{i}"], [f"t{i}"]),
            helper.make_node("Add", [f"t{i}", skip], [f"s{i}"]),
        ]
        prev = f"s{i}"
        if i % 2 == 0:
            nodes.append(helper.make_node("Mul", [prev, "scale"], [f"k{i}"]))
            prev = skip = f"k{i}"
    nodes += [
        helper.make_node("MatMul", [prev, "W_shared"], ["logits"]),
        helper.make_node("Mul", ["logits", "scale"], ["y"]),
        helper.make_node("Sigmoid", [prev], ["side"]),
    ]
    graph = helper.make_graph(
        nodes,
        "branchy",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", HIDDEN]),
            helper.make_tensor_value_info("bias_in", TensorProto.FLOAT, [HIDDEN]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", HIDDEN]),
            helper.make_tensor_value_info("early", TensorProto.FLOAT, []),
            helper.make_tensor_value_info("side", TensorProto.FLOAT, ["batch", HIDDEN]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def branchy_feeds(batch: int = 3, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((batch, HIDDEN)).astype(np.float32),
        "bias_in": rng.standard_normal(HIDDEN).astype(np.float32),
    }


def build_control_flow(seed: int = 0) -> onnx.ModelProto:
    """MatMul layers around an ``If`` whose branches read an outer activation and an outer
    initializer (implicit inputs), then more layers after it."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(_w(rng, HIDDEN, HIDDEN), n) for n in ("A", "B", "C", "D", "E")]
    then_g = helper.make_graph(
        [helper.make_node("MatMul", ["h2", "C"], ["then_out"])],
        "then",
        [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, None)],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["h2"], ["else_out"])],
        "else",
        [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, None)],
    )
    nodes = [
        helper.make_node("MatMul", ["x", "A"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h1r"]),
        helper.make_node("MatMul", ["h1r", "B"], ["h2"]),
        helper.make_node("ReduceSum", ["h2"], ["sum"], keepdims=0),
        helper.make_node("Greater", ["sum", "zero"], ["cond"]),
        helper.make_node("If", ["cond"], ["branch"], then_branch=then_g, else_branch=else_g),
        helper.make_node("MatMul", ["branch", "D"], ["h3"]),
        helper.make_node("Relu", ["h3"], ["h3r"]),
        helper.make_node("MatMul", ["h3r", "E"], ["y"]),
    ]
    inits.append(numpy_helper.from_array(np.float32(0.0), "zero"))
    graph = helper.make_graph(
        nodes,
        "control_flow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, HIDDEN])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def control_flow_feeds(seed: int = 2, sign: float = 1.0) -> dict[str, np.ndarray]:
    x = np.abs(np.random.default_rng(seed).standard_normal((2, HIDDEN))).astype(np.float32)
    return {"x": sign * x}


def save(model: onnx.ModelProto, path: Path, external: bool = False) -> Path:
    if external:
        onnx.save_model(
            model, path, save_as_external_data=True, location=path.name + ".data", size_threshold=0
        )
    else:
        onnx.save_model(model, path)
    return path


# OpenVINO's CPU plugin computes in bf16 by default on AVX512-BF16 / AMX hosts, where a
# partitioned model rounds differently from the whole one (2.1e-3 apart on ``branchy``, 0.0 at
# f32): equivalence is checked at f32 on every host.
OV_F32 = {"INFERENCE_PRECISION_HINT": "f32"}


def backend_options(backend: str) -> dict[str, str] | None:
    """Session options that make ``backend`` compute in the model's own precision."""
    return dict(OV_F32) if backend == "openvino" else None


def run_original(path: Path, feeds: dict[str, np.ndarray], backend: str = "cpu") -> list:
    """The unpartitioned model on ``backend`` (the reference for equivalence)."""
    if backend == "openvino":
        import openvino as ov

        compiled = ov.Core().compile_model(ov.Core().read_model(str(path)), "CPU", OV_F32)
        res = compiled(feeds)
        return [np.asarray(res[o]) for o in compiled.outputs]
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def partition_to(src: Path, out: Path, pipeline: tuple[str, ...] = ("partition",), **options):  # noqa: ANN201
    """Run ``pipeline`` with ``partition`` options and save the folder; returns (info, report)."""
    from memshrink.manager import PassContext, PassManager
    from memshrink.model import load
    from memshrink.writer import save_model

    model, report = PassManager(list(pipeline), options={"partition": options}).run(
        load(src), PassContext()
    )
    return save_model(model, out), report


def assert_close(ref: list, got: list, atol: float = 1e-5, rtol: float = 0.0) -> None:
    """Outputs equal within ``atol`` (absolute), ``rtol`` (relative), same shapes and dtypes."""
    assert len(ref) == len(got)
    for a, b in zip(ref, got, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(b, a, atol=atol, rtol=rtol)
