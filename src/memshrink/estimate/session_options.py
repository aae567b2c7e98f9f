"""Check ``estimate``'s session options before any prediction reads them.

Why: each backend's rules read the options they know and ignore the rest, and read a flag as
"on" only for ``1``/``true``/``yes``/``on``. So ``enable_mem_pattern=maybe`` predicted as if
the pattern were off, ``memshrink.ov_plain_node=1`` (one letter short) or
``INFERENCE_PRECISION_HINT=f33`` silently predicted the defaults, and
``memshrink.int_range=a`` was an internal error (QA session 14). Runtime options the
estimator does not model (``intra_op_num_threads``, ``session.*`` config entries, OpenVINO
properties) stay accepted: ``verify`` hands the same options to the runtimes.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any

from memshrink.errors import UsageError

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


def _flag(value: Any) -> str | None:
    if isinstance(value, bool) or value in (0, 1):
        return None
    text = str(value).strip().lower()
    return None if text in TRUE + FALSE else f"expected one of {', '.join(TRUE + FALSE)}"


def _choice(*allowed: str, prefix: str = "") -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        text = str(value).strip().upper().removeprefix(prefix)
        return None if text in allowed else f"expected one of {', '.join(allowed)}"

    return check


def _int_at_least(low: int) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        try:
            ok = not isinstance(value, bool) and int(str(value).strip()) >= low
        except ValueError:
            ok = False
        return None if ok else f"expected an integer >= {low}"

    return check


def _non_negative_float(value: Any) -> str | None:
    try:
        x = float(str(value).strip())
    except ValueError:
        return "expected a number >= 0"
    return None if x >= 0 and x != float("inf") else "expected a finite number >= 0"


def _int_range(value: Any) -> str | None:
    parts = value.split(",") if isinstance(value, str) else list(value)
    try:
        lo, hi = (int(str(p).strip()) for p in parts)
    except (TypeError, ValueError):
        return "expected LO,HI (two integers, LO < HI), e.g. 0,30522"
    return None if lo < hi else f"expected LO < HI, got {lo},{hi}"


def _generation(value: Any) -> str | None:
    usage = "expected max_length=N[,num_beams=K] with N, K >= 1"
    items: list[tuple[Any, Any]]
    if isinstance(value, Mapping):
        items = list(value.items())
    else:
        parts = [p for p in str(value).split(",") if p.strip()]
        if not parts or any("=" not in p for p in parts):
            return usage
        items = [(k, v) for k, v in (p.split("=", 1) for p in parts)]
    seen: dict[str, int] = {}
    for key, v in items:
        key = str(key).strip()
        if key not in ("max_length", "num_beams"):
            return f"unknown key {key!r}; {usage}"
        try:
            seen[key] = int(str(v).strip())
        except ValueError:
            return usage
        if seen[key] < 1:
            return usage
    return None if "max_length" in seen else usage


def _precision(value: Any) -> str | None:
    text = str(value).strip().lower()
    known = ("bf16", "bfloat16", "f16", "fp16", "float16", "f32", "fp32", "float32")
    return None if any(k in text for k in known) else "expected f32, bf16 or f16"


_LEVELS = (
    *("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_LAYOUT"),
    *("ORT_ENABLE_ALL", "0", "1", "2", "3", "99"),
)

#: Every key some backend's rules read, with its value check (None: the value is fine).
CHECKS: dict[str, Callable[[Any], str | None]] = {
    "execution_order": _choice(
        "DEFAULT", "PRIORITY_BASED", "MEMORY_EFFICIENT", prefix="EXECUTIONORDER."
    ),
    "graph_optimization_level": _choice(*_LEVELS, prefix="GRAPHOPTIMIZATIONLEVEL."),
    "enable_mem_pattern": _flag,
    "enable_cpu_mem_arena": _flag,
    "enable_mem_reuse": _flag,
    "reshape": _flag,
    "ENABLE_MMAP": _flag,
    "INFERENCE_PRECISION_HINT": _precision,
    "inference_precision_hint": _precision,
    "inference_precision": _precision,
    "memshrink.hold_outputs": _flag,
    "memshrink.int_range": _int_range,
    "memshrink.generation": _generation,
    "memshrink.glibc_mode": lambda v: None,  # checked with its list by ort.session_options_rules
    "memshrink.cuda_weight_orders": _int_at_least(0),
    "memshrink.cuda_conv_algo_search": _choice("EXHAUSTIVE", "HEURISTIC", "DEFAULT"),
    "memshrink.cuda_conv_workspace": _non_negative_float,
    "memshrink.ov_native_io": _flag,
    "memshrink.ov_release_folded": _flag,
    "memshrink.ov_plain_nodes": _flag,
    "memshrink.ov_split_static": _flag,
    "memshrink.ovep_heap_regrowth": _flag,
}

#: ONNX Runtime ``SessionOptions`` attributes the estimator does not model (accepted as is).
ORT_ATTRIBUTES = (
    "enable_profiling",
    "execution_mode",
    "inter_op_num_threads",
    "intra_op_num_threads",
    "log_severity_level",
    "log_verbosity_level",
    "logid",
    "optimized_model_filepath",
    "profile_file_prefix",
    "use_deterministic_compute",
)


def check_session_options(opts: Mapping[str, Any] | None) -> None:
    """Raise ``UsageError`` for a bad value of a key the estimator reads, for an unknown
    ``memshrink.*`` key, and for a key one typo away from a known one."""
    for key, value in (opts or {}).items():
        check = CHECKS.get(key)
        if check is not None:
            problem = check(value)
            if problem:
                raise UsageError(f"session option {key}={value!r}: {problem}")
            continue
        known = [k for k in CHECKS if k.startswith("memshrink.")]
        if key.startswith("memshrink."):
            near = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {near[0]}? " if near else ""
            raise UsageError(
                f"unknown estimator option {key!r}; {hint}known: {', '.join(sorted(known))}"
            )
        if key in ORT_ATTRIBUTES or "." in key:
            continue
        near = difflib.get_close_matches(key, list(CHECKS), n=1, cutoff=0.85)
        if near:
            raise UsageError(
                f"unknown session option {key!r}: did you mean {near[0]}? (a misspelt option "
                "would be ignored and the prediction made for the default)"
            )
