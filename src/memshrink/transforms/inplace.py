"""``inplace``: declare complete, consistent shapes so ONNX Runtime's own buffer reuse fires.

Why: ORT's allocation planner lets an output take an input's buffer (in-place kernels: Relu,
Sigmoid, Cast, Softmax, ...) or a freed buffer only when both tensors have the same element
size and an *identical declared* ``TensorShapeProto``: equal ``dim_value``, or equal non-empty
``dim_param``. A dim that shape inference leaves unknown, or names with a fresh ``unk__N``
symbol, blocks every reuse of that tensor. This pass infers each intermediate's shape under two
different input bindings and declares it in ``value_info``:

* a dim equal under both bindings is static (``dim_value``);
* a dim that varies is named after the input symbol it tracks (same values under both
  bindings), else ``ms_<v1>_<v2>``, so dims computed the same way share one name;
* static dims and dims named after an input symbol are kept; exporter-made or ``unk__N``
  names are replaced, so that two tensors of equal shape always declare equal shapes.

Models with only static inputs need one binding. The pass also records ORT's in-place plan as
node ``metadata_props`` (``memshrink.inplace = "<input> -> <output>"``), never as attributes a
runtime would reject. It rewrites only when the predicted ORT peak (its allocation plan over the
DEFAULT order) drops and the whole estimate's highest stage does not rise. Outputs are bit-identical: only type annotations change.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir

from memshrink.estimate import ort as ortsim
from memshrink.estimate.graph import GraphInfo, ModelView, SymShape, build_view
from memshrink.estimate.schedule import ort_default
from memshrink.manager import Pass, PassContext, PassResult
from memshrink.transforms import register
from memshrink.transforms.predicted import predicted_peak
from memshrink.transforms.reorder import bound_view

META_KEY = "memshrink.inplace"


def _second_view(model: ir.Model, view: ModelView) -> ModelView | None:
    """The view under a second binding of every symbolic input dim (2d + 1), or None."""
    shapes: dict[str, list[int]] = {}
    changed = False
    for name, decl in view.declared_inputs:
        bound = list(view.bindings.get(name, ()))
        for k, d in enumerate(decl):
            if not isinstance(d, int) and k < len(bound):
                bound[k] = 2 * bound[k] + 1
                changed = True
        shapes[name] = bound
    if not changed:
        return None
    try:
        return build_view(model, shapes=shapes)
    except Exception:  # noqa: BLE001 - a model that rejects the probe keeps its shapes
        return None


def _symbols(view: ModelView, second: ModelView | None) -> dict[tuple[int, int], str]:
    """(value under binding 1, value under binding 2) -> the input symbol with those values."""
    out: dict[tuple[int, int], str] = {}
    if second is None:
        return out
    for name, decl in view.declared_inputs:
        b1, b2 = view.bindings.get(name, ()), second.bindings.get(name, ())
        for k, d in enumerate(decl):
            if isinstance(d, str) and d and k < len(b1) and k < len(b2):
                out.setdefault((b1[k], b2[k]), d)
    return out


def declared_shapes(view: ModelView, second: ModelView | None) -> dict[str, SymShape]:
    """New complete shapes for activations whose declared shape is incomplete."""
    g = view.graph
    syms = _symbols(view, second)
    names = {d for _, decl in view.declared_inputs for d in decl if isinstance(d, str)}
    out: dict[str, SymShape] = {}
    for name, t in g.tensors.items():
        if t.kind != "activation" or t.elem_type == 0 or t.elem_type == 8:
            continue
        if name in g.bounded:  # a data-dependent size: its bound must never be declared
            continue
        sym = t.sym_shape
        c1 = t.shape
        c2 = c1 if second is None else _concrete(second.graph, name)
        if c1 is None or c2 is None or len(c1) != len(c2):
            continue
        if sym is not None and len(sym) != len(c1):
            continue
        dims: list[int | str | None] = []
        change = False
        for k, (v1, v2) in enumerate(zip(c1, c2, strict=True)):
            old = sym[k] if sym is not None else None
            if isinstance(old, int) or (isinstance(old, str) and old in names):
                dims.append(old)
                continue
            new = v1 if v1 == v2 else syms.get((v1, v2), f"ms_{v1}_{v2}")
            change = change or new != old
            dims.append(new)
        if change:
            out[name] = tuple(dims)
    return out


def _concrete(g: GraphInfo, name: str) -> tuple[int, ...] | None:
    t = g.tensors.get(name)
    return t.shape if t is not None else None


def _with_shapes(g: GraphInfo, shapes: Mapping[str, SymShape]) -> GraphInfo:
    tensors = dict(g.tensors)
    for name, shp in shapes.items():
        t2 = copy.copy(tensors[name])
        t2.sym_shape = shp
        tensors[name] = t2
    return GraphInfo(g.nodes, tensors, g.inputs, g.outputs, g.initializers, g.unknown)


def _steady(g: GraphInfo, order: list[int]) -> int:
    """Predicted steady-state arena bytes (plan, BFC arena, memory pattern), plus live peak
    as a tie-breaker scale: reuse changes the arena, not the bytes alive together."""
    sim = ortsim.simulate(ortsim.plan(g, order), len(order))
    return int(sim.steady_state)


def inplace_plan(g: GraphInfo, order: list[int]) -> dict[int, tuple[str, str]]:
    """Node index -> (input, output) pairs ORT's planner runs in place (alias ops excluded)."""
    plan = ortsim.plan(g, order)
    out: dict[int, tuple[str, str]] = {}
    for tensor, kind in plan.kinds.items():
        if kind == "inplace":
            t = g.tensors[tensor]
            if t.producer is not None:
                out[t.producer] = (plan.reused[tensor], tensor)
    return out


@register
class InplacePass(Pass):
    name = "inplace"
    summary = (
        "Declare complete, consistent intermediate shapes so ORT reuses buffers in place and "
        "from its free list; record the in-place plan in node metadata."
    )
    targets = ("activations",)
    exact = True

    @dataclass
    class Options:
        record: bool = True  # write the in-place plan into node metadata_props

    def run(self, model: ir.Model, context: PassContext) -> PassResult:
        view = bound_view(model, context)
        if isinstance(view, str):
            return PassResult(False, {"reason": view})
        g = view.graph
        second = _second_view(model, view)
        shapes = declared_shapes(view, second)
        order = ort_default(g)
        before = _steady(g, order)
        g2 = _with_shapes(g, shapes)
        after = _steady(g2, order)
        plan = inplace_plan(g2, order)
        kinds: dict[str, int] = {}
        for k in ortsim.plan(g2, order).kinds.values():
            kinds[k] = kinds.get(k, 0) + 1
        stats: dict[str, Any] = {
            "shapes_completed": len(shapes),
            "predicted_peak_before": before,
            "predicted_peak_after": after,
            "inplace_nodes": len(plan),
            "plan_kinds": kinds,
        }
        if not shapes or after >= before:
            stats["reason"] = (
                "every intermediate shape is already complete"
                if not shapes
                else "completing shapes does not lower the predicted ORT peak"
            )
            return PassResult(False, stats)
        values = {v.name: v for node in model.graph for v in node.outputs if v.name}
        # the whole prediction too (ORT's own graph rewrites, the memory-pattern block): the
        # plan over the file's graph can drop while the session's steady state rises
        # (tf2onnx's Keras transformer: plan 17.6 -> 17.4 MiB, the estimate 30.3 -> 44.7,
        # measured 32.1 -> 42.5)
        full_before = predicted_peak(model, context)
        kept = {name: (v.dtype, v.shape) for name, v in values.items() if name in shapes}
        for name, shp in shapes.items():
            v = values.get(name)
            if v is None:
                continue
            if v.dtype is None and g.tensors[name].elem_type:
                v.dtype = ir.DataType(g.tensors[name].elem_type)
            v.shape = ir.Shape([d if d is not None else None for d in shp])
        full_after = predicted_peak(model, context) if full_before is not None else None
        # on the CUDA EP the plan judged above is not the one that runs (its Softmax and Cast
        # kernels never run in place, ``ort.CUDA_MAY_INPLACE_OPS``), yet the declared shapes
        # change ORT's CUDA plan all the same: an fp16 GPT-2 predicted 33 -> 33 MiB measured
        # run 3 14 -> 30 (session 15). So there the CUDA estimate itself must drop.
        if (
            full_after is not None
            and full_before is not None
            and (
                full_after >= full_before if context.backend == "cuda" else full_after > full_before
            )
        ):
            for name, (dtype, shape) in kept.items():
                values[name].dtype, values[name].shape = dtype, shape  # type: ignore[assignment]
            stats["predicted_stage_peak_before"] = full_before
            stats["predicted_stage_peak_after"] = full_after
            verb = "does not lower" if full_after == full_before else "raises"
            stats["reason"] = (
                f"completing shapes lowers the allocation plan but {verb} the predicted "
                f"{context.backend or 'ort'} peak ({full_before / 2**20:.1f} -> "
                f"{full_after / 2**20:.1f} MiB)"
            )
            return PassResult(False, stats)
        if self.options.record:
            nodes = list(model.graph)
            for idx, (src, dst) in plan.items():
                nodes[idx].metadata_props[META_KEY] = f"{src} -> {dst}"
        return PassResult(True, stats)
