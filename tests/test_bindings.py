"""Shape bindings: --shape > --dim > sidecar, and unbound dims named, never guessed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memshrink.bindings import (
    bind_input_shapes,
    check_dim_names,
    load_sidecar,
    parse_dim_args,
    parse_shape_args,
)
from memshrink.errors import UnboundDimensionError, UsageError

INPUTS = [("ids", ["batch", "seq"]), ("image", [1, 3, 8, 8])]


def _sidecar(tmp_path: Path):  # noqa: ANN202
    model = tmp_path / "m.onnx"
    Path(str(model) + ".json").write_text(
        json.dumps(
            {"inputs": [{"name": "ids", "shape": [1, 128], "dtype": "int64", "range": [0, 10]}]}
        )
    )
    return load_sidecar(model)


def test_parse_args() -> None:
    assert parse_shape_args(["a=1,3,224,224", "b=1x128"]) == {"a": (1, 3, 224, 224), "b": (1, 128)}
    assert parse_dim_args(["batch=4"]) == {"batch": 4}
    assert parse_shape_args(["n="]) == {"n": ()}  # a scalar, for inputs without a shape
    for bad in (["a"], ["=1"], ["a=x"], ["a=-1"]):
        with pytest.raises(UsageError):
            parse_shape_args(bad)
    with pytest.raises(UsageError):
        parse_dim_args(["batch=four"])


def test_unbound_dims_are_all_named() -> None:
    with pytest.raises(UnboundDimensionError, match=r"ids\[0\] \('batch'\), ids\[1\] \('seq'\)"):
        bind_input_shapes(INPUTS)
    with pytest.raises(UnboundDimensionError, match=r"here: --dim batch=SIZE --dim seq=SIZE,"):
        bind_input_shapes(INPUTS)


def test_precedence_shape_dim_sidecar(tmp_path: Path) -> None:
    side = _sidecar(tmp_path)
    assert side is not None and side.input("ids").range == (0, 10)
    assert bind_input_shapes(INPUTS, sidecar=side)["ids"] == (1, 128)
    assert bind_input_shapes(INPUTS, dims={"batch": 4, "seq": 512}, sidecar=side)["ids"] == (4, 512)
    assert bind_input_shapes(
        INPUTS, shapes={"ids": [2, 8]}, dims={"batch": 4, "seq": 512}, sidecar=side
    )["ids"] == (2, 8)
    assert bind_input_shapes(INPUTS, dims={"batch": 4, "seq": 512})["image"] == (1, 3, 8, 8)


def test_a_shape_binds_its_symbols_for_the_inputs_that_share_them(tmp_path: Path) -> None:
    """README's ``--shape input_ids=1,128`` on a BERT whose sidecar says [1, 32] for all three
    inputs fed attention_mask [1, 32] (QA session 11: ORT failed on both models, exit 5)."""
    inputs = [("ids", ["batch", "seq"]), ("mask", ["batch", "seq"]), ("pos", ["seq"])]
    side_path = tmp_path / "m.onnx"
    spec = [
        {"name": n, "shape": s, "dtype": "int64"}
        for n, s in [("ids", [1, 32]), ("mask", [1, 32]), ("pos", [32])]
    ]
    Path(str(side_path) + ".json").write_text(json.dumps({"inputs": spec}))
    side = load_sidecar(side_path)
    got = bind_input_shapes(inputs, shapes={"ids": [1, 128]}, sidecar=side)
    assert got == {"ids": (1, 128), "mask": (1, 128), "pos": (128,)}
    # an explicit --dim still wins over what the --shape implies, and the sidecar stays the
    # fallback for inputs sharing no bound symbol
    got = bind_input_shapes(inputs, shapes={"ids": [1, 128]}, dims={"seq": 64}, sidecar=side)
    assert got == {"ids": (1, 128), "mask": (1, 64), "pos": (64,)}
    got = bind_input_shapes(inputs[2:] + [("other", ["n"])], shapes={"pos": [16]}, dims={"n": 3})
    assert got == {"pos": (16,), "other": (3,)}


def test_shape_errors() -> None:
    with pytest.raises(UsageError, match="unknown input"):
        bind_input_shapes(INPUTS, shapes={"nope": [1]}, dims={"batch": 1, "seq": 1})
    with pytest.raises(UsageError, match="rank"):
        bind_input_shapes(INPUTS, shapes={"ids": [1]})
    with pytest.raises(UsageError, match="fixed to 3"):
        bind_input_shapes(INPUTS, shapes={"image": [1, 4, 8, 8]}, dims={"batch": 1, "seq": 1})


def test_malformed_sidecar(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    Path(str(model) + ".json").write_text("{not json")
    with pytest.raises(UsageError, match="malformed sidecar"):
        load_sidecar(model)


def test_an_input_without_a_shape_is_unknown_rank_not_a_scalar(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An input with no shape field used to be bound as a scalar (estimate: 4 B; verify: fed
    a scalar, OpenVINO refused): it must be named as unbound, and --shape gives it any rank."""
    import onnx
    from onnx import TensorProto, helper

    from memshrink.estimate import estimate
    from memshrink.verify.inputs import make_feeds
    from memshrink.verify.modelinfo import read_model_io

    with pytest.raises(UnboundDimensionError, match=r"x \(no shape declared: unknown rank\)"):
        bind_input_shapes([("x", None)])
    assert bind_input_shapes([("x", None)], shapes={"x": (2, 3)}) == {"x": (2, 3)}
    assert bind_input_shapes([("s", ())]) == {"s": ()}  # a declared scalar stays one

    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    path = tmp_path / "m.onnx"
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(UnboundDimensionError, match="unknown rank"):
        estimate(str(path))
    est = estimate(str(path), shapes={"x": (200, 300)})
    assert est.to_dict()["bindings"]["x"] == [200, 300]
    with pytest.raises(UnboundDimensionError, match="unknown rank"):
        make_feeds(read_model_io(path), path)
    feeds, _ = make_feeds(read_model_io(path), path, shapes={"x": (2, 3)})
    assert feeds["x"].shape == (2, 3)


def test_exporter_expression_dims_bind_through_their_symbols() -> None:
    """torch's dynamo exporter names a dim declared ``8 * Dim("h8")`` ``8*h8`` (DeepLabV3 in the
    session-13 sweep; Mamba-2's ``16*chunks``; ``s0 + s1`` for seq + past): binding the symbol
    binds the expression, and binding the text still works (the error names the text)."""
    inputs = [("image", ["batch", 3, "8*h8", "8*w8"]), ("ids", ["b", "s0 + s1", "2*s0 - 1"])]
    got = bind_input_shapes(inputs, dims={"batch": 1, "h8": 32, "w8": 40, "b": 2, "s0": 5, "s1": 7})
    assert got == {"image": (1, 3, 256, 320), "ids": (2, 12, 9)}
    by_text = bind_input_shapes(inputs[:1], dims={"batch": 1, "8*h8": 256, "8*w8": 320})
    assert by_text == {"image": (1, 3, 256, 320)}
    # the hint binds through the symbols (the text ``s0 + s1=SIZE`` would need shell quotes)
    with pytest.raises(
        UnboundDimensionError,
        match=r"image\[2\] \('8\*h8'\).*here: --dim batch=SIZE --dim h8=SIZE --dim w8=SIZE,",
    ):
        bind_input_shapes(inputs[:1])
    with pytest.raises(UnboundDimensionError, match=r"here: --dim b=SIZE --dim s1=SIZE,"):
        bind_input_shapes(inputs[1:], dims={"s0": 5})
    # names that only look like arithmetic stay names: no value from half-bound parts
    with pytest.raises(UnboundDimensionError, match=r"'seq-len'"):
        bind_input_shapes([("x", ["seq-len"])], dims={"seq": 4})


def test_an_expression_dim_bound_two_ways_must_agree_and_spaces_do_not_matter() -> None:
    """QA session 14: ``--dim h8=1 --dim 8*h8=256`` fed 256 without a word (the text won
    over the symbol other inputs may read directly), and ``--dim s0+s1=12`` did not bind
    the dim dynamo writes ``s0 + s1``."""
    inputs = [("image", ["batch", 3, "8*h8", "8*h8"]), ("ids", ["b", "s0 + s1"])]
    with pytest.raises(UsageError, match=r"--dim 8\*h8=256 contradicts h8=1, which make 8\*h8 = 8"):
        bind_input_shapes(inputs[:1], dims={"batch": 1, "8*h8": 256, "h8": 1})
    with pytest.raises(UsageError, match=r"--dim s0\+s1=13 contradicts s0=5, s1=7"):
        bind_input_shapes(inputs[1:], dims={"b": 1, "s0+s1": 13, "s0": 5, "s1": 7})
    agree = {"batch": 1, "8*h8": 256, "h8": 32, "b": 2, "s0+s1": 12, "s0": 5, "s1": 7}
    assert bind_input_shapes(inputs, dims=agree) == {"image": (1, 3, 256, 256), "ids": (2, 12)}
    assert bind_input_shapes(inputs[1:], dims={"b": 2, "s0+s1": 12}) == {"ids": (2, 12)}


def test_a_dim_naming_no_symbol_of_the_model_is_refused_naming_those_it_has(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """QA session 14: ``--dim foo=3`` was accepted without a word (the sidecar fed instead)."""
    inputs = [("image", ["batch", 3, "8*h8", "s0 + s1"]), ("mask", None)]
    check_dim_names({"batch": 1, "h8": 4, "8*h8": 32, "s0+s1": 3, "s0": 1}, inputs)  # all known
    with pytest.raises(UsageError) as info:
        check_dim_names({"batch": 1, "foo": 3}, inputs)
    assert str(info.value) == (
        "--dim foo: no input of the model has such a dim; its symbols are: "
        "batch, 8*h8, h8, s0 + s1, s0, s1"
    )
    check_dim_names({"batch": 1}, [("x", [1, 3, 8, 8])])  # a static model: only a note
    assert "--dim batch ignored: every input dim of the model is fixed" in capsys.readouterr().err
    check_dim_names(None, [("x", [1, 3, 8, 8])])  # nothing given: nothing to refuse


def test_an_expression_dim_given_a_value_it_cannot_take_is_refused() -> None:
    """QA session 14: ``--dim 8*h8=30`` fed 30 to a dim the exporter declared a multiple of 8."""
    inputs = [("image", [1, 3, "8*h8", "2*s0 + 1"])]
    with pytest.raises(
        UsageError, match=r"--dim 8\*h8=30: the model's dim 8\*h8 is a multiple of 8"
    ):
        bind_input_shapes(inputs, dims={"8*h8": 30, "s0": 1})
    with pytest.raises(UsageError, match=r"a multiple of 2 plus 1 \(no integer s0 makes 8\)"):
        bind_input_shapes(inputs, dims={"h8": 1, "2*s0+1": 8})
    got = bind_input_shapes(inputs, dims={"8*h8": 32, "2*s0+1": 7})
    assert got == {"image": (1, 3, 32, 7)}
