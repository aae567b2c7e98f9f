"""The estimate a user or the pass manager gets back: stages, planners, timeline, assumptions."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from memshrink.estimate.graph import GraphInfo, ModelView
from memshrink.estimate.lifetimes import Buffer, live_bytes, tensor_buffers
from memshrink.estimate.stages import BackendPrediction


@dataclass
class Estimate:
    """Predicted memory of one model on one backend. All bytes are deltas over an empty process."""

    view: ModelView
    prediction: BackendPrediction
    assumptions: list[str] = field(default_factory=list)

    @property
    def backend(self) -> str:
        return self.prediction.backend

    @property
    def partial(self) -> bool:
        return bool(self.view.graph.unknown)

    @property
    def unknowns(self) -> list[str]:
        return list(self.view.graph.unknown)

    def stage_peaks(self) -> dict[str, int]:
        return {s.name: s.peak for s in self.prediction.stages}

    # ------------------------------------------------------------------ timeline
    def _buffers(self) -> list[Buffer]:
        plan = self.prediction.details.get("plan")
        if plan is not None:
            return list(plan.buffers)
        return tensor_buffers(self._graph(), self.prediction.order)

    def _graph(self) -> GraphInfo:
        """The graph the schedule indexes: the runtime's rewritten one where it has one."""
        return self.prediction.graph or self.view.graph

    def timeline(self) -> list[int]:
        """Activation bytes alive at each step of the schedule (the runtime's own plan)."""
        return live_bytes(self._buffers(), len(self.prediction.order))

    def top_tensors(self, k: int = 10) -> list[dict[str, Any]]:
        tl = self.timeline()
        if not tl:
            return []
        step = max(range(len(tl)), key=tl.__getitem__)
        g = self._graph()
        live = sorted((b for b in self._buffers() if b.live_at(step)), key=lambda b: -b.size)
        out = []
        for b in live[:k]:
            prod = g.nodes[b.producer] if b.producer is not None else None
            out.append(
                {
                    "tensors": b.tensors,
                    "bytes": b.size,
                    "producer": prod.name if prod else None,
                    "op_type": prod.op_type if prod else None,
                    "steps": [b.start, b.end],
                    "output": b.is_output,
                }
            )
        return out

    # ------------------------------------------------------------------ outputs
    def to_dict(self) -> dict[str, Any]:
        p = self.prediction
        w = p.weights
        g = self._graph()
        tl = self.timeline()
        return {
            "backend": p.backend,
            "model": self.view.model_path,
            "stages": {s.name: s.to_dict() for s in p.stages},
            "planners": dict(p.planners),
            "weights": {
                "total": w.total,
                "external": w.external,
                "embedded_in_saved_file": self.view.embedded,
                "ort_prepacked": w.prepacked,
                "ov_reordered": w.ov_reordered,
                "gather_tables": w.gather_tables,
            },
            "timeline": {
                "steps": [g.nodes[i].name for i in p.order],
                "activation_bytes": tl,
                "peak_step": max(range(len(tl)), key=tl.__getitem__) if tl else None,
            },
            "top_tensors": self.top_tensors(),
            "assumptions": self.assumptions + p.assumptions,
            "bindings": {k: list(v) for k, v in self.view.bindings.items()},
            "schedule": p.schedule,
            "partial": self.partial,
            "unknowns": self.unknowns,
            "details": {k: v for k, v in p.details.items() if k != "plan"},
        }

    def format_table(self, verbose: bool = False) -> str:
        """Console text (``estimate/text.py``); ``verbose`` adds planners, glibc modes, assumptions."""
        from memshrink.estimate.text import format_estimate

        return format_estimate(self, verbose)

    def plot(self, path: str | os.PathLike) -> None:
        """PNG of live memory over the schedule: the weights band under the activations."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        tl = self.timeline()
        steady = next((s for s in self.prediction.stages if s.name == "steady_state"), None)
        wb = (steady.weights_anon + steady.weights_file) if steady else 0
        mib = 1 / (1 << 20)
        xs = list(range(len(tl)))
        fig, ax = plt.subplots(figsize=(10, 4))
        ax.fill_between(
            xs, 0, [wb * mib] * len(xs), color="#9db4d0", label="weights resident", step="mid"
        )
        ax.fill_between(
            xs,
            [wb * mib] * len(xs),
            [(wb + v) * mib for v in tl],
            color="#e08a5a",
            label="activations alive",
            step="mid",
        )
        ax.set_xlabel(f"step ({self.prediction.schedule} order)")
        ax.set_ylabel("MiB")
        ax.set_title(f"{os.path.basename(self.view.model_path or 'model')} on {self.backend}")
        ax.legend(loc="upper right")
        fig.tight_layout()
        from memshrink.atomic import write_atomic

        try:
            write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=100))
        finally:
            plt.close(fig)
