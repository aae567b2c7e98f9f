"""The estimate a user or the pass manager gets back: stages, planners, timeline, assumptions."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from memshrink.estimate.backends import BackendPrediction
from memshrink.estimate.graph import GraphInfo, ModelView
from memshrink.estimate.lifetimes import Buffer, live_bytes, tensor_buffers
from memshrink.units import format_bytes


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

    def format_table(self) -> str:
        p = self.prediction
        rows = [
            f"memshrink estimate — backend {p.backend}, schedule {p.schedule}"
            + (
                f" (PARTIAL: {len(self.unknowns)} tensor(s) of unknown size)"
                if self.partial
                else ""
            ),
            f"{'stage':<18}{'peak':>12}{'weights anon':>14}{'weights file':>14}{'activations':>13}"
            f"{'overhead':>11}",
        ]
        host = p.details.get("host") if p.backend == "cuda" else None
        if host is not None:  # device figures, plus the host process beside them
            rows[1] = (
                f"{'stage':<18}{'GPU peak':>12}{'GPU weights':>14}{'':>14}{'GPU activ.':>13}"
                f"{'GPU fixed':>11}{'host peak':>12}"
            )
        for s in p.stages:
            line = (
                f"{s.name:<18}{format_bytes(s.peak):>12}{format_bytes(s.weights_anon):>14}"
                f"{format_bytes(s.weights_file) if host is None else '':>14}"
                f"{format_bytes(s.activations):>13}{format_bytes(s.overhead):>11}"
            )
            if host is not None:
                line += f"{format_bytes(host.get(s.name, 0)):>12}"
            rows.append(line)
        if host is not None:
            rows.append(
                "GPU figures are over an empty CUDA session (the verifier's baseline), so the "
                "fixed part can be negative; host figures are over the process baseline"
            )
            if spread := p.details.get("device_range"):
                rows.append(
                    "GPU peak under other weight copy orders (ORT's differs per process): "
                    + ", ".join(
                        f"{k} {format_bytes(lo)}..{format_bytes(hi)}"
                        for k, (lo, hi) in spread.items()
                    )
                )
        chosen = p.details.get("glibc_modes", {})
        for m in sorted({m for s in p.stages for m in s.modes}):
            rows.append(
                f"  glibc {m} mode (embedded weights, at random per process"
                + ("; the table above" if chosen.get(m, {}).get("predicted") else "")
                + "): "
                + ", ".join(
                    f"{s.name} {format_bytes(s.modes[m])}" for s in p.stages if m in s.modes
                )
            )
        rows.append(
            "planners (activations): "
            + ", ".join(f"{k} {format_bytes(v)}" for k, v in p.planners.items())
        )
        top = self.top_tensors(5)
        if top:
            rows.append("largest tensors alive at the peak:")
            for t in top:
                rows.append(
                    f"  {format_bytes(t['bytes']):>10}  {t['tensors'][0]}  ← {t['op_type']} {t['producer']}"
                )
        if self.partial:
            rows.append(
                "unknown sizes (counted as 0): "
                + ", ".join(self.unknowns[:10])
                + (" …" if len(self.unknowns) > 10 else "")
            )
        return "\n".join(rows)

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
        fig.savefig(os.fspath(path), dpi=100)
        plt.close(fig)
