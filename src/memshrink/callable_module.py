"""Let ``memshrink.estimate(...)`` and ``memshrink.verify(...)`` stay calls after their
subpackages are imported.

Why: ``memshrink`` re-exports the functions ``estimate`` and ``verify`` lazily, but importing
the subpackages ``memshrink.estimate`` / ``memshrink.verify`` (which the pass manager and the
CLI do) binds the package attribute to the *module*, so the README's ``memshrink.estimate(path)``
failed with "'module' object is not callable" from the second call on. Making those two modules
callable keeps both meanings working: a module for imports, the function for calls.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any


def make_callable(module_name: str, target: str, attr: str) -> None:
    """Calling module ``module_name`` calls ``target.attr`` (imported at the first call)."""

    class _CallableModule(types.ModuleType):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return getattr(importlib.import_module(target), attr)(*args, **kwargs)

    sys.modules[module_name].__class__ = _CallableModule
