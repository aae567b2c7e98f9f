"""OpenVINO's dynamic plan with the static-size edges apart (``openvino.dynamic_plan``, option
``memshrink.ov_split_static``, off by default; docs/estimate.md EP "Session 14")."""

from __future__ import annotations

from types import SimpleNamespace

from memshrink.estimate.graph import TensorInfo
from memshrink.estimate.lifetimes import Buffer
from memshrink.estimate.openvino import dynamic_plan, dynamic_size_buffers

MiB = 1 << 20


def _case() -> tuple[SimpleNamespace, list[Buffer]]:
    """A Shape output (static size, [2] int64) alive over steps 0-2, a dynamic 4 MiB edge over
    1-2 and another over 3-4."""
    tensors = {
        "s": TensorInfo("s", "activation", 7, sym_shape=(2,), shape=(2,)),
        "a": TensorInfo("a", "activation", 1, sym_shape=("b", 1024), shape=(1024, 1024)),
        "c": TensorInfo("c", "activation", 1, sym_shape=("b", 1024), shape=(1024, 1024)),
    }
    bufs = [
        Buffer(0, 16, 0, 2, ["s"]),
        Buffer(1, 4 * MiB, 1, 2, ["a"]),
        Buffer(2, 4 * MiB, 3, 4, ["c"]),
    ]
    return SimpleNamespace(tensors=tensors), bufs


def test_static_size_edges_go_to_the_solver() -> None:
    g, bufs = _case()
    static, dyn = dynamic_size_buffers(g, bufs)  # type: ignore[arg-type]
    assert [b.tensors for b in static] == [["s"]]
    assert [b.tensors for b in dyn] == [["a"], ["c"]]


def test_mixed_sets_grow_the_shape_tensors_block_split_do_not() -> None:
    """Known answers. Mixed: the Shape output opens set 1, ``a`` (alive beside it) set 2, and
    ``c`` joins set 1, which grows to 4 MiB: 8 MiB. Split: ``a`` and ``c`` share one set
    (4 MiB) and the solver holds the 16 bytes."""
    g, bufs = _case()
    assert dynamic_plan(g, bufs) == 8 * MiB  # type: ignore[arg-type]
    assert dynamic_plan(g, bufs, split=True) == 4 * MiB + 16  # type: ignore[arg-type]
