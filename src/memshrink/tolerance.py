"""The tolerance a rewritten model's outputs are stated to keep, recorded in the model itself.

Why: a non-exact pass (``chunk``'s channel split reorders sums; ``simplify`` folds constants)
states a tolerance (``Pass.tolerance``), but ``verify`` compared at its own defaults (atol 1e-5,
rtol 1e-5). A rewrite inside what its passes promise then failed the gate: FCOS after
``--passes all`` differed by 6.1e-5 (docs/reliability.md, session 8). So ``PassManager`` writes
the passes that changed the model and their stated (atol, rtol) into the model's
``metadata_props[KEY]``, and ``verify``, when the user gave no tolerance, compares at that stated
tolerance and says so. An exact pipeline (``safe``) writes nothing and stays strict.

Tolerances add up: if pass A keeps ``|y1 - y0| <= a1 + r1·|y0|`` and pass B keeps ``|y2 - y1| <=
a2 + r2·|y1|``, then ``|y2 - y0| <= (a1 + a2) + (r1 + r2)·|y0|`` up to a second-order
``r1·r2`` term. A model optimized twice carries the sum over both runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

KEY = "memshrink.tolerance"


@dataclass
class StatedTolerance:
    """(atol, rtol) the outputs keep against the model before memshrink, and which passes
    (name -> (atol, rtol), one entry per run that changed the model) make it up."""

    atol: float = 0.0
    rtol: float = 0.0
    passes: list[tuple[str, float, float]] = field(default_factory=list)

    def add(self, name: str, atol: float, rtol: float) -> None:
        self.atol += atol
        self.rtol += rtol
        self.passes.append((name, atol, rtol))

    def describe(self) -> str:
        """``chunk (atol 1e-4, rtol 1e-4) + simplify (...)``."""
        return " + ".join(f"{n} (atol {a:g}, rtol {r:g})" for n, a, r in self.passes)

    def to_json(self) -> str:
        return json.dumps(
            {
                "atol": self.atol,
                "rtol": self.rtol,
                "passes": [{"pass": n, "atol": a, "rtol": r} for n, a, r in self.passes],
            },
            separators=(",", ":"),
        )

    def to_dict(self) -> dict[str, Any]:
        return json.loads(self.to_json())


def parse(text: str | None) -> StatedTolerance | None:
    """The record in ``metadata_props[KEY]``, or None when absent or unreadable (an unreadable
    record never loosens anything: verify then stays at its defaults)."""
    if not text:
        return None
    try:
        data = json.loads(text)
        out = StatedTolerance()
        for p in data.get("passes", []):
            out.add(str(p["pass"]), float(p["atol"]), float(p["rtol"]))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return out if out.passes else None


def record(
    metadata: dict[str, str], changed: Iterable[tuple[str, tuple[float, float] | None]]
) -> StatedTolerance | None:
    """Add the non-exact passes among ``changed`` (name, stated (atol, rtol) or None for an exact
    pass) to the record already in ``metadata`` (a model optimized before) and write it back.
    Returns the record, or None when nothing non-exact ran (``metadata`` is then untouched)."""
    stated = parse(metadata.get(KEY)) or StatedTolerance()
    n = len(stated.passes)
    for name, tol in changed:
        if tol is not None:
            stated.add(name, *tol)
    if len(stated.passes) == n:
        return stated if n else None
    metadata[KEY] = stated.to_json()
    return stated


def from_metadata(metadata: Mapping[str, str] | None) -> StatedTolerance | None:
    return parse((metadata or {}).get(KEY))
