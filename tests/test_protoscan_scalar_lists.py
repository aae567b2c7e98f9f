"""The lazy loader's wire scan stops at an attribute's first list element (``protoscan``).

Why: skl2onnx writes a forest's ``nodes_*`` attributes as unpacked repeated fields, one per
value; the scan walked all of them in Python (a 24 MiB RandomForest: 148 s of a 169 s
``optimize --passes safe``, 14 s after). A list attribute cannot hold a tensor, and tensors in
other attributes must still be lifted out of the skeleton.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from memshrink import protoscan


def _model() -> onnx.ModelProto:
    n = 20_000
    big = numpy_helper.from_array(np.arange(4096, dtype=np.float32), "c")
    nodes = [
        helper.make_node("Constant", [], ["k"], value=big),  # a tensor attribute: lifted
        helper.make_node("Add", ["x", "k"], ["y0"]),
        helper.make_node(
            "TreeEnsembleRegressor",
            ["y0"],
            ["y"],
            domain="ai.onnx.ml",
            nodes_nodeids=list(range(n)),  # unpacked ints: one field per value
            nodes_values=[0.5] * n,
            nodes_modes=["LEAF"] * n,
        ),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4096])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)]
    )


def test_scan_skips_list_attributes_and_still_lifts_tensor_attributes(
    tmp_path: Path, monkeypatch
) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_model(), str(path))
    calls = 0
    real = protoscan.iter_fields

    def counting(buf, start, end):  # type: ignore[no-untyped-def]
        nonlocal calls
        for f in real(buf, start, end):
            calls += 1
            yield f

    monkeypatch.setattr(protoscan, "iter_fields", counting)
    res = protoscan.scan_model_file(str(path), "m.onnx")
    assert res.lifted_tensors == 1 and res.lifted_bytes == 4096 * 4
    assert calls < 200  # not 20,000 per list (3 lists)
    skel = onnx.ModelProto.FromString(res.skeleton)
    tree = skel.graph.node[2]
    got = {a.name: onnx.helper.get_attribute_value(a) for a in tree.attribute}
    assert got["nodes_nodeids"] == list(range(20_000))
    np.testing.assert_allclose(got["nodes_values"], 0.5, rtol=0, atol=0)
    assert skel.graph.node[0].attribute[0].t.data_location == TensorProto.EXTERNAL


def test_the_scan_drops_the_pages_of_each_lifted_list(tmp_path: Path, monkeypatch) -> None:
    """A lifted list is read once: the scan drops its mapped pages from the resident set
    (``_drop_pages``) for exactly each lifted attribute's bytes, and the result is the same."""
    from memshrink import compact_attrs

    path = tmp_path / "m.onnx"
    onnx.save(_model(), str(path))
    whole = protoscan.scan_model_file(str(path), "m.onnx", lift_lists=compact_attrs.lift)
    ranges: list[tuple[int, int]] = []
    monkeypatch.setattr(protoscan, "_drop_pages", lambda mm, s, e: ranges.append((s, e)))
    res = protoscan.scan_model_file(str(path), "m.onnx", lift_lists=compact_attrs.lift)
    assert res.skeleton == whole.skeleton and len(res.lists) == len(whole.lists) == 3
    assert len(ranges) == 3  # the three 20,000-element lists, not the Constant's tensor
    assert all(e - s >= 20_000 for s, e in ranges)


def test_drop_pages_releases_whole_pages_inside_the_range() -> None:
    """Only pages wholly inside [start, end) are dropped: a page shared with bytes the scan
    still reads stays (it would fault in again anyway, but needlessly)."""
    import mmap

    calls: list[tuple[int, int, int]] = []

    class FakeMap:
        def madvise(self, how: int, start: int, length: int) -> None:
            calls.append((how, start, length))

    page = mmap.PAGESIZE
    protoscan._drop_pages(FakeMap(), 1, 3 * page + 5)  # type: ignore[arg-type]
    protoscan._drop_pages(FakeMap(), page + 1, 2 * page - 1)  # no whole page: nothing
    assert calls == [(mmap.MADV_DONTNEED, page, 2 * page)]
