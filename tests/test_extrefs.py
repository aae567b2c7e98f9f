"""``extrefs``: external-data references read from the wire format, checked with the loader's
rules, without building the model (``verify``'s parent checks with it before any run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import numpy_helper

from memshrink.errors import ExternalDataError, ModelLoadError
from memshrink.extrefs import check_file, read_refs


def _ext(t: onnx.TensorProto, data: bytearray, location: str = "m.data") -> onnx.TensorProto:
    """Move ``t``'s payload to the end of ``data`` and point ``t`` at it (no length entry for
    the Constant: its size then comes from dims and type)."""
    raw = t.raw_data
    t.ClearField("raw_data")
    t.data_location = onnx.TensorProto.EXTERNAL
    entries = [("location", location), ("offset", str(len(data)))]
    if t.name != "c":
        entries.append(("length", str(len(raw))))
    for k, v in entries:
        e = t.external_data.add()
        e.key, e.value = k, v
    data.extend(raw)
    return t


def _model(folder: Path) -> Path:
    """External: an f32 4x8 initializer ``w`` and a Constant's tensor ``c`` (16 f32) inside an
    If branch; inline: a small int64 initializer."""
    data = bytearray()
    w = _ext(numpy_helper.from_array(np.arange(32, dtype=np.float32).reshape(4, 8), "w"), data)
    small = numpy_helper.from_array(np.array([1, 32], dtype=np.int64), "shape")
    c = _ext(numpy_helper.from_array(np.ones((16,), np.float32), "c"), data)
    branch = oh.make_graph(
        [oh.make_node("Constant", [], ["k"], value=c)],
        "then",
        [],
        [oh.make_tensor_value_info("k", onnx.TensorProto.FLOAT, [16])],
    )
    g = oh.make_graph(
        [
            oh.make_node("Reshape", ["w", "shape"], ["r"]),
            oh.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch),
        ],
        "g",
        [oh.make_tensor_value_info("cond", onnx.TensorProto.BOOL, [])],
        [
            oh.make_tensor_value_info("r", onnx.TensorProto.FLOAT, [1, 32]),
            oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [16]),
        ],
        initializer=[w, small],
    )
    path = folder / "m.onnx"
    onnx.save_model(oh.make_model(g, opset_imports=[oh.make_opsetid("", 21)]), path)
    (folder / "m.data").write_bytes(bytes(data))
    return path


def test_reads_every_external_tensor_with_its_size(tmp_path: Path) -> None:
    refs = read_refs(_model(tmp_path))
    assert sorted((r.name, r.location, r.offset, r.length, r.nbytes) for r in refs) == [
        ("c", "m.data", 128, None, 64),  # then branch
        ("c", "m.data", 128, None, 64),  # else branch
        ("w", "m.data", 0, 128, 128),
    ]
    assert check_file(tmp_path / "m.onnx") == 3


def test_int4_size_is_packed(tmp_path: Path) -> None:
    data = bytearray()
    q = _ext(oh.make_tensor("c", onnx.TensorProto.INT4, [3, 5], bytes(8), raw=True), data)
    g = oh.make_graph([], "g", [], [oh.make_tensor_value_info("c", onnx.TensorProto.INT4, [3, 5])],
                      initializer=[q])  # fmt: skip
    path = tmp_path / "q.onnx"
    onnx.save_model(oh.make_model(g), path)
    (ref,) = read_refs(path)
    assert ref.length is None and ref.nbytes == 8  # ceil(15 * 4 / 8)


def test_missing_short_and_escaping_files_are_refused(tmp_path: Path) -> None:
    path = _model(tmp_path)
    data = tmp_path / "m.data"
    data.write_bytes(data.read_bytes()[:150])  # w whole, c (128..192) cut
    with pytest.raises(ExternalDataError, match="'c': external data 'm.data' is shorter"):
        check_file(path)
    data.unlink()
    with pytest.raises(ExternalDataError, match="'m.data' is missing"):
        check_file(path)
    data.write_bytes(bytes(192))
    proto = onnx.load(path, load_external_data=False)
    proto.graph.initializer[0].external_data[0].value = "../m.data"
    bad = tmp_path / "bad.onnx"
    onnx.save_model(proto, bad)
    with pytest.raises(ExternalDataError, match="escapes"):
        check_file(bad)


def test_not_protobuf_is_a_load_error(tmp_path: Path) -> None:
    bad = tmp_path / "x.onnx"
    bad.write_bytes(b"\xff" * 64)
    with pytest.raises(ModelLoadError, match="truncated or not an ONNX model"):
        check_file(bad)


def test_verify_check_does_not_import_onnx_ir(tmp_path: Path) -> None:
    """The check runs in ``verify``'s parent: importing onnx-ir (and sympy) cost it 36 MiB."""
    path = _model(tmp_path)
    code = (
        "import sys; from pathlib import Path; from memshrink.verify.kinds import resolve_model;"
        f"resolve_model({str(path)!r}, 'original');"
        "print(sorted(m for m in ('onnx_ir', 'sympy', 'memshrink.model') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_initializer_locations_are_what_onnx_load_states(tmp_path: Path) -> None:
    """The main graph's initializers only (not the If branch's Constant), as OpenVINO's
    data-file stat read them from ``onnx.load(..., load_external_data=False)`` before."""
    from memshrink.extrefs import initializer_locations

    path = _model(tmp_path)
    proto = onnx.load(str(path), load_external_data=False)
    want = [
        (t.name, e.value) for t in proto.graph.initializer for e in t.external_data
        if e.key == "location"
    ]  # fmt: skip
    assert initializer_locations(path) == want == [("w", "m.data")]
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x0a\xff\xff")
    with pytest.raises(ModelLoadError):
        initializer_locations(bad)


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("lenght", "128", r"unknown key\(s\) 'lenght' \(ONNX defines location, offset"),
        (b"l\x9angth", "128", r"unknown key\(s\)"),  # one flipped byte: not UTF-8
        ("offset", "abc", "external data offset 'abc' is not a number"),
        ("length", "100", r"external data length 100 is not the tensor's size \(128 bytes"),
        ("length", "132", r"external data length 132 is not the tensor's size \(128 bytes"),
    ],
)
def test_a_damaged_entry_is_refused_by_the_loader_and_the_check(
    tmp_path: Path, key: str | bytes, value: str, says: str
) -> None:
    """QA session 14: ORT refuses such a file; onnx-ir dropped the unknown entry with a
    Python warning, so ``optimize`` wrote a 'repaired' copy (exit 0) and ``verify`` ran both
    models into exit 5. ``offset`` 'abc' was read as 0 by onnx-ir."""
    from memshrink.model import load

    path = _model(tmp_path)
    proto = onnx.load(path, load_external_data=False)
    entries = proto.graph.initializer[0].external_data
    if key in ("offset", "length"):
        next(e for e in entries if e.key == key).value = value
    elif isinstance(key, str):
        e = entries.add()
        e.key, e.value = key, value
    onnx.save_model(proto, path)
    if isinstance(key, bytes):  # flip the byte in the file: protobuf won't set such a key
        raw = path.read_bytes()
        path.write_bytes(raw.replace(b"length", key, 1))
    with pytest.raises(ExternalDataError, match=says):
        check_file(path)
    with pytest.raises(ExternalDataError, match=says):
        load(path)
