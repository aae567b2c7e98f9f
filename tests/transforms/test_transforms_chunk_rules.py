"""chunk rules: receptive-field arithmetic, reshape axis tracking and band layout, known answers."""

from __future__ import annotations

import onnx_ir as ir
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memshrink.transforms.chunking.region import bands
from memshrink.transforms.chunking.rules import NodeFacts, Refuse, forward, need, reshape_axis


def _facts(op: str, in_shapes, out_shape, **attrs) -> NodeFacts:  # noqa: ANN001, ANN003
    inputs = [ir.Value(name=f"i{k}") for k in range(len(in_shapes))]
    node = ir.node(op, inputs, attributes=attrs)
    return NodeFacts(node, list(in_shapes), [tuple(out_shape)], 18)


def test_conv_halo() -> None:
    f = _facts("Conv", [(1, 1, 16, 8), (1, 1, 3, 3)], (1, 1, 16, 8), pads=[1, 1, 1, 1])
    assert need(f, [2, None], 2, (0, 4)) == [(-1, 5), None]  # one zero row above, 5 real
    assert need(f, [2, None], 2, (4, 8)) == [(3, 9), None]


def test_strided_dilated_conv_halo() -> None:
    f = _facts(
        "Conv", [(1, 1, 19, 8), (1, 1, 3, 3)], (1, 1, 8, 2),
        pads=[0, 0, 0, 0], strides=[2, 2], dilations=[2, 2],
    )  # fmt: skip
    # output row o reads input rows 2o, 2o+2, 2o+4
    assert need(f, [2, None], 2, (2, 4)) == [(4, 11), None]


def test_pool_halo_and_ceil_mode_refused() -> None:
    f = _facts("MaxPool", [(1, 1, 8, 8)], (1, 1, 4, 4), kernel_shape=[2, 2], strides=[2, 2])
    assert need(f, [2], 2, (1, 3)) == [(2, 6)]
    g = _facts(
        "MaxPool", [(1, 1, 7, 7)], (1, 1, 4, 4), kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1
    )
    with pytest.raises(Refuse):
        forward(g, [2])


def test_convtranspose_needs() -> None:
    f = _facts("ConvTranspose", [(1, 1, 4, 4), (1, 1, 2, 2)], (1, 1, 8, 8), strides=[2, 2])
    assert need(f, [2, None], 2, (4, 8)) == [(2, 4), None]  # k=2, s=2: one input row per pair
    g = _facts(
        "ConvTranspose", [(1, 1, 4, 4), (1, 1, 3, 3)], (1, 1, 7, 7), strides=[2, 2],
        pads=[1, 1, 1, 1],
    )  # fmt: skip
    # output row 2 = input 1 (kernel row 1) + input rows 1..2 overlap
    assert need(g, [2, None], 2, (2, 3)) == [(1, 2), None]
    assert need(g, [2, None], 2, (3, 4)) == [(1, 3), None]


def test_channel_axis_is_refused_for_conv() -> None:
    f = _facts("Conv", [(1, 4, 8, 8), (4, 4, 1, 1)], (1, 4, 8, 8))
    with pytest.raises(Refuse):
        forward(f, [1, None])


def test_softmax_and_layernorm_axes() -> None:
    sm = _facts("Softmax", [(4, 8)], (4, 8), axis=-1)
    assert forward(sm, [0]) == ([0], {})
    with pytest.raises(Refuse):
        forward(_facts("Softmax", [(4, 8)], (4, 8), axis=0), [0])
    ln = _facts("LayerNormalization", [(4, 8, 16), (16,), (16,)], (4, 8, 16), axis=-1)
    assert forward(ln, [1, None, None]) == ([1], {})


def test_matmul_axes() -> None:
    mm = _facts("MatMul", [(4, 8, 16), (16, 32)], (4, 8, 32))
    assert forward(mm, [0, None]) == ([0], {})
    assert forward(mm, [1, None]) == ([1], {})  # query rows
    with pytest.raises(Refuse):
        forward(mm, [2, None])  # the contracted axis


def test_broadcast_slices_full_extent_operands() -> None:
    add = _facts("Add", [(4, 2, 8, 8), (4, 1, 1, 8)], (4, 2, 8, 8))
    assert forward(add, [0, None]) == ([0], {1: 0})  # the mask must be sliced per chunk
    bias = _facts("Add", [(4, 2, 8, 8), (8,)], (4, 2, 8, 8))
    assert forward(bias, [0, None]) == ([0], {})


def test_reshape_axis() -> None:
    assert reshape_axis((4, 512, 768), (4, 512, 12, 64), 0) == 0
    assert reshape_axis((4, 512, 768), (2048, 768), 0) == 0  # merged with the sequence
    assert reshape_axis((4, 512, 12, 64), (4, 512, 768), 1) == 1
    with pytest.raises(Refuse):
        reshape_axis((4, 6), (6, 4), 1)


@given(st.integers(1, 600), st.integers(1, 16), st.integers(0, 16))
def test_bands_tile_the_extent(extent: int, count: int, stagger: int) -> None:
    parts = [bands(extent, k, count, stagger) for k in range(count)]
    assert parts[0][0] == 0 and parts[-1][1] == extent
    assert all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))
    if stagger == 0:
        sizes = [b - a for a, b in parts]
        assert max(sizes) - min(sizes) <= 1


def test_staggered_bands_differ() -> None:
    sizes = [b - a for a, b in (bands(512, k, 4, 8) for k in range(4))]
    assert sizes == [116, 124, 132, 140] and sum(sizes) == 512
