"""Feeds: seeded, integer inputs in range, unbound dims named, user .npz checked."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from memshrink.errors import UnboundDimensionError, UsageError
from memshrink.verify.inputs import load_feeds, make_feeds, parse_int_range_args
from memshrink.verify.modelinfo import read_model_io


@pytest.fixture
def model(tmp_path: Path, embed_mlp) -> Path:  # type: ignore[no-untyped-def]
    return embed_mlp(tmp_path / "m.onnx")


def test_unbound_dims_are_named(model: Path) -> None:
    with pytest.raises(UnboundDimensionError, match=r"ids\[0\] \('batch'\)"):
        make_feeds(read_model_io(model), model)


def test_ints_stay_in_gather_range_and_are_seeded(model: Path, vocab: int) -> None:
    io = read_model_io(model)
    feeds, infos = make_feeds(io, model, dims={"batch": 64}, seed=7)
    ids = feeds["ids"]
    assert ids.shape == (64, 8) and ids.dtype == np.int64
    assert ids.min() >= 0 and ids.max() < vocab
    assert ids.max() > vocab // 2  # the range is used, not a tiny default
    assert infos[0].range == (0, vocab) and "Gather" in infos[0].source
    again, _ = make_feeds(io, model, dims={"batch": 64}, seed=7)
    np.testing.assert_array_equal(again["ids"], ids)  # exact: same seed, same data


def test_int_range_flag_and_sidecar_take_precedence(model: Path) -> None:
    io = read_model_io(model)
    rng = parse_int_range_args(["ids=3,5"])
    feeds, infos = make_feeds(io, model, shapes={"ids": (4, 8)}, int_ranges=rng)
    assert set(np.unique(feeds["ids"])) <= {3, 4} and infos[0].source.endswith("--int-range")
    Path(str(model) + ".json").write_text(
        json.dumps(
            {"inputs": [{"name": "ids", "shape": [2, 8], "dtype": "int64", "range": [10, 12]}]}
        )
    )
    feeds, infos = make_feeds(io, model)
    assert feeds["ids"].shape == (2, 8)
    assert set(np.unique(feeds["ids"])) <= {10, 11} and infos[0].source.endswith("sidecar")


def test_bad_int_range_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        parse_int_range_args(["ids=5,5"])
    with pytest.raises(UsageError):
        parse_int_range_args(["ids=a,b"])


def test_user_npz_must_cover_inputs(model: Path, tmp_path: Path) -> None:
    io = read_model_io(model)
    good = tmp_path / "good.npz"
    np.savez(good, ids=np.zeros((1, 8), np.int64))
    feeds, infos = load_feeds(good, io)
    assert feeds["ids"].shape == (1, 8) and "user file" in infos[0].source
    bad = tmp_path / "bad.npz"
    np.savez(bad, other=np.zeros(1))
    with pytest.raises(UsageError, match="missing input"):
        load_feeds(bad, io)


def test_string_inputs_get_random_words_that_ort_takes(tmp_path: Path) -> None:
    """A STRING graph input used to stop verify ("cannot make random data of dtype object")."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Identity", ["words"], ["out"])],
        "s",
        [helper.make_tensor_value_info("words", TensorProto.STRING, ["n"])],
        [helper.make_tensor_value_info("out", TensorProto.STRING, ["n"])],
    )
    path = tmp_path / "s.onnx"
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)
    feeds, _ = make_feeds(read_model_io(path), path, dims={"n": 5})
    assert feeds["words"].shape == (5,) and feeds["words"].dtype.kind == "U"
    np.savez(tmp_path / "f.npz", **feeds)
    with np.load(tmp_path / "f.npz", allow_pickle=False) as z:  # what the child reads
        (out,) = ort.InferenceSession(str(path)).run(None, {"words": z["words"]})
    assert list(out) == list(feeds["words"])
