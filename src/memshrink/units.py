"""Parse and format byte sizes (``500MiB``, ``1.5GB``), used by budgets and reports."""

from __future__ import annotations

import re

from memshrink.errors import UsageError

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}

_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_bytes(text: str | int) -> int:
    """Return a byte count from ``'500MiB'``, ``'1.5 GB'``, ``'4096'`` or an int."""
    if isinstance(text, int):
        return text
    m = _SIZE_RE.match(text)
    if not m or m.group(2).lower() not in _UNITS:
        raise UsageError(
            f"cannot parse size {text!r}: use a number with an optional unit "
            "(B, KiB, MiB, GiB, KB, MB, GB), e.g. 500MiB"
        )
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def format_bytes(n: float | int | None) -> str:
    """Human-readable binary size: ``'417.3 MiB'``."""
    if n is None:
        return "-"
    sign = "-" if n < 0 else ""
    v = float(abs(n))
    for unit in ("B", "KiB", "MiB", "GiB"):
        if v < 1024 or unit == "GiB":
            return f"{sign}{v:.0f} {unit}" if unit == "B" else f"{sign}{v:.1f} {unit}"
        v /= 1024
    return f"{sign}{v:.1f} GiB"  # pragma: no cover


def mib(n: float | int) -> float:
    return float(n) / (1024 * 1024)
