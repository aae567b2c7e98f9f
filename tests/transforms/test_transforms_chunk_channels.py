"""chunk, channels mode: inverted bottlenecks split along their hidden channels, under real ORT.

Tolerance: the reduce's sum over channels is taken slice by slice, then the partial results
are added, so outputs differ by rounding only: compared at atol 1e-4, rtol 1e-4 (the pass's
stated tolerance).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from fixtures_onnx import erf_gelu, erf_gelu_constants, run_ort
from onnx import TensorProto, helper, numpy_helper

from memshrink.checks import check_model
from memshrink.manager import PassContext, PassManager
from memshrink.model import load
from memshrink.transforms.chunk import _predict, _shapes
from memshrink.transforms.chunking.channels import find_blocks, split_channels
from memshrink.writer import save_model

RNG = np.random.default_rng(0)
MiB = 1 << 20


def _w(name: str, *shape: int, scale: float = 0.2, offset: float = 0.0) -> onnx.TensorProto:
    arr = (RNG.standard_normal(shape) * scale + offset).astype(np.float32)
    return numpy_helper.from_array(arr, name)


def _vi(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:  # noqa: ANN001
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return onnx.shape_inference.infer_shapes(m)


def bottleneck(
    cin: int = 16, hidden: int = 96, hw: int = 128, *, leak: bool = False
) -> onnx.ModelProto:
    """MobileNetV2/EfficientNet block: 1x1 expand, BN, ReLU6, depthwise 3x3, swish, 1x1 reduce,
    residual. ``leak`` adds a second reader of the hidden tensor outside the block."""
    nodes = [
        helper.make_node("Conv", ["x", "we", "be"], ["e"]),
        helper.make_node("BatchNormalization", ["e", "g", "b", "m", "v"], ["n"]),
        helper.make_node("Clip", ["n", "lo", "hi"], ["r"]),
        helper.make_node("Conv", ["r", "wd", "bd"], ["d"], group=hidden, pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["d"], ["s"]),
        helper.make_node("Mul", ["d", "s"], ["sw"]),
        helper.make_node("Mul", ["sw", "chs"], ["sc"]),  # per-channel scale [C,1,1]
        helper.make_node("Conv", ["sc", "wr", "br"], ["p"]),
        helper.make_node("Add", ["p", "x"], ["y"]),
    ]
    outputs = [_vi("y", [1, cin, hw, hw])]
    if leak:
        nodes.append(helper.make_node("ReduceMean", ["r"], ["leak"], keepdims=0))
        outputs.append(_vi("leak", []))
    inits = [
        _w("we", hidden, cin, 1, 1), _w("be", hidden), _w("g", hidden, offset=1.0),
        _w("b", hidden), _w("m", hidden), _w("v", hidden, scale=0.1, offset=1.0),
        numpy_helper.from_array(np.float32(0.0), "lo"), numpy_helper.from_array(np.float32(6.0), "hi"),
        _w("wd", hidden, 1, 3, 3), _w("bd", hidden), _w("chs", hidden, 1, 1, offset=1.0),
        _w("wr", cin, hidden, 1, 1, scale=0.05), _w("br", cin),
    ]  # fmt: skip
    return _model(nodes, [_vi("x", [1, cin, hw, hw])], outputs, inits)


def ffn(batch: int = 2, seq: int = 256, h: int = 64, hidden: int = 1024) -> onnx.ModelProto:
    """A transformer FFN as exporters write it: MatMul, bias Add, GELU (Erf form), MatMul,
    bias Add, residual, LayerNorm."""
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["a"]),
        helper.make_node("Add", ["a", "b1"], ["ab"]),
        *erf_gelu("ab", "gelu", form=3),
        helper.make_node("MatMul", ["gelu", "w2"], ["o"]),
        helper.make_node("Add", ["o", "b2"], ["ob"]),
        helper.make_node("Add", ["ob", "x"], ["res"]),
        helper.make_node("LayerNormalization", ["res", "gamma", "beta"], ["y"], axis=-1),
    ]
    inits = [
        _w("w1", h, hidden), _w("b1", hidden), _w("w2", hidden, h, scale=0.05), _w("b2", h),
        *erf_gelu_constants(), _w("gamma", h, offset=1.0), _w("beta", h),
    ]  # fmt: skip
    return _model(nodes, [_vi("x", [batch, seq, h])], [_vi("y", [batch, seq, h])], inits)


def _feeds(proto: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    inp = proto.graph.input[0]
    return {
        inp.name: rng.standard_normal([d.dim_value for d in inp.type.tensor_type.shape.dim]).astype(
            np.float32
        )
    }


def _steady(path: Path) -> int:
    """Measured ORT CPU steady state: run-3 peak over the state after session creation."""
    from memshrink.verify import profile

    run = profile(str(path), backends=("cpu",), runs=3).runs[0]
    st = {s["name"]: s for s in run.stages}
    return int(st["run3"]["peak"]) - int(st["session"]["after"])


def _pass(proto: onnx.ModelProto, tmp: Path, stem: str) -> tuple[Path, Path, dict]:
    src = tmp / f"{stem}.onnx"
    onnx.save_model(proto, src)
    model, report = PassManager(["chunk"], options={"chunk": {"modes": "channels"}}).run(src)
    check_model(model)
    out = tmp / f"{stem}_ch.onnx"
    save_model(model, out)
    return src, out, report.passes[0].stats


def test_inverted_bottleneck_is_split_and_lowers_the_peak(tmp_path: Path) -> None:
    proto = bottleneck()
    src, out, st = _pass(proto, tmp_path, "ib")
    ch = st["channels"]
    assert ch["chunks"] >= 2 and ch["blocks"] == 1, ch
    assert ch["predicted_activations_after"] < 0.8 * ch["predicted_activations_before"]
    feeds = _feeds(proto)
    np.testing.assert_allclose(run_ort(out, feeds)[0], run_ort(src, feeds)[0], atol=1e-4, rtol=1e-4)
    m = onnx.load(out)
    convs = [n for n in m.graph.node if n.op_type == "Conv"]
    assert len(convs) == 3 * ch["chunks"]
    names = {i.name for i in m.graph.initializer}
    assert not {"we", "wd", "wr", "g", "chs"} & names  # originals dropped once unused
    # hidden tensor 96 x 128 x 128 x 4 B = 6 MiB; the split keeps about one slice of it
    assert _steady(out) < _steady(src) - 3 * MiB


def test_ffn_is_split_along_its_hidden_dim(tmp_path: Path) -> None:
    proto = ffn()
    src, out, st = _pass(proto, tmp_path, "ffn")
    ch = st["channels"]
    assert ch["chunks"] >= 2 and ch["hidden_channels"] == [1024], ch
    assert ch["predicted_activations_after"] < 0.8 * ch["predicted_activations_before"]
    feeds = _feeds(proto)
    np.testing.assert_allclose(run_ort(out, feeds)[0], run_ort(src, feeds)[0], atol=1e-4, rtol=1e-4)
    # hidden tensors 2 x 256 x 1024 x 4 B = 2 MiB each, several alive in the GELU
    assert _steady(out) < _steady(src) - 2 * MiB


def test_explicit_split_matches_for_every_count(tmp_path: Path) -> None:
    """Unequal slices too (96 channels in 5 and 7): the identity does not need equal parts."""
    proto = bottleneck(hw=16)
    src = tmp_path / "ib.onnx"
    onnx.save_model(proto, src)
    feeds = _feeds(proto)
    ref = run_ort(src, feeds)[0]
    for count in (2, 5, 7):
        model = load(src)
        _, est = _predict(model, PassContext())
        st = split_channels(model.graph, _shapes(est), count)
        assert st.blocks == 1
        check_model(model)
        out = tmp_path / f"ib{count}.onnx"
        save_model(model, out)
        np.testing.assert_allclose(run_ort(out, feeds)[0], ref, atol=1e-4, rtol=1e-4)


def test_hidden_tensor_read_outside_the_block_is_left_alone(tmp_path: Path) -> None:
    proto = bottleneck(hw=16, leak=True)
    src = tmp_path / "leak.onnx"
    onnx.save_model(proto, src)
    model = load(src)
    _, est = _predict(model, PassContext())
    assert find_blocks(model.graph, _shapes(est)) == []
    res = PassManager(["chunk"], options={"chunk": {"modes": "channels"}}).run(src)[1]
    assert not res.passes[0].modified
    assert "reason" in res.passes[0].stats["channels"]


def test_channel_mixing_op_stops_the_block(tmp_path: Path) -> None:
    """A Softmax over the channels between expand and reduce: no block."""
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["a"]),
        helper.make_node("Softmax", ["a"], ["s"], axis=-1),
        helper.make_node("MatMul", ["s", "w2"], ["y"]),
    ]
    proto = _model(
        nodes, [_vi("x", [4, 8])], [_vi("y", [4, 8])], [_w("w1", 8, 64), _w("w2", 64, 8)]
    )
    model = load(proto)
    _, est = _predict(model, PassContext())
    assert find_blocks(model.graph, _shapes(est)) == []


def test_guard_refuses_a_split_that_raises_openvino(tmp_path: Path) -> None:
    """OpenVINO's CPU plugin costs memory per Conv primitive; on a tiny block the split only
    adds primitives, so ``channel_guard=openvino`` refuses every count."""
    src = tmp_path / "ib.onnx"
    onnx.save_model(bottleneck(hw=16), src)
    opts = {"chunk": {"modes": "channels", "channel_guard": "openvino", "min_gain": -1.0}}
    res = PassManager(["chunk"], options=opts).run(src)[1].passes[0]
    assert not res.modified
    ch = res.stats["channels"]
    # ORT's own whole-process peak refuses them first here; the guard refuses the rest
    assert "openvino" in ch["reason"] or "whole-process" in ch["reason"]
    tried = ch.get("guard", {}).get("tried", [])
    assert all("openvino" in t["refused"] for t in tried)


def test_split_that_raises_the_whole_process_peak_is_refused(tmp_path: Path) -> None:
    """On a tiny block the activations saved are smaller than what more kernels cost the
    session (3 KiB a node, kept through the runs): the ORT whole-process peak would rise, so no
    split is taken. (At 16x16 the saving now wins: the session has no 4 MiB parse transient
    on a weightless file, so the run stages are the process peak.)"""
    src = tmp_path / "ib.onnx"
    onnx.save_model(bottleneck(hw=6), src)
    opts = {"chunk": {"modes": "channels", "min_gain": -1.0}}
    res = PassManager(["chunk"], options=opts).run(src)[1].passes[0]
    cands = res.stats["channels"]["candidates"]
    assert not res.modified and cands
    assert all("whole-process" in c["refused"] for c in cands)


def test_the_pipelines_target_backend_is_guarded(tmp_path: Path) -> None:
    """``optimize --backend openvino`` guards OpenVINO without naming it in the options: the
    same refusal as ``channel_guard=openvino``."""
    src = tmp_path / "ib.onnx"
    onnx.save_model(bottleneck(hw=16), src)
    opts = {"chunk": {"modes": "channels", "min_gain": -1.0, "guard_backends": ""}}
    ctx = PassContext(backend="openvino")
    res = PassManager(["chunk"], options=opts).run(src, ctx)[1].passes[0]
    ch = res.stats["channels"]
    assert not res.modified and ch["candidates"]
    assert "openvino" in ch["reason"] or "whole-process" in ch["reason"]
    assert all("openvino" in t["refused"] for t in ch.get("guard", {}).get("tried", []))


def test_slices_are_read_from_the_file_without_mapping_it(tmp_path: Path) -> None:
    """The split weights are read slice by slice with pread: equal to numpy slicing on every
    axis, and no mapping of the file is left in the process."""
    import onnx_ir as ir

    from memshrink.transforms.weight_io import read_slice

    arr = np.arange(4 * 6 * 5, dtype=np.float32).reshape(4, 6, 5)
    raw = tmp_path / "w.bin"
    raw.write_bytes(b"\0" * 128 + arr.tobytes())
    t = ir.ExternalTensor(
        "w.bin", 128, arr.nbytes, ir.DataType.FLOAT, shape=ir.Shape([4, 6, 5]), name="w",
        base_dir=tmp_path,
    )  # fmt: skip
    for axis, lo, hi in ((0, 1, 3), (1, 2, 6), (2, 0, 1), (1, 0, 6)):
        index = tuple(slice(lo, hi) if a == axis else slice(None) for a in range(3))
        part = read_slice(t, axis, lo, hi)
        assert part is not None and np.array_equal(part, arr[index])
    assert t.raw is None  # never mapped


def test_an_export_without_intermediate_types_gets_typed_slices(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Legacy torch exports declare no value_info: the slices take their dtype from the block
    (here f32 through a Cast round trip), so saving writes them without onnx_ir's "value type
    ... is not known ... Skipping serialization" warning (~250 on torchvision's FCOS)."""
    proto = bottleneck(hw=16)
    sig = next(i for i, n in enumerate(proto.graph.node) if n.op_type == "Sigmoid")
    proto.graph.node[sig].input[0] = "d16"  # Sigmoid(Cast(Cast(d, f16), f32))
    proto.graph.node.insert(sig, helper.make_node("Cast", ["d16"], ["d32"], to=TensorProto.FLOAT))
    proto.graph.node[sig + 1].input[0] = "d32"
    proto.graph.node.insert(sig, helper.make_node("Cast", ["d"], ["d16"], to=TensorProto.FLOAT16))
    proto.graph.ClearField("value_info")
    src = tmp_path / "ib.onnx"
    onnx.save_model(proto, src)
    model = load(src)
    _, est = _predict(model, PassContext())
    assert split_channels(model.graph, _shapes(est), 2).blocks == 1
    new = [v for n in model.graph for v in n.outputs if "__ch" in (v.name or "")]
    assert new and all(v.type is not None for v in new)
    f16 = {v.name for v in new if v.dtype == ir.DataType.FLOAT16}
    assert f16 == {"d16__ch0", "d16__ch1"}, f16
    caplog.set_level(logging.WARNING, logger="onnx_ir")
    out = tmp_path / "ib_ch.onnx"
    save_model(model, out)
    assert not [r for r in caplog.records if "is not known" in r.getMessage()]
    feeds = _feeds(proto)
    np.testing.assert_allclose(
        run_ort(out, feeds)[0], run_ort(src, feeds)[0], atol=1e-3, rtol=1e-3
    )  # f16 round trip inside the block: rounding at f16's 11-bit mantissa


def test_backend_cuda_guards_the_channel_split_on_gpu_plus_host(tmp_path: Path) -> None:
    """``optimize --backend cuda``: a channel split must not raise CUDA's predicted GPU + host
    total either (each split Conv keeps its cuDNN state on the host); the tried splits of a
    small bottleneck save no GPU arena region, so each is refused for its host cost."""
    src = tmp_path / "ib.onnx"
    onnx.save_model(bottleneck(hw=16), src)
    opts = {"chunk": {"modes": "channels", "min_gain": -1.0, "guard_backends": ""}}
    ctx = PassContext(backend="cuda", deploy_only=True)
    res = PassManager(["chunk"], options=opts).run(src, ctx)[1].passes[0]
    g = res.stats["channels"]["guard"]
    before = g["before"]["cuda"]
    assert not res.modified and g["tried"] and "host" in before
    for t in g["tried"]:
        after = t["cuda"]
        assert after["steady_state"] > before["steady_state"] or (
            after["steady_state"] + after["host"] > before["steady_state"] + before["host"]
        )
    gpu_only = {"chunk": {**opts["chunk"], "cuda_total": False}}  # the GPU guard alone keeps one
    assert PassManager(["chunk"], options=gpu_only).run(src, ctx)[1].passes[0].modified


def test_min_saving_refuses_a_tiny_channel_split(tmp_path: Path) -> None:
    """``min_saving`` bounds the channel splits as it bounds the row layouts: the ``all``
    preset (4 MiB) once took channels x2 on HF MobileViT b2 for 0.25 MiB predicted, and the
    75 added nodes cost the OpenVINO EP +16 MiB measured."""
    src = tmp_path / "ib.onnx"
    onnx.save_model(bottleneck(hw=16), src)
    opts: dict = {"chunk": {"modes": "channels"}}
    plain = PassManager(["chunk"], options=opts).run(src)[1].passes[0]
    assert plain.modified and plain.stats["channels"]["chunks"] >= 2
    opts["chunk"]["min_saving"] = "4MiB"
    res = PassManager(["chunk"], options=opts).run(src)[1].passes[0]
    assert not res.modified
    assert "under min_saving 4194304 B" in res.stats["channels"]["reason"]
