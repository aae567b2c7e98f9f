"""Bound vs actual size of every data-dependent tensor (``estimate/dd_bounds.py``).

Runs the model once on ONNX Runtime CPU with ``memshrink verify``'s seeded feeds, with every
tensor the estimate sized by a bound added as a graph output, and prints the bound and the
actual shape of each source tensor, the total bytes, and the largest tensors:

    python docs/bench/dd_bounds_actual.py MODEL.onnx [--shape NAME=D1,D2,...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

MiB = 2**20


def main() -> None:
    import onnx
    import onnxruntime as ort

    from memshrink.bindings import parse_shape_args
    from memshrink.estimate.graph import build_view
    from memshrink.verify.inputs import make_feeds
    from memshrink.verify.modelinfo import read_model_io

    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--shape", action="append", default=[])
    args = ap.parse_args()
    shapes = parse_shape_args(args.shape)
    g = build_view(args.model, shapes=shapes).graph
    names = [n for n in g.bounded if n in g.tensors and g.tensors[n].kind == "activation"]
    m = onnx.load(args.model)
    have = {o.name for o in m.graph.output}
    for n in names:
        if n not in have:
            vi = onnx.helper.make_tensor_value_info(n, g.tensors[n].elem_type, None)
            m.graph.output.append(vi)
    feeds, _ = make_feeds(read_model_io(args.model), args.model, shapes=shapes)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))
    bound = sum(g.tensors[n].nbytes or 0 for n in names)
    actual = sum(outs[n].nbytes for n in names)
    print(f"{len(names)} bounded tensors: bound {bound / MiB:.2f} MiB, actual {actual / MiB:.2f}")
    for n, how in sorted(g.bounded.items()):
        if n in outs and not how.startswith("follows"):
            print(f"  {n}: bound {g.tensors[n].shape}, actual {outs[n].shape} ({how})")
    for n in sorted(names, key=lambda n: -(g.tensors[n].nbytes or 0))[:6]:
        t = g.tensors[n]
        print(
            f"  largest {n}: bound {t.shape} {(t.nbytes or 0) / MiB:.2f} MiB, actual {outs[n].shape}"
        )


if __name__ == "__main__":
    main()
