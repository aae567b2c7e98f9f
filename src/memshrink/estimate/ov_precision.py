"""Which inference precision OpenVINO's CPU plugin will use: f32 or bf16.

Why it matters: on a CPU with native bf16 (``avx512_bf16`` or AMX) the plugin's default
``INFERENCE_PRECISION_HINT`` is bf16, not f32 (OpenVINO's "Precision Control" docs; the
compiled model reports ``bfloat16``), and its weight copies and activations shrink. The
estimator's OpenVINO rules were measured in f32 (an AVX2 host), so on a bf16 host they describe
a compile run with ``INFERENCE_PRECISION_HINT=f32``. Measured 2026-11-27 on an AMD EPYC with
``avx512_bf16`` through the verifier's child, compile peak default vs f32 hint: Llama-130M
721 vs 838 MiB, T5-small 388 vs 491, ConvNeXt-tiny (dynamic) 252 vs 204; 6 x Conv 512x512 3x3
121 vs 150 predicted. Only the hardware flags are read (``/proc/cpuinfo``), no runtime.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
_NAMES = {"f32": "f32", "float32": "f32", "fp32": "f32", "bf16": "bf16", "bfloat16": "bf16"}


@lru_cache(maxsize=1)
def host_default(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The plugin's default precision on this machine: bf16 where the CPU has it natively."""
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return "bf16" if BF16_FLAGS & set(line.split(":", 1)[-1].split()) else "f32"
    except OSError:
        pass
    return "f32"


def inference_precision(opts: Mapping[str, Any] | None) -> str:
    """``INFERENCE_PRECISION_HINT`` from the session options (as ``memshrink verify`` passes
    them to ``compile_model``), else the host's default."""
    for key in ("INFERENCE_PRECISION_HINT", "inference_precision"):
        v = (opts or {}).get(key)
        if v is not None:
            return _NAMES.get(str(v).strip().lower(), str(v).strip().lower())
    return host_default()
