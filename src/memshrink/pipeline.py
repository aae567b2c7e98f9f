"""Resolve a pipeline spec (preset name, comma list, TOML file, or objects) into passes.

Presets are TOML files shipped in the wheel as ``memshrink/presets`` (from the repo's
top-level ``passes/`` folder); in a source checkout the folder itself is read.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from memshrink.errors import UsageError
from memshrink.manager import Pass

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def presets_dir() -> Path:
    """Folder holding the preset TOML files (wheel or source checkout)."""
    packaged = resources.files("memshrink") / "presets"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[2] / "passes"


def available_presets() -> dict[str, Path]:
    folder = presets_dir()
    return {p.stem: p for p in sorted(folder.glob("*.toml"))} if folder.is_dir() else {}


def load_pipeline_file(path: Path) -> tuple[list[str], dict[str, dict[str, Any]], str]:
    """Parse a pipeline TOML: ``passes = [...]``, optional ``[options.<pass>]`` tables."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"pipeline file {path} not found") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"pipeline file {path} is not valid TOML: {exc}") from None
    names = data.get("passes")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise UsageError(
            f'pipeline file {path} needs `passes = ["name", ...]` (a list of pass names)'
        )
    options = data.get("options", {})
    if not isinstance(options, dict) or not all(isinstance(v, dict) for v in options.values()):
        raise UsageError(f"pipeline file {path}: [options.<pass>] entries must be tables")
    unknown_keys = sorted(set(data) - {"passes", "options", "description", "name"})
    if unknown_keys:
        raise UsageError(f"pipeline file {path}: unknown key(s) {', '.join(unknown_keys)}")
    if not names:
        raise UsageError(f"pipeline file {path}: `passes` is empty; name at least one pass")
    # An options table for a misspelt pass, or one not in `passes`, was silently ignored
    # (QA session 14); ``-O`` for such a pass was already an error.
    stray = sorted(set(options) - set(names))
    if stray:
        raise UsageError(
            f"pipeline file {path}: [options.{stray[0]}]"
            + (f" (and {', '.join(stray[1:])})" if stray[1:] else "")
            + f" names no pass of its `passes` ({', '.join(dict.fromkeys(names))})"
        )
    return names, options, str(data.get("description", ""))


def _expand(spec: str) -> tuple[list[str], dict[str, dict[str, Any]]]:
    presets = available_presets()
    path = Path(spec)
    if spec.endswith(".toml") or (path.is_file() and spec not in presets):
        file_names, file_options, _ = load_pipeline_file(path)
        return file_names, file_options
    names: list[str] = []
    options: dict[str, dict[str, Any]] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if part in presets:
            preset_names, preset_opts, _ = load_pipeline_file(presets[part])
            names.extend(preset_names)
            for k, v in preset_opts.items():
                options.setdefault(k, {}).update(v)
        else:
            names.append(part)
    if not names:
        raise UsageError("empty pipeline: name passes, a preset (all, safe) or a TOML file")
    return names, options


def resolve_pipeline(
    pipeline: str | Sequence[str | Pass], options: Mapping[str, Mapping[str, Any]]
) -> list[Pass]:
    """Instantiate the passes of ``pipeline``; ``options`` override per pass name."""
    from memshrink.transforms import available_passes, get_pass

    if isinstance(pipeline, str):
        names, file_options = _expand(pipeline)
        items: list[str | Pass] = list(names)
    else:
        items, file_options = list(pipeline), {}
    known = available_passes()
    unknown = sorted({i for i in items if isinstance(i, str) and i not in known})
    if unknown:
        raise UsageError(
            f"unknown pass(es) {', '.join(unknown)}; available passes: "
            f"{', '.join(sorted(known))}; presets: {', '.join(available_presets())}"
        )
    stray = sorted(set(options) - {i for i in items if isinstance(i, str)})
    if stray:
        raise UsageError(f"options given for pass(es) not in the pipeline: {', '.join(stray)}")
    passes: list[Pass] = []
    for item in items:
        if isinstance(item, Pass):
            passes.append(item)
            continue
        merged = {**file_options.get(item, {}), **options.get(item, {})}
        passes.append(get_pass(item)(**merged))
    return passes
