"""Gather rows read in place from a mapped table: the file pages they fault in (``gather_pages``).

The formula is checked against the kernel (numpy reading random rows of a mapped file), then
the estimator's use of it: external tables only, ids from inputs random, computed ids
contiguous."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.gather_pages import FAULT_AROUND, touched_fraction

MiB = 1 << 20
ROWS, DIM = 4096, 768  # 12 MiB fp32 table, 3 KiB rows


def _rss_file() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssFile"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssFile")


def test_fault_around_formula_matches_the_kernel(tmp_path: Path) -> None:
    row = DIM * 4
    table = ROWS * row
    path = tmp_path / "table.bin"
    data = np.ones(ROWS * DIM, np.float32).tobytes()
    with open(path, "wb") as f:  # 64 KiB writes: small page-cache folios (see gather_pages)
        for i in range(0, len(data), FAULT_AROUND):
            f.write(data[i : i + FAULT_AROUND])
    fault_around = Path("/sys/kernel/debug/fault_around_bytes")
    if fault_around.exists() and int(fault_around.read_text()) != FAULT_AROUND:
        pytest.skip("this kernel's fault_around_bytes is not the default 64 KiB")
    rng = np.random.default_rng(0)
    for n in (32, 128):
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            a = np.frombuffer(mm, dtype=np.uint8)
            before = _rss_file()
            total = 0
            for i in rng.integers(0, ROWS, n):
                total += int(a[i * row]) + int(a[i * row + row - 1])  # first and last page
            got = (_rss_file() - before) / table
            del a
        want = touched_fraction(n, table, row)
        assert total > 0
        assert got == pytest.approx(want, rel=0.15, abs=0.02)  # rtol 15 %, atol 2 % of table


def _model(ext_dir: Path | None) -> onnx.ModelProto | str:
    """ids[4,64] (input) -> Gather(word table); a constant position range -> Gather(pos table)."""
    word = numpy_helper.from_array(np.zeros((ROWS, DIM), np.float32), "word")
    pos = numpy_helper.from_array(np.zeros((512, DIM), np.float32), "pos")
    pos_ids = numpy_helper.from_array(np.arange(64, dtype=np.int64), "pos_ids")
    g = oh.make_graph(
        [
            oh.make_node("Gather", ["word", "ids"], ["we"]),
            oh.make_node("Gather", ["pos", "pos_ids"], ["pe"]),
            oh.make_node("Add", ["we", "pe"], ["y"]),
        ],
        "emb",
        [oh.make_tensor_value_info("ids", onnx.TensorProto.INT64, [4, 64])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 64, DIM])],
        [word, pos, pos_ids],
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 18)])
    if ext_dir is None:
        return m
    path = ext_dir / "emb.onnx"
    onnx.save(m, str(path), save_as_external_data=True, location="emb.onnx.data")
    return str(path)


def test_estimator_counts_mapped_gather_pages(tmp_path: Path) -> None:
    ext = estimate(_model(tmp_path))
    run = {s.name: s for s in ext.prediction.stages}["steady_state"]
    row = DIM * 4
    word = ROWS * row * touched_fraction(256, ROWS * row, row)  # 256 uniform ids
    pos = -(-64 * row // FAULT_AROUND) * FAULT_AROUND  # 64 consecutive rows
    assert run.weights_file >= word + pos - 8192  # atol: page rounding, plus in-place weights
    assert run.weights_file <= word + pos + 2 * MiB
    assert any("uniform random" in a for a in ext.to_dict()["assumptions"])
    # ids in [0, 2) (``memshrink.int_range``, like verify --int-range): two rows' windows
    few = estimate(_model(tmp_path), session_options={"memshrink.int_range": "0,2"})
    run_few = {s.name: s for s in few.prediction.stages}["steady_state"]
    assert run_few.weights_file <= run.weights_file - word + FAULT_AROUND  # atol 64 KiB
    emb = estimate(_model(None))  # embedded: the tables are heap copies made at creation
    assert {s.name: s for s in emb.prediction.stages}["steady_state"].weights_file == 0


def test_ids_wrapped_by_tf2onnx_arithmetic_are_still_random() -> None:
    """tf2onnx lowers Keras ``Embedding``'s ``where(ids < 0, ids + N, ids)`` to Cast / Less /
    Not / Mul / Add before the Gather: those ids still come from the input (uniform random),
    not a contiguous run (a 98 MiB tf2onnx table: 0.2 MiB predicted before, 15.0 after,
    12.4 MiB measured on the file ``optimize`` wrote)."""
    from memshrink.estimate.gather_pages import gather_pages
    from memshrink.estimate.graph import build_view

    word = numpy_helper.from_array(np.zeros((ROWS, DIM), np.float32), "word")
    n = numpy_helper.from_array(np.array(ROWS, np.int32), "n")
    zero = numpy_helper.from_array(np.array(0, np.int32), "zero")
    g = oh.make_graph(
        [
            oh.make_node("Add", ["ids", "n"], ["wrapped"]),
            oh.make_node("Less", ["ids", "zero"], ["neg"]),
            oh.make_node("Not", ["neg"], ["pos"]),
            oh.make_node("Cast", ["pos"], ["posi"], to=onnx.TensorProto.INT32),
            oh.make_node("Cast", ["neg"], ["negi"], to=onnx.TensorProto.INT32),
            oh.make_node("Mul", ["ids", "posi"], ["keep"]),
            oh.make_node("Mul", ["negi", "wrapped"], ["moved"]),
            oh.make_node("Add", ["moved", "keep"], ["sel"]),
            oh.make_node("Gather", ["word", "sel"], ["y"]),
        ],
        "tfemb",
        [oh.make_tensor_value_info("ids", onnx.TensorProto.INT32, [4, 64])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 64, DIM])],
        [word, n, zero],
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    got = gather_pages(build_view(m).graph, {"word"})
    row = DIM * 4
    want = ROWS * row * touched_fraction(256, ROWS * row, row)
    assert got.random_ids
    np.testing.assert_allclose(got.touched, want, rtol=0, atol=4096)  # page rounding
