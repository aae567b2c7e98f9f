"""Measuring-child driver for partition folders (``memshrink verify``/``profile``).

Why here: the verifier's child (``memshrink.verify.child``) runs one model per process and
measures named stages; a partition folder needs ``PartitionedSession`` instead of one
``InferenceSession``. This function is its driver for the ``partition`` model kind, written
against the child's small API (``start_meter``, ``stage``, ``fault``, ``result``). Stdlib, numpy
and the runtime only, like the child itself.

Stages: ``session`` (streamed: reading the manifest; resident: creating every part's session),
then ``run1..N`` (streamed: each part created, run and released inside the run). The whole-run
peak is the highest stage peak, as for a single model.
"""

from __future__ import annotations

from typing import Any


def run_partitioned(child: Any) -> list[Any]:
    """Run ``child.spec`` (kind ``partition``) and return the last run's outputs."""
    from memshrink.runtime.backends import BackendUnavailable, preload
    from memshrink.runtime.session import PartitionedSession
    from memshrink.verify.child import Unsupported, _load_feeds, cuda_gpu_probe

    spec = child.spec
    backend = spec["backend"]
    mode = spec.get("partition_mode") or spec["model"].get("mode") or "streamed"
    feeds = _load_feeds(spec)
    child.result["runtime"] = {"name": "memshrink.runtime.PartitionedSession", "mode": mode}
    child.result.setdefault("assumptions", {})
    popts = {k: str(v) for k, v in (spec.get("provider_options") or {}).items()}
    gpu_probe, _ = cuda_gpu_probe(child, backend, popts)
    try:
        # the runtime in the baseline, as for a single model (its libraries are not the model's)
        preload(backend, spec.get("provider_options") or None)
    except BackendUnavailable as exc:
        raise Unsupported(str(exc)) from exc
    child.start_meter(gpu_probe)
    try:
        with child.stage("session"):
            sess = PartitionedSession(
                spec["model"]["path"],
                backend,
                mode,
                session_options=spec.get("session_options") or None,
                provider_options=spec.get("provider_options") or None,
            )
        child.fault("after-first-stage")
        names = spec["output_names"] or [o.name for o in sess.get_outputs()]
        outs: list[Any] = []
        for r in range(1, int(spec["runs"]) + 1):
            with child.stage(f"run{r}"):
                outs = sess.run(names, feeds)
    except BackendUnavailable as exc:
        raise Unsupported(str(exc)) from exc
    child.result["runtime"]["providers"] = sess.get_providers()
    child.result["assumptions"].update(
        {
            "partition_mode": mode,
            "parts": len(sess.manifest.parts),
            "session_options": spec.get("session_options") or {},
            "provider_options": spec.get("provider_options") or {},
            "loaded_by": "path (each part)",
            "last_run": sess.last_run.to_dict(),
        }
    )
    return outs
