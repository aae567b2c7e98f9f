"""Defer importing sympy until something reads it.

Why: ``onnx_ir`` imports sympy at module load (``_core``'s ``import sympy`` and
``_symbolic_shapes``' table of sympy functions), but only uses it when a ``SymbolicDim``
takes part in arithmetic or is built from a sympy expression. sympy is +34 MiB RSS and
~0.5 CPU-s of every CLI command (``python -c 'import onnx, sympy'``: 38 -> 72 MiB), and
``optimize`` / ``estimate`` of a static graph never do that arithmetic.

``defer()`` puts a stand-in module under each name in ``sys.modules``; the first attribute
read of a stand-in (``sympy.Expr``, ``sympy.__path__`` when a submodule is imported,
``parse_symbolic_expression``) imports the real module, which then replaces it in
``sys.modules``, and answers from it. Modules that bound the stand-in (``onnx_ir._core``)
keep forwarding through it. ``importlib.util.LazyLoader`` does not do here: on Python 3.11
``import sympy`` itself reads the module's ``__spec__`` and so loads it at once.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

#: (module, parent package or ""): ``onnx_ir._symbolic_shapes`` builds its sympy table at
#: import, so it waits too; looked up without importing ``onnx_ir``.
DEFERRED = (("sympy", ""), ("onnx_ir._symbolic_shapes", "onnx_ir"))


class _Deferred(types.ModuleType):
    """A module that imports the real one on its first attribute read."""

    def __init__(self, name: str, spec: importlib.machinery.ModuleSpec) -> None:
        super().__init__(name)
        self.__spec__ = spec
        self.__loader__ = spec.loader
        object.__setattr__(self, "_memshrink_real", None)

    def __getattr__(self, attr: str) -> Any:  # only called for names the stand-in lacks
        real = self.__dict__.get("_memshrink_real")
        if real is None:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
            real = importlib.import_module(self.__name__)
            object.__setattr__(self, "_memshrink_real", real)
        return getattr(real, attr)


def _spec(name: str, parent: str) -> importlib.machinery.ModuleSpec | None:
    if not parent:
        return importlib.util.find_spec(name)
    pspec = importlib.util.find_spec(parent)  # a top-level package: not imported by this
    if pspec is None or not pspec.submodule_search_locations:
        return None
    return importlib.machinery.PathFinder.find_spec(name, list(pspec.submodule_search_locations))


def defer() -> list[str]:
    """Install the stand-ins where nothing imported the modules yet; return their names.

    A no-op for a module already imported (or its package: ``onnx_ir`` loaded means its
    ``_symbolic_shapes`` is too) and for one that can't be found."""
    done = []
    for name, parent in DEFERRED:
        if name in sys.modules or (parent and parent in sys.modules):
            continue
        try:
            spec = _spec(name, parent)
        except (ImportError, ValueError):
            spec = None
        if spec is None or spec.loader is None:
            continue
        sys.modules[name] = _Deferred(name, spec)
        done.append(name)
    return done
