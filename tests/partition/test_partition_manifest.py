"""Manifest validation: every broken folder fails with a clear message naming the problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from partition.partgraphs import build_branchy, partition_to, save

from memshrink.partition import ManifestError, is_partition_folder, read_manifest
from memshrink.partition.manifest import manifest_from_dict


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    src = save(build_branchy(), tmp_path / "b.onnx")
    partition_to(src, tmp_path / "out", parts=3)
    return tmp_path / "out"


def _doc(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def _write(folder: Path, doc: dict) -> None:
    (folder / "manifest.json").write_text(json.dumps(doc))


def test_valid_folder_reads(folder: Path) -> None:
    manifest = read_manifest(folder)
    assert is_partition_folder(folder)
    assert len(manifest.parts) == 3
    assert manifest.parts_needed(["early"]) == [0]
    assert manifest.parts_needed(["y"])[-1] == 2


def test_missing_or_not_json(tmp_path: Path, folder: Path) -> None:
    with pytest.raises(ManifestError, match="no manifest.json"):
        read_manifest(tmp_path)
    (folder / "manifest.json").write_text("{nope")
    with pytest.raises(ManifestError, match="not JSON"):
        read_manifest(folder)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(format="something-else"), "format is 'something-else'"),
        (lambda d: d.update(version=99), "version 99 is not supported"),
        (lambda d: d.update(parts=[]), "no parts"),
        (lambda d: d["parts"][1].update(index=5), "index is 5, expected 1"),
        (lambda d: d["parts"][1]["inputs"][0].update(source="elsewhere"), "bad source"),
        (lambda d: d["parts"][0]["inputs"][0].update(source=2), "does not run before it"),
        (lambda d: d["parts"][1]["inputs"][0].pop("dtype"), "has no dtype"),
        (lambda d: d["parts"][2].update(file="../escape.onnx"), "escapes the folder"),
        (
            lambda d: d["outputs"].append({"name": "ghost", "dtype": "float32"}),
            "'ghost' is produced by no part",
        ),
        (lambda d: d["parts"][0]["outputs"][0].update(shape=[-3]), "bad shape"),
    ],
)
def test_inconsistent_manifests_are_named(folder: Path, mutate, message: str) -> None:  # noqa: ANN001
    doc = _doc(folder)
    mutate(doc)
    _write(folder, doc)
    with pytest.raises(ManifestError, match=message):
        read_manifest(folder)


def test_missing_part_and_short_data_file(folder: Path) -> None:
    (folder / "part_001.onnx").unlink()
    with pytest.raises(ManifestError, match="part 1 file 'part_001.onnx' is missing"):
        read_manifest(folder)
    read_manifest(folder, check_files=False)  # structure alone is still valid


def test_truncated_weights_file(folder: Path) -> None:
    data = folder / "part_000.data"
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(ManifestError, match="part_000.data' is shorter than part 0"):
        read_manifest(folder)


def test_dict_errors_without_a_folder() -> None:
    with pytest.raises(ManifestError, match="top level is not an object"):
        manifest_from_dict([])
