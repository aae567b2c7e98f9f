"""``external-data``: weights in an aligned external file, loaded by path.

What the runtimes reward (MEASURING.md): ONNX Runtime memory-maps external data instead
of copying an embedded ModelProto to the heap (BERT-base session creation 684 → 388 MiB);
OpenVINO's reader maps it too. The pass sets the save policy (threshold, 64 KiB alignment,
4 KiB for smaller tensors) that ``memshrink.writer`` applies when the model is written, and
turns large ``Constant`` nodes into initializers so their tensors can move out as well.

On the CUDA EP the trade is different (docs/compare.md, "CUDA EP"): the weights are copied to
the GPU either way, so mapping the file saves the host nothing, while ONNX Runtime's external
loading costs a transient ~128 MiB at session creation (MobileNetV2, 14 MiB of weights: host
290 -> 407 MiB measured). Under ``optimize --backend cuda`` the pass therefore keeps the weights
embedded when the estimator predicts a lower host peak at session creation for that, without
a higher GPU stage and without raising the host process peak (5 % and 8 MiB, ``chooser``'s
threshold): embedded costs the weights once plus 0.25x kept heap, external a constant 128 MiB.

Weights read inside a ``Loop`` or ``Scan`` body stay embedded (``loop_weights_inline``): ONNX
Runtime's OpenVINO EP (1.24) resolves their external-data location against the process's
working directory, not the model's folder, and fails to compile ("invalid external data")
unless run from that folder; the embedded original runs (real-model sweep, scan-cumulative).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import onnx_ir as ir

from memshrink.irgraphs import graphs
from memshrink.manager import Pass, PassContext, PassResult
from memshrink.model import META_SAVE, META_SOURCE, iter_tensor_slots
from memshrink.transforms import register
from memshrink.transforms.chunking.choice import RISE, RISE_BYTES
from memshrink.transforms.ov_folded import folded_weights
from memshrink.writer import DEFAULT_THRESHOLD

MiB = 1 << 20
#: The writer's protobuf limit with its margin: an embedded save must stay under it.
EMBED_LIMIT = int((2**31 - 1) * 0.9)


def _constant_to_initializer(graph: ir.Graph, node: ir.Node, threshold: int) -> int:
    """Replace ``Constant(value=T)`` by an initializer when T is large; returns bytes moved."""
    if (
        node.op_type != "Constant"
        or node.domain not in ("", "ai.onnx")
        or len(node.attributes) != 1
    ):
        return 0
    attr = node.attributes.get("value")
    if attr is None or attr.type != ir.AttributeType.TENSOR or attr.value is None:
        return 0
    tensor = attr.value
    if tensor.nbytes < threshold:
        return 0
    output = node.outputs[0]
    if output.name is None or output.name in graph.initializers:
        return 0
    if output in graph.outputs:
        return 0  # graph outputs must stay produced by a node in older IR versions
    init = ir.Value(
        name=output.name,
        shape=ir.Shape(tensor.shape),
        type=ir.TensorType(tensor.dtype),
        const_value=tensor,
    )
    graph.remove(node, safe=False)
    output.replace_all_uses_with(init)
    graph.register_initializer(init)
    return tensor.nbytes


_LOOP_OPS = ("Loop", "Scan")


def _embedded_in_source(value: ir.Value, source: str | None) -> bool:
    """Whether the weight was embedded in the file it was loaded from (the loader maps big
    embedded tensors as external tensors into the .onnx itself). One that already lived in a
    data file stays there: embedding it would cost memory, and the original had the EP's
    problem too."""
    t = value.const_value
    if not isinstance(t, ir.ExternalTensor):
        return True
    return source is not None and os.path.realpath(t.path) == source


def loop_body_weights(model: ir.Model) -> set[str]:
    """Names of the initializers (of any scope) read by a node inside a Loop or Scan body,
    nested bodies included, that the source file embedded."""
    source = (model.meta.get(META_SOURCE) or {}).get("path")
    source = os.path.realpath(source) if source else None
    names: set[str] = set()
    for graph in graphs(model):
        for node in graph:
            if node.op_type not in _LOOP_OPS or node.domain not in ("", "ai.onnx"):
                continue
            for attr in node.attributes.values():
                if attr.type != ir.AttributeType.GRAPH or attr.value is None:
                    continue
                for inner in ir.traversal.RecursiveGraphIterator(attr.value):
                    for v in inner.inputs:
                        if (
                            v is not None
                            and v.name
                            and v.is_initializer()
                            and _embedded_in_source(v, source)
                        ):
                            names.add(v.name)
    return names


@register
class ExternalDataPass(Pass):
    name = "external-data"
    summary = "Store weights above a size threshold in OUT.data at 64 KiB-aligned offsets, small ones at 4 KiB (mapped, not copied, at load)."
    targets = ("weights", "session-creation")
    exact = True

    @dataclass
    class Options:
        # under a page (4 KiB) a tensor stays embedded: mapped it costs a whole page
        # (``writer.DEFAULT_THRESHOLD``; 3,000 x 1 KiB: ORT CPU +39.4 -> +32.1 MiB)
        threshold: int = DEFAULT_THRESHOLD
        alignment: int = 65536
        # tensors smaller than ``alignment`` start on a page instead (``writer.tensor_offset``):
        # their 64 KiB padding became resident pages in OpenVINO's mapping (multibranch ``all``:
        # +7 MiB); set it equal to ``alignment`` for the old layout
        small_alignment: int = 4096
        constants_to_initializers: bool = True
        loop_weights_inline: bool = True
        # weights OpenVINO folds into new Constants (Conv + BN / Mul by a constant, scaled FC)
        # to OUT.folded.data: that file's mapping goes after compile_model, so their pages do
        # not stay resident (EfficientFormer-L1: 156 -> 140 MiB measured; ``ov_folded``)
        folded_file: bool = True

    def run(self, model: ir.Model, context: PassContext) -> PassResult:
        o = self.options
        for key in ("alignment", "small_alignment"):
            value = getattr(o, key)
            if value < 1 or value & (value - 1):
                from memshrink.errors import UsageError

                raise UsageError(f"external-data.{key} must be a power of two, got {value}")
        moved_constants = moved_constant_bytes = 0
        if o.constants_to_initializers and model.ir_version >= 4:
            for graph in graphs(model):
                for node in list(graph):
                    moved = _constant_to_initializer(graph, node, o.threshold)
                    if moved:
                        moved_constants += 1
                        moved_constant_bytes += moved
        inline = sorted(loop_body_weights(model)) if o.loop_weights_inline else []
        tensors = [t for t, _ in iter_tensor_slots(model)]
        big = [t for t in tensors if t.nbytes >= o.threshold and t.name not in inline]
        previous = model.meta.get(META_SAVE) or {}
        policy: dict = {
            "external": True,
            "threshold": o.threshold,
            "alignment": o.alignment,
            "small_alignment": o.small_alignment,
        }
        if inline:
            policy["inline"] = inline
        folded: list[str] = []
        if o.folded_file:
            big_names = {t.name for t in big}
            folded = sorted(n for n in folded_weights(model.graph) if n in big_names)
            if folded:
                policy["folded"] = folded
        cuda_choice: dict = {}
        if context.deploy_only and context.backend == "cuda":
            cuda_choice = cuda_embedded_choice(model, context, sum(t.nbytes for t in tensors))
            if cuda_choice.get("embedded"):
                policy = {"external": False}
                big = []
        model.meta[META_SAVE] = policy
        return PassResult(
            modified=moved_constants > 0 or previous != policy,
            stats={
                "tensors_external": len(big),
                "bytes_external": sum(t.nbytes for t in big),
                "tensors_inline": len(tensors) - len(big),
                "constants_to_initializers": moved_constants,
                "constant_bytes_moved": moved_constant_bytes,
                "alignment": o.alignment,
                "small_alignment": o.small_alignment,
                **({"loop_weights_inline": len(inline)} if inline else {}),
                **({"cuda_layout": cuda_choice} if cuda_choice else {}),
                **(
                    {
                        "tensors_folded_file": len(folded),
                        "bytes_folded_file": sum(t.nbytes for t in big if t.name in folded),
                    }
                    if folded
                    else {}
                ),
            },
        )


def cuda_embedded_choice(model: ir.Model, context: PassContext, total: int) -> dict:
    """Whether the CUDA EP is predicted to hold less with the weights embedded; the figures
    (MiB) and the reason. Embedded when session creation's host peak is lower, no GPU stage is
    higher and the host process peak does not rise (by more than 5 % and 8 MiB)."""
    from memshrink.errors import MemshrinkError
    from memshrink.transforms.predicted import cuda_layout_figures

    if total > EMBED_LIMIT:
        return {"embedded": False, "reason": "over the protobuf limit embedded"}
    try:
        ext = cuda_layout_figures(model, context, embedded=False)
        emb = cuda_layout_figures(model, context, embedded=True)
    except MemshrinkError as exc:  # no prediction: the usual external layout
        return {"embedded": False, "reason": f"no CUDA prediction: {exc}"}
    ext_peak, emb_peak = max(ext["host"].values()), max(emb["host"].values())
    session = "session_creation"
    out: dict = {
        "host_session_mib": [
            round(ext["host"][session] / MiB, 1),
            round(emb["host"][session] / MiB, 1),
        ],
        "host_peak_mib": [round(ext_peak / MiB, 1), round(emb_peak / MiB, 1)],
    }
    if emb["host"][session] >= ext["host"][session]:
        out["reason"] = "external data is predicted no higher at session creation"
    elif any(emb["gpu"][k] > v for k, v in ext["gpu"].items()):
        out["reason"] = "embedded is predicted to raise a GPU stage"
    elif emb_peak > max(ext_peak * (1 + RISE), ext_peak + RISE_BYTES):
        out["reason"] = "embedded is predicted to raise the host process peak"
    else:
        out["reason"] = "embedded is predicted lower at session creation (external, embedded)"
        out["embedded"] = True
    out.setdefault("embedded", False)
    return out
