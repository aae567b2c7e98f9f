"""How the pipeline will store the weights when it saves: what an estimate inside a pass needs.

Why: ONNX Runtime copies embedded weights to the heap and frees the model proto after session
creation; the arena regions of the first run then land partly in those freed heap holes, which
adds no RSS. With external data the weights are mapped and no holes exist, so the same
activation plan measures higher (U-Net after ``chunk``: 368 vs 400 MiB predicted). A pass that
predicts the memory of its own output must therefore predict it in the layout it will be saved
in: ``external-data`` records that layout (``META_SAVE``) when it runs, which is why the
``all`` preset runs it before the activation passes. The decision itself is the writer's
(``writer.decide_external``: pass policy, then the input's layout, then the 2 GB rule), so a
pass predicts exactly the file ``save`` will write.
"""

from __future__ import annotations

import onnx_ir as ir

from memshrink.writer import decide_external


def saved_embedded(model: ir.Model) -> bool:
    """Whether the saved file will hold its weights inline (the writer's own decision)."""
    return not decide_external(model)


def clone_with_meta(model: ir.Model) -> ir.Model:
    """``model.clone()`` keeping ``model.meta`` (the save policy, the source path), which
    ``clone`` drops: a trial rewrite must be predicted in the same layout as the model."""
    trial = model.clone()
    for key, value in model.meta.items():
        trial.meta[key] = value
    return trial
