"""The bundled example model, built in code (no binary blob in the package).

A small transformer-like encoder with the habits of real exports that memshrink fixes:
weights embedded in the .onnx, a tied embedding duplicated as the output projection,
large ``Constant`` nodes, and a dead branch left over from export. Seeded, so every build
is byte-identical.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VOCAB = 4000
HIDDEN = 256
LAYERS = 4
SEQ = 64


def build_demo_model(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    inits = []
    nodes = []
    embedding = w(VOCAB, HIDDEN)
    inits.append(numpy_helper.from_array(embedding, "embeddings.weight"))
    # Exporters often write the tied LM head as a second, identical copy.
    inits.append(numpy_helper.from_array(embedding.copy(), "lm_head.weight"))
    nodes.append(helper.make_node("Gather", ["embeddings.weight", "input_ids"], ["h0"], axis=0))
    h = "h0"
    for i in range(LAYERS):
        p = f"layer{i}"
        inits += [
            numpy_helper.from_array(w(HIDDEN, 4 * HIDDEN), f"{p}.fc1.weight"),
            numpy_helper.from_array(w(4 * HIDDEN, HIDDEN), f"{p}.fc2.weight"),
            numpy_helper.from_array(np.ones(HIDDEN, np.float32), f"{p}.ln.scale"),
            numpy_helper.from_array(np.zeros(HIDDEN, np.float32), f"{p}.ln.bias"),
        ]
        nodes += [
            helper.make_node(
                "Constant",
                [],
                [f"{p}.fc1.bias"],
                value=numpy_helper.from_array(w(4 * HIDDEN), f"{p}.fc1.bias"),
            ),
            helper.make_node("MatMul", [h, f"{p}.fc1.weight"], [f"{p}.a"]),
            helper.make_node("Add", [f"{p}.a", f"{p}.fc1.bias"], [f"{p}.b"]),
            helper.make_node("Relu", [f"{p}.b"], [f"{p}.c"]),
            helper.make_node("MatMul", [f"{p}.c", f"{p}.fc2.weight"], [f"{p}.d"]),
            helper.make_node("Add", [f"{p}.d", h], [f"{p}.e"]),
            helper.make_node(
                "LayerNormalization",
                [f"{p}.e", f"{p}.ln.scale", f"{p}.ln.bias"],
                [f"{p}.out"],
                axis=-1,
            ),
            # Dead branch: a debug statistic nothing consumes.
            helper.make_node("ReduceMean", [f"{p}.c"], [f"{p}.unused_stat"], keepdims=0),
        ]
        h = f"{p}.out"
    inits.append(numpy_helper.from_array(w(HIDDEN, HIDDEN), "unused.projection"))
    nodes.append(
        helper.make_node("Transpose", ["lm_head.weight"], ["lm_head.weight_t"], perm=[1, 0])
    )
    nodes.append(helper.make_node("MatMul", [h, "lm_head.weight_t"], ["logits"]))
    graph = helper.make_graph(
        nodes,
        "memshrink_demo_encoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, SEQ])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, SEQ, VOCAB])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="memshrink-demo"
    )
    model.ir_version = 9
    return model


def write_demo_model(path: Path, seed: int = 0) -> Path:
    """Write the demo model (embedded weights) and its sidecar next to it, atomically: a full
    disk or an unwritable ``--out`` is a one-line error (exit 7) with no half-written demo.onnx
    left (QA session 11: "internal error: OSError: [Errno 28]", exit 1)."""
    import json

    from memshrink.atomic import describe_os_error, write_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise describe_os_error(exc, path) from exc
    model = build_demo_model(seed)
    write_atomic(path, lambda f: f.write(model.SerializeToString()))
    sidecar = {
        "inputs": [{"name": "input_ids", "shape": [1, SEQ], "dtype": "int64", "range": [0, VOCAB]}],
        "outputs": ["logits"],
    }
    write_atomic(
        Path(str(path) + ".json"), lambda f: f.write(json.dumps(sidecar, indent=2).encode() + b"\n")
    )
    return path
