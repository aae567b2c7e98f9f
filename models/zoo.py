"""The real model-zoo graphs shipped inside the ``onnx`` wheel, with materialized weights.

``onnx/backend/test/data/light/light_*.onnx`` are the zoo's real graphs (opset 9 Caffe2
exports) whose weights were replaced by ``ConstantOfShape(shape) -> weight`` nodes filling
0.02, so the wheel stays small. We turn each of those into an ordinary initializer with
seeded random values scaled for its role (He-normal conv/gemm weights, BatchNorm stats near
identity, small biases): a runtime then loads weights as usual instead of materializing them
at session creation, and outputs stay finite. Needs only ``onnx`` (no torch).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from models.suite import Feed, ModelSpec, register

# Bump when a change here alters any built file's bytes: cached builds of older versions
# are then rebuilt (the version is part of the sidecar's fingerprint).
BUILD_VERSION = 1

# name: (file, label, small enough for CI (< 50 MB of weights, builds in about a second))
ZOO = {
    "zoo-resnet50": ("light_resnet50.onnx", "ResNet-50 (Caffe2 zoo graph)", False),
    "zoo-densenet121": ("light_densenet121.onnx", "DenseNet-121 (zoo graph)", True),
    "zoo-inception-v1": ("light_inception_v1.onnx", "Inception v1 / GoogLeNet (zoo graph)", True),
    "zoo-inception-v2": ("light_inception_v2.onnx", "Inception v2 (zoo graph)", True),
    "zoo-shufflenet": ("light_shufflenet.onnx", "ShuffleNet (zoo graph)", True),
    "zoo-squeezenet": ("light_squeezenet.onnx", "SqueezeNet (zoo graph)", True),
    "zoo-vgg19": ("light_vgg19.onnx", "VGG-19 (zoo graph)", False),
    "zoo-alexnet": ("light_bvlc_alexnet.onnx", "AlexNet (BVLC, zoo graph)", False),
    "zoo-zfnet512": ("light_zfnet512.onnx", "ZFNet-512 (zoo graph)", False),
}


def light_dir() -> Path:
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _values(role: tuple[str, int], shape: list[int], rng: Any) -> Any:
    """Seeded values for a weight by (consumer op, input index)."""
    import numpy as np

    op, idx = role
    size = int(np.prod(shape)) if shape else 1
    if op in ("Conv", "Gemm", "MatMul", "ConvTranspose") and idx == 1:
        fan_in = size // shape[0] if op != "MatMul" and shape else (shape[0] if shape else 1)
        return rng.standard_normal(shape).astype(np.float32) * np.float32(
            np.sqrt(2.0 / max(fan_in, 1))
        )
    if op == "BatchNormalization":
        if idx == 1:  # scale
            return rng.uniform(0.5, 1.5, shape).astype(np.float32)
        if idx == 4:  # variance
            return rng.uniform(0.5, 1.5, shape).astype(np.float32)
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)  # bias, mean
    return (rng.standard_normal(shape) * 0.01).astype(np.float32)  # biases and the rest


def materialize(src: Path, seed: int) -> Any:
    """Load a light zoo model and replace its ConstantOfShape weights with initializers."""
    import numpy as np
    import onnx
    import onnx_ir as ir
    from onnx import numpy_helper

    proto = onnx.load(str(src))
    graph = proto.graph
    inits = {t.name: t for t in graph.initializer}
    consumers: dict[str, tuple[str, int]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            consumers.setdefault(name, (node.op_type, i))
    keep_nodes = []
    new_inits = []
    used_shapes: set[str] = set()
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = [int(d) for d in numpy_helper.to_array(inits[node.input[0]]).tolist()]
            out = node.output[0]
            # Seed per tensor from its name: values don't depend on node order.
            digest = hashlib.sha256(f"{seed}:{out}".encode()).digest()
            rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
            values = _values(consumers.get(out, ("", 0)), shape, rng)
            new_inits.append(numpy_helper.from_array(values, out))
            used_shapes.add(node.input[0])
        else:
            keep_nodes.append(node)
    still_used = {n for node in keep_nodes for n in node.input}
    kept_inits = [t for t in graph.initializer if t.name not in used_shapes or t.name in still_used]
    del graph.node[:]
    graph.node.extend(keep_nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept_inits + new_inits)
    # Old-IR files list initializers as graph inputs too; drop them from the inputs. IR 4
    # (the one that came with opset 9) is the first where initializers need not be inputs.
    proto.ir_version = max(proto.ir_version, 4)
    init_names = {t.name for t in graph.initializer}
    real_inputs = [i for i in graph.input if i.name not in init_names and i.name not in used_shapes]
    del graph.input[:]
    graph.input.extend(real_inputs)
    onnx.checker.check_model(proto)
    return ir.from_proto(proto)


def _maker(file: str, seed: int) -> Any:
    return lambda: materialize(light_dir() / file, seed)


def _feeds(file: str) -> tuple[Feed, ...]:
    """Feeds straight from the graph's declared inputs (all static in the light models)."""
    import onnx

    proto = onnx.load(str(light_dir() / file), load_external_data=False)
    inits = {t.name for t in proto.graph.initializer}
    feeds = []
    for value in proto.graph.input:
        if value.name in inits:
            continue
        dims = tuple(int(d.dim_value) for d in value.type.tensor_type.shape.dim)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type).name
        feeds.append(Feed(value.name, dims, dtype))
    return tuple(feeds)


def _register_all() -> None:
    for name, (file, label, ci) in ZOO.items():
        if not (light_dir() / file).is_file():
            continue
        feeds = _feeds(file)
        shape = "x".join(str(d) for d in feeds[0].shape) if feeds else "?"
        register(
            ModelSpec(
                name=name,
                description=f"{label}, {shape}, weights materialized (seeded)",
                family="zoo",
                tags=("zoo", "cnn", "embedded", *(("ci",) if ci else ())),
                source=f"zoo:{name}:seed0",
                make=_maker(file, 0),
                feeds=feeds,
                seed=0,
                needs_torch=False,
                extra={
                    "architecture": label,
                    "source_file": f"onnx/backend/test/data/light/{file}",
                },
            )
        )


_register_all()
