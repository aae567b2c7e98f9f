"""Built-in passes, one module each; the registry maps pass names to classes.

Modules are imported on first lookup so ``import memshrink`` stays light and a pass with
an optional dependency (onnxsim) only fails when it runs.
"""

from __future__ import annotations

import importlib

from memshrink.errors import UsageError
from memshrink.manager import Pass

#: Modules defining built-in passes; each calls ``register`` at import.
BUILTIN_MODULES = (
    "memshrink.transforms.prune",
    "memshrink.transforms.inline_functions",
    "memshrink.transforms.dedup_weights",
    "memshrink.transforms.simplify",
    "memshrink.transforms.external_data",
    "memshrink.transforms.partition",
    "memshrink.transforms.flush_subnormals",
    "memshrink.transforms.fold_weight_transforms",
    "memshrink.transforms.chunk",
    "memshrink.transforms.reorder",
    "memshrink.transforms.inplace",
    "memshrink.transforms.recompute",
    "memshrink.transforms.ep_compat",
    "memshrink.transforms.fc_weight_layout",
    "memshrink.transforms.fc_weight_first",
)

_REGISTRY: dict[str, type[Pass]] = {}
_loaded = False


def register(cls: type[Pass]) -> type[Pass]:
    """Class decorator: make a pass available by its ``name``."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"two passes named {cls.name!r}")
    _REGISTRY[cls.name] = cls
    return cls


def _load_builtins() -> None:
    global _loaded
    if not _loaded:
        for module in BUILTIN_MODULES:
            importlib.import_module(module)
        _loaded = True


def available_passes() -> dict[str, type[Pass]]:
    _load_builtins()
    return dict(_REGISTRY)


def get_pass(name: str) -> type[Pass]:
    passes = available_passes()
    if name not in passes:
        raise UsageError(f"unknown pass {name!r}; available passes: {', '.join(sorted(passes))}")
    return passes[name]
