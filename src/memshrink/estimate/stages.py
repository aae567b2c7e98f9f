"""The prediction's containers, apart from the rules that fill them.

Every backend's rules module (``backends.py`` for ORT CPU, ``openvino.py``, ``ort_openvino.py``,
``cuda.py``) returns these; keeping them here lets those modules import them without importing
``backends``, which in turn imports them (the cycle made ``import memshrink.estimate.openvino``
fail as a first import).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memshrink.estimate.graph import GraphInfo
from memshrink.estimate.weights import WeightSplit


@dataclass
class Stage:
    name: str
    weights_anon: int = 0
    weights_file: int = 0
    activations: int = 0
    overhead: int = 0
    notes: list[str] = field(default_factory=list)
    # the stage's peak in every mode the runtime lands in at random per process (ORT CPU,
    # embedded weights: glibc's ``pinned`` / ``consolidated``); empty when it has one
    modes: dict[str, int] = field(default_factory=dict)

    @property
    def peak(self) -> int:
        return self.weights_anon + self.weights_file + self.activations + self.overhead

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "peak": self.peak,
            "weights_anon": self.weights_anon,
            "weights_file": self.weights_file,
            "activations": self.activations,
            "overhead": self.overhead,
            "notes": self.notes,
        }
        if self.modes:
            out["modes"] = dict(self.modes)
        return out


@dataclass
class BackendPrediction:
    backend: str
    schedule: str
    order: list[int]
    stages: list[Stage]
    planners: dict[str, int]
    weights: WeightSplit
    details: dict[str, Any]
    assumptions: list[str]
    graph: GraphInfo | None = None  # the graph the runtime runs, when it rewrites the model
