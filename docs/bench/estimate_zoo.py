"""Real-sized CNNs from the ``onnx`` wheel's "light" zoo graphs, with random weights.

The light models replace each weight by ``ConstantOfShape(<name>__SHAPE)``; we turn those back
into initializers of that shape filled with seeded random values (no subnormals), so the
runtimes see real weight sizes. ``make(name, out_dir, external=True)`` writes
``out_dir/name.onnx`` (+ ``.data`` with 64 KiB-aligned offsets when external).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

LIGHT = Path(onnx.__file__).parent / "backend/test/data/light"
NAMES = sorted(p.stem.removeprefix("light_") for p in LIGHT.glob("light_*.onnx"))


def make(name: str, out_dir: str | os.PathLike, external: bool = True, batch: int = 1) -> Path:
    m = onnx.load(str(LIGHT / f"light_{name}.onnx"))
    g = m.graph
    shapes = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    rng = np.random.default_rng(0)
    keep, new_inits = [], []
    for node in g.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in shapes:
            dims = [int(d) for d in shapes[node.input[0]]]
            arr = (rng.standard_normal(dims).astype(np.float32) * 0.05).astype(np.float32)
            new_inits.append(numpy_helper.from_array(arr, node.output[0]))
        else:
            keep.append(node)
    del g.node[:]
    g.node.extend(keep)
    used = {n for node in keep for n in node.input}
    old = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(old + new_inits)
    if batch != 1:
        for vi in list(g.input) + list(g.output):
            d = vi.type.tensor_type.shape.dim
            if d and d[0].HasField("dim_value"):
                d[0].dim_value = batch
    del g.value_info[:]
    out = Path(out_dir) / (f"{name}-b{batch}" + ("" if external else "-embedded") + ".onnx")
    if external:
        data = out.name + ".data"
        (Path(out_dir) / data).unlink(missing_ok=True)
        _save_aligned(m, out, data)
    else:
        onnx.save(m, str(out))
    return out


def _save_aligned(m: onnx.ModelProto, out: Path, data: str, align: int = 65536) -> None:
    with open(out.parent / data, "wb") as f:
        for t in m.graph.initializer:
            raw = t.raw_data or numpy_helper.to_array(t).tobytes()
            if len(raw) < 1024:
                continue
            off = f.tell()
            pad = (-off) % align
            f.write(b"\0" * pad)
            off += pad
            f.write(raw)
            t.ClearField("raw_data")
            del t.float_data[:]
            t.data_location = onnx.TensorProto.EXTERNAL
            del t.external_data[:]
            for k, v in (("location", data), ("offset", str(off)), ("length", str(len(raw)))):
                e = t.external_data.add()
                e.key, e.value = k, v
    onnx.save(m, str(out))


if __name__ == "__main__":
    import sys

    d = sys.argv[1] if len(sys.argv) > 1 else "/tmp/estimate_zoo"
    os.makedirs(d, exist_ok=True)
    for n in NAMES:
        print(make(n, d))
