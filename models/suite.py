"""The benchmark suite's catalogue: every model name, what it is, how to feed it, how to make it.

A spec is cheap data; the heavy part (``make``) is a zero-argument callable that imports
torch/transformers lazily, so listing the suite and building the ``onnx``-wheel zoo models
work without the ``models`` extra. Specs that share a ``source`` come from one export
(e.g. BERT-base embedded vs. external data, or seq 128 vs. batch 4 x seq 512 of the same
dynamic-shape graph), and ``build_many`` reuses that export instead of repeating it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx_ir as ir


@dataclass(frozen=True)
class Feed:
    """One graph input as benchmarks should feed it (concrete shape, dtype, valid int range)."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    range: tuple[int, int] | None = None  # half-open [low, high) for integer inputs

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
        if self.range is not None:
            out["range"] = list(self.range)
        return out


@dataclass(frozen=True)
class ModelSpec:
    """A named model of the suite."""

    name: str
    description: str
    family: str  # transformer | cnn | multibranch | zoo
    tags: tuple[str, ...]
    source: str  # export cache key: specs with the same source share one ``make()`` result
    make: Callable[[], ir.Model] = field(repr=False, compare=False)
    feeds: tuple[Feed, ...]
    external_data: bool = False
    seed: int = 0
    dims: dict[str, int] = field(default_factory=dict)  # bindings of the graph's symbolic dims
    needs_torch: bool = True
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. vocab_size, config summary
    version: int = 1  # bump when this one model's bytes change (see build.fingerprint)


_REGISTRY: dict[str, ModelSpec] = {}


def register(spec: ModelSpec) -> ModelSpec:
    if spec.name in _REGISTRY:
        raise ValueError(f"duplicate model name {spec.name!r}")
    _REGISTRY[spec.name] = spec
    return spec


def all_specs() -> list[ModelSpec]:
    _load_catalogue()
    return list(_REGISTRY.values())


def get_spec(name: str) -> ModelSpec:
    _load_catalogue()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise KeyError(f"unknown model {name!r}; known models: {known}") from None


_loaded = False


def _load_catalogue() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    # Importing these modules registers their specs; none of them imports torch at import time.
    from models import cnn, hf, zoo  # noqa: F401
