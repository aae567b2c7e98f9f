"""memshrink's benchmark model suite: real architectures with seeded random weights, built locally.

``python -m models list`` / ``python -m models build NAME... | --all``; from Python::

    import models
    path = models.build("bert-tiny")          # .cache/models/bert-tiny.onnx (+ .json sidecar)
    models.names(tag="tiny")                  # the fast variants tests use
"""

from __future__ import annotations

from models.build import DEFAULT_CACHE, build, build_many, cache_dir, is_built, model_path
from models.suite import Feed, ModelSpec, all_specs, get_spec


def names(tag: str | None = None, include_big: bool = True) -> list[str]:
    """Model names, optionally only those with ``tag``; ``include_big=False`` drops the >2 GB ones."""
    return [
        s.name
        for s in all_specs()
        if (tag is None or tag in s.tags) and (include_big or "big" not in s.tags)
    ]


def describe(name: str) -> ModelSpec:
    """The spec of ``name``: description, tags, feeds, storage."""
    return get_spec(name)


__all__ = [
    "DEFAULT_CACHE",
    "Feed",
    "ModelSpec",
    "all_specs",
    "build",
    "build_many",
    "cache_dir",
    "describe",
    "get_spec",
    "is_built",
    "model_path",
    "names",
]
