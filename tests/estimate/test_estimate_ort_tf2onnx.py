"""tf2onnx-style graphs on ORT CPU: Swish as ``x * Sigmoid(x)`` (QuickGeluFusion), Keras'
``ZeroPadding2D`` before a strided depthwise Conv (PadFusion), residual Adds whose inputs carry
different ``unk__N`` batch names (NCHWc reshaped Add). The emulated graph is checked against
ORT's own ``optimized_model_filepath`` dump and its profiler (node order, output bytes)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import onnx
import onnx.helper as oh
import onnxruntime as ort
from onnx import numpy_helper

from memshrink.estimate import estimate
from memshrink.estimate.graph import build_view
from memshrink.estimate.ort_optimized import NCHWC_DOMAIN, optimize
from memshrink.estimate.schedule import ort_default

F = onnx.TensorProto.FLOAT
BATCH = 2


def _w(name: str, *shape: int) -> onnx.TensorProto:
    rng = np.random.default_rng(len(name))
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.1, name)


def _vi(name: str, batch: str, *dims: int) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, F, [batch, *dims])


def tf2onnx_block(*, alpha: bool = True, se: bool = True) -> onnx.ModelProto:
    """An EfficientNet-like block as tf2onnx writes it: NHWC input and one Transpose, Swish as
    two nodes (``alpha``: the second one as ``x * Sigmoid(x * 1.702)``), a Pad by zeros before
    a stride-2 depthwise Conv, a residual Add of two Convs declared with different batch
    names (tf2onnx's ``unk__N``). ``se``: the second Conv reads a squeeze-excite product (an
    NCHW Mul), so ORT cannot trace both Add inputs' batch dims to one tensor."""
    nodes = [
        oh.make_node("Transpose", ["images"], ["t0"], perm=[0, 3, 1, 2]),
        oh.make_node("Conv", ["t0", "w1", "b1"], ["c1"]),
        oh.make_node("Sigmoid", ["c1"], ["s1"]),
        oh.make_node("Mul", ["c1", "s1"], ["a1"]),
        oh.make_node("Pad", ["a1", "pads"], ["p1"]),
        oh.make_node("Conv", ["p1", "w2", "b2"], ["c2"], group=32, strides=[2, 2]),
    ]
    if alpha:
        nodes += [
            oh.make_node("Mul", ["c2", "alpha"], ["m2"]),
            oh.make_node("Sigmoid", ["m2"], ["s2"]),
        ]
    else:
        nodes.append(oh.make_node("Sigmoid", ["c2"], ["s2"]))
    nodes += [
        oh.make_node("Mul", ["s2", "c2"], ["a2"]),
        oh.make_node("GlobalAveragePool", ["a2"], ["g"]),
        oh.make_node("Sigmoid", ["g"], ["gs"]),
        oh.make_node("Mul", ["a2", "gs"], ["e"]),
        oh.make_node("Conv", ["a2", "w3", "b3"], ["c3"]),
        oh.make_node("Conv", ["e" if se else "a2", "w4", "b4"], ["c4"]),
        oh.make_node("Add", ["c3", "c4"], ["y"]),
        oh.make_node("GlobalAveragePool", ["y"], ["out"]),
    ]
    inits = [
        _w("w1", 32, 16, 1, 1), _w("b1", 32), _w("w2", 32, 1, 3, 3), _w("b2", 32),
        _w("w3", 32, 32, 1, 1), _w("b3", 32), _w("w4", 32, 32, 1, 1), _w("b4", 32),
        numpy_helper.from_array(np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64), "pads"),
        numpy_helper.from_array(np.array(1.702, np.float32), "alpha"),
    ]  # fmt: skip
    graph = oh.make_graph(
        nodes,
        "tf2onnx_block",
        [_vi("images", "unk__1", 64, 64, 16)],
        [_vi("out", "unk__9", 32, 1, 1)],
        inits,
        value_info=[
            _vi("t0", "unk__2", 16, 64, 64),
            _vi("c1", "unk__3", 32, 64, 64),
            _vi("p1", "unk__4", 32, 65, 65),
            _vi("c2", "unk__5", 32, 32, 32),
            _vi("c3", "unk__6", 32, 32, 32),
            _vi("c4", "unk__7", 32, 32, 32),
        ],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def _ort(path: str, tmp_path) -> tuple[onnx.GraphProto, list[tuple[str, int]]]:
    """ORT's optimized graph and, from its profiler, each node's op and output bytes."""
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "ort_opt.onnx")
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).random((BATCH, 64, 64, 16), dtype=np.float32)
    sess.run(None, {"images": x})
    with open(sess.end_profiling()) as f:
        events = json.load(f)
    steps = [
        (e["args"]["op_name"], int(e["args"]["output_size"]))
        for e in events
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")
    ]
    return onnx.load(str(tmp_path / "ort_opt.onnx")).graph, steps


def _key(n) -> tuple[str, str]:
    return (n.op_type, "nchwc" if n.domain == NCHWC_DOMAIN else "")


def _check(model: onnx.ModelProto, tmp_path) -> Counter:
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    g = optimize(build_view(path, dims={"unk__1": BATCH}).graph).graph
    ref, steps = _ort(path, tmp_path)
    order = ort_default(g)
    ours, theirs = [_key(g.nodes[i]) for i in order], [_key(n) for n in ref.node]
    # ORT numbers its final ReorderOutput nodes in a per-process hash order: those compared
    # as a multiset, every other node in order
    assert sorted(ours) == sorted(theirs)
    assert [k for k in ours if k[0] != "ReorderOutput"] == [
        k for k in theirs if k[0] != "ReorderOutput"
    ]
    mine = [
        (g.nodes[i].op_type, sum(g.tensors[o].nbytes or 0 for o in g.nodes[i].outputs if o))
        for i in order
    ]
    assert sorted(mine) == sorted(steps)  # op and output bytes per node, exact (atol = 0)
    return Counter(n.op_type for n in g.nodes)


def test_swish_pad_and_unprovable_add_match_ort(tmp_path):
    ops = _check(tf2onnx_block(alpha=True, se=True), tmp_path)
    # both Swish forms are one QuickGelu each, the Pad is gone into the depthwise Conv, the
    # input's Transpose into the first ReorderInput; the SE gate's Sigmoid stays
    assert ops["QuickGelu"] == 2 and ops["Sigmoid"] == 1 and ops["Pad"] == 0
    assert ops["Transpose"] == 0 and ops["Mul"] == 1
    # the residual Add is done on the blocked tensors through Reshapes, not fused into a Conv
    assert ops["Add"] == 1 and ops["Reshape"] == 3


def test_add_of_convs_from_one_tensor_is_a_conv_sum(tmp_path):
    """Both Add inputs' dims trace back to one tensor (NchwcArgument::Shape): the declared
    ``unk__6`` / ``unk__7`` do not matter, the Add is fused as a Conv's Sum input."""
    g_ops = _check(tf2onnx_block(alpha=True, se=False), tmp_path)
    assert g_ops["Add"] == 0 and g_ops["Reshape"] == 0


def test_plain_swish_matches_ort(tmp_path):
    ops = _check(tf2onnx_block(alpha=False), tmp_path)
    assert ops["QuickGelu"] == 2 and ops["Sigmoid"] == 1


def test_swish_fusion_lowers_the_run_estimate(tmp_path):
    """The block at batch 2: Swish written out keeps ``x``, ``Sigmoid(x)`` and the product
    alive together; QuickGelu only ``x`` and its output. Known answer: the estimate's
    activations at run 1 are no more than those of the same block with the fusion's result
    written by hand (one QuickGelu node), within 1 % (rtol = 0.01, atol = 0)."""
    path = str(tmp_path / "m.onnx")
    onnx.save(tf2onnx_block(alpha=False), path)
    fused = tf2onnx_block(alpha=False)
    g = fused.graph
    keep = [n for n in g.node if n.op_type != "Sigmoid" or n.input[0] == "g"]
    for n in keep:
        if n.op_type == "Mul" and n.output[0] in ("a1", "a2"):
            x = [i for i in n.input if not i.startswith("s")][0]
            n.CopyFrom(oh.make_node("QuickGelu", [x], list(n.output), domain="com.microsoft"))
    del g.node[:]
    g.node.extend(keep)
    fused.opset_import.append(oh.make_opsetid("com.microsoft", 1))
    path2 = str(tmp_path / "fused.onnx")
    onnx.save(fused, path2)
    a = estimate(path, dims={"unk__1": BATCH}).stage_peaks()["run_1"]
    b = estimate(path2, dims={"unk__1": BATCH}).stage_peaks()["run_1"]
    assert abs(a - b) <= 0.01 * b


def test_pad_by_a_nonzero_constant_stays(tmp_path):
    """A Pad with a ``constant_value`` of 1 is not a Conv's zero padding: ORT keeps it (and
    so does the emulation, which reads no constant values and keeps any Pad with one)."""
    m = tf2onnx_block(alpha=False, se=False)
    pad = next(n for n in m.graph.node if n.op_type == "Pad")
    pad.input.append("padv")
    m.graph.initializer.append(numpy_helper.from_array(np.array(1.0, np.float32), "padv"))
    ops = _check(m, tmp_path)
    assert ops["Pad"] == 1
