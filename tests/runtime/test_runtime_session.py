"""PartitionedSession: outputs equal the original model's on ORT CPU and OpenVINO, both modes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from interpreters import NO_OVEP, ovep_python
from partition.partgraphs import (
    assert_close,
    backend_options,
    branchy_feeds,
    build_branchy,
    build_control_flow,
    control_flow_feeds,
    partition_to,
    run_original,
    save,
)

from memshrink.errors import UsageError
from memshrink.runtime import PartitionedSession, PartLoadError, open_session

REPO = Path(__file__).resolve().parents[2]
ATOL = 1e-5  # absolute; rtol 0. Parts run the same kernels, so differences are rounding only.


@pytest.fixture(scope="module")
def branchy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("branchy")
    src = save(build_branchy(layers=6), tmp / "b.onnx")
    partition_to(src, tmp / "parts", parts=4)
    return src, tmp / "parts"


@pytest.fixture(scope="module")
def control_flow(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("cf")
    src = save(build_control_flow(), tmp / "c.onnx", external=True)
    partition_to(src, tmp / "parts", parts=3)
    return src, tmp / "parts"


@pytest.mark.parametrize("backend", ["cpu", "openvino"])
@pytest.mark.parametrize("mode", ["streamed", "resident"])
def test_branchy_matches_original(branchy, backend: str, mode: str) -> None:  # noqa: ANN001
    src, parts = branchy
    feeds = branchy_feeds()
    ref = run_original(src, feeds, backend)
    with PartitionedSession(parts, backend, mode, session_options=backend_options(backend)) as sess:
        assert [i.name for i in sess.get_inputs()] == ["x", "bias_in"]
        assert sess.get_inputs()[0].type == "tensor(float)"
        assert [o.name for o in sess.get_outputs()] == ["y", "early", "side"]
        got = sess.run(None, feeds)
        again = sess.run(["side", "y"], feeds)
    assert_close(ref, got, atol=ATOL)
    assert_close([ref[2], ref[0]], again, atol=ATOL)


@pytest.mark.parametrize("backend", ["cpu", "openvino"])
@pytest.mark.parametrize("mode", ["streamed", "resident"])
def test_control_flow_matches_original(control_flow, backend: str, mode: str) -> None:  # noqa: ANN001
    src, parts = control_flow
    with PartitionedSession(parts, backend, mode, session_options=backend_options(backend)) as sess:
        for sign in (1.0, -1.0):  # both branches of the If
            feeds = control_flow_feeds(sign=sign)
            assert_close(run_original(src, feeds, backend), sess.run(None, feeds), atol=ATOL)


def test_only_needed_parts_run(branchy) -> None:  # noqa: ANN001
    _, parts = branchy
    sess = PartitionedSession(parts, "cpu", "streamed")
    out = sess.run(["early"], branchy_feeds())
    assert out[0].shape == ()
    assert [p.index for p in sess.last_run.parts] == [0]
    sess.run(None, branchy_feeds())
    assert [p.index for p in sess.last_run.parts] == [0, 1, 2, 3]


def test_feed_and_output_errors(branchy) -> None:  # noqa: ANN001
    _, parts = branchy
    sess = PartitionedSession(parts, "cpu", "streamed")
    with pytest.raises(UsageError, match="missing input 'bias_in'"):
        sess.run(None, {"x": branchy_feeds()["x"]})
    with pytest.raises(UsageError, match="unknown output"):
        sess.run(["nope"], branchy_feeds())
    with pytest.raises(UsageError, match="unknown mode"):
        PartitionedSession(parts, "cpu", "lazy")


@pytest.mark.parametrize("mode", ["streamed", "resident"])
def test_a_part_that_fails_to_load_is_named(tmp_path: Path, mode: str) -> None:
    src = save(build_branchy(), tmp_path / "b.onnx")
    partition_to(src, tmp_path / "parts", parts=3)
    (tmp_path / "parts" / "part_002.onnx").write_bytes(b"not an onnx file")
    with pytest.raises(PartLoadError, match=r"part 2 \(part_002.onnx\) .* failed to load on cpu"):
        sess = PartitionedSession(tmp_path / "parts", "cpu", mode)
        sess.run(None, branchy_feeds())


def test_open_session_takes_files_and_folders(branchy) -> None:  # noqa: ANN001
    src, parts = branchy
    feeds = branchy_feeds()
    single = open_session(src, "cpu")
    folder = open_session(parts, "cpu", "streamed")
    assert_close(single.run(["y"], feeds), folder.run(["y"], feeds), atol=ATOL)


def test_exported_transformer_matches(tmp_path: Path) -> None:
    """An exported graph (the suite's BERT tiny: Shape/Gather chains, attention, tied dims)."""
    models = pytest.importorskip("models")
    try:
        src = models.build("bert-tiny")
    except Exception as exc:  # noqa: BLE001 - torch/transformers missing: nothing to export
        pytest.skip(f"cannot build bert-tiny: {exc}")
    from memshrink.bindings import load_sidecar

    side = load_sidecar(src)
    assert side is not None
    rng = np.random.default_rng(0)
    feeds = {
        i.name: rng.integers(int(i.range[0]), int(i.range[1]), size=i.shape).astype(i.dtype)
        for i in side.inputs
        if i.range
    }
    partition_to(src, tmp_path / "parts", ("dedup-weights", "partition"), parts=4)
    for backend in ("cpu", "openvino"):
        ref = run_original(src, feeds, backend)
        for mode in ("streamed", "resident"):
            opts = backend_options(backend)
            got = PartitionedSession(tmp_path / "parts", backend, mode, session_options=opts).run(
                None, feeds
            )
            assert_close(ref, got, atol=ATOL)


@pytest.mark.skipif(ovep_python() is None, reason=NO_OVEP)
def test_ort_openvino_ep_streamed(branchy, tmp_path: Path) -> None:  # noqa: ANN001
    """The ORT OpenVINO EP lives in its own venv (no onnx there): run the session in it."""
    src, parts = branchy
    feeds = branchy_feeds()
    np.savez(tmp_path / "feeds.npz", **feeds)
    script = (
        "import sys, numpy as np\n"
        "from memshrink.runtime import PartitionedSession\n"
        "f = dict(np.load(sys.argv[2]))\n"
        "s = PartitionedSession(sys.argv[1], 'ort-openvino', 'streamed')\n"
        "np.savez(sys.argv[3], *s.run(None, f))\n"
        "print(s.get_providers())\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    proc = subprocess.run(
        [
            str(ovep_python()),
            "-c",
            script,
            str(parts),
            str(tmp_path / "feeds.npz"),
            str(tmp_path / "o.npz"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "OpenVINOExecutionProvider" in proc.stdout
    with np.load(tmp_path / "o.npz") as z:
        got = [z[f"arr_{i}"] for i in range(3)]
    assert_close(run_original(src, feeds, "cpu"), got, atol=1e-4)


@pytest.mark.cuda
def test_cuda_streamed(branchy) -> None:  # noqa: ANN001
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("no CUDA execution provider here")
    src, parts = branchy
    feeds = branchy_feeds()
    got = PartitionedSession(parts, "cuda", "streamed").run(None, feeds)
    assert_close(run_original(src, feeds, "cpu"), got, atol=1e-4)


def test_runtime_imports_no_onnx() -> None:
    code = "import sys, memshrink.runtime; print([m for m in sys.modules if m.split('.')[0] in ('onnx', 'onnx_ir')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_sequence_values_cross_cuts_and_outputs(tmp_path: Path) -> None:
    """Sequence-typed values (SplitToSequence) are declared with their full type in the parts."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), n)
        for n in ("W1", "W2")
    ]
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W1"], ["h"]),
            helper.make_node("SplitToSequence", ["h"], ["seq"], axis=0),
            helper.make_node("ConcatFromSequence", ["seq"], ["cat"], axis=0),
            helper.make_node("MatMul", ["cat", "W2"], ["y"]),
        ],
        "sequences",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64]),
            helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    src = tmp_path / "s.onnx"
    onnx.save_model(model, src)
    partition_to(src, tmp_path / "parts", parts=2)
    sess = PartitionedSession(tmp_path / "parts", "cpu", "streamed")
    assert len(sess.manifest.parts) == 2
    assert [o.type for o in sess.get_outputs()] == ["tensor(float)", "seq(tensor(float))"]
    feeds = {"x": rng.standard_normal((4, 64)).astype(np.float32)}
    ref = run_original(src, feeds)
    got = sess.run(None, feeds)
    assert_close([ref[0]], [got[0]], atol=ATOL)
    assert_close(list(ref[1]), list(got[1]), atol=ATOL)
