"""The suite's catalogue, CLI and torch-free builds (the onnx-wheel zoo models)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import models
from models.__main__ import main

REPO = Path(__file__).resolve().parents[2]


def test_names_unique_and_described() -> None:
    specs = models.all_specs()
    names = [s.name for s in specs]
    assert len(names) == len(set(names))
    for s in specs:
        assert s.description and s.feeds, s.name
        assert s.family in {"transformer", "cnn", "multibranch", "zoo"}, s.name


def test_suite_covers_the_issue() -> None:
    names = set(models.names())
    for required in (
        "bert-base", "bert-base-ext", "bert-base-b4s512", "bert-base-b4s512-ext",
        "gpt2", "gpt2-ext", "gpt2-s1024", "gpt2-s1024-ext", "vit-b16", "vit-b16-ext",
        "resnet50", "resnet50-b16", "mobilenetv2", "unet", "multibranch", "gpt2-large-ext",
        "zoo-resnet50", "zoo-densenet121", "zoo-inception-v1", "zoo-inception-v2",
        "zoo-shufflenet", "zoo-squeezenet", "zoo-vgg19", "zoo-alexnet", "zoo-zfnet512",
    ):  # fmt: skip
        assert required in names, required
    tiny = set(models.names(tag="tiny"))
    assert {"bert-tiny", "gpt2-tiny", "vit-tiny", "resnet50-tiny", "mobilenetv2-tiny",
            "unet-tiny", "multibranch-tiny"} <= tiny  # fmt: skip


def test_big_model_only_on_demand(capsys: pytest.CaptureFixture[str]) -> None:
    big = set(models.names(tag="big"))
    assert big == {"gpt2-large-ext"}
    assert not big & set(models.names(include_big=False))
    assert models.get_spec("gpt2-large-ext").external_data
    # `--all` never selects it; `--all --big` does. Check the selection, build nothing.
    from models.__main__ import _selected

    ns = type("NS", (), {"names": [], "all": True, "big": False, "tag": None})
    assert not big & set(_selected(ns))
    ns.big = True
    assert big <= set(_selected(ns))


def test_unknown_name_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "no-such-model", "--out", "/nonexistent"]) == 2
    assert "unknown model 'no-such-model'" in capsys.readouterr().err


def test_cli_list_json_runs_without_torch(tmp_path: Path) -> None:
    # A fresh interpreter with torch made unimportable: listing must not need the extra.
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
        "from models.__main__ import main; raise SystemExit(main(['list', '--json', "
        f"'--out', {str(tmp_path)!r}]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert {r["name"] for r in rows} == set(models.names())
    assert not any(r["built"] for r in rows)


def test_zoo_build_sidecar_and_ort_run(tmp_path: Path, feeds_for, check_sidecar) -> None:
    path = models.build("zoo-squeezenet", tmp_path)
    assert path == tmp_path / "zoo-squeezenet.onnx"
    sidecar = check_sidecar(path)
    proto = onnx.load(str(path))
    assert not any(n.op_type == "ConstantOfShape" for n in proto.graph.node)
    weight_bytes = sum(onnx.numpy_helper.to_array(t).nbytes for t in proto.graph.initializer)
    assert sidecar["weight_bytes"] == weight_bytes
    assert sidecar["weight_bytes"] > 4 * 2**20  # real SqueezeNet: 1.2 M params
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    outs = session.run(None, feeds_for(path))
    assert outs[0].shape == (1, 1000, 1, 1)
    assert np.isfinite(outs[0]).all()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp")]


def test_zoo_build_is_deterministic_and_skipped_when_present(tmp_path: Path) -> None:
    a = models.build("zoo-shufflenet", tmp_path / "a")
    b = models.build("zoo-shufflenet", tmp_path / "b")
    assert a.read_bytes() == b.read_bytes()
    assert Path(str(a) + ".json").read_bytes() == Path(str(b) + ".json").read_bytes()
    stamp = a.stat().st_mtime_ns
    assert models.build("zoo-shufflenet", tmp_path / "a") == a
    assert a.stat().st_mtime_ns == stamp  # skipped, not rebuilt
    models.build("zoo-shufflenet", tmp_path / "a", force=True)
    assert a.read_bytes() == b.read_bytes()


def test_half_written_build_does_not_count(tmp_path: Path) -> None:
    path = models.build("zoo-squeezenet", tmp_path)
    Path(str(path) + ".json").unlink()  # as if killed between the model and its sidecar
    assert not models.is_built("zoo-squeezenet", tmp_path)
    stamp = path.stat().st_mtime_ns
    models.build("zoo-squeezenet", tmp_path)
    assert models.is_built("zoo-squeezenet", tmp_path)
    assert path.stat().st_mtime_ns != stamp


def test_out_dir_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSHRINK_MODELS_DIR", os.fspath(tmp_path))
    assert models.model_path("bert-tiny") == tmp_path / "bert-tiny.onnx"


def test_measure_row_from_a_real_profile(tmp_path: Path) -> None:
    from models import measure

    rows = measure.measure_many(["zoo-squeezenet"], tmp_path, runs=2, timeout=120)
    assert len(rows) == 1
    row = rows[0]
    assert row["status"] == "ok", row.get("error")
    sidecar = json.loads((tmp_path / "zoo-squeezenet.onnx.json").read_text())
    assert row["weight_bytes"] == sidecar["weight_bytes"]
    # Embedded weights are copied to the heap at session creation: at least the weights.
    assert row["session_peak_delta"] >= sidecar["weight_bytes"]
    assert row["steady_peak_delta"] >= row["session_after_delta"]
    table = measure.markdown_table(rows)
    assert "| zoo-squeezenet |" in table


def test_help_examples_parse_and_out_is_a_folder(tmp_path: Path) -> None:
    """Every example in ``python -m models --help`` parses, and ``--out`` (the models folder)
    refuses a file name: the help's own ``measure --all --out docs/models-measured.json`` would
    have built every model into a folder of that name (QA session 15)."""
    import shlex

    from models.__main__ import EPILOG, build_parser

    examples = [ln.split("#")[0].split()[3:] for ln in EPILOG.splitlines() if "python -m" in ln]
    assert len(examples) >= 7
    for argv in examples:
        args = build_parser().parse_args(argv)
        assert not (getattr(args, "out", None) or "").endswith(".json"), argv
    for bad in ("r.json", "m.onnx"):
        with pytest.raises(SystemExit) as exc:
            main(shlex.split(f"measure --all --out {tmp_path / bad}"))
        assert exc.value.code == 2
    assert not (tmp_path / "r.json").exists()
