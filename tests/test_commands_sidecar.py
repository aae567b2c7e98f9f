"""``optimize`` carries the input's sidecar (how to feed it) to the output, with the shapes the
rewritten model now declares."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import onnx_ir as ir

from memshrink.bindings import load_sidecar, sidecar_path
from memshrink.commands import _copy_sidecar, _declared_inputs


def _model(dims: list[int | str]) -> ir.Model:
    text = f"""<ir_version: 8, opset_import: ["" : 17]>
    g (int64[{",".join(str(d) for d in dims)}] ids, float[N] x) => (float[N] y) {{ y = Relu(x) }}"""
    return ir.serde.deserialize_model(onnx.parser.parse_model(text))


def _write_sidecar(path: Path) -> None:
    side = {
        "inputs": [
            {"name": "ids", "shape": [1, 128], "dtype": "int64", "range": [0, 100]},
            {"name": "x", "shape": [8], "dtype": "float32"},
        ],
        "outputs": ["y"],
        "seed": 3,
    }
    sidecar_path(path).write_text(json.dumps(side))


def test_bound_inputs_take_the_outputs_static_shape(tmp_path: Path) -> None:
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    _write_sidecar(src)
    dst.write_bytes(b"model")
    # chunk bound batch=4, sequence=512 into the output's declared input shape
    _copy_sidecar(src, dst, _declared_inputs(_model([4, 512])))
    side = load_sidecar(dst)
    assert side is not None
    ids = side.input("ids")
    assert ids is not None and ids.shape == (4, 512) and ids.range == (0, 100)
    x = side.input("x")
    assert x is not None and x.shape == (8,)  # symbolic in the output: the sidecar's binding
    assert side.extra["seed"] == 3 and side.outputs == ["y"]
    assert load_sidecar(src).input("ids").shape == (1, 128)  # the input's is untouched


def test_symbolic_outputs_keep_the_sidecar_and_bad_json_is_copied(tmp_path: Path) -> None:
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    _write_sidecar(src)
    dst.write_bytes(b"model")
    _copy_sidecar(src, dst, _declared_inputs(_model(["batch", "sequence"])))
    assert load_sidecar(dst).input("ids").shape == (1, 128)
    sidecar_path(src).write_text("{not json")
    _copy_sidecar(src, dst, _declared_inputs(_model([4, 512])))
    assert sidecar_path(dst).read_text() == "{not json"


def test_sidecar_that_cannot_be_written_fails_the_run_with_nothing_saved(tmp_path: Path) -> None:
    """A full disk on the sidecar (QA session 11: tmpfs with 340 KiB free) left OUT.onnx and its
    data beside no sidecar, or an earlier run's one that describes another model: it is staged
    before the model is saved now, so the run fails (exit 7) before any output is renamed."""
    from memshrink.atomic import temp_path_for
    from memshrink.cli import main

    text = """<ir_version: 8, opset_import: ["" : 17]>
    g (float[8] x) => (float[8] y) { y = Relu(x) }"""
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(onnx.parser.parse_model(text), src)
    sidecar_path(src).write_text(json.dumps({"inputs": [{"name": "x", "shape": [8]}]}))
    sidecar_path(dst).write_text("earlier run's sidecar")
    blocker = temp_path_for(sidecar_path(dst))
    blocker.mkdir()  # opening the staged sidecar fails, as on a full disk
    assert main(["optimize", str(src), str(dst), "--passes", "prune", "-q"]) == 7
    assert not dst.exists()
    assert sidecar_path(dst).read_text() == "earlier run's sidecar"
    blocker.rmdir()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "in.onnx",
        "in.onnx.json",
        "out.onnx.json",
    ]
    assert main(["optimize", str(src), str(dst), "--passes", "prune", "-q"]) == 0
    assert load_sidecar(dst).input("x").shape == (8,)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "in.onnx",
        "in.onnx.json",
        "out.onnx",
        "out.onnx.json",
    ]
