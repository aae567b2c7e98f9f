"""ORT CPU keeps a file's node metadata and doc strings resident (``ort_metadata``).

Measured (``memshrink profile``, 2 fresh processes each, identical; docs/estimate.md "Session 15:
metadata the session keeps"), a chain of 300 Relu nodes on [1, 64], anon after session creation
over the same chain without metadata (2.29 MiB): one 2,026-byte entry a node +0.63 MiB; ten
76-byte entries +0.77; twenty 46-byte entries +1.45; twenty 226-byte entries +2.45; a
2,002-byte ``doc_string`` a node +1.17 (twice the bytes). A dynamo Whisper export's 1,639
entries (0.58 MiB of text) measured +0.87 MiB against the same file stripped.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from memshrink.estimate import estimate
from memshrink.estimate.ort_metadata import METADATA_ENTRY_BYTES, kept_string_bytes

MiB = 1 << 20
NODES = 300


def _chain(entries: int = 0, value_len: int = 0, doc_len: int = 0) -> onnx.ModelProto:
    nodes = []
    for i in range(NODES):
        node = helper.make_node(
            "Relu", ["x" if i == 0 else f"t{i}"], [f"t{i + 1}" if i < NODES - 1 else "y"]
        )
        for j in range(entries):
            p = node.metadata_props.add()
            p.key, p.value = f"k{j:02d}" + "x" * 23, "v" * value_len  # 26-byte keys
        node.doc_string = "d" * doc_len
        nodes.append(node)
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 64]) for n in ("x", "y")]
    g = helper.make_graph(nodes, "chain", vi[:1], vi[1:])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def test_kept_bytes_count_entries_and_doc_strings_exactly() -> None:
    m = _chain(entries=3, value_len=10, doc_len=5)
    m.metadata_props.add(key="producer_note", value="abc")
    expected = NODES * (3 * (26 + 10 + METADATA_ENTRY_BYTES) + 2 * 5) + (13 + 3 + 200)
    assert kept_string_bytes(ir.serde.deserialize_model(m)) == expected


def test_a_graph_without_metadata_keeps_nothing() -> None:
    assert kept_string_bytes(ir.serde.deserialize_model(_chain())) == 0


@pytest.mark.parametrize(
    ("entries", "value_len", "doc_len", "measured_mib"),
    [
        (1, 2000, 0, 0.63),
        (10, 50, 0, 0.77),
        (20, 20, 0, 1.45),
        (20, 200, 0, 2.45),
        (0, 0, 2002, 1.17),
    ],
)
def test_session_creation_grows_by_the_measured_metadata(
    entries: int, value_len: int, doc_len: int, measured_mib: float
) -> None:
    bare = estimate(_chain(), backend="ort").stage_peaks()
    rich = estimate(_chain(entries, value_len, doc_len), backend="ort").stage_peaks()
    for stage in ("session_creation", "run_1", "steady_state"):
        grown = (rich[stage] - bare[stage]) / MiB
        assert grown == pytest.approx(measured_mib, rel=0.1, abs=0.0), stage
