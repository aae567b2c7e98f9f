"""Hand-built graphs whose lifetimes, reuse and peaks are known exactly."""

from __future__ import annotations

import onnx
import onnx.helper as oh
import pytest

from memshrink.errors import UnboundDimensionError
from memshrink.estimate import estimate
from memshrink.estimate import ort as ortsim
from memshrink.estimate.graph import build_view
from memshrink.estimate.lifetimes import lower_bound, tensor_buffers
from memshrink.estimate.schedule import schedule

F = onnx.TensorProto.FLOAT
MB = 1 << 20  # a [1, 262144] float tensor is exactly 1 MiB


def model(text: str) -> onnx.ModelProto:
    return onnx.parser.parse_model(text)


HEAD = '<ir_version: 8, opset_import: ["" : 17]>\n'


def chain(n: int = 4) -> onnx.ModelProto:
    body = "\n".join(f"t{i + 1} = Sigmoid(t{i})" for i in range(n - 1))
    return model(HEAD + f"g (float[1,262144] t0) => (float[1,262144] t{n - 1}) {{ {body} }}")


def test_chain_lower_bound_is_two_tensors():
    v = build_view(chain(5))
    order = schedule(v.graph, "file")
    bufs = tensor_buffers(v.graph, order)
    # t1..t4 are activations; at each step the input and the output are alive: 2 MiB.
    assert lower_bound(bufs, len(order)) == 2 * MB
    assert sum(b.size for b in bufs) == 4 * MB


def test_inplace_chain_uses_one_buffer():
    # Sigmoid is MayInplace in ORT: each output takes its input's buffer at last use.
    v = build_view(chain(5))
    plan = ortsim.plan(v.graph, schedule(v.graph, "ort_default"))
    kinds = plan.kinds
    assert kinds["t2"] == "inplace" and kinds["t3"] == "inplace"
    assert kinds["t4"] == "output"  # graph outputs never reuse
    assert [b.size for b in plan.buffers if not b.is_output] == [MB]


def test_add_chain_reuses_from_free_list_exact_size():
    m = model(
        HEAD
        + """g (float[1,262144] x) => (float[1,262144] y) {
            a = Add(x, x)
            b = Add(a, a)
            c = Add(b, b)
            y = Add(c, c)
        }"""
    )
    v = build_view(m)
    plan = ortsim.plan(v.graph, schedule(v.graph, "ort_default"))
    # Add is not in-place: b is new (a still alive while b is made), c reuses a's freed buffer.
    assert plan.kinds["b"] == "new" and plan.kinds["c"] == "freelist"
    assert plan.reused["c"] == "a"


def test_diamond_keeps_both_branches_alive():
    m = model(
        HEAD
        + """g (float[1,262144] x) => (float[1,262144] y) {
            a = Sigmoid(x)
            l = Tanh(a)
            r = Sigmoid(a)
            y = Add(l, r)
        }"""
    )
    v = build_view(m)
    order = schedule(v.graph, "file")
    bufs = tensor_buffers(v.graph, order)
    assert lower_bound(bufs, len(order)) == 3 * MB  # a, l, r alive when r is made
    plan = ortsim.plan(v.graph, order)
    assert plan.kinds["l"] == "new"  # a still has a pending use (r): no in-place
    assert plan.kinds["r"] == "inplace"  # last use of a


def test_alias_chain_shares_one_buffer():
    m = model(
        HEAD
        + """g (float[1,262144] x) => (float[1,1] y) {
            a = Sigmoid(x)
            s1 = Constant<value = int64[2] {512, 512}>()
            b = Reshape(a, s1)
            s2 = Constant<value = int64[2] {262144, 1}>()
            c = Reshape(b, s2)
            d = Flatten(c)
            y = ReduceSum(d)
        }"""
    )
    v = build_view(m)
    order = schedule(v.graph, "file")
    bufs = tensor_buffers(v.graph, order)
    big = [b for b in bufs if b.size == MB]
    assert len(big) == 1 and big[0].tensors == ["a", "b", "c", "d"]
    plan = ortsim.plan(v.graph, order)
    assert plan.kinds["b"] == plan.kinds["c"] == plan.kinds["d"] == "alias"


def test_output_stays_alive_to_the_end():
    m = model(
        HEAD
        + """g (float[1,262144] x) => (float[1,262144] early, float[1,262144] y) {
            early = Sigmoid(x)
            a = Tanh(early)
            b = Sigmoid(a)
            y = Tanh(b)
        }"""
    )
    v = build_view(m)
    order = schedule(v.graph, "file")
    bufs = {b.tensors[0]: b for b in tensor_buffers(v.graph, order)}
    assert bufs["early"].end == len(order) - 1
    plan = ortsim.plan(v.graph, order)
    assert plan.kinds["a"] == "new"  # never in place over a graph output


def test_parallel_branches_default_order_interleaves_priority_does_not():
    # Four branches: big = Sigmoid(x) (1 MiB, not a graph output), small = ReduceSum(big).
    # Written "all big ops first": file/priority order holds all four big tensors at once,
    # ORT DEFAULT's reverse DFS finishes one branch before the next.
    bigs = "\n".join(f"b{i} = Tanh(x)" for i in range(4))
    smalls = "\n".join(f"s{i} = ReduceSum(b{i})" for i in range(4))
    m = model(
        HEAD
        + "g (float[1,262144] x) => (float[1] s0, float[1] s1, float[1] s2, float[1] s3) {"
        + bigs
        + "\n"
        + smalls
        + "}"
    )
    pr = estimate(m, schedule="ort_priority").prediction.planners["lower_bound"]
    de = estimate(m).prediction.planners["lower_bound"]
    assert pr >= 4 * MB
    assert de < 2 * MB
    assert schedule(build_view(m).graph, "ort_default") == [3, 7, 2, 6, 1, 5, 0, 4]


def test_if_body_planned_inside_node_span():
    then_g = oh.make_graph(
        [oh.make_node("Sigmoid", ["x"], ["t1"]), oh.make_node("ReduceSum", ["t1"], ["to"])],
        "then",
        [],
        [oh.make_tensor_value_info("to", F, [1])],
        value_info=[oh.make_tensor_value_info("t1", F, [1, 262144])],
    )
    else_g = oh.make_graph(
        [oh.make_node("ReduceMax", ["x"], ["eo"])],
        "else",
        [],
        [oh.make_tensor_value_info("eo", F, [1])],
    )
    g = oh.make_graph(
        [
            oh.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
            oh.make_node("Cast", ["s"], ["c"], to=onnx.TensorProto.BOOL),
            oh.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
        ],
        "g",
        [oh.make_tensor_value_info("x", F, [1, 262144])],
        [oh.make_tensor_value_info("y", F, [1])],
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    v = build_view(m)
    bufs = tensor_buffers(v.graph, schedule(v.graph, "file"))
    body = [b for b in bufs if b.transient]
    assert len(body) == 1 and body[0].size >= MB and body[0].start == body[0].end == 2


def test_loop_body_planned_inside_node_span():
    body = oh.make_graph(
        [
            oh.make_node("Identity", ["cond_in"], ["cond_out"]),
            oh.make_node("Sigmoid", ["v_in"], ["t"]),
            oh.make_node("Tanh", ["t"], ["v_out"]),
        ],
        "body",
        [
            oh.make_tensor_value_info("i", onnx.TensorProto.INT64, []),
            oh.make_tensor_value_info("cond_in", onnx.TensorProto.BOOL, []),
            oh.make_tensor_value_info("v_in", F, [1, 262144]),
        ],
        [
            oh.make_tensor_value_info("cond_out", onnx.TensorProto.BOOL, []),
            oh.make_tensor_value_info("v_out", F, [1, 262144]),
        ],
    )
    g = oh.make_graph(
        [oh.make_node("Loop", ["n", "", "x"], ["y"], body=body)],
        "g",
        [
            oh.make_tensor_value_info("n", onnx.TensorProto.INT64, []),
            oh.make_tensor_value_info("x", F, [1, 262144]),
        ],
        [oh.make_tensor_value_info("y", F, [1, 262144])],
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    est = estimate(m)
    bufs = tensor_buffers(est.view.graph, est.prediction.order)
    body_buf = [b for b in bufs if b.transient]
    # t and v_out alive together, plus the 1-byte bool cond_out (a body output: own buffer)
    assert len(body_buf) == 1 and body_buf[0].size == 2 * MB + 1


def test_unbound_dims_raise_or_are_partial():
    m = model(HEAD + "g (float[N,1024] x) => (float[N,1024] y) { a = Sigmoid(x)\n y = Tanh(a) }")
    with pytest.raises(UnboundDimensionError, match="N"):
        estimate(m)
    est = estimate(m, allow_partial=True)
    assert est.partial and "a" in est.unknowns
    bound = estimate(m, dims={"N": 256})
    assert not bound.partial
    assert bound.prediction.planners["naive"] == 256 * 1024 * 4 * 2


def test_symbolic_dims_reuse_only_with_same_dim_param():
    m = model(
        HEAD
        + """g (float[N,1024] x) => (float[N,1024] y) {
            a = Add(x, x)
            b = Add(a, a)
            c = Add(b, b)
            y = Add(c, c)
        }"""
    )
    est = estimate(m, dims={"N": 4})
    plan = est.prediction.details["plan"]
    assert plan.kinds["c"] == "freelist"  # same dim_param "N": ORT reuses


def test_estimate_does_not_mutate_ir_model(tmp_path):
    import onnx_ir as ir

    path = tmp_path / "m.onnx"
    onnx.save(chain(4), path)
    irm = ir.load(path)
    before = ir.to_proto(irm).SerializeToString()
    estimate(irm)
    assert ir.to_proto(irm).SerializeToString() == before


def test_outputs_table_json_plot(tmp_path):
    est = estimate(chain(6))
    d = est.to_dict()
    assert set(est.stage_peaks()) == {"session_creation", "run_1", "steady_state"}
    assert d["timeline"]["activation_bytes"] and d["top_tensors"]
    assert "execution order: ort_default" in d["assumptions"]
    assert "run_1" in est.format_table()
    est.plot(tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000
    ov = estimate(chain(6), backend="openvino").stage_peaks()
    assert set(ov) == {"read_model", "compile_model", "run_1", "steady_state"}


def test_arena_rules_match_measured_ort_micrographs():
    # Measured on ORT 1.32 (docs/estimate.md): one 48 MiB MatMul output -> run 1 +48 MiB,
    # steady +96 MiB (two generations); Add -> IsNaN -> Where adds two full-size scratch
    # tensors in run 1 (+204 MiB planned+scratch). atol = 4 KiB (the tiny output's chunk).
    mm = model(
        HEAD
        + """g (float[4,12,512,64] q, float[4,12,64,512] k) => (float[1,1,1,1] y) {
            s = MatMul(q, k)
            y = ReduceSum(s)
        }"""
    )
    p = estimate(mm).prediction.planners
    assert abs(p["ort_run_1"] - 48 * MB) <= 4096
    assert abs(p["ort_steady_state"] - 96 * MB) <= 4096
    wh = onnx.parser.parse_model(
        HEAD
        + """g (float[4,12,512,512] x) => (float[1,1,1,1] y) {
            a = Add(x, x)
            n = IsNaN(a)
            zero = Constant<value = float {0.0}>()
            w = Where(n, zero, a)
            y = ReduceSum(w)
        }"""
    )
    e = estimate(wh)
    scratch = [b for b in e.prediction.details["plan"].buffers if b.scratch]
    assert [b.size for b in scratch] == [48 * MB, 48 * MB]
    # a 48 + n 12 + 2 x 48 scratch + w 48
    assert abs(e.prediction.planners["ort_run_1"] - 204 * MB) <= 4096


def test_inplace_metadata_makes_output_share_input_buffer():
    # The inplace pass records ORT's in-place plan as node metadata; the generic lifetime model
    # (OpenVINO, planners) follows it: one 1 MiB buffer instead of two.
    m = chain(3)  # t0 -> t1 -> t2 (output)
    body = m.graph.node[0]
    g0 = build_view(m).graph
    plain = tensor_buffers(g0, schedule(g0, "file"))
    body.metadata_props.add(key="memshrink.inplace", value="t0 -> t1")
    g1 = build_view(m).graph
    assert g1.nodes[0].meta == {"memshrink.inplace": "t0 -> t1"}
    # t0 is a graph input: ORT never writes into it, so no alias from the metadata either
    assert len(tensor_buffers(g1, schedule(g1, "file"))) == len(plain)
    m4 = chain(4)  # t0 -> t1 -> t2 -> t3
    m4.graph.node[1].metadata_props.add(key="memshrink.inplace", value="t1 -> t2")
    g4 = build_view(m4).graph
    bufs = tensor_buffers(g4, schedule(g4, "file"))
    shared = [b for b in bufs if b.tensors == ["t1", "t2"]]
    assert len(shared) == 1 and shared[0].size == MB  # exact, atol = 0
    assert lower_bound(bufs, len(g4.nodes)) == 2 * MB


def test_fingerprint_sees_declared_intermediate_shapes():
    # A pass that only completes value_info (inplace) must invalidate cached shape inference,
    # and its declared dims must win over the ones inference could not name (unk__N).
    import onnx_ir as ir

    from memshrink.estimate import graph as est_graph

    m = model(
        HEAD
        + """g (float[N,262144] x, int64[2] s) => (float[N,1] y) {
            a = Sigmoid(x)
            c = Reshape(a, s)
            y = ReduceSum<axes = [1]>(c)
        }"""
    )
    irm = ir.serde.deserialize_model(m)
    before = est_graph._fingerprint(irm)
    t = build_view(irm, dims={"N": 2}, allow_partial=True).graph.tensors["c"]
    assert t.shape is None and all(str(d).startswith("unk__") for d in t.sym_shape or ())
    c = next(v for n in irm.graph for v in n.outputs if v.name == "c")
    c.shape = ir.Shape(["N", 262144])
    c.dtype = ir.DataType.FLOAT
    assert est_graph._fingerprint(irm) != before
    t = build_view(irm, dims={"N": 2}, allow_partial=True).graph.tensors["c"]
    assert t.sym_shape == ("N", 262144)
    assert t.nbytes == 2 * MB  # exact, atol = 0


def test_an_untyped_dropout_mask_takes_its_input_shape():
    # Zoo SqueezeNet (opset 9): shape inference leaves the unread mask untyped, which
    # made every estimate of it partial.
    m = model(
        '<ir_version: 4, opset_import: ["" : 9]>\n'
        "g (float[1,262144] x) => (float[1,262144] y) { y, mask = Dropout <ratio = 0.5> (x) }"
    )
    est = estimate(m)
    assert not est.partial and est.unknowns == []
    mask = est.view.graph.tensors["mask"]
    assert mask.shape == (1, 262144) and mask.nbytes == 262144
