"""How the pipeline will store the weights when it saves: what an estimate inside a pass needs.

Why: ONNX Runtime copies embedded weights to the heap and frees the model proto after session
creation; the arena regions of the first run then land partly in those freed heap holes, which
adds no RSS. With external data the weights are mapped and no holes exist, so the same
activation plan measures higher (U-Net after ``chunk``: 368 vs 400 MiB predicted). A pass that
predicts the memory of its own output must therefore predict it in the layout it will be saved
in: ``external-data`` records that layout (``META_SAVE``) when it runs, which is why the
``all`` preset runs it before the activation passes.
"""

from __future__ import annotations

import onnx_ir as ir

from memshrink.model import META_SAVE


def saved_embedded(model: ir.Model) -> bool | None:
    """False when the save policy writes weights to external data; None: as loaded."""
    policy = model.meta.get(META_SAVE) or {}
    return False if isinstance(policy, dict) and policy.get("external") else None


def clone_with_meta(model: ir.Model) -> ir.Model:
    """``model.clone()`` keeping ``model.meta`` (the save policy, the source path), which
    ``clone`` drops: a trial rewrite must be predicted in the same layout as the model."""
    trial = model.clone()
    for key, value in model.meta.items():
        trial.meta[key] = value
    return trial
