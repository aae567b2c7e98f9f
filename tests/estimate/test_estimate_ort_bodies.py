"""ORT CPU weights read inside If bodies (``ort_bodies``): an outer weight packed by a branch's
MatMul costs what a main-graph MatMul's does; a branch's own weight costs more.

Measured (fresh processes, a 4 MiB [1024, 1024] W; docs/estimate.md, "Session 13: weights
inside bodies"): external W, MatMul in the main graph session / run 1 17.3 / 13.9 MiB, in one
If branch 17.5 / 14.2 (main predicted 17.9 / 14.9 for both now; the branch was 9.9 / 14.9);
a branch's own external W +4.0 MiB file from session creation on, its own embedded W +8.0
MiB anon beyond a main-graph one.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from fixtures_onnx import save_model_as
from onnx import helper, numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.ort_bodies import BODY_EMBEDDED_EXTRA_COPIES, flatten_bodies

N = 1024
W_BYTES = N * N * 4
MiB = 1 << 20


def _vi(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, 1, [2, N])


def _w(name: str) -> onnx.TensorProto:
    return numpy_helper.from_array(np.ones((N, N), np.float32), name)


def _model(kind: str) -> onnx.ModelProto:
    """``main``: y = x @ W; ``outer``: an If whose then-branch computes x @ W with the outer W
    (else: -x); ``own``: the same with W declared inside the then-branch."""
    zero = numpy_helper.from_array(np.array(0, np.float32), "zero")
    if kind == "main":
        nodes, inits = [helper.make_node("MatMul", ["x", "W"], ["y"])], [_w("W")]
    else:
        w = "Wt" if kind == "own" else "W"
        then = helper.make_graph(
            [helper.make_node("MatMul", ["x", w], ["ty"])], "t", [], [_vi("ty")],
            [_w("Wt")] if kind == "own" else [],
        )  # fmt: skip
        other = helper.make_graph([helper.make_node("Neg", ["x"], ["ey"])], "e", [], [_vi("ey")])
        nodes = [
            helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
            helper.make_node("Greater", ["s", "zero"], ["c"]),
            helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
        ]
        inits = [zero] + ([] if kind == "own" else [_w("W")])
    g = helper.make_graph(nodes, "g", [_vi("x")], [_vi("y")], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def _save(tmp_path, kind: str, external: bool) -> str:
    return save_model_as(_model(kind), tmp_path, kind, external)


def _stages(path: str) -> dict:
    return {s.name: s for s in estimate(path, backend="ort").prediction.stages}


def test_flatten_appends_body_nodes_and_drops_the_implicit_use(tmp_path):
    g = build_view(_save(tmp_path, "outer", True)).graph
    flat, bodies = flatten_bodies(g, embedded=False)
    assert len(flat.nodes) == 3 + 2  # If + ReduceSum + Greater, then MatMul and Neg
    consumers = [flat.nodes[c].op_type for c in flat.tensors["W"].consumers]
    assert consumers == ["MatMul"]  # the If's implicit use is not a reader of its own
    assert bodies.embedded == 0 and bodies.external_packed == 0
    assert flatten_bodies(g, embedded=False)[0] is not g
    main = build_view(_save(tmp_path, "main", True)).graph
    assert flatten_bodies(main, embedded=False)[0] is main  # no bodies: the graph itself


@pytest.mark.parametrize("external", [True, False])
def test_outer_weight_packed_in_a_branch_costs_like_the_main_graph(tmp_path, external):
    main = _stages(_save(tmp_path, "main", external))
    branch = _stages(_save(tmp_path, "outer", external))
    for name in ("session_creation", "run_1"):
        assert branch[name].weights_anon == pytest.approx(main[name].weights_anon, abs=0.1 * MiB)
        assert branch[name].weights_file == pytest.approx(main[name].weights_file, abs=0.1 * MiB)
    if external:  # packed once, the mapped source released: no run-time file pages
        assert branch["run_1"].weights_file == 0
        assert branch["run_1"].weights_anon == pytest.approx(W_BYTES, abs=0.1 * MiB)


def test_own_external_weight_stays_mapped(tmp_path):
    own = _stages(_save(tmp_path, "own", True))
    outer = _stages(_save(tmp_path, "outer", True))
    for name in ("session_creation", "run_1"):
        assert own[name].weights_file == W_BYTES  # the branch's source pages are kept
        assert own[name].weights_anon == pytest.approx(W_BYTES, abs=0.1 * MiB)  # one pack
    assert own["run_1"].peak - outer["run_1"].peak == pytest.approx(W_BYTES, abs=0.1 * MiB)


def test_own_embedded_weight_costs_two_more_copies(tmp_path):
    own = _stages(_save(tmp_path, "own", False))
    outer = _stages(_save(tmp_path, "outer", False))
    extra = BODY_EMBEDDED_EXTRA_COPIES * W_BYTES
    for name in ("session_creation", "run_1"):
        assert own[name].weights_anon - outer[name].weights_anon == pytest.approx(
            extra, abs=0.1 * MiB
        )
