"""Fuzzing: hypothesis-generated random DAGs through every registered pass and ``all``.

Graphs mix element-wise ops, broadcasting against weights, MatMul/Gemm, Conv,
Reshape/Transpose, Concat/Split, Slice, reductions and an ``If`` with two bodies (outer-scope
reads, initializers inside the bodies), plus what the weight passes target: duplicated
weights, dead branches, large ``Constant`` nodes. For each graph and pass: outputs under ONNX
Runtime bit-identical to the original's (or within the pass's stated tolerance), the rewritten
model valid (``check_model``, and ``onnx.checker`` with shape inference on the saved file),
and the estimator's plan of it valid: best-fit placements of the buffers ORT would allocate
never overlap while alive, and no planner total is below the lower bound.

Failing examples found so far are kept as ``@example``\\ s / regression tests below.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnx_ir as ir
import reliability_harness as h
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

MAX_EXAMPLES = int(os.environ.get("MEMSHRINK_FUZZ_EXAMPLES", "6"))
MAX_ELEMENTS = 2048
OPS = (
    "unary",
    "binary",
    "matmul",
    "gemm",
    "conv",
    "reshape",
    "transpose",
    "concat",
    "split",
    "slice",
    "reduce",
    "if",
    "dup_weight",
    "dead",
    "constant",
)


class _Builder:
    """Grows a valid opset-18 graph one random op at a time, tracking every value's shape."""

    def __init__(self, draw: st.DrawFn, shape: list[int]) -> None:
        self.draw = draw
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.pool: list[tuple[str, list[int]]] = [("x", shape)]
        self.count = 0
        self.rng = np.random.default_rng(draw(st.integers(0, 2**16)))
        self.uses_cond = False

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def weight(self, shape: list[int], scale: float = 1.0) -> str:
        name = self.name("w")
        arr = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def ints(self, values: list[int]) -> str:
        name = self.name("i")
        self.inits.append(numpy_helper.from_array(np.array(values, np.int64), name))
        return name

    def pick(self) -> tuple[str, list[int]]:
        # prefer recent values: deeper graphs
        k = self.draw(st.integers(0, min(3, len(self.pool) - 1)))
        return self.pool[-1 - k]

    def emit(self, op: str, inputs: list[str], shape: list[int], **attrs: object) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        self.pool.append((out, shape))
        return out

    # ------------------------------------------------------------------ ops
    def step(self, op: str) -> None:
        a, shape = self.pick()
        rank = len(shape)
        d = self.draw
        if op == "unary":
            self.emit(d(st.sampled_from(["Relu", "Tanh", "Sigmoid", "Neg", "Abs"])), [a], shape)
        elif op == "binary":
            kind = d(st.sampled_from(["Add", "Mul", "Sub"]))
            same = [n for n, s in self.pool if s == shape and n != a]
            if same and d(st.booleans()):
                other = d(st.sampled_from(same))
            else:  # a weight broadcast against a: some dims 1, maybe fewer leading dims
                keep = d(st.integers(1, rank))
                bshape = [s if d(st.booleans()) else 1 for s in shape[rank - keep :]]
                other = self.weight(bshape)
            ins = [a, other] if d(st.booleans()) else [other, a]
            self.emit(kind, ins, shape)
        elif op == "matmul":
            k, m = shape[-1], d(st.integers(1, 6))
            if np.prod(shape[:-1]) * m <= MAX_ELEMENTS:
                w = self.weight([k, m], 1 / np.sqrt(k))
                self.emit("MatMul", [a, w], [*shape[:-1], m])
        elif op == "gemm" and rank == 2:
            k, n = shape[1], d(st.integers(1, 6))
            trans = d(st.booleans())
            w = self.weight([n, k] if trans else [k, n], 1 / np.sqrt(k))
            self.emit("Gemm", [a, w, self.weight([n])], [shape[0], n], transB=int(trans))
        elif op == "conv" and rank == 4:
            m, kernel = d(st.integers(1, 4)), d(st.sampled_from([1, 3]))
            out_shape = [shape[0], m, shape[2], shape[3]]
            if np.prod(out_shape) <= MAX_ELEMENTS:
                w = self.weight([m, shape[1], kernel, kernel], 1 / np.sqrt(shape[1] * kernel**2))
                ins = [a, w] + ([self.weight([m])] if d(st.booleans()) else [])
                pad = kernel // 2
                self.emit("Conv", ins, out_shape, pads=[pad] * 4)
        elif op == "reshape" and rank >= 2:
            flat = [int(np.prod(shape[:-1])), shape[-1]] if d(st.booleans()) else [-1]
            out_shape = flat if flat != [-1] else [int(np.prod(shape))]
            self.emit("Reshape", [a, self.ints(flat)], out_shape)
        elif op == "transpose":
            perm = d(st.permutations(list(range(rank))))
            self.emit("Transpose", [a], [shape[p] for p in perm], perm=list(perm))
        elif op == "concat":
            axis = d(st.integers(0, rank - 1))
            if np.prod(shape) * 2 <= MAX_ELEMENTS:
                same = [n for n, s in self.pool if s == shape]
                other = d(st.sampled_from(same))
                out_shape = list(shape)
                out_shape[axis] *= 2
                self.emit("Concat", [a, other], out_shape, axis=axis)
        elif op == "split":
            axes = [i for i, s in enumerate(shape) if s >= 2 and s % 2 == 0]
            if axes:
                axis = d(st.sampled_from(axes))
                half = list(shape)
                half[axis] //= 2
                outs = [self.name("split"), self.name("split")]
                self.nodes.append(
                    helper.make_node("Split", [a, self.ints([half[axis]] * 2)], outs, axis=axis)
                )
                self.pool += [(outs[0], half), (outs[1], list(half))]
        elif op == "slice":
            axis = d(st.integers(0, rank - 1))
            size = shape[axis]
            start = d(st.integers(0, size - 1))
            end = d(st.integers(start + 1, size))
            step = d(st.sampled_from([1, 2]))
            out_shape = list(shape)
            out_shape[axis] = len(range(start, end, step))
            ins = [a, self.ints([start]), self.ints([end]), self.ints([axis]), self.ints([step])]
            self.emit("Slice", ins, out_shape)
        elif op == "reduce":
            axis = d(st.integers(0, rank - 1))
            keep = d(st.booleans()) or rank == 1
            out_shape = list(shape)
            if keep:
                out_shape[axis] = 1
            else:
                del out_shape[axis]
            kind = d(st.sampled_from(["ReduceSum", "ReduceMean", "ReduceMax"]))
            self.emit(kind, [a, self.ints([axis])], out_shape, keepdims=int(keep))
        elif op == "if":
            self.uses_cond = True
            out = self.name("if")
            branches = []
            for branch, act, comb in (("then", "Relu", "Add"), ("else", "Sigmoid", "Mul")):
                w = numpy_helper.from_array(
                    self.rng.standard_normal(shape[-1:]).astype(np.float32), self.name(branch)
                )
                t, r = self.name(branch), self.name(branch)
                body = helper.make_graph(
                    [helper.make_node(act, [a], [t]), helper.make_node(comb, [t, w.name], [r])],
                    self.name(branch),
                    [],
                    [helper.make_tensor_value_info(r, TensorProto.FLOAT, shape)],
                    [w],
                )
                branches.append(body)
            self.nodes.append(
                helper.make_node(
                    "If", ["cond"], [out], then_branch=branches[0], else_branch=branches[1]
                )
            )
            self.pool.append((out, shape))
        elif op == "dup_weight":  # the same bytes under two names: dedup-weights' target
            w = self.weight(shape[-1:])
            (src,) = [t for t in self.inits if t.name == w]
            dup = onnx.TensorProto()
            dup.CopyFrom(src)
            dup.name = self.name("dup")
            self.inits.append(dup)
            self.emit("Add", [self.emit("Add", [a, w], shape), dup.name], shape)
        elif op == "dead":  # reaches no output: prune's target
            name = self.name("dead")
            self.nodes.append(helper.make_node("Exp", [a], [name]))
        elif op == "constant":  # a large Constant node: external-data moves it out
            name = self.name("const")
            arr = self.rng.standard_normal(shape).astype(np.float32)
            self.nodes.append(
                helper.make_node("Constant", [], [name], value=numpy_helper.from_array(arr))
            )
            self.emit("Add", [a, name], shape)


@st.composite
def random_models(draw: st.DrawFn) -> onnx.ModelProto:
    shape = [
        draw(st.integers(1, 2)),
        draw(st.integers(1, 4)),
        draw(st.integers(2, 6)),
        draw(st.integers(2, 6)),
    ]
    b = _Builder(draw, shape)
    for op in draw(st.lists(st.sampled_from(OPS), min_size=2, max_size=14)):
        b.step(op)
    if len(b.pool) == 1:
        b.step("unary")
    candidates = [n for n, _ in b.pool[1:]]
    outs = [candidates[-1]] + draw(
        st.lists(st.sampled_from(candidates), max_size=2, unique=True).map(
            lambda xs: [x for x in xs if x != candidates[-1]]
        )
    )
    shapes = dict(b.pool)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    if b.uses_cond:
        inputs.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    graph = helper.make_graph(
        b.nodes,
        "fuzz",
        inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o]) for o in outs],
        b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)  # the generator itself must be right
    return model


def _feeds(model: onnx.ModelProto, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = []
    for vi in model.graph.input:
        if vi.type.tensor_type.elem_type == TensorProto.BOOL:
            feeds.append(np.array(bool(seed % 2)))
        else:
            dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            feeds.append(rng.standard_normal(dims).astype(np.float32))
    return feeds


def check_plans(model: ir.Model) -> None:
    """The estimator's view of the rewritten model: a valid plan, totals above the bound."""
    from memshrink.estimate import estimate
    from memshrink.estimate.lifetimes import lower_bound
    from memshrink.estimate.planners import best_fit, check_no_overlap, greedy_by_size

    est = estimate(model, backend="ort")
    plan = est.prediction.details.get("plan")
    assert plan is not None, "the ORT prediction carries no plan"
    bufs = [b for b in plan.buffers if b.size]
    for b in bufs:
        assert 0 <= b.start <= b.end, b
    n_steps = len(est.prediction.order)
    bound = lower_bound(bufs, n_steps)
    for total, placements in (best_fit(bufs, align=64), greedy_by_size(bufs)):
        assert check_no_overlap(placements), "two live buffers share bytes"
        assert total >= bound
    assert all(v >= 0 for v in est.stage_peaks().values()), est.stage_peaks()


def _fuzz_case(model: onnx.ModelProto, seed: int) -> h.Case:
    return h.Case(
        f"fuzz-{seed}", "fuzz", 1e-3, 1e-7, model=model, data_sets=[(_feeds(model, seed), [])]
    )


def _check(model: onnx.ModelProto, seed: int) -> None:
    case = _fuzz_case(model, seed)
    # the reference is the original's own ORT output: fill it so the suite check is meaningful
    baseline = h.run_ort_proto(model, case.data_sets)
    case.data_sets = [(case.data_sets[0][0], baseline[0])]
    outcomes = h.run_case(case, inspect=check_plans, full_check=True)
    bad = [o for o in outcomes if o.status not in ("pass", "known-bug")]
    assert not bad, (
        "\n".join(f"{o.pass_name}: {o.status}: {o.reason}" for o in bad)
        + "\n"
        + str(helper.printable_graph(model.graph))
    )


@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(random_models(), st.integers(0, 1000))
def test_random_graphs_every_pass(model: onnx.ModelProto, seed: int) -> None:
    _check(model, seed)
