"""Pipeline specs: presets, comma lists, TOML files, options, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from memshrink.errors import UsageError
from memshrink.pipeline import available_presets, resolve_pipeline
from memshrink.transforms import available_passes


def _names(spec, options=None) -> list[str]:  # noqa: ANN001
    return [p.name for p in resolve_pipeline(spec, options or {})]


def test_presets_exist_and_safe_is_exact() -> None:
    presets = available_presets()
    assert {"all", "safe"} <= set(presets)
    passes = available_passes()
    assert all(passes[n].exact is True for n in _names("safe"))
    assert set(_names("safe")) <= set(_names("all"))
    assert "simplify" in _names("all") and "simplify" not in _names("safe")


def test_comma_list_and_preset_mix() -> None:
    assert _names("prune,external-data") == ["prune", "external-data"]
    assert _names("safe,simplify")[-1] == "simplify"


def test_toml_pipeline_with_options(tmp_path: Path) -> None:
    f = tmp_path / "p.toml"
    f.write_text(
        'passes = ["prune", "external-data"]\n[options.external-data]\nthreshold = "4KiB"\n'
    )
    passes = resolve_pipeline(str(f), {})
    assert passes[1].options.threshold == 4096
    # Command-line options override the file's.
    passes = resolve_pipeline(str(f), {"external-data": {"threshold": "8KiB"}})
    assert passes[1].options.threshold == 8192


@pytest.mark.parametrize(
    "content, message",
    [
        ("passes = 3", "list of pass names"),
        ("passes = [", "not valid TOML"),
        ('passes = ["prune"]\nbogus = 1', "unknown key"),
        ('passes = ["nope"]', "unknown pass"),
        # QA session 14: these were accepted, the options table silently ignored
        (
            'passes = ["prune", "external-data"]\n[options.extrenal-data]\nthreshold = "1KiB"',
            r"\[options.extrenal-data\] names no pass of its `passes` \(prune, external-data\)",
        ),
        ('passes = ["prune"]\n[options.chunk]\nmax_chunks = 4', r"\[options.chunk\] names no pass"),
        ("passes = []", "`passes` is empty"),
    ],
)
def test_bad_pipeline_files(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(content)
    with pytest.raises(UsageError, match=message):
        resolve_pipeline(str(f), {})


def test_unknown_pass_lists_what_exists() -> None:
    with pytest.raises(
        UsageError, match=r"unknown pass\(es\) frobnicate; available passes: .*prune"
    ):
        resolve_pipeline("prune,frobnicate", {})


def test_missing_file_and_stray_options() -> None:
    with pytest.raises(UsageError, match="not found"):
        resolve_pipeline("missing.toml", {})
    with pytest.raises(UsageError, match="not in the pipeline"):
        resolve_pipeline("prune", {"external-data": {"threshold": 1}})
    with pytest.raises(UsageError, match="empty pipeline"):
        resolve_pipeline(" , ", {})
