"""Facts about the host CPU that decide what a runtime does, read without importing the runtime.

The estimator predicts for the machine it runs on unless told otherwise: ORT's NCHWc block
size and OpenVINO's default inference precision both follow the CPU's instruction sets, so
the same model needs measurably different memory on an AVX2 host and on an AVX512-BF16 one.
"""

from __future__ import annotations

import functools
import platform

#: Inference precisions OpenVINO's CPU plugin computes in, by our short names.
PRECISIONS = ("f32", "bf16", "f16")


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The ``flags`` line of ``/proc/cpuinfo`` (empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def normalize_precision(value: object) -> str:
    """``f32`` / ``bf16`` / ``f16`` from what a user or OpenVINO writes: ``bf16``,
    ``bfloat16``, ``<Type: 'bfloat16'>``, ``f16``, ``FP16``, ``f32``...; unknown → ``f32``."""
    text = str(value).lower()
    if "bf16" in text or "bfloat16" in text:
        return "bf16"
    if "f16" in text or "float16" in text or "fp16" in text:
        return "f16"
    return "f32"


def ov_default_precision(flags: frozenset[str] | None = None, machine: str | None = None) -> str:
    """OpenVINO CPU plugin's default ``INFERENCE_PRECISION_HINT`` on this host: ``bf16``
    where the CPU has native bf16 (``Config``: ``hasHardwareSupport(bf16)``, i.e. oneDNN's
    ``avx512_core_bf16`` or AMX), else ``f32`` (x86-64). Checked against the plugin's own
    property by ``tests/estimate/test_estimate_ov_precision.py``. ARM hosts default to ``f16`` where
    the core has fp16 arithmetic (``asimdhp``)."""
    flags = cpu_flags() if flags is None else flags
    machine = (machine or platform.machine()).lower()
    if machine in ("x86_64", "amd64"):
        return "bf16" if {"avx512_bf16", "amx_bf16"} & flags else "f32"
    if machine in ("aarch64", "arm64"):
        return "f16" if "asimdhp" in flags else "f32"
    return "f32"
