"""OpenVINO ``read_model``'s library pages and a Conv's read anon (session 11, docs/estimate.md
"Session 11: read_model's library pages").

    python docs/bench/ov_read_pages_bench.py build DIR          # single-op graphs, Conv chains
    python docs/bench/ov_read_pages_bench.py measure [--libs] FILE ...  # a fresh process per file
    python docs/bench/ov_read_pages_bench.py seq [--libs] FILE ...      # one process, in turn

``measure`` / ``seq`` print one JSON row per file: ``read_model`` only, RssFile / RssAnon after
minus before (MiB), with ``--libs`` the pages per library from ``/proc/self/smaps`` (whose text
then blurs the anon figure), and the ov op kinds it made. In ``seq`` each row is the pages that
file added to those of the files before it.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

MiB = 1 << 20
X = ["b", 8, 16, 16]


def _model(name: str, nodes: list, inits: list, x: list | None = None) -> onnx.ModelProto:
    g = h.make_graph(nodes, name, [h.make_tensor_value_info("x", T.FLOAT, x or X)],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)  # fmt: skip
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _save(path: Path, nodes: list, inits: list, x: list | None = None) -> None:
    onnx.save(_model(path.stem, nodes, inits, x), str(path))


def _w(name: str, *shape: int, dtype: type = np.float32) -> onnx.TensorProto:
    return nh.from_array(np.full(shape, 1, dtype), name)


def build(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    n = h.make_node
    i64 = np.int64
    ops = {
        "Relu": ([n("Relu", ["x"], ["y"])], []),
        "Add": ([n("Add", ["x", "b"], ["y"])], [_w("b", 1)]),
        "MatMul": ([n("MatMul", ["x", "w"], ["y"])], [_w("w", 16, 16)]),
        "Reshape": ([n("Reshape", ["x", "s"], ["y"])], [_w("s", 2, dtype=i64)]),
        "Slice": ([n("Slice", ["x", "s", "e", "a"], ["y"])],
                  [_w("s", 1, dtype=i64), _w("e", 1, dtype=i64), _w("a", 1, dtype=i64)]),
        "ConvB": ([n("Conv", ["x", "w", "b"], ["y"])], [_w("w", 4, 8, 3, 3), _w("b", 4)]),
        "Conv": ([n("Conv", ["x", "w"], ["y"])], [_w("w", 4, 8, 3, 3)]),
        "ReduceSumAll": ([n("ReduceSum", ["x"], ["y"])], []),
        "Flatten2": ([n("Flatten", ["x"], ["y"], axis=2)], []),
        "QDQ": ([n("QuantizeLinear", ["x", "s", "z"], ["q"]), n("DequantizeLinear", ["q", "s", "z"], ["y"])],
                [nh.from_array(np.array(0.1, np.float32), "s"), nh.from_array(np.array(0, np.uint8), "z")]),
    }  # fmt: skip
    for name, (nodes, inits) in ops.items():
        _save(d / f"{name}.onnx", nodes, inits)
    vi = h.make_tensor_value_info
    then = h.make_graph([n("Relu", ["x"], ["t"])], "then", [], [vi("t", T.FLOAT, None)])
    other = h.make_graph([n("Neg", ["x"], ["e"])], "else", [], [vi("e", T.FLOAT, None)])
    _save(d / "If.onnx", [n("ReduceSum", ["x"], ["s"], keepdims=0), n("Greater", ["s", "z"], ["c"]),
                          n("If", ["c"], ["y"], then_branch=then, else_branch=other)],
          [nh.from_array(np.array(0, np.float32), "z")])  # fmt: skip
    # Conv chains 16 -> 16 on [b, 16, 8, 8]: plain / biased 1x1, depthwise 3x3 (external data)
    from memshrink.model import load, save

    for k in (32, 256):
        for bias in (False, True):
            for group in (1, 16):
                nodes, inits, x = [], [], "x"
                for i in range(k):
                    kk = 3 if group > 1 else 1
                    inits.append(_w(f"w{i}", 16, 16 // group, kk, kk))
                    ins = [x, f"w{i}"] + ([f"b{i}"] if bias else [])
                    if bias:
                        inits.append(_w(f"b{i}", 16))
                    nodes.append(n("Conv", ins, [f"c{i}"], group=group, pads=[kk // 2] * 4))
                    x = f"c{i}"
                nodes.append(n("Identity", [x], ["y"]))
                p = d / f"conv_k{k}_b{int(bias)}_g{group}.onnx"
                save(load(_model(p.stem, nodes, inits, ["b", 16, 8, 8])), str(p), external=True)
    print(f"built {len(list(d.glob('*.onnx')))} files into {d}")


def _status() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("RssAnon", "RssFile"):
            out[k] = int(v.split()[0]) * 1024
    return out


def _libs() -> collections.Counter:
    rss: collections.Counter = collections.Counter()
    cur = "[anon]"
    for line in Path("/proc/self/smaps").read_text().splitlines():
        parts = line.split()
        if "-" in parts[0] and ":" not in parts[0]:
            cur = os.path.basename(parts[5]) if len(parts) >= 6 else "[anon]"
        elif parts[0] == "Rss:":
            rss[cur] += int(parts[1]) * 1024
    return rss


def seq(files: list[str], libs: bool) -> None:
    import openvino as ov

    core = ov.Core()
    for f in files:
        # reading smaps allocates (its text): the anon figure is exact only without --libs
        l0 = _libs() if libs else collections.Counter()
        s0 = _status()
        m = core.read_model(f)
        s1 = _status()
        l1 = _libs() if libs else collections.Counter()
        libs = {
            k: round((l1[k] - l0[k]) / MiB, 3) for k in l1 if k.startswith("lib") and l1[k] != l0[k]
        }
        kinds = sorted(
            {o.get_type_name() for o in m.get_ops()} - {"Parameter", "Result", "Constant"}
        )
        print(json.dumps({"file": f, "file_mib": round((s1["RssFile"] - s0["RssFile"]) / MiB, 3),
                          "anon_mib": round((s1["RssAnon"] - s0["RssAnon"]) / MiB, 3),
                          "libs": libs, "ov_ops": len(m.get_ops()), "kinds": kinds}), flush=True)  # fmt: skip
        del m


def main(argv: list[str]) -> int:
    if argv[:1] == ["build"]:
        build(Path(argv[1]))
    elif argv[:1] == ["seq"]:
        seq([a for a in argv[1:] if a != "--libs"], "--libs" in argv)
    elif argv[:1] == ["measure"]:
        extra = ["--libs"] if "--libs" in argv else []
        for f in (a for a in argv[1:] if a != "--libs"):
            subprocess.run([sys.executable, __file__, "seq", f, *extra], check=True)
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
