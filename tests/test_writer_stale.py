"""Re-saving to the same OUT replaces the whole output set: a data file the new model does not
use (an earlier save's ``OUT.folded.data`` or ``OUT.data``) is removed after the new files are in
place; the user's other files, and the old set when the save fails, stay."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from fixtures_onnx import conv_bn_conv

from memshrink.cli import main
from memshrink.errors import ModelSaveError
from memshrink.manager import PassContext
from memshrink.model import load
from memshrink.transforms.external_data import ExternalDataPass
from memshrink.writer import data_files, save_model


def _with_policy(src: Path, folded_file: bool):  # type: ignore[no-untyped-def]
    model = load(src)
    p = ExternalDataPass()
    p.options = ExternalDataPass.Options(folded_file=folded_file)
    p.run(model, PassContext())
    return model


def _names(folder: Path) -> set[str]:
    return {f.name for f in folder.iterdir()}


def test_resave_without_folded_weights_removes_the_old_folded_file(tmp_path: Path) -> None:
    src = tmp_path / "in.onnx"
    onnx.save_model(conv_bn_conv(), src)
    out_dir = tmp_path / "o"
    out_dir.mkdir()
    (out_dir / "notes.txt").write_text("mine")  # a user's file beside OUT
    (out_dir / "other.onnx.folded.data").write_bytes(b"x")  # another model's: not OUT's
    out = out_dir / "m.onnx"

    first = save_model(_with_policy(src, folded_file=True), out)
    assert first.folded_path == f"{out}.folded.data" and first.removed_stale == []
    assert _names(out_dir) >= {"m.onnx", "m.onnx.data", "m.onnx.folded.data"}

    second = save_model(_with_policy(src, folded_file=False), out)
    assert second.folded_path is None
    assert second.removed_stale == [f"{out}.folded.data"]
    assert _names(out_dir) == {"m.onnx", "m.onnx.data", "notes.txt", "other.onnx.folded.data"}
    assert {f.name for f in data_files(load(out))} == {"m.onnx.data"}

    third = save_model(load(src), out, external=False)  # everything embedded: no data file
    assert third.data_path is None and third.removed_stale == [f"{out}.data"]
    assert _names(out_dir) == {"m.onnx", "notes.txt", "other.onnx.folded.data"}


def test_a_failed_save_keeps_the_old_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "in.onnx"
    onnx.save_model(conv_bn_conv(), src)
    out = tmp_path / "m.onnx"
    save_model(_with_policy(src, folded_file=True), out)
    before = {
        n: (tmp_path / n).read_bytes() for n in ("m.onnx", "m.onnx.data", "m.onnx.folded.data")
    }

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(onnx, "save_model", full)
    with pytest.raises(ModelSaveError, match="out of disk space"):
        save_model(_with_policy(src, folded_file=False), out)
    assert {n: (tmp_path / n).read_bytes() for n in before} == before
    assert _names(tmp_path) == {"in.onnx", *before}  # no temp file left


def test_optimize_says_what_it_removed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.onnx"
    onnx.save_model(conv_bn_conv(), src)
    out = tmp_path / "m.onnx"
    assert main(["optimize", str(src), str(out), "--passes", "external-data"]) == 0
    assert (tmp_path / "m.onnx.folded.data").is_file()
    capsys.readouterr()
    args = ["optimize", str(src), str(out), "--passes", "external-data"]
    assert main([*args, "-O", "external-data.folded_file=false"]) == 0
    text = capsys.readouterr().out
    assert "note: removed m.onnx.folded.data: left by an earlier save to this output" in text
    assert not (tmp_path / "m.onnx.folded.data").exists()


def test_optimize_removes_a_sidecar_that_describes_an_earlier_input(tmp_path: Path) -> None:
    """IN with a sidecar, then another IN without one, to the same OUT: the old ``OUT.onnx.json``
    would feed ``estimate OUT`` another model's shapes; it goes, and the report says so."""
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save_model(conv_bn_conv(), a)
    onnx.save_model(conv_bn_conv(), b)
    (tmp_path / "a.onnx.json").write_text('{"inputs": [{"name": "x", "shape": [2, 16, 8, 8]}]}')
    out = tmp_path / "m.onnx"
    assert main(["optimize", str(a), str(out), "--passes", "prune", "-q"]) == 0
    assert (tmp_path / "m.onnx.json").is_file()
    report = tmp_path / "r.json"
    assert (
        main(["optimize", str(b), str(out), "--passes", "prune", "-q", "--json", str(report)]) == 0
    )
    assert not (tmp_path / "m.onnx.json").exists()
    import json

    assert json.loads(report.read_text())["save"]["removed_stale"] == [f"{out}.json"]
