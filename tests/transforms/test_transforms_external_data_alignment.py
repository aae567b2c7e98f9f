"""external-data's layout: tensors under 64 KiB start on a page, so no 64 KiB padding per tensor.

Regression for session 10's open item "`all` without `chunk` costs OpenVINO +3…+7 MiB": every
tensor at a 64 KiB offset made multibranch's data file 33.0 MiB for 24.4 MiB of weights, and
OpenVINO's mapping of the file holds all of it once the holes are in the page cache (a file read
cold): infer 3 +131.0 MiB against +124.2 for the embedded original (docs/optimize.md,
"Alignment of small tensors")."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from memshrink.writer import plan_offsets, save_model, tensor_offset


def test_tensor_offset_known_layout() -> None:
    # 2 KiB, 2 KiB, 100 KiB, 2 KiB, 64 KiB written in that order
    offset, offsets = 0, []
    for n in (2048, 2048, 102400, 2048, 65536):
        offset = tensor_offset(offset, n, 65536)
        offsets.append(offset)
        offset += n
    assert offsets == [0, 4096, 65536, 167936, 196608]
    assert tensor_offset(5, 10, 1) == 5  # alignment 1: packed
    assert tensor_offset(5, 10, 65536, small=65536) == 65536  # the old layout, on request
    # the writer's plan: the 2 KiB tensor after the 100 KiB one fills the hole before it
    assert plan_offsets([2048, 2048, 102400, 2048, 65536], 65536) == [0, 4096, 65536, 8192, 196608]
    # largest first: a 4-page hole after 48 KiB takes the 3-page tensor, then the earliest
    # 1-page one; the last 1-page tensor stays after the big one
    sizes = [12 * 4096, 65536, 4096, 3 * 4096, 4096]
    assert plan_offsets(sizes, 65536) == [0, 65536, 15 * 4096, 12 * 4096, 131072]
    assert plan_offsets([10, 10], 1) == [0, 10]
    assert plan_offsets([2048, 70000], 65536, small=65536) == [0, 65536]  # the old layout


def _convs(n: int = 32, c: int = 16) -> ir.Model:
    """A chain of ``n`` 1x1 Convs, c -> c channels: ``n`` weights of c*c*4 = 1 KiB each."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((c, c, 1, 1)).astype(np.float32) / 4, f"w{i}")
        for i in range(n)
    ]
    nodes = [
        helper.make_node("Conv", ["x" if i == 0 else f"h{i - 1}", f"w{i}"], [f"h{i}"])
        for i in range(n)
    ]
    nodes.append(helper.make_node("Identity", [f"h{n - 1}"], ["y"]))
    g = helper.make_graph(
        nodes,
        "convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 8, 8])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return ir.serde.deserialize_model(m)


def _save(tmp: Path, small: int) -> Path:
    model = _convs()
    # threshold 1 KiB: the 1 KiB weights go out (the default, 4 KiB, keeps them embedded)
    model.meta["memshrink.save"] = {"external": True, "small_alignment": small, "threshold": 1024}
    out = tmp / f"m{small}.onnx"
    save_model(model, out)
    return out


def test_small_weights_pack_at_4k_and_the_old_layout_stays_available(tmp_path: Path) -> None:
    new, old = _save(tmp_path, 4096), _save(tmp_path, 65536)
    assert os.path.getsize(str(new) + ".data") == 31 * 4096 + 1024
    assert os.path.getsize(str(old) + ".data") == 31 * 65536 + 1024
    proto = onnx.load(new, load_external_data=False)
    offsets = [
        int({e.key: e.value for e in t.external_data}["offset"]) for t in proto.graph.initializer
    ]
    assert offsets == [4096 * i for i in range(32)]


def _mapped_kib(data: Path) -> int:
    """Rss of this process's mappings of ``data`` (KiB)."""
    rss, cur = 0, ""
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if parts and "-" in parts[0] and not parts[0].endswith(":"):
                cur = parts[5] if len(parts) > 5 else ""
            elif parts and parts[0] == "Rss:" and cur == str(data):
                rss += int(parts[1])
    return rss


def test_openvino_holds_the_whole_cold_file_so_padding_costs_resident_pages(
    tmp_path: Path,
) -> None:
    """Known answer: after a cold read (the file evicted first), OpenVINO's compiled model keeps
    the data file mapped and resident whole, padding included: 32 x 64 KiB slots = 1.94 MiB for
    32 KiB of weights with the old layout, 31 x 4 KiB + 1 KiB = 125 KiB with the new one."""
    ov = pytest.importorskip("openvino")
    core = ov.Core()
    for small, size in ((65536, 31 * 65536 + 1024), (4096, 31 * 4096 + 1024)):
        path = _save(tmp_path, small)
        data = Path(str(path) + ".data").resolve()
        fd = os.open(data, os.O_RDONLY)
        os.fsync(fd)  # dirty pages are not dropped: write them back first
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # as read from disk, not just written
        os.close(fd)
        compiled = core.compile_model(core.read_model(str(path)), "CPU")
        x = np.ones((1, 16, 8, 8), np.float32)
        compiled({0: x})
        kib = _mapped_kib(data)
        del compiled
        # the whole file, in pages (the last one rounded up); atol one 64 KiB fault-around window
        assert abs(kib * 1024 - -(-size // 4096) * 4096) <= 65536, (small, kib)


def test_tensors_under_a_page_stay_embedded_by_default(tmp_path: Path) -> None:
    """Known answer for the default threshold (4 KiB): weights of 1 KiB and 3 KiB stay in the
    .onnx, 4 KiB goes out at offset 0 and 64 KiB at 64 KiB, so the data file is 128 KiB. Why: a
    tensor under a page costs a whole page mapped (3,000 x 1 KiB: ORT CPU run 3 +39.4 MiB
    external, +32.1 embedded; docs/optimize.md, "Tensors under a page")."""
    from memshrink.manager import PassContext
    from memshrink.transforms.external_data import ExternalDataPass

    sizes = {"a": 1024, "b": 3072, "c": 4096, "d": 65536}  # bytes, in graph order
    x = "x"
    nodes, inits = [], []
    for name, n in sizes.items():
        inits.append(numpy_helper.from_array(np.full(n // 4, 0.5, np.float32), name))
        nodes.append(helper.make_node("ReduceSum", [name], [f"r{name}"], keepdims=1))
        nodes.append(helper.make_node("Add", [x, f"r{name}"], [f"y{name}"]))
        x = f"y{name}"
    g = helper.make_graph(
        nodes,
        "sizes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1])],
        inits,
    )
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model = ir.serde.deserialize_model(proto)
    ExternalDataPass().run(model, PassContext())
    out = tmp_path / "m.onnx"
    save_model(model, out)
    saved = onnx.load(out, load_external_data=False)
    where = {
        t.name: int({e.key: e.value for e in t.external_data}["offset"])
        if t.data_location == TensorProto.EXTERNAL
        else None
        for t in saved.graph.initializer
    }
    assert where == {"a": None, "b": None, "c": 0, "d": 65536}
    assert os.path.getsize(str(out) + ".data") == 131072
