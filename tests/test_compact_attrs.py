"""Large scalar-list attributes (a forest's ``nodes_*``) stay compact in memory (``compact_attrs``).

Why: onnx_ir holds an INTS/FLOATS attribute as a tuple of Python numbers (32 bytes an element)
and the estimator fingerprinted it with ``repr``; ``optimize --passes safe`` of a 24 MiB
skl2onnx RandomForest peaked at 955 MiB. The values must still save to the same bytes.
"""

from __future__ import annotations

import math
import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from memshrink import compact_attrs
from memshrink.compact_attrs import THRESHOLD, CompactList
from memshrink.model import load, save

N = 100_000  # tree nodes: 10^5 elements in each nodes_* list


def _forest(n: int = N) -> onnx.ModelProto:
    """One TreeEnsembleRegressor whose every list has ``n`` elements (one tree, all leaves
    but the ids make it valid enough for load/save; ORT is not run on it)."""
    rng = np.random.default_rng(0)
    tree = helper.make_node(
        "TreeEnsembleRegressor",
        ["x"],
        ["y"],
        domain="ai.onnx.ml",
        n_targets=1,
        nodes_treeids=[0] * n,
        nodes_nodeids=list(range(n)),
        nodes_featureids=rng.integers(0, 4, n).tolist(),
        nodes_values=rng.standard_normal(n).astype(np.float32).tolist(),
        nodes_modes=["BRANCH_LEQ"] * (n - 1) + ["LEAF"],
        nodes_truenodeids=[3_000_000_000] * n,  # past int32: stays int64
        nodes_falsenodeids=[-1] * n,
        target_ids=[0],
        target_nodeids=[n - 1],
        target_treeids=[0],
        target_weights=[1.5],
    )
    g = helper.make_graph(
        [tree],
        "forest",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1])],
    )
    return helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    )


@pytest.fixture(scope="module")
def forest_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("forest") / "forest.onnx"
    onnx.save(_forest(), str(path))
    return path


def test_load_keeps_large_lists_compact_and_equal(forest_path: Path) -> None:
    model = load(forest_path)
    attrs = next(iter(model.graph)).attributes
    ref = {a.name: helper.get_attribute_value(a) for a in _forest().graph.node[0].attribute}
    for name in ("nodes_nodeids", "nodes_values", "nodes_featureids", "nodes_truenodeids"):
        value = attrs[name].value
        assert isinstance(value, CompactList), name
        assert len(value) == N and value == tuple(ref[name]), name
    assert attrs["nodes_nodeids"].value.array.dtype == np.int32  # 0..99999
    assert attrs["nodes_featureids"].value.array.dtype == np.int8
    assert attrs["nodes_truenodeids"].value.array.dtype == np.int64  # 3e9 needs 64 bits
    assert attrs["nodes_falsenodeids"].value[5] == -1
    modes = attrs["nodes_modes"].value
    assert type(modes) is tuple and modes[-1] == "LEAF" and len(set(map(id, modes))) == 2
    assert attrs["target_weights"].value == (1.5,)  # small lists: plain tuples
    assert not any((a.doc_string or "").startswith("\x00") for a in attrs.values())  # markers gone


def test_save_writes_the_bytes_a_plain_onnx_ir_round_trip_writes(
    forest_path: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out.onnx"
    save(load(forest_path), out)
    plain = ir.serde.serialize_model(ir.serde.deserialize_model(onnx.load(str(forest_path))))
    assert out.read_bytes() == plain.SerializeToString()


def test_loaded_lists_cost_a_fraction_of_tuples(forest_path: Path) -> None:
    """Python-side memory held by the loaded model (tracemalloc sees tuples, floats and numpy
    buffers): 7 lists x 10^5 as tuples are ~20 MiB; compact, ~1.6 MiB."""
    tracemalloc.start()
    try:
        model = load(forest_path)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(model.graph) == 1
    assert held < 4 * 2**20, held
    assert peak < 12 * 2**20, peak


def test_fingerprint_of_a_large_attribute_allocates_little(forest_path: Path) -> None:
    from memshrink.estimate.graph import _fingerprint

    model = load(forest_path)
    first = _fingerprint(model)  # computes and caches the digests
    tracemalloc.start()
    try:
        again = _fingerprint(model)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert again == first
    assert peak < 256 * 1024, peak  # repr of 10^5 floats alone is ~2 MiB


def test_fingerprint_changes_when_a_large_list_changes(forest_path: Path) -> None:
    from memshrink.estimate.graph import _fingerprint

    model = load(forest_path)
    node = next(iter(model.graph))
    before = _fingerprint(model)
    arr = node.attributes["nodes_values"].value.array.copy()
    arr[7] += 1.0
    node.attributes["nodes_values"] = compact_attrs._CompactAttr(
        "nodes_values", ir.AttributeType.FLOATS, CompactList(arr), None
    )
    assert _fingerprint(model) != before


def test_estimate_view_drops_large_lists_and_runs(forest_path: Path) -> None:
    from memshrink.estimate import estimate
    from memshrink.estimate.graph import build_view
    from memshrink.estimate.ort_ml import TREE_BYTES_PER_NODE, tree_counts

    res = estimate(str(forest_path), backend="ort", dims={"batch": 8})
    assert all(v > 0 for v in res.stage_peaks().values())
    # the lists are gone from the view, their lengths are not: ORT's tree rule counts
    # N tree nodes and 1 leaf entry (target_ids)
    view = build_view(load(forest_path), dims={"batch": 8})
    assert tree_counts(view.graph) == (N, 1)
    assert res.stage_peaks()["session_creation"] >= N * TREE_BYTES_PER_NODE  # 38.6 MiB
    proto = _forest(THRESHOLD)
    assert compact_attrs.drop_large_lists(proto) == 7  # the 7 nodes_* lists, not target_*
    got = {a.name: a for a in proto.graph.node[0].attribute}
    assert len(got["nodes_values"].floats) == 0 and len(got["nodes_modes"].strings) == 0
    assert list(got["target_weights"].floats) == [1.5]


def test_compact_list_behaves_like_its_tuple() -> None:
    ref = tuple(float(np.float32(v)) for v in (0.1, -0.0, math.inf, 2.5) * 2000)
    c = CompactList(np.array(ref, dtype=np.float32))
    assert len(c) == len(ref) and list(c) == list(ref)
    assert c[1] == ref[1] and math.copysign(1, c[1]) == -1 and c[-1] == 2.5
    assert c[2:5] == ref[2:5] and c == ref and c != ref[:-1]
    assert c == CompactList(np.array(ref, dtype=np.float32)) and hash(c) == hash(
        CompactList(np.array(ref, dtype=np.float32))
    )
    with pytest.raises(ValueError):
        c.array[0] = 1.0  # read-only: the model shares it


@pytest.mark.parametrize("packed", [False, True])
def test_parse_without_large_lists_drops_exactly_the_large_ones(packed: bool) -> None:
    """Unpacked (what protobuf writes for onnx's proto2 lists) and packed encodings: a list of
    THRESHOLD elements goes, one of THRESHOLD - 1 stays, subgraphs are walked too."""
    inner = helper.make_node("Constant", [], ["c"], value_ints=list(range(THRESHOLD)))
    body = helper.make_graph(
        [inner], "body", [], [helper.make_tensor_value_info("c", TensorProto.INT64, None)]
    )
    nodes = [
        helper.make_node("Foo", ["x"], ["a"], domain="d", big=[3] * THRESHOLD),
        helper.make_node("Foo", ["a"], ["b"], domain="d", small=[-7] * (THRESHOLD - 1)),
        helper.make_node("Foo", ["b"], ["y"], domain="d", f=[0.5] * THRESHOLD, sub=body),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("d", 1)])
    data = model.SerializeToString()
    if packed:  # re-encode the int lists packed: field 8, one LEN payload of varints
        from memshrink.protoscan import _encode_varint, _len_field

        def ints_attr(name: str, values: list[int]) -> bytes:
            payload = b"".join(_encode_varint(v & (2**64 - 1)) for v in values)
            return (
                _len_field(1, name.encode())
                + _len_field(8, payload)
                + b"\xa0\x01"
                + _encode_varint(onnx.AttributeProto.INTS)
            )

        for node, name, values in ((0, "big", [3] * THRESHOLD), (1, "small", [-7] * 4095)):
            n = model.graph.node[node]
            del n.attribute[:]
            n.attribute.add().MergeFromString(ints_attr(name, values))
        data = model.SerializeToString()
    out = compact_attrs.parse_without_large_lists(data)
    assert len(out.graph.node[0].attribute[0].ints) == 0
    assert list(out.graph.node[1].attribute[0].ints) == [-7] * (THRESHOLD - 1)
    f, sub = out.graph.node[2].attribute
    assert len(f.floats) == 0 and len(sub.g.node[0].attribute[0].ints) == 0
    assert [n.op_type for n in out.graph.node] == ["Foo"] * 3
    assert out.graph.output[0] == model.graph.output[0]


def test_inferred_forest_keeps_types_without_lists(forest_path: Path) -> None:
    from memshrink.estimate.graph import _infer

    proto = onnx.load(str(forest_path))
    full = onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True)
    light = _infer(proto, None)
    assert list(light.graph.output) == list(full.graph.output)
    assert list(light.graph.value_info) == list(full.graph.value_info)
    got = {a.name: a for a in light.graph.node[0].attribute}
    assert len(got["nodes_values"].floats) == 0 and got["n_targets"].i == 1


def test_symbolic_tool_gets_lists_only_when_inference_reads_them(forest_path: Path) -> None:
    """A forest's lists don't change ONNX's inferred types: the tool gets the light copy. A
    Constant's ``value_ints`` is its output's shape: the tool keeps the full proto."""
    from memshrink.estimate.graph import _collect_types, _infer, _tool_proto

    def types(p: onnx.ModelProto) -> dict:
        out: dict = {}
        _collect_types(onnx.shape_inference.infer_shapes(p).graph, out)
        return out

    forest = onnx.load(str(forest_path))
    light = _tool_proto(forest, types(forest), None)
    assert light is not forest and not compact_attrs.has_large_lists(light)
    const = helper.make_model(
        helper.make_graph(
            [helper.make_node("Constant", [], ["y"], value_ints=list(range(THRESHOLD)))],
            "c",
            [],
            [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    assert _tool_proto(const, types(const), None) is const
    assert len(_infer(const, None).graph.node[0].attribute[0].ints) == 0  # the view drops it


@pytest.mark.parametrize(
    "values",
    [
        list(range(-5, THRESHOLD)),  # negative ints: 10-byte varints
        [0, 127, 128, 16383, 16384, 2**31, 2**62, -(2**63)] * 600,
        np.linspace(-3, 3, THRESHOLD, dtype=np.float32).tolist(),
        ["BRANCH_LEQ", "LEAF", "é"] * 2000,
    ],
)
def test_wire_list_is_what_protobuf_writes(values: list) -> None:
    """The list's fields built from the array equal the serialized attribute's (unpacked,
    one key per element), so a save can splice them in."""
    attr = helper.make_attribute("a", values)
    if isinstance(values[0], str):
        compact: object = tuple(values)
    elif isinstance(values[0], float):
        compact = CompactList(np.array(values, np.float32))
    else:
        compact = CompactList(compact_attrs._narrow(np.array(values, np.int64)))
    got = compact_attrs.wire_list(compact)
    bare = onnx.AttributeProto(name="a", type=attr.type).SerializeToString()
    # protobuf's field order: name (1), the list (7-9), type (20)
    assert attr.SerializeToString() == bare[:3] + got + bare[3:]


def test_the_scan_lifts_large_lists_out_of_the_skeleton(forest_path: Path) -> None:
    """The loader's scan takes the lists off the skeleton (parsed alone, one attribute at a
    time), so the skeleton it parses is small; the load still gives every value back."""
    from memshrink.protoscan import scan_model_file

    res = scan_model_file(str(forest_path), "forest.onnx", lift_lists=compact_attrs.lift)
    assert len(res.skeleton) < 4096 < forest_path.stat().st_size
    assert len(res.lists) == 7  # the 7 nodes_* lists; target_* stay in the skeleton
    assert all(len(v) == N for v, _ in res.lists.values())


def test_estimate_splices_a_constants_large_list_for_inference() -> None:
    """In the estimator the large lists are markers; ONNX's inference still gets them spliced
    in: a Constant's ``value_ints`` is its output's shape."""
    from memshrink.estimate.graph import build_view

    const = helper.make_model(
        helper.make_graph(
            [
                helper.make_node("Constant", [], ["c"], value_ints=list(range(THRESHOLD))),
                helper.make_node("Cast", ["c"], ["y"], to=TensorProto.FLOAT),
            ],
            "c",
            [],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    view = build_view(load(const), dims={})
    assert view.graph.tensors["y"].shape == (THRESHOLD,)


def test_wire_list_in_slices_is_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ints are encoded a slice at a time (bounded temporaries): slice edges change nothing."""
    values = [0, 127, 128, -1, 2**40, 16384, -(2**63), 5] * 1000 + [300]
    attr = helper.make_attribute("a", values)
    compact = CompactList(compact_attrs._narrow(np.array(values, np.int64)))
    whole = compact_attrs.wire_list(compact)
    monkeypatch.setattr(compact_attrs, "_WIRE_SLICE", 999)  # edges inside the 8-value pattern
    assert compact_attrs.wire_list(compact) == whole
    bare = onnx.AttributeProto(name="a", type=attr.type).SerializeToString()
    assert attr.SerializeToString() == bare[:3] + whole + bare[3:]


@pytest.mark.parametrize(
    "values",
    [
        [0, 127, 128, -1, 2**40, 16384, -(2**63), 5] * 1000 + [300],
        np.linspace(-3, 3, THRESHOLD, dtype=np.float32).tolist(),
        ["BRANCH_LEQ", "LEAF", "é"] * 2000,
    ],
)
def test_a_wire_list_counts_its_bytes_before_making_them(
    values: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The save writes a list's fields when it gets to them (``WireList``); the length prefix
    of every message around them needs their size first, counted without making them."""
    if isinstance(values[0], str):
        compact: object = tuple(values)
    elif isinstance(values[0], float):
        compact = CompactList(np.array(values, np.float32))
    else:
        compact = CompactList(compact_attrs._narrow(np.array(values, np.int64)))
    monkeypatch.setattr(compact_attrs, "_WIRE_SLICE", 999)
    lazy = compact_attrs.WireList(compact)
    made = compact_attrs.wire_list(compact)
    assert len(lazy) == len(made) and lazy.tobytes() == made
    assert compact_attrs.piece_bytes(lazy) == made and compact_attrs.piece_bytes(b"ab") == b"ab"
    # the save writes the fields a slice of at most 999 elements at a time: the same bytes
    slices = list(compact_attrs.piece_slices([b"ab", lazy]))
    assert slices[0] == b"ab" and b"".join(slices[1:]) == made
    assert len(slices) == 1 + math.ceil(len(values) / 999)
