"""Give freed memory back to the OS.

glibc keeps freed heap in its arenas (only ``malloc_trim`` returns pages from the middle of
one), and an onnx_ir graph is a web of cycles that only the cyclic GC frees. A model the tool
has dropped (simplify's input, the optimized model once saved) would otherwise stay in the
RSS, under everything that runs after it.
"""

from __future__ import annotations

import gc


def release_memory() -> None:
    """Collect cycles, then return the heap's free pages to the OS (glibc only)."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
