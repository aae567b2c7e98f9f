"""Builds the real-world stress set for ``real_models_sweep.py``: exported models of every kind.

Random weights, tiny configs, nothing downloaded. Each builder writes one model into the given
folder and returns a ``Case``: where the model is and how to bind its symbolic dims. Kinds:
torch's legacy (TorchScript) and dynamo exporters with dynamic axes; scripted control flow
(Loop/If reading outer-scope values), Scan, nested If inside Loop, sequence ops; Hugging Face
architectures (GPT-2 with past key/values, T5, BART, ViT, Whisper, DistilBERT, ConvNeXt, ResNet,
a Llama-like decoder with GQA); ORT's transformer optimizer (com.microsoft fused ops), its
dynamic (MatMulInteger) and static (QDQ) quantizers, fp16 conversion; odd files: external data
in a sub-folder / several files, opsets 11..21, IR 7, unused initializers, initializers listed
as inputs, zero-size tensors, omitted optional inputs, unnamed and duplicate-named nodes,
int64/bool/string inputs. Session 10: CLIP (two towers), wav2vec2 / HuBERT (conv front end,
dynamic audio length), Segformer, DINOv2 (interpolated position embeddings, dynamic H/W), DETR
(transformers ResNet backbone), YOLOS, HF MobileViT, Qwen2 with its KV cache (dynamo), Phi-3,
Gemma, BART's decoder step with past, Mamba (unrolled scan), ORT's optimizer on Llama,
``MatMulNBits`` 4-bit, per-channel QDQ, ``torch.while_loop``, opset-23 Attention / RMSNorm /
RotaryEmbedding, an onnxruntime-genai-style decoder (GroupQueryAttention, MatMulNBits).
Session 11: torch LSTM/GRU, a bidirectional LSTM and reverse GRU with ``sequence_lens``, a
Conformer, Whisper / T5 decoder steps with past and their encoders alone, SAM's ViT at 1024²,
an SD-style VAE decoder, ORT's QOperator quantizers (ConvInteger, DynamicQuantizeLSTM,
QLinearConv), onnxconverter-common fp16 with ``keep_io_types``, nested local functions, a
reverse Scan over axis 1, IR 3 / opset 8, external data over many files at offsets, int4
block-wise DequantizeLinear, Optional ops. Session 12: an Optimum-style merged decoder (If on
``use_cache_branch``), ORT BeamSearch / GreedySearch, an SD-style U-Net, a YOLO-style detector
with TopK + NonMaxSuppression, torchvision R3D-18 / R(2+1)D-18, HF EnCodec, GNN scatter /
gather message passing, a model over 2 GiB, inputs with unnamed / ``-1`` dims. Session 13:
Mixtral's MoE (``batched_mm`` experts: TopK routing, GatherND of expert weights), Qwen2-MoE's
eager experts (NonZero token lists, index_add), SDPA at opset 23 (the exporter's own
``Attention``), NonZero + torch.cond unrolled, torchvision RAFT-small (correlation volume,
GridSample), Qwen2 with sliding-window attention, DeepLabV3-ResNet-50 (dilated, ``8*h8`` dims),
Deformable DETR (multi-scale GridSample), Mamba-2's chunked SSD, a Llama cast to bf16.
Session 14: other exporters in a side-installed child (tf2onnx: a Keras NHWC CNN, a BiLSTM +
GRU, a ``tf.while_loop`` carrying six values, Keras transformer blocks; jax2onnx: a JAX CNN),
onnxscript with opset-18 forms (Col2Im, ReduceMean axes input, Split num_outputs,
ScatterElements max), a DLRM-style recommender (EmbeddingBag), a TTS length regulator, a
PointNet / DGCNN kNN (TopK), TrOCR (vision encoder-decoder), wav2vec2 on 30 s of audio,
SegFormer at 512², HF ConvNeXt-V2 (GRN). Session 15: files other tools touched: ORT's
optimizer then ``quantize_dynamic``, QDQ per-channel BERT, ``MatMulNBitsQuantizer`` (asymmetric
at accuracy level 4; its QDQ int4 form), ORT's saved optimized models (nchwc CNN, extended
BERT), onnxconverter-common fp16 of the U-Net and the YOLO detector, onnxslim / onnxsim outputs,
skl2onnx ColumnTransformer / TF-IDF / kNN pipelines (side packages: ``REAL_MODELS_ML_SITE``).
"""

from __future__ import annotations

import contextlib
import io
import sys
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.version_converter
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: models/
from models.fixtures import zipmap_classifier  # noqa: E402


@dataclass
class Case:
    name: str
    path: Path
    dims: dict[str, int] = field(default_factory=dict)  # symbol -> value for --dim
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # for --shape
    int_ranges: dict[str, tuple[int, int]] = field(default_factory=dict)
    note: str = ""


BUILDERS: list[tuple[str, Callable[[Path], Case]]] = []


def builder(name: str) -> Callable[[Callable[[Path], Case]], Callable[[Path], Case]]:
    def deco(fn: Callable[[Path], Case]) -> Callable[[Path], Case]:
        BUILDERS.append((name, fn))
        return fn

    return deco


@contextlib.contextmanager
def _quiet() -> Any:
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        warnings.simplefilter("ignore")
        yield


def _seed() -> None:
    import torch

    torch.manual_seed(0)
    np.random.seed(0)


def _legacy(
    module: Any,
    args: tuple,
    path: Path,
    names: list[str],
    outs: list[str],
    axes: dict,
    opset: int = 17,
    **kw: Any,
) -> None:
    import torch

    module.eval()
    with _quiet(), torch.no_grad():
        torch.onnx.export(
            module,
            args,
            str(path),
            input_names=names,
            output_names=outs,
            dynamic_axes=axes,
            opset_version=opset,
            dynamo=False,
            **kw,
        )


def _legacy_text(
    inner: Any, path: Path, vocab: int, outs: list[str], opset: int, token_types: bool = False
) -> None:
    """Legacy-export a Hugging Face text model fed (input_ids, attention_mask[,
    token_type_ids]) with symbolic batch and seq; ``outs`` are attributes of its output."""
    import torch

    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if token_types else [])

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = inner

        def forward(self, *feeds: Any) -> Any:
            o = self.m(**dict(zip(names, feeds, strict=True)))
            return tuple(getattr(o, k) for k in outs)

    ones = torch.ones(2, 8, dtype=torch.long)
    args = (_tok(vocab), ones, torch.zeros(2, 8, dtype=torch.long))[: len(names)]
    axes = {n: {0: "batch", 1: "seq"} for n in names}
    _legacy(W(), args, path, names, outs, axes, opset=opset)


def _dynamo(
    module: Any,
    args: tuple,
    path: Path,
    names: list[str],
    outs: list[str],
    dynamic_shapes: Any,
    opset: int = 18,
    kwargs: dict | None = None,
) -> None:
    import torch

    module.eval()
    with _quiet(), torch.no_grad():
        prog = torch.onnx.export(
            module,
            args,
            kwargs=kwargs,
            input_names=names,
            output_names=outs,
            dynamic_shapes=dynamic_shapes,
            opset_version=opset,
            dynamo=True,
        )
        prog.save(str(path))


def _cnn() -> Any:
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(3, 16, 3, padding=1)
            self.bn = nn.BatchNorm2d(16)
            self.c2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
            self.fc = nn.Linear(32, 10)

        def forward(self, x: Any) -> Any:
            y = torch.relu(self.bn(self.c1(x)))
            y = torch.nn.functional.gelu(self.c2(y))
            y = torch.nn.functional.interpolate(y, scale_factor=2.0, mode="nearest")
            return self.fc(y.mean(dim=(2, 3)))

    _seed()
    return Net()


# --------------------------------------------------------------------------- torch exporters


@builder("legacy-cnn-dynHW-op11")
def legacy_cnn(d: Path) -> Case:
    import torch

    p = d / "legacy_cnn.onnx"
    _legacy(
        _cnn(),
        (torch.randn(2, 3, 32, 32),),
        p,
        ["x"],
        ["y"],
        {"x": {0: "batch", 2: "height", 3: "width"}},
        opset=11,
    )
    return Case("legacy-cnn-dynHW-op11", p, dims={"batch": 2, "height": 64, "width": 48})


@builder("dynamo-cnn-dynHW")
def dynamo_cnn(d: Path) -> Case:
    import torch

    p = d / "dynamo_cnn.onnx"
    b, h, w = torch.export.Dim("batch"), torch.export.Dim("h", min=8), torch.export.Dim("w", min=8)
    _dynamo(_cnn(), (torch.randn(2, 3, 32, 32),), p, ["x"], ["y"], ({0: b, 2: h, 3: w},))
    return Case("dynamo-cnn-dynHW", p, dims={"batch": 2, "h": 64, "w": 48})


@builder("legacy-init-as-inputs-op9")
def legacy_init_inputs(d: Path) -> Case:
    import torch
    from torch import nn

    p = d / "legacy_init_inputs.onnx"
    _seed()
    m = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32))
    _legacy(
        m,
        (torch.randn(2, 64),),
        p,
        ["x"],
        ["y"],
        {"x": {0: "n"}},
        opset=9,
        keep_initializers_as_inputs=True,
    )
    return Case("legacy-init-as-inputs-op9", p, dims={"n": 3})


@builder("script-loop-if")
def script_loop_if(d: Path) -> Case:
    import torch
    from torch import nn

    class Body(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(32, 32)
            self.scale = nn.Parameter(torch.randn(32))

        def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
            h = x
            for _ in range(int(n)):
                h = torch.tanh(self.lin(h)) * self.scale
                if bool(h.sum() > 0):  # noqa: SIM108 (a scripted If, on purpose)
                    h = h + x
                else:
                    h = h - x
            return h

    _seed()
    m = torch.jit.script(Body())
    p = d / "script_loop_if.onnx"
    _legacy(
        m,
        (torch.randn(4, 32), torch.tensor(3)),
        p,
        ["x", "n"],
        ["y"],
        {"x": {0: "batch"}},
        opset=13,
    )
    return Case("script-loop-if", p, dims={"batch": 4}, int_ranges={"n": (1, 5)})


def _make_model(graph: onnx.GraphProto, **kw: Any) -> onnx.ModelProto:
    """``helper.make_model`` at IR 10 at most, as exporters write (torch's dynamo exporter: IR
    10): the onnx wheel's default (IR 14 with onnx 1.23) is more than the ONNX Runtime of the
    OpenVINO EP's venv (1.24: IR <= 13) loads, which would make the EP refuse every hand-built
    original, not what users bring."""
    m = helper.make_model(graph, **kw)
    m.ir_version = min(m.ir_version, 10)
    return m


def _save(model: onnx.ModelProto, path: Path, check: bool = True) -> None:
    if check:
        onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))


def _w(name: str, *shape: int, dtype: Any = np.float32) -> TensorProto:
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    return numpy_helper.from_array(rng.standard_normal(shape).astype(dtype), name)


@builder("scan-cumulative")
def scan_model(d: Path) -> Case:
    # Scan body: state = tanh(state @ W + x_t); reads W from the outer scope.
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["s_in", "W"], ["sw"]),
            helper.make_node("Add", ["sw", "x_t"], ["a"]),
            helper.make_node("Tanh", ["a"], ["s_out"]),
            helper.make_node("Identity", ["s_out"], ["y_t"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [1, 64]),
            helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [1, 64]),
        ],
        [
            helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [1, 64]),
            helper.make_tensor_value_info("y_t", TensorProto.FLOAT, [1, 64]),
        ],
    )
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "Win"], ["xp"]),
            helper.make_node("Scan", ["s0", "xp"], ["sf", "ys"], body=body, num_scan_inputs=1),
            helper.make_node("Relu", ["ys"], ["y"]),
        ],
        "scan",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", 1, 64])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["T", 1, 64]),
            helper.make_tensor_value_info("sf", TensorProto.FLOAT, [1, 64]),
        ],
        initializer=[
            _w("W", 64, 64),
            _w("Win", 64, 64),
            numpy_helper.from_array(np.zeros((1, 64), np.float32), "s0"),
        ],
    )
    m = _make_model(g, opset_imports=[helper.make_opsetid("", 16)])
    p = d / "scan.onnx"
    _save(m, p)
    return Case("scan-cumulative", p, dims={"T": 7})


@builder("nested-if-in-loop")
def nested_if_in_loop(d: Path) -> Case:
    then_g = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "Wt"], ["t_out"])],
        "then",
        [],
        [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, ["u1a", "u1b"])],
        initializer=[_w("Wt", 32, 32)],
    )
    else_g = helper.make_graph(
        [helper.make_node("Mul", ["h_in", "scale"], ["e_out"])],
        "else",
        [],
        [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, ["u2a", "u2b"])],
    )
    body = helper.make_graph(
        [
            helper.make_node("Mod", ["i", "two"], ["r"]),
            helper.make_node("Equal", ["r", "zero"], ["even"]),
            helper.make_node("If", ["even"], ["h_if"], then_branch=then_g, else_branch=else_g),
            helper.make_node("Tanh", ["h_if"], ["h_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("ReduceSum", ["h_out"], ["sc"], keepdims=0),
        ],
        "loop_body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_in", TensorProto.FLOAT, ["u3a", "u3b"]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_out", TensorProto.FLOAT, ["u4a", "u4b"]),
            helper.make_tensor_value_info("sc", TensorProto.FLOAT, []),
        ],
        initializer=[
            numpy_helper.from_array(np.array(2, np.int64), "two"),
            numpy_helper.from_array(np.array(0, np.int64), "zero"),
        ],
    )
    g = helper.make_graph(
        [
            helper.make_node("Loop", ["trip", "", "x"], ["h", "scans"], body=body),
            helper.make_node("Add", ["h", "x"], ["y"]),
        ],
        "nested",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32]),
            helper.make_tensor_value_info("trip", TensorProto.INT64, []),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 32]),
            helper.make_tensor_value_info("scans", TensorProto.FLOAT, ["iters"]),
        ],
        initializer=[numpy_helper.from_array(np.full((32,), 0.5, np.float32), "scale")],
    )
    m = _make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    p = d / "nested_if_loop.onnx"
    _save(m, p)
    return Case("nested-if-in-loop", p, dims={"batch": 3}, int_ranges={"trip": (2, 5)})


@builder("sequence-ops")
def sequence_ops(d: Path) -> Case:
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["a"]),
            helper.make_node("Relu", ["a"], ["b"]),
            helper.make_node("Sigmoid", ["a"], ["c"]),
            helper.make_node("SequenceConstruct", ["a", "b", "c"], ["seq"]),
            helper.make_node("SequenceInsert", ["seq", "x2"], ["seq2"]),
            helper.make_node("ConcatFromSequence", ["seq2"], ["cat"], axis=1),
            helper.make_node("SplitToSequence", ["cat", "split"], ["parts"], axis=1),
            helper.make_node("SequenceAt", ["parts", "idx"], ["p1"]),
            helper.make_node("SequenceLength", ["parts"], ["n"]),
            helper.make_node("Add", ["p1", "bias"], ["y"]),
        ],
        "seq",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 48]),
            helper.make_tensor_value_info("x2", TensorProto.FLOAT, ["batch", 48]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["u5a", "u5b"]),
            helper.make_tensor_value_info("n", TensorProto.INT64, []),
        ],
        initializer=[
            _w("W", 48, 48),
            _w("bias", 96),
            numpy_helper.from_array(np.array([96, 96], np.int64), "split"),
            numpy_helper.from_array(np.array(1, np.int64), "idx"),
        ],
    )
    m = _make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    p = d / "sequence_ops.onnx"
    _save(m, p)
    return Case("sequence-ops", p, dims={"batch": 2})


# --------------------------------------------------------------------------- Hugging Face


def _tok(vocab: int, b: int = 2, s: int = 8) -> Any:
    import torch

    return torch.randint(0, vocab, (b, s), generator=torch.Generator().manual_seed(0))


def _gpt2_lm() -> Any:
    """A seeded 2-layer GPT-2 LM with its KV cache on (both GPT-2 exporters' cases)."""
    import transformers

    cfg = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=500, n_positions=128, use_cache=True
    )
    _seed()
    return transformers.GPT2LMHeadModel(cfg).eval()


def _llama_lm() -> Any:
    """A seeded 2-layer Llama with grouped-query attention (4 heads, 2 KV heads)."""
    import transformers

    cfg = transformers.LlamaConfig(
        vocab_size=500,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        use_cache=False,
    )
    _seed()
    return transformers.LlamaForCausalLM(cfg)


@builder("hf-gpt2-past-legacy")
def gpt2_past(d: Path) -> Case:
    import torch
    import transformers

    lm = _gpt2_lm()

    class Wrap(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, ids: Any, mask: Any, k0: Any, v0: Any, k1: Any, v1: Any) -> Any:
            cache = transformers.DynamicCache()
            cache.update(k0, v0, 0)
            cache.update(k1, v1, 1)
            out = self.lm(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
            pk = out.past_key_values
            return (
                out.logits,
                pk.layers[0].keys,
                pk.layers[0].values,
                pk.layers[1].keys,
                pk.layers[1].values,
            )

    past = [torch.randn(2, 4, 5, 16) for _ in range(4)]
    ids = _tok(500, 2, 3)
    mask = torch.ones(2, 8, dtype=torch.long)
    names = ["input_ids", "attention_mask", "past_k0", "past_v0", "past_k1", "past_v1"]
    outs = ["logits", "present_k0", "present_v0", "present_k1", "present_v1"]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"}}
    for n in names[2:]:
        axes[n] = {0: "batch", 2: "past"}
    p = d / "gpt2_past.onnx"
    _legacy(Wrap(), (ids, mask, *past), p, names, outs, axes, opset=14)
    return Case(
        "hf-gpt2-past-legacy",
        p,
        dims={"batch": 2, "seq": 3, "past": 5, "total": 8},
        int_ranges={"attention_mask": (1, 2), "input_ids": (0, 500)},
    )


@builder("hf-gpt2-cache-dynamo")
def gpt2_dynamo(d: Path) -> Case:
    import torch

    lm = _gpt2_lm()

    class Wrap(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, ids: Any, mask: Any) -> Any:
            out = self.lm(input_ids=ids, attention_mask=mask, use_cache=True)
            pk = out.past_key_values
            return out.logits, pk.layers[0].keys, pk.layers[1].values

    b, s = torch.export.Dim("batch"), torch.export.Dim("seq", min=2, max=120)
    p = d / "gpt2_dynamo.onnx"
    _dynamo(
        Wrap(),
        (_tok(500), torch.ones(2, 8, dtype=torch.long)),
        p,
        ["input_ids", "attention_mask"],
        ["logits", "k0", "v1"],
        ({0: b, 1: s}, {0: b, 1: s}),
    )
    return Case(
        "hf-gpt2-cache-dynamo",
        p,
        dims={"batch": 2, "seq": 16},
        int_ranges={"attention_mask": (1, 2)},
    )


def _hf_dynamo(
    name: str,
    module: Any,
    inputs: dict[str, Any],
    dyn: dict[str, dict[int, str]],
    d: Path,
    dims: dict[str, int],
    ranges: dict[str, tuple[int, int]] | None = None,
    opset: int = 18,
) -> Case:
    """Exports an HF model as users do: keyword inputs, named dynamic dims, outputs flattened."""
    import torch

    module.eval()
    sym: dict[str, Any] = {}
    ds = {
        k: (
            {
                a: sym.setdefault(n, torch.export.Dim(n, min=2, max=512))
                for a, n in dyn.get(k, {}).items()
            }
            or None
        )
        for k in inputs
    }
    p = d / f"{name}.onnx"
    _dynamo(module, (), p, list(inputs), None, ds, kwargs=inputs, opset=opset)  # type: ignore[arg-type]
    return Case(name, p, dims=dims, int_ranges=ranges or {})


@builder("hf-t5-encdec-dynamo")
def t5(d: Path) -> Case:
    import torch
    import transformers

    cfg = transformers.T5Config(
        vocab_size=300,
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        use_cache=False,
    )
    _seed()
    m = transformers.T5ForConditionalGeneration(cfg)
    inputs = {
        "input_ids": _tok(300),
        "attention_mask": torch.ones(2, 8, dtype=torch.long),
        "decoder_input_ids": _tok(300, 2, 6),
    }
    dyn = {
        "input_ids": {0: "batch", 1: "enc"},
        "attention_mask": {0: "batch", 1: "enc"},
        "decoder_input_ids": {0: "batch", 1: "dec"},
    }
    return _hf_dynamo(
        "hf-t5-encdec-dynamo",
        m,
        inputs,
        dyn,
        d,
        {"batch": 2, "enc": 10, "dec": 5},
        {"attention_mask": (1, 2)},
    )


@builder("hf-bart-legacy")
def bart(d: Path) -> Case:
    import torch
    import transformers

    cfg = transformers.BartConfig(
        vocab_size=300,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        use_cache=False,
        max_position_embeddings=128,
    )
    _seed()
    inner = transformers.BartForConditionalGeneration(cfg).eval()

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = inner

        def forward(self, ids: Any, mask: Any, dec: Any) -> Any:
            return self.m(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits

    p = d / "bart.onnx"
    axes = {
        "input_ids": {0: "batch", 1: "enc"},
        "attention_mask": {0: "batch", 1: "enc"},
        "decoder_input_ids": {0: "batch", 1: "dec"},
    }
    _legacy(
        W(),
        (_tok(300), torch.ones(2, 8, dtype=torch.long), _tok(300, 2, 6)),
        p,
        list(axes),
        ["logits"],
        axes,
        opset=17,
    )
    return Case(
        "hf-bart-legacy",
        p,
        dims={"batch": 2, "enc": 10, "dec": 5},
        int_ranges={"attention_mask": (1, 2)},
    )


@builder("hf-vit-dynamo")
def vit(d: Path) -> Case:
    import torch
    import transformers

    cfg = transformers.ViTConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        image_size=32,
        patch_size=8,
    )
    _seed()
    m = transformers.ViTModel(cfg)
    return _hf_dynamo(
        "hf-vit-dynamo",
        m,
        {"pixel_values": torch.randn(2, 3, 32, 32)},
        {"pixel_values": {0: "batch"}},
        d,
        {"batch": 2},
    )


@builder("hf-whisper-dynamo")
def whisper(d: Path) -> Case:
    import torch
    import transformers

    cfg = transformers.WhisperConfig(
        vocab_size=300,
        num_mel_bins=16,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        d_model=64,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_source_positions=50,
        max_target_positions=64,
        use_cache=False,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
    )
    _seed()
    m = transformers.WhisperForConditionalGeneration(cfg)
    inputs = {"input_features": torch.randn(2, 16, 100), "decoder_input_ids": _tok(300, 2, 6)}
    dyn = {"input_features": {0: "batch"}, "decoder_input_ids": {0: "batch", 1: "dec"}}
    return _hf_dynamo("hf-whisper-dynamo", m, inputs, dyn, d, {"batch": 2, "dec": 5})


@builder("hf-distilbert-legacy")
def distilbert(d: Path) -> Case:
    import transformers

    cfg = transformers.DistilBertConfig(
        vocab_size=400, dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=128
    )
    _seed()
    inner = transformers.DistilBertModel(cfg).eval()
    p = d / "distilbert.onnx"
    _legacy_text(inner, p, 400, ["last_hidden_state"], opset=14)
    return Case(
        "hf-distilbert-legacy",
        p,
        dims={"batch": 2, "seq": 16},
        int_ranges={"attention_mask": (1, 2)},
    )


@builder("hf-convnext-dynamo")
def convnext(d: Path) -> Case:
    import torch
    import transformers

    cfg = transformers.ConvNextConfig(
        num_channels=3,
        hidden_sizes=[16, 32],
        depths=[1, 1],
        num_stages=2,
        num_labels=10,
        image_size=64,
    )
    _seed()
    m = transformers.ConvNextForImageClassification(cfg)
    return _hf_dynamo(
        "hf-convnext-dynamo",
        m,
        {"pixel_values": torch.randn(2, 3, 64, 64)},
        {"pixel_values": {0: "batch", 2: "h", 3: "w"}},
        d,
        {"batch": 2, "h": 64, "w": 96},
    )


@builder("hf-resnet-legacy")
def resnet(d: Path) -> Case:
    import torch
    import transformers

    cfg = transformers.ResNetConfig(
        num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], num_labels=10
    )
    _seed()
    inner = transformers.ResNetForImageClassification(cfg).eval()

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = inner

        def forward(self, x: Any) -> Any:
            return self.m(pixel_values=x).logits

    p = d / "resnet.onnx"
    _legacy(
        W(),
        (torch.randn(2, 3, 64, 64),),
        p,
        ["pixel_values"],
        ["logits"],
        {"pixel_values": {0: "batch", 2: "h", 3: "w"}},
        opset=13,
    )
    return Case("hf-resnet-legacy", p, dims={"batch": 2, "h": 64, "w": 96})


@builder("hf-llama-gqa-dynamo")
def llama(d: Path) -> Case:
    import torch

    m = _llama_lm()
    inputs = {"input_ids": _tok(500), "attention_mask": torch.ones(2, 8, dtype=torch.long)}
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    return _hf_dynamo(
        "hf-llama-gqa-dynamo",
        m,
        inputs,
        dyn,
        d,
        {"batch": 2, "seq": 12},
        {"attention_mask": (1, 2)},
    )


@builder("hf-llama-gqa-legacy")
def llama_legacy(d: Path) -> Case:

    inner = _llama_lm().eval()
    p = d / "llama_legacy.onnx"
    _legacy_text(inner, p, 500, ["logits"], opset=17)
    return Case(
        "hf-llama-gqa-legacy",
        p,
        dims={"batch": 2, "seq": 12},
        int_ranges={"attention_mask": (1, 2)},
    )


# --------------------------------------------------------------------------- ORT tools


def _bert_legacy(
    d: Path,
    name: str = "bert_src.onnx",
    outs: tuple[str, ...] = ("last_hidden_state", "pooler_output"),
) -> Path:
    import transformers

    cfg = transformers.BertConfig(
        vocab_size=400,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=128,
    )
    _seed()
    inner = transformers.BertModel(cfg).eval()
    p = d / name
    _legacy_text(inner, p, 400, list(outs), opset=14, token_types=True)
    return p


_BERT_DIMS = {"batch": 2, "seq": 16}
_BERT_RANGES = {"attention_mask": (1, 2), "token_type_ids": (0, 2)}


@builder("ort-transformers-optimizer-bert")
def ort_optimized_bert(d: Path) -> Case:
    from onnxruntime.transformers import optimizer

    src = _bert_legacy(d)
    with _quiet():
        opt = optimizer.optimize_model(
            str(src), model_type="bert", num_heads=4, hidden_size=64, opt_level=0
        )
    p = d / "bert_ortopt.onnx"
    opt.save_model_to_file(str(p))
    return Case("ort-transformers-optimizer-bert", p, dims=_BERT_DIMS, int_ranges=_BERT_RANGES)


@builder("ort-optimizer-gpt2-fp16")
def ort_optimized_gpt2_fp16(d: Path) -> Case:
    from onnxruntime.transformers import optimizer

    src = gpt2_past(d)
    with _quiet():
        opt = optimizer.optimize_model(
            str(src.path), model_type="gpt2", num_heads=4, hidden_size=64, opt_level=0
        )
        opt.convert_float_to_float16(keep_io_types=True)
    p = d / "gpt2_ortopt_fp16.onnx"
    opt.save_model_to_file(str(p))
    return Case("ort-optimizer-gpt2-fp16", p, dims=src.dims, int_ranges=src.int_ranges)


@builder("ort-quantize-dynamic-bert")
def quant_dynamic(d: Path) -> Case:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = _bert_legacy(d, "bert_src_q.onnx")
    p = d / "bert_qdyn.onnx"
    with _quiet():
        quantize_dynamic(str(src), str(p), weight_type=QuantType.QInt8)
    return Case("ort-quantize-dynamic-bert", p, dims=_BERT_DIMS, int_ranges=_BERT_RANGES)


@builder("ort-quantize-static-qdq-cnn")
def quant_static(d: Path) -> Case:
    import torch
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    src = d / "cnn_fp32.onnx"
    _legacy(_cnn(), (torch.randn(1, 3, 32, 32),), src, ["x"], ["y"], {"x": {0: "batch"}}, opset=13)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(0)
            self.data = iter(
                [{"x": rng.standard_normal((1, 3, 32, 32), np.float32)} for _ in range(4)]
            )

        def get_next(self) -> Any:
            return next(self.data, None)

    p = d / "cnn_qdq.onnx"
    with _quiet():
        quantize_static(
            str(src),
            str(p),
            Reader(),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
        )
    return Case("ort-quantize-static-qdq-cnn", p, dims={"batch": 2})


@builder("fp16-converted-cnn")
def fp16_cnn(d: Path) -> Case:
    import torch
    from onnxruntime.transformers.float16 import convert_float_to_float16

    src = d / "cnn_for_fp16.onnx"
    _legacy(
        _cnn(),
        (torch.randn(1, 3, 32, 32),),
        src,
        ["x"],
        ["y"],
        {"x": {0: "batch", 2: "h", 3: "w"}},
        opset=17,
    )
    with _quiet():
        m16 = convert_float_to_float16(onnx.load(str(src)), keep_io_types=False)
    p = d / "cnn_fp16.onnx"
    onnx.save(m16, str(p))
    return Case("fp16-converted-cnn", p, dims={"batch": 2, "h": 32, "w": 40})


# --------------------------------------------------------------------------- odd files


def _mlp_graph(opset: int, n_layers: int = 3, width: int = 256) -> onnx.ModelProto:
    nodes, inits = [], []
    cur = "x"
    for i in range(n_layers):
        inits += [_w(f"W{i}", width, width), _w(f"b{i}", width)]
        nodes += [
            helper.make_node("MatMul", [cur, f"W{i}"], [f"m{i}"]),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
            helper.make_node("Relu", [f"a{i}"], [f"r{i}"]),
        ]
        cur = f"r{i}"
    nodes.append(helper.make_node("Identity", [cur], ["y"]))
    g = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])],
        initializer=inits,
    )
    return _make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@builder("external-data-subfolder-multifile")
def external_multi(d: Path) -> Case:
    m = _mlp_graph(17, 4)
    sub = d / "extmulti"
    (sub / "weights").mkdir(parents=True, exist_ok=True)
    for i, t in enumerate(m.graph.initializer):
        loc = f"weights/part{i % 3}.bin"
        raw = t.raw_data
        f = sub / loc
        off = f.stat().st_size if f.exists() else 0
        with open(f, "ab") as fh:
            fh.write(raw)
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", loc), ("offset", str(off)), ("length", str(len(raw)))):
            e = t.external_data.add()
            e.key, e.value = k, v
    p = sub / "model.onnx"
    onnx.save(m, str(p))
    onnx.checker.check_model(str(p))
    return Case("external-data-subfolder-multifile", p, dims={"batch": 4})


@builder("opset-sweep-11..21")
def opsets(d: Path) -> list[Case]:  # type: ignore[override]
    cases = []
    for op in (11, 13, 15, 19, 21):
        m = _mlp_graph(op, 2, 64)
        # ops whose signature changed across opsets
        g = m.graph
        g.node.extend(
            [
                helper.make_node(
                    "Unsqueeze",
                    ["y", "ax"] if op >= 13 else ["y"],
                    ["u"],
                    **({} if op >= 13 else {"axes": [0]}),
                ),
                helper.make_node(
                    "ReduceSum",
                    ["u", "ax"] if op >= 13 else ["u"],
                    ["s"],
                    keepdims=0,
                    **({} if op >= 13 else {"axes": [0]}),
                ),
                helper.make_node("Softmax", ["s"], ["z"], axis=-1),
            ]
        )
        g.initializer.append(numpy_helper.from_array(np.array([0], np.int64), "ax"))
        del g.output[:]
        g.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 64]))
        if op < 13:
            g.initializer.pop()
        p = d / f"opset{op}.onnx"
        m.ir_version = min(m.ir_version, 10 if op >= 21 else 8)
        _save(m, p)
        cases.append(Case(f"opset-{op}", p, dims={"batch": 3}))
    return cases


@builder("ir7-unused-inits-unnamed-nodes")
def ir7(d: Path) -> Case:
    m = _mlp_graph(12, 3, 128)
    m.ir_version = 7
    g = m.graph
    g.initializer.extend([_w("unused_a", 128, 128), _w("unused_b", 64)])
    for i, n in enumerate(g.node):  # empty names; ORT refuses duplicate names, so none here
        n.name = "" if n.op_type != "Relu" else f"relu{i}"
    p = d / "ir7.onnx"
    _save(m, p)
    return Case("ir7-unused-inits-unnamed-nodes", p, dims={"batch": 2})


@builder("zero-size-optional-inputs")
def zero_size(d: Path) -> Case:
    g = helper.make_graph(
        [
            helper.make_node("Concat", ["x", "empty"], ["c"], axis=1),  # empty tensor (2x0)
            helper.make_node("Resize", ["img", "", "scales"], ["r"], mode="nearest"),
            helper.make_node("Clip", ["c", "", "hi"], ["cl"]),
            helper.make_node("MatMul", ["cl", "W"], ["y"]),
            helper.make_node("Shape", ["zero_in"], ["zs"]),
            helper.make_node("ReduceSum", ["zero_in"], ["zsum"], keepdims=1),
        ],
        "zero",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32]),
            helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 2, 8, 8]),
            helper.make_tensor_value_info("zero_in", TensorProto.FLOAT, ["batch", 0]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16]),
            helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 2, 16, 16]),
            helper.make_tensor_value_info("zs", TensorProto.INT64, [2]),
            helper.make_tensor_value_info("zsum", TensorProto.FLOAT, ["u7a", "u7b"]),
        ],
        initializer=[
            numpy_helper.from_array(np.zeros((1, 0), np.float32), "empty"),
            numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
            numpy_helper.from_array(np.array(0.5, np.float32), "hi"),
            _w("W", 32, 16),
        ],
    )
    m = _make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    # Concat of x (batch, 32) with an empty (1, 0) weight: ORT skips the empty input, while
    # ONNX shape inference concludes batch == 1 (onnxsim used to pin the input to [1, 32]).
    p = d / "zero_size.onnx"
    _save(m, p)
    return Case("zero-size-optional-inputs", p, dims={"batch": 2})


@builder("int-bool-string-inputs")
def mixed_inputs(d: Path) -> Case:
    g = helper.make_graph(
        [
            helper.make_node("Gather", ["emb", "ids"], ["e"]),
            helper.make_node("Cast", ["mask"], ["mf"], to=TensorProto.FLOAT),
            helper.make_node("Unsqueeze", ["mf", "ax"], ["mu"]),
            helper.make_node("Mul", ["e", "mu"], ["em"]),
            helper.make_node("ReduceMean", ["em", "ax1"], ["y"], keepdims=0),
            helper.make_node(
                "StringNormalizer", ["words"], ["wn"], case_change_action="LOWER", locale="C"
            ),
            helper.make_node("Where", ["mask", "ids", "neg"], ["ids_masked"]),
        ],
        "mixed",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("mask", TensorProto.BOOL, ["batch", "seq"]),
            helper.make_tensor_value_info("words", TensorProto.STRING, ["nwords"]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 32]),
            helper.make_tensor_value_info("wn", TensorProto.STRING, ["nwords"]),
            helper.make_tensor_value_info("ids_masked", TensorProto.INT64, ["batch", "seq"]),
        ],
        initializer=[
            _w("emb", 1000, 32),
            numpy_helper.from_array(np.array([-1], np.int64), "ax"),
            numpy_helper.from_array(np.array([1], np.int64), "ax1"),
            numpy_helper.from_array(np.array(-1, np.int64), "neg"),
        ],
    )
    m = _make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    p = d / "mixed_inputs.onnx"
    _save(m, p)
    return Case("int-bool-string-inputs", p, dims={"batch": 2, "seq": 6, "nwords": 3})


@builder("skl2onnx-like-ml-zipmap")
def ml_zipmap(d: Path) -> Case:
    """What skl2onnx writes for a classifier: ai.onnx.ml ops, a ZipMap to seq(map(int64,float))."""
    m = zipmap_classifier(features=8, scaler=True, batch_dim=None)
    m.ir_version = 7
    p = d / "skl_zipmap.onnx"
    _save(m, p, check=False)
    return Case(
        "skl2onnx-like-ml-zipmap",
        p,
        shapes={"X": (5, 8)},
        note="first input dim has neither dim_value nor dim_param",
    )


@builder("onnxscript-local-functions")
def local_functions(d: Path) -> Case:
    """Model-local functions (what onnxscript and the dynamo exporter with functions emit)."""
    fn = helper.make_function(
        "custom.fn",
        "GeluBlock",
        ["x", "w"],
        ["y"],
        [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("Mul", ["m", "m"], ["m2"]),
            helper.make_node("Sigmoid", ["m2"], ["s"]),
            helper.make_node("Mul", ["m", "s"], ["y"]),
        ],
        opset_imports=[helper.make_opsetid("", 18)],
    )
    g = helper.make_graph(
        [
            helper.make_node("GeluBlock", ["x", "W1"], ["h"], domain="custom.fn"),
            helper.make_node("GeluBlock", ["h", "W2"], ["h2"], domain="custom.fn"),
            helper.make_node("Add", ["h2", "x"], ["y"]),
        ],
        "fn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])],
        initializer=[_w("W1", 64, 64), _w("W2", 64, 64)],
    )
    m = _make_model(
        g,
        functions=[fn],
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("custom.fn", 1)],
    )
    p = d / "local_functions.onnx"
    _save(m, p)
    return Case("onnxscript-local-functions", p, dims={"batch": 3})


@builder("onnxslim-and-onnxsim-outputs")
def slimmed(d: Path) -> list[Case]:  # type: ignore[override]
    """Models already run through another optimizer (users chain tools)."""
    import onnxsim
    import onnxslim

    src = distilbert(d)
    cases = []
    with _quiet():
        slim = onnxslim.slim(str(src.path))
    p1 = d / "distilbert_slim.onnx"
    onnx.save(slim, str(p1))
    cases.append(Case("onnxslim-output-distilbert", p1, dims=src.dims, int_ranges=src.int_ranges))
    with _quiet():
        sim, ok = onnxsim.simplify(str(src.path))
    p2 = d / "distilbert_sim.onnx"
    onnx.save(sim, str(p2))
    cases.append(Case("onnxsim-output-distilbert", p2, dims=src.dims, int_ranges=src.int_ranges))
    return cases


@builder("graphsurgeon-stale-valueinfo")
def stale_value_info(d: Path) -> Case:
    """Hand-edited graph (onnx-graphsurgeon): value_info left stale (wrong shapes)."""
    import onnx_graphsurgeon as gs

    src = legacy_cnn(d)
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(onnx.load(str(src.path))))
    # insert an extra Relu after the first Conv and leave the old value_info in place
    conv = next(n for n in graph.nodes if n.op == "Conv")
    out = conv.outputs[0]
    mid = gs.Variable("relu_extra", dtype=np.float32)
    for consumer in list(out.outputs):
        consumer.inputs[consumer.inputs.index(out)] = mid
    graph.nodes.append(gs.Node("Relu", inputs=[out], outputs=[mid]))
    graph.cleanup().toposort()
    m = gs.export_onnx(graph)
    for vi in m.graph.value_info:  # stale: claim a wrong static shape
        if vi.type.tensor_type.HasField("shape") and len(vi.type.tensor_type.shape.dim) == 4:
            vi.type.tensor_type.shape.dim[1].dim_value = 999
            break
    p = d / "gs_stale.onnx"
    onnx.save(m, str(p))
    return Case("graphsurgeon-stale-valueinfo", p, dims=src.dims)


@builder("big-activations-cnn")
def big_act(d: Path) -> Case:
    """Large activations (a U-Net-ish stem at 512x512) so `all`'s effect on the peak shows."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Conv2d(3, 32, 3, padding=1)
            self.b = nn.Conv2d(32, 32, 3, padding=1)
            self.c = nn.Conv2d(32, 64, 3, stride=2, padding=1)
            self.up = nn.ConvTranspose2d(64, 32, 2, stride=2)
            self.out = nn.Conv2d(64, 4, 1)

        def forward(self, x: Any) -> Any:
            a = torch.relu(self.a(x))
            b = torch.relu(self.b(a))
            c = torch.relu(self.c(b))
            u = self.up(c)
            return self.out(torch.cat([u, b], 1))

    _seed()
    p = d / "big_act.onnx"
    _legacy(
        Net(),
        (torch.randn(1, 3, 64, 64),),
        p,
        ["x"],
        ["y"],
        {"x": {0: "batch", 2: "h", 3: "w"}},
        opset=17,
    )
    return Case("big-activations-cnn", p, dims={"batch": 1, "h": 512, "w": 512})


@builder("sparse-initializer-no-shape-input")
def sparse_noshape(d: Path) -> list[Case]:  # type: ignore[override]
    """A sparse initializer read inside an If branch; an input that declares no shape."""
    sp = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.0, 2.0, 3.0], np.float32), "S"),
        numpy_helper.from_array(np.array([0, 5, 9], np.int64), "idx"),
        [64],
    )
    then = helper.make_graph(
        [helper.make_node("Add", ["x", "S"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, ["b", 64])],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["b", 64])],
    )
    g = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
            helper.make_node("Greater", ["s", "zero"], ["cond"]),
            helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other),
        ],
        "sparse",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 64])],
        [numpy_helper.from_array(np.array(0, np.float32), "zero")],
        sparse_initializer=[sp],
    )
    p1 = d / "sparse_if.onnx"
    _save(_make_model(g, opset_imports=[helper.make_opsetid("", 17)]), p1, check=False)
    g2 = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
        "noshape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [_w("W", 64, 64)],
    )
    p2 = d / "noshape.onnx"
    onnx.save(_make_model(g2, opset_imports=[helper.make_opsetid("", 17)]), str(p2))
    return [
        Case("sparse-initializer-in-if", p1, dims={"b": 3}),
        Case("input-without-shape", p2, shapes={"x": (4, 64)}),
    ]


@builder("big-mlp-embedded")
def big(d: Path) -> Case:
    """The biggest model of the set (~300 MiB embedded): the tool's own RSS vs onnxsim/onnxslim."""
    m = _mlp_graph(17, 5, 3584)
    p = d / "big_mlp.onnx"
    onnx.save(m, str(p))
    return Case("big-mlp-embedded", p, dims={"batch": 2})


# --------------------------------------------------------------- session 7: timm, torchvision
# timm and torchvision are not memshrink's dependencies. On a CPU torch install them off to the
# side (pip's torchvision wheel is the CUDA build, and pip would replace the CPU torch):
#   pip install --no-deps --target DIR timm torchvision==0.28.0   # 0.28 pairs with torch 2.13
# then run with PYTHONPATH=DIR. Without its C++ ops (the CUDA build on a CPU torch) torchvision
# does not even import: ``_torchvision()`` defines ``torchvision::nms`` in Python first, enough
# for the detectors' postprocess to run and trace (the ONNX export maps it to
# NonMaxSuppression either way).


def _torchvision() -> Any:
    import importlib.util

    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        raise RuntimeError("torchvision is not importable (see the comment above)")
    if not hasattr(torch.ops.torchvision, "nms") and not _tv_ops_load(spec.origin):
        _tv_nms_shim()
    import torchvision
    import torchvision.extension as ext

    if not ext._has_ops():

        def _has_ops() -> bool:  # a def, not a lambda: torch.jit.script compiles it
            return True

        ext._has_ops = _has_ops
        # imported by name there (and the package's ``roi_align`` is the function, not the
        # module): make it call the op, which the exporter maps to RoiAlign
        sys.modules["torchvision.ops.roi_align"]._has_ops = _has_ops
        from torchvision.ops import _register_onnx_ops

        _register_onnx_ops._register_custom_op()
    return torchvision


def _tv_ops_load(origin: str) -> bool:
    import torch

    so = next(Path(origin).parent.glob("_C*.so"), None)
    try:
        torch.ops.load_library(str(so))
    except (OSError, RuntimeError, TypeError):
        return False
    return True


_TV_LIB: list[Any] = []


def _tv_nms_shim() -> None:
    """Greedy NMS in Python, registered as ``torchvision::nms`` (and a ``qnms`` schema, which
    torchvision's import registers a fake kernel for)."""
    import torch

    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")

    def nms(dets: Any, scores: Any, thr: float) -> Any:
        order = torch.argsort(scores, descending=True)
        x1, y1, x2, y2 = dets.unbind(1)
        area = (x2 - x1) * (y2 - y1)
        gone = torch.zeros(len(order), dtype=torch.bool)
        keep = []
        for k in range(len(order)):
            if gone[k]:
                continue
            i, rest = order[k], order[k + 1 :]
            w = (torch.minimum(x2[i], x2[rest]) - torch.maximum(x1[i], x1[rest])).clamp(min=0)
            h = (torch.minimum(y2[i], y2[rest]) - torch.maximum(y1[i], y1[rest])).clamp(min=0)
            inter = w * h
            gone[k + 1 :] |= inter / (area[i] + area[rest] - inter) > thr
            keep.append(i)
        return torch.stack(keep) if keep else torch.zeros(0, dtype=torch.long)

    lib.impl("nms", nms, "CPU")
    lib.define(
        "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
        "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor"
    )

    def roi_align(x: Any, rois: Any, scale: float, ph: int, pw: int, sr: int, al: bool) -> Any:
        ra = sys.modules["torchvision.ops.roi_align"]  # its pure-torch version, not compiled
        return ra._roi_align.__wrapped__(x, rois, scale, ph, pw, sr, al)

    lib.impl("roi_align", roi_align, "CPU")
    _TV_LIB.append(lib)


def _timm(name: str, **kw: Any) -> Any:
    _torchvision()  # timm imports torchvision
    import timm

    _seed()
    return timm.create_model(name, pretrained=False, **kw).eval()


def _img_legacy(case: str, fname: str, model: Any, d: Path, hw: int, dyn_hw: bool) -> Case:
    import torch

    p = d / fname
    axes = {0: "batch", 2: "h", 3: "w"} if dyn_hw else {0: "batch"}
    _legacy(model, (torch.randn(2, 3, hw, hw),), p, ["x"], ["y"], {"x": axes, "y": {0: "batch"}})
    dims = {"batch": 2, "h": hw, "w": hw} if dyn_hw else {"batch": 2}
    return Case(case, p, dims=dims)


def _img_dynamo(case: str, fname: str, model: Any, d: Path, hw: int) -> Case:
    import torch

    p = d / fname
    b = torch.export.Dim("batch", min=1, max=64)
    _dynamo(model, (torch.randn(2, 3, hw, hw),), p, ["x"], ["y"], ({0: b},))
    return Case(case, p, dims={"batch": 2})


@builder("timm-efficientnet-b0-legacy")
def timm_effnet(d: Path) -> Case:
    """Depthwise conv, squeeze-excite (GlobalAveragePool -> Conv -> Sigmoid -> Mul), SiLU."""
    m = _timm("efficientnet_b0", num_classes=10)
    return _img_legacy("timm-efficientnet-b0-legacy", "timm_effnet.onnx", m, d, 96, True)


@builder("timm-regnety-legacy")
def timm_regnet(d: Path) -> Case:
    """Grouped convolutions (group width 8) and SE blocks."""
    m = _timm("regnety_002", num_classes=10)
    return _img_legacy("timm-regnety-legacy", "timm_regnety.onnx", m, d, 64, False)


@builder("timm-mobilevit-dynamo")
def timm_mobilevit(d: Path) -> Case:
    """Conv + transformer hybrid: unfold/fold of patches as Reshape/Transpose chains."""
    m = _timm("mobilevit_xxs", num_classes=10)
    return _img_dynamo("timm-mobilevit-dynamo", "timm_mobilevit.onnx", m, d, 128)


@builder("timm-convnextv2-dynamo")
def timm_convnextv2(d: Path) -> Case:
    """ConvNeXt-V2: global response norm (ReduceL2 / mean over spatial), LayerNorm channels-last."""
    m = _timm("convnextv2_atto", num_classes=10)
    return _img_dynamo("timm-convnextv2-dynamo", "timm_convnextv2.onnx", m, d, 64)


@builder("timm-efficientformer-legacy")
def timm_efficientformer(d: Path) -> Case:
    """EfficientFormer: pooling token mixers, then attention with a learned bias table
    (Gather of an initializer by a constant index)."""
    m = _timm("efficientformer_l1", num_classes=10)
    return _img_legacy("timm-efficientformer-legacy", "timm_efficientformer.onnx", m, d, 224, False)


@builder("timm-swinv2-legacy")
def timm_swinv2(d: Path) -> Case:
    """Swin-V2, shrunk: shifted windows (Roll as Slice+Concat), cosine attention with a
    log-spaced continuous position bias MLP, window partition Reshape/Transpose chains."""
    m = _timm(
        "swinv2_tiny_window8_256",
        num_classes=10,
        embed_dim=32,
        depths=(2, 2, 2, 2),
        num_heads=(1, 2, 4, 8),
    )
    return _img_legacy("timm-swinv2-legacy", "timm_swinv2.onnx", m, d, 256, False)


@builder("timm-deit-distilled-dynamo")
def timm_deit(d: Path) -> Case:
    """DeiT with a distillation token: two heads averaged in eval, class + dist tokens."""
    m = _timm("deit_tiny_distilled_patch16_224", num_classes=10, depth=4)
    return _img_dynamo("timm-deit-distilled-dynamo", "timm_deit.onnx", m, d, 224)


@builder("timm-levit-fp16-legacy")
def timm_levit_fp16(d: Path) -> Case:
    """A model exported at fp16 by torch itself (``.half()``): fp16 weights and activations,
    Cast-free, attention biases gathered from an fp16 table."""
    import torch

    m = _timm("levit_128s", num_classes=10).half()
    p = d / "timm_levit_fp16.onnx"
    x = torch.randn(2, 3, 224, 224).half()
    _legacy(m, (x,), p, ["x"], ["y"], {"x": {0: "batch"}, "y": {0: "batch"}})
    return Case("timm-levit-fp16-legacy", p, dims={"batch": 2})


def _detector(
    case: str,
    fname: str,
    model: Any,
    d: Path,
    hw: tuple[int, int],
    outs: tuple[str, ...] | list[str] = ("boxes", "scores", "labels"),
) -> Case:
    """Legacy export of a torchvision detector with its postprocess (If around the batched NMS,
    TopK, NonZero/GatherND: data-dependent output sizes); one image of fixed size. The builders
    set ``score_thresh=0``: with random weights every score is under the default 0.05, ORT CPU
    then returns no box, and OpenVINO 2026.4 one box of uninitialized memory (different in every
    process: the original "differs" from itself)."""
    import torch

    p = d / fname
    _seed()
    x = [torch.rand(3, *hw)]
    _legacy(model, (x,), p, ["image"], list(outs), {})
    return Case(case, p)


@builder("tv-ssdlite-legacy")
def tv_ssdlite(d: Path) -> Case:
    tv = _torchvision()
    _seed()
    m = tv.models.detection.ssdlite320_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=5, score_thresh=0.0
    )
    return _detector("tv-ssdlite-legacy", "tv_ssdlite.onnx", m, d, (320, 320))


@builder("tv-retinanet-legacy")
def tv_retinanet(d: Path) -> Case:
    """RetinaNet, ResNet-18 FPN backbone (a ResNet-50 one takes minutes to export here)."""
    tv = _torchvision()
    from torchvision.models.detection.backbone_utils import _resnet_fpn_extractor
    from torchvision.ops.feature_pyramid_network import LastLevelP6P7

    _seed()
    backbone = _resnet_fpn_extractor(
        tv.models.resnet18(weights=None),
        5,
        returned_layers=[2, 3, 4],
        extra_blocks=LastLevelP6P7(256, 256),
    )
    m = tv.models.detection.RetinaNet(
        backbone, num_classes=5, min_size=256, max_size=256, score_thresh=0.0
    )
    return _detector("tv-retinanet-legacy", "tv_retinanet.onnx", m, d, (256, 256))


@builder("tv-fcos-legacy")
def tv_fcos(d: Path) -> Case:
    """FCOS (anchor-free, centerness branch), MobileNet-V3 FPN backbone."""
    tv = _torchvision()
    from torchvision.models.detection.backbone_utils import mobilenet_backbone

    _seed()
    backbone = mobilenet_backbone(
        backbone_name="mobilenet_v3_large", weights=None, fpn=True, trainable_layers=0
    )
    from torchvision.models.detection.anchor_utils import AnchorGenerator

    anchors = AnchorGenerator(sizes=((16,), (32,), (64,)), aspect_ratios=((1.0,),) * 3)
    m = tv.models.detection.FCOS(
        backbone,
        num_classes=5,
        min_size=256,
        max_size=256,
        anchor_generator=anchors,
        score_thresh=0.0,
    )
    return _detector("tv-fcos-legacy", "tv_fcos.onnx", m, d, (256, 256))


@builder("tv-keypointrcnn-legacy")
def tv_keypointrcnn(d: Path) -> Case:
    """Keypoint R-CNN (two stages: RPN proposals -> RoiAlign over an FPN -> box and keypoint
    heads, heatmap argmax postprocess), MobileNet-V3 FPN backbone, 256x256."""
    tv = _torchvision()
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.models.detection.backbone_utils import mobilenet_backbone

    _seed()
    backbone = mobilenet_backbone(
        backbone_name="mobilenet_v3_large", weights=None, fpn=True, trainable_layers=0
    )
    anchors = AnchorGenerator(sizes=((32,), (64,), (128,)), aspect_ratios=((0.5, 1.0, 2.0),) * 3)
    m = tv.models.detection.KeypointRCNN(
        backbone,
        num_classes=2,
        num_keypoints=5,
        min_size=256,
        max_size=256,
        rpn_anchor_generator=anchors,
        box_score_thresh=0.0,
        rpn_pre_nms_top_n_test=200,
        rpn_post_nms_top_n_test=50,
        box_detections_per_img=20,
    )
    outs = ["boxes", "labels", "scores", "keypoints", "keypoints_scores"]
    return _detector("tv-keypointrcnn-legacy", "tv_keypointrcnn.onnx", m, d, (256, 256), outs)


@builder("script-if-branch-shapes")
def script_if_shapes(d: Path) -> Case:
    """A scripted If whose branches give different shapes (a pooled half-size tensor or the
    full one), then a Loop that grows a tensor by concatenation each trip (a loop-carried value
    whose shape changes)."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(16, 16)

        def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
            if bool(x.mean() > 0):
                h = torch.nn.functional.avg_pool1d(x, 2)
                h = torch.cat([h, h], dim=-1)
            else:
                h = x * 2.0
            acc = self.lin(h)
            for _ in range(int(n)):
                acc = torch.cat([acc, torch.relu(self.lin(h))], dim=0)
            return acc

    _seed()
    m = torch.jit.script(Net())
    p = d / "script_if_shapes.onnx"
    _legacy(m, (torch.randn(3, 8, 16), torch.tensor(2)), p, ["x", "n"], ["y"], {"x": {0: "batch"}})
    return Case("script-if-branch-shapes", p, dims={"batch": 3}, int_ranges={"n": (1, 4)})


@builder("dynamo-torch-cond")
def dynamo_cond(d: Path) -> Case:
    """``torch.cond`` through the dynamo exporter: an If whose branches are local functions
    (onnxscript) that read the outer weights."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(64, 64)
            self.b = nn.Linear(64, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            def yes(x: torch.Tensor) -> torch.Tensor:
                return torch.relu(self.a(x)) + 1.0

            def no(x: torch.Tensor) -> torch.Tensor:
                return torch.tanh(self.b(x)) - 1.0

            return torch.cond(x.sum() > 0, yes, no, (x,))

    _seed()
    p = d / "dynamo_cond.onnx"
    b = torch.export.Dim("batch", min=1, max=256)
    _dynamo(Net(), (torch.randn(4, 64),), p, ["x"], ["y"], ({0: b},))
    return Case("dynamo-torch-cond", p, dims={"batch": 8})


# --------------------------------------------------------------------------- session 10


def _hf_out(module: Any, names: list[str], keys: tuple[str, ...]) -> Any:
    """Wraps an HF model: positional inputs go in by keyword (``names``), the named outputs come
    out as a tuple (neither exporter takes ``**kwargs`` with per-input dynamic shapes)."""
    import torch

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = module

        def forward(self, a: Any, b: Any = None, c: Any = None) -> Any:
            o = self.m(**dict(zip(names, (a, b, c)[: len(names)], strict=True)))
            return tuple(getattr(o, k) for k in keys)

    return W().eval()


def _hf_dynamo_pos(
    name: str,
    module: Any,
    keys: tuple[str, ...],
    inputs: dict[str, Any],
    dyn: dict[str, dict[int, str]],
    d: Path,
    dims: dict[str, int],
    ranges: dict[str, tuple[int, int]] | None = None,
) -> Case:
    """``_hf_dynamo`` for models whose output is a ModelOutput: named outputs ``keys``."""
    import torch

    sym: dict[str, Any] = {}
    ds = tuple(
        {
            a: sym.setdefault(n, torch.export.Dim(n, min=2, max=4096))
            for a, n in dyn.get(k, {}).items()
        }
        or None
        for k in inputs
    )
    p = d / f"{name}.onnx"
    wrapped = _hf_out(module, list(inputs), keys)
    _dynamo(wrapped, tuple(inputs.values()), p, list(inputs), list(keys), ds)
    return Case(name, p, dims=dims, int_ranges=ranges or {})


@builder("hf-clip-dynamo")
def hf_clip(d: Path) -> Case:
    """CLIP: two towers (text transformer with causal mask + argmax pooling, vision ViT), text
    and image batches independent, the logit matrix between them."""
    import torch
    import transformers

    cfg = transformers.CLIPConfig(
        text_config={
            "vocab_size": 300,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "max_position_embeddings": 32,
        },
        vision_config={
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "image_size": 64,
            "patch_size": 16,
        },
        projection_dim=32,
    )
    _seed()
    m = transformers.CLIPModel(cfg)
    inputs = {
        "input_ids": _tok(300, 3, 8),
        "attention_mask": torch.ones(3, 8, dtype=torch.long),
        "pixel_values": torch.randn(2, 3, 64, 64),
    }
    dyn = {
        "input_ids": {0: "texts", 1: "seq"},
        "attention_mask": {0: "texts", 1: "seq"},
        "pixel_values": {0: "images"},
    }
    return _hf_dynamo_pos(
        "hf-clip-dynamo",
        m,
        ("logits_per_image", "text_embeds", "image_embeds"),
        inputs,
        dyn,
        d,
        {"texts": 3, "seq": 12, "images": 2},
        {"attention_mask": (1, 2), "input_ids": (0, 300)},
    )


def _audio_cfg(cls: Any) -> Any:
    return cls(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        conv_dim=(32, 32, 32),
        conv_stride=(5, 2, 2),
        conv_kernel=(10, 3, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        vocab_size=32,
    )


@builder("hf-wav2vec2-ctc-dynamo")
def hf_wav2vec2(d: Path) -> Case:
    """wav2vec2 CTC: a strided Conv1d feature extractor (group norm), a grouped positional
    Conv1d, a transformer; the audio length is dynamic."""
    import torch
    import transformers

    _seed()
    m = transformers.Wav2Vec2ForCTC(_audio_cfg(transformers.Wav2Vec2Config))
    return _hf_dynamo_pos(
        "hf-wav2vec2-ctc-dynamo",
        m,
        ("logits",),
        {"input_values": torch.randn(2, 4000)},
        {"input_values": {0: "batch", 1: "samples"}},
        d,
        {"batch": 2, "samples": 8000},
    )


@builder("hf-hubert-legacy")
def hf_hubert(d: Path) -> Case:
    """HuBERT through the legacy exporter: the same conv front end, dynamic batch and length."""
    import torch
    import transformers

    _seed()
    m = transformers.HubertModel(_audio_cfg(transformers.HubertConfig)).eval()
    p = d / "hubert.onnx"
    axes = {"input_values": {0: "batch", 1: "samples"}}

    class P(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = m

        def forward(self, x: Any) -> Any:
            return self.m(input_values=x).last_hidden_state

    _legacy(P(), (torch.randn(2, 4000),), p, ["input_values"], ["last_hidden_state"], axes)
    return Case("hf-hubert-legacy", p, dims={"batch": 2, "samples": 8000})


@builder("hf-segformer-dynamo")
def hf_segformer(d: Path) -> Case:
    """Segformer: overlapping patch embeddings, efficient attention with a strided reduction
    Conv, an all-MLP decoder that upsamples every stage to 1/4 (dynamic H/W)."""
    import torch
    import transformers

    cfg = transformers.SegformerConfig(
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[4, 2],
        hidden_sizes=[16, 32],
        patch_sizes=[7, 3],
        strides=[4, 2],
        num_attention_heads=[1, 2],
        mlp_ratios=[2, 2],
        decoder_hidden_size=32,
        num_labels=5,
    )
    _seed()
    m = transformers.SegformerForSemanticSegmentation(cfg)
    return _hf_dynamo_pos(
        "hf-segformer-dynamo",
        m,
        ("logits",),
        {"pixel_values": torch.randn(2, 3, 64, 64)},
        {"pixel_values": {0: "batch", 2: "h", 3: "w"}},
        d,
        {"batch": 2, "h": 128, "w": 96},
    )


@builder("hf-dinov2-legacy")
def hf_dinov2(d: Path) -> Case:
    """DINOv2: position embeddings interpolated (bicubic Resize) to the input's patch grid,
    layer scale; dynamic batch/H/W through the legacy exporter."""
    import torch
    import transformers

    cfg = transformers.Dinov2Config(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        mlp_ratio=2,
        image_size=56,
        patch_size=14,
    )
    _seed()
    inner = transformers.Dinov2Model(cfg).eval()

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = inner

        def forward(self, x: Any) -> Any:
            o = self.m(pixel_values=x)
            return o.last_hidden_state, o.pooler_output

    p = d / "dinov2.onnx"
    axes = {"pixel_values": {0: "batch", 2: "h", 3: "w"}}
    _legacy(W(), (torch.randn(2, 3, 56, 56),), p, ["pixel_values"], ["tokens", "pooled"], axes)
    return Case("hf-dinov2-legacy", p, dims={"batch": 2, "h": 84, "w": 112})


@builder("hf-detr-legacy")
def hf_detr(d: Path) -> Case:
    """DETR with the transformers ResNet backbone (``use_timm_backbone=False``): sine position
    embeddings from the pixel mask, an encoder-decoder over 20 object queries; fixed size."""
    import torch
    import transformers

    backbone = transformers.ResNetConfig(
        embedding_size=16,
        hidden_sizes=[16, 32, 64, 128],
        depths=[1, 1, 1, 1],
        layer_type="basic",
        out_features=["stage4"],
    )
    cfg = transformers.DetrConfig(
        use_timm_backbone=False,
        backbone_config=backbone,
        use_pretrained_backbone=False,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        num_queries=20,
        num_labels=5,
    )
    _seed()
    inner = transformers.DetrForObjectDetection(cfg).eval()

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = inner

        def forward(self, x: Any) -> Any:
            o = self.m(pixel_values=x)
            return o.logits, o.pred_boxes

    p = d / "detr.onnx"
    _legacy(W(), (torch.randn(1, 3, 128, 128),), p, ["pixel_values"], ["logits", "boxes"], {})
    return Case("hf-detr-legacy", p)


@builder("hf-yolos-dynamo")
def hf_yolos(d: Path) -> Case:
    """YOLOS: a ViT with detection tokens appended, interpolated mid-position embeddings."""
    import torch
    import transformers

    cfg = transformers.YolosConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        image_size=[64, 64],
        patch_size=16,
        num_detection_tokens=10,
        num_labels=5,
    )
    _seed()
    m = transformers.YolosForObjectDetection(cfg)
    return _hf_dynamo_pos(
        "hf-yolos-dynamo",
        m,
        ("logits", "pred_boxes"),
        {"pixel_values": torch.randn(2, 3, 64, 64)},
        {"pixel_values": {0: "batch"}},
        d,
        {"batch": 2},
    )


@builder("hf-mobilevit-legacy")
def hf_mobilevit(d: Path) -> Case:
    """HF MobileViT (inverted residuals + unfold/fold transformer blocks), legacy, dynamic batch."""
    import torch
    import transformers

    cfg = transformers.MobileViTConfig(
        image_size=64,
        hidden_sizes=[32, 40, 48],
        neck_hidden_sizes=[8, 8, 16, 24, 32, 40, 160],
        num_attention_heads=2,
        num_labels=10,
    )
    _seed()
    inner = transformers.MobileViTForImageClassification(cfg).eval()

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = inner

        def forward(self, x: Any) -> Any:
            return self.m(pixel_values=x).logits

    p = d / "mobilevit_hf.onnx"
    _legacy(
        W(),
        (torch.randn(2, 3, 64, 64),),
        p,
        ["pixel_values"],
        ["logits"],
        {"pixel_values": {0: "batch"}},
    )
    return Case("hf-mobilevit-legacy", p, dims={"batch": 2})


def _decoder_with_past(lm: Any, n_layers: int) -> Any:
    """Wraps a decoder LM: (ids, mask, k0, v0, k1, v1, ...) -> (logits, present k/v ...)."""
    import torch
    import transformers

    class Wrap(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, ids: Any, mask: Any, *past: Any) -> Any:
            cache = transformers.DynamicCache()
            for i in range(n_layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.lm(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
            pk = out.past_key_values
            return (
                out.logits,
                *[t for i in range(n_layers) for t in (pk.layers[i].keys, pk.layers[i].values)],
            )

    return Wrap().eval()


@builder("hf-qwen2-kv-dynamo")
def hf_qwen2(d: Path) -> Case:
    """Qwen2 (GQA 4/2 heads, rotary, QKV bias) with its KV cache in and out through the dynamo
    exporter: dynamic batch, new tokens and past length."""
    import torch
    import transformers

    cfg = transformers.Qwen2Config(
        vocab_size=500,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        use_cache=True,
    )
    _seed()
    m = _decoder_with_past(transformers.Qwen2ForCausalLM(cfg).eval(), 2)
    b = torch.export.Dim("batch", min=1, max=64)
    s = torch.export.Dim("seq", min=1, max=64)
    past = torch.export.Dim("past", min=1, max=64)
    total = torch.export.Dim.AUTO  # seq + past: a sum of two dims is no derived Dim
    pv = [torch.randn(2, 2, 5, 16) for _ in range(4)]
    p = d / "qwen2_kv.onnx"
    dyn = ({0: b, 1: s}, {0: b, 1: total}, tuple({0: b, 2: past} for _ in range(4)))  # *past
    names = ["input_ids", "attention_mask", "past_k0", "past_v0", "past_k1", "past_v1"]
    outs = ["logits", "present_k0", "present_v0", "present_k1", "present_v1"]
    _dynamo(m, (_tok(500, 2, 3), torch.ones(2, 8, dtype=torch.long), *pv), p, names, outs, dyn)
    return Case(
        "hf-qwen2-kv-dynamo",
        p,
        dims={"batch": 2, "seq": 3, "past": 9, "s64": 12},  # s64: the exporter's seq + past
        int_ranges={"attention_mask": (1, 2), "input_ids": (0, 500)},
    )


@builder("hf-phi3-legacy")
def hf_phi3(d: Path) -> Case:
    """Phi-3 (fused qkv and gate_up projections, RMSNorm, rotary), legacy, no cache."""
    import transformers

    cfg = transformers.Phi3Config(
        vocab_size=500,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        use_cache=False,
        pad_token_id=0,
    )
    _seed()
    inner = transformers.Phi3ForCausalLM(cfg).eval()
    p = d / "phi3.onnx"
    _legacy_text(inner, p, 500, ["logits"], opset=17)
    return Case(
        "hf-phi3-legacy", p, dims={"batch": 2, "seq": 12}, int_ranges={"attention_mask": (1, 2)}
    )


@builder("hf-gemma-dynamo")
def hf_gemma(d: Path) -> Case:
    """Gemma (multi-query attention: 1 KV head, GeGLU, scaled embeddings, tied head), dynamo."""
    import torch
    import transformers

    cfg = transformers.GemmaConfig(
        vocab_size=500,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=128,
        use_cache=False,
    )
    _seed()
    m = transformers.GemmaForCausalLM(cfg)
    inputs = {"input_ids": _tok(500), "attention_mask": torch.ones(2, 8, dtype=torch.long)}
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    return _hf_dynamo(
        "hf-gemma-dynamo", m, inputs, dyn, d, {"batch": 2, "seq": 12}, {"attention_mask": (1, 2)}
    )


@builder("hf-bart-past-legacy")
def hf_bart_past(d: Path) -> Case:
    """BART's decoder step with past: encoder output and the self-attention cache in, the new
    cache out (the `decoder_with_past` file of an exported seq2seq pair)."""
    import torch
    import transformers

    cfg = transformers.BartConfig(
        vocab_size=300,
        d_model=64,
        encoder_layers=1,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        use_cache=True,
        max_position_embeddings=128,
    )
    _seed()
    inner = transformers.BartForConditionalGeneration(cfg).eval()
    dec = inner.get_decoder()
    head = inner.lm_head

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dec, self.head = dec, head

        def forward(
            self, ids: Any, enc: Any, emask: Any, k0: Any, v0: Any, k1: Any, v1: Any
        ) -> Any:
            cache = transformers.EncoderDecoderCache(
                transformers.DynamicCache(), transformers.DynamicCache()
            )
            cache.self_attention_cache.update(k0, v0, 0)
            cache.self_attention_cache.update(k1, v1, 1)
            o = self.dec(
                input_ids=ids,
                encoder_hidden_states=enc,
                encoder_attention_mask=emask,
                past_key_values=cache,
                use_cache=True,
            )
            sc = o.past_key_values.self_attention_cache
            return (
                self.head(o.last_hidden_state),
                sc.layers[0].keys,
                sc.layers[0].values,
                sc.layers[1].keys,
                sc.layers[1].values,
            )

    past = [torch.randn(2, 4, 5, 16) for _ in range(4)]
    args = (_tok(300, 2, 1), torch.randn(2, 7, 64), torch.ones(2, 7, dtype=torch.long), *past)
    names = ["input_ids", "encoder_hidden_states", "encoder_attention_mask"]
    names += ["past_k0", "past_v0", "past_k1", "past_v1"]
    outs = ["logits", "present_k0", "present_v0", "present_k1", "present_v1"]
    axes: dict[str, dict[int, str]] = {
        "input_ids": {0: "batch"},
        "encoder_hidden_states": {0: "batch", 1: "enc"},
        "encoder_attention_mask": {0: "batch", 1: "enc"},
    }
    for n in names[3:]:
        axes[n] = {0: "batch", 2: "past"}
    p = d / "bart_dec_past.onnx"
    _legacy(W(), args, p, names, outs, axes, opset=17)
    return Case(
        "hf-bart-past-legacy",
        p,
        dims={"batch": 2, "enc": 10, "past": 6},
        int_ranges={"encoder_attention_mask": (1, 2), "input_ids": (0, 300)},
    )


@builder("ort-optimizer-llama-gpt2type")
def ort_optimized_llama(d: Path) -> Case:
    """ORT's transformer optimizer on the legacy Llama (model_type gpt2): SimplifiedLayerNorm /
    SkipSimplifiedLayerNormalization, FastGelu-free SwiGLU, whatever fuses."""
    from onnxruntime.transformers import optimizer

    src = llama_legacy(d)
    with _quiet():
        opt = optimizer.optimize_model(
            str(src.path), model_type="gpt2", num_heads=4, hidden_size=64, opt_level=0
        )
    p = d / "llama_ortopt.onnx"
    opt.save_model_to_file(str(p))
    return Case("ort-optimizer-llama-gpt2type", p, dims=src.dims, int_ranges=src.int_ranges)


@builder("ort-matmulnbits-4bit-llama")
def ort_nbits(d: Path) -> Case:
    """4-bit weight-only quantization (``MatMulNBitsQuantizer``, symmetric, block 32): every
    MatMul with a constant weight becomes com.microsoft MatMulNBits (packed uint8 + scales)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    src = llama_legacy(d)
    model = onnx.load(str(src.path))
    with _quiet():
        q = MatMulNBitsQuantizer(
            model, algo_config=DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True)
        )
        q.process()
    p = d / "llama_nbits4.onnx"
    _save(q.model.model, p, check=False)
    return Case("ort-matmulnbits-4bit-llama", p, dims=src.dims, int_ranges=src.int_ranges)


@builder("ort-qdq-perchannel-cnn")
def quant_static_pc(d: Path) -> Case:
    """``quantize_static`` QDQ with per-channel weight scales (axis 0 DequantizeLinear of the
    Conv weights, int8 activations, ``QuantizeBias``), a CNN with a residual add."""
    import torch
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(3, 32, 3, padding=1)
            self.c2 = nn.Conv2d(32, 32, 3, padding=1)
            self.c3 = nn.Conv2d(32, 64, 3, stride=2, padding=1)
            self.fc = nn.Linear(64, 10)

        def forward(self, x: Any) -> Any:
            y = torch.relu(self.c1(x))
            y = torch.relu(self.c2(y) + y)
            y = torch.relu(self.c3(y))
            return self.fc(y.mean(dim=(2, 3)))

    _seed()
    src = d / "cnn_fp32_pc.onnx"
    _legacy(Net(), (torch.randn(1, 3, 64, 64),), src, ["x"], ["y"], {"x": {0: "batch"}}, opset=13)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(0)
            self.data = iter(
                [{"x": rng.standard_normal((1, 3, 64, 64), np.float32)} for _ in range(4)]
            )

        def get_next(self) -> Any:
            return next(self.data, None)

    p = d / "cnn_qdq_pc.onnx"
    with _quiet():
        quantize_static(
            str(src),
            str(p),
            Reader(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
        )
    return Case("ort-qdq-perchannel-cnn", p, dims={"batch": 4})


@builder("dynamo-while-loop")
def dynamo_while(d: Path) -> Case:
    """``torch.while_loop`` through the dynamo exporter: a Loop whose body reads outer weights
    and whose trip count comes from the data (an int input)."""
    import torch
    from torch import nn
    from torch._higher_order_ops import while_loop

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(64, 64)

        def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
            def cond(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
                return i < n

            def body(i: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                return i + 1, torch.tanh(self.lin(h))

            _, h = while_loop(cond, body, (torch.zeros((), dtype=torch.int64), x))
            return h

    _seed()
    p = d / "dynamo_while.onnx"
    b = torch.export.Dim("batch", min=1, max=256)
    _dynamo(Net(), (torch.randn(4, 64), torch.tensor(3)), p, ["x", "n"], ["y"], ({0: b}, None))
    return Case("dynamo-while-loop", p, dims={"batch": 8}, int_ranges={"n": (1, 5)})


@builder("opset23-attention-rmsnorm")
def opset23(d: Path) -> Case:
    """Hand-built opset-23 transformer block: the standard ``Attention`` op (4D, GQA 4/2 heads,
    causal), ``RMSNormalization`` and ``RotaryEmbedding``; symbolic batch and sequence."""
    hid, heads, kv, hd, ff = 64, 4, 2, 16, 128
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", hid])
    pos = helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", hid])
    inv = 1.0 / (10000 ** (np.arange(0, hd, 2) / hd))
    ang = np.arange(128)[:, None] * inv[None]
    inits = [
        _w("g1", hid),
        _w("g2", hid),
        _w("wq", hid, heads * hd),
        _w("wk", hid, kv * hd),
        _w("wv", hid, kv * hd),
        _w("wo", heads * hd, hid),
        _w("w1", hid, ff),
        _w("w2", ff, hid),
        numpy_helper.from_array(np.cos(ang).astype(np.float32), "cos"),
        numpy_helper.from_array(np.sin(ang).astype(np.float32), "sin"),
        numpy_helper.from_array(np.array([0, 0, heads, hd], np.int64), "shq"),
        numpy_helper.from_array(np.array([0, 0, kv, hd], np.int64), "shkv"),
        numpy_helper.from_array(np.array([0, 0, heads * hd], np.int64), "sho"),
    ]
    for t in inits:
        if t.name.startswith(("g", "w")):
            t.CopyFrom(
                numpy_helper.from_array(
                    numpy_helper.to_array(t) * 0.1 + (1.0 if t.name[0] == "g" else 0.0), t.name
                )
            )
    n = helper.make_node
    nodes = [
        n("RMSNormalization", ["x", "g1"], ["h"], axis=-1, epsilon=1e-6),
        n("MatMul", ["h", "wq"], ["q0"]),
        n("MatMul", ["h", "wk"], ["k0"]),
        n("MatMul", ["h", "wv"], ["v0"]),
        n("Reshape", ["q0", "shq"], ["q1"]),
        n("Reshape", ["k0", "shkv"], ["k1"]),
        n("Reshape", ["v0", "shkv"], ["v1"]),
        n("Transpose", ["q1"], ["q2"], perm=[0, 2, 1, 3]),  # 4D rotary input is BNSH
        n("Transpose", ["k1"], ["k2"], perm=[0, 2, 1, 3]),
        n("RotaryEmbedding", ["q2", "cos", "sin", "position_ids"], ["q"]),
        n("RotaryEmbedding", ["k2", "cos", "sin", "position_ids"], ["k"]),
        n("Transpose", ["v1"], ["v"], perm=[0, 2, 1, 3]),
        n("Attention", ["q", "k", "v"], ["a"], is_causal=1),
        n("Transpose", ["a"], ["a1"], perm=[0, 2, 1, 3]),
        n("Reshape", ["a1", "sho"], ["a2"]),
        n("MatMul", ["a2", "wo"], ["o"]),
        n("Add", ["x", "o"], ["r1"]),
        n("RMSNormalization", ["r1", "g2"], ["h2"], axis=-1, epsilon=1e-6),
        n("MatMul", ["h2", "w1"], ["f1"]),
        n("Gelu", ["f1"], ["f2"]),
        n("MatMul", ["f2", "w2"], ["f3"]),
        n("Add", ["r1", "f3"], ["y"]),
    ]
    g = helper.make_graph(nodes, "opset23", [x, pos], [y], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 11  # the least opset 23 allows
    p = d / "opset23_attention.onnx"
    _save(m, p)
    return Case(
        "opset23-attention-rmsnorm",
        p,
        dims={"batch": 2, "seq": 32},
        int_ranges={"position_ids": (0, 100)},
    )


@builder("hf-mamba-legacy")
def hf_mamba(d: Path) -> Case:
    """Mamba (selective state-space scan, causal depthwise Conv1d), legacy export of the
    reference PyTorch path: the scan is a Python loop over tokens, so the exporter unrolls it
    for the traced length (16) and only the batch stays dynamic, as users get it."""
    import torch
    import transformers

    cfg = transformers.MambaConfig(
        vocab_size=300,
        hidden_size=64,
        state_size=8,
        num_hidden_layers=2,
        expand=2,
        conv_kernel=4,
        use_cache=False,
    )
    _seed()
    inner = transformers.MambaForCausalLM(cfg).eval()

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = inner

        def forward(self, ids: Any) -> Any:
            return self.m(input_ids=ids).logits

    p = d / "mamba.onnx"
    _legacy(W(), (_tok(300, 2, 16),), p, ["input_ids"], ["logits"], {"input_ids": {0: "batch"}})
    return Case("hf-mamba-legacy", p, dims={"batch": 3}, int_ranges={"input_ids": (0, 300)})


@builder("genai-style-gqa-nbits")
def genai_gqa(d: Path) -> Case:
    """What onnxruntime-genai's model builder writes for an LLM: com.microsoft
    GroupQueryAttention (rotary inside, ``seqlens_k`` / ``total_sequence_length`` computed from
    the attention mask, past KV in, present KV out), SimplifiedLayerNormalization /
    SkipSimplifiedLayerNormalization, then 4-bit ``MatMulNBits`` weights (the quantizer run on
    it); symbolic batch, sequence and past."""
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    hid, heads, kv, hd, ff, vocab, layers = 64, 4, 2, 16, 128, 500, 2
    n = helper.make_node
    ms = "com.microsoft"
    inits = [_w("embed", vocab, hid), _w("lm_head", hid, vocab)]
    inv = 1.0 / (10000 ** (np.arange(0, hd, 2) / hd))
    ang = np.arange(256)[:, None] * inv[None]
    inits += [
        numpy_helper.from_array(np.cos(ang).astype(np.float32), "cos_cache"),
        numpy_helper.from_array(np.sin(ang).astype(np.float32), "sin_cache"),
        numpy_helper.from_array(np.array([1], np.int64), "one_axis"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array([1], np.int64), "idx1"),
    ]
    ins = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]),
    ]
    outs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", vocab])]
    nodes = [
        n("Gather", ["embed", "input_ids"], ["h0"]),
        n("ReduceSum", ["attention_mask", "one_axis"], ["msum"], keepdims=0),
        n("Sub", ["msum", "one"], ["msum1"]),
        n("Cast", ["msum1"], ["seqlens_k"], to=TensorProto.INT32),
        n("Shape", ["attention_mask"], ["mshape"]),
        n("Gather", ["mshape", "idx1"], ["tot64"]),
        n("Cast", ["tot64"], ["total_len"], to=TensorProto.INT32),
    ]
    h, skip = "h0", None
    for i in range(layers):
        inits += [
            numpy_helper.from_array(np.ones(hid, np.float32), f"ln1_{i}"),
            numpy_helper.from_array(np.ones(hid, np.float32), f"ln2_{i}"),
            _w(f"wqkv_{i}", hid, (heads + 2 * kv) * hd),
            _w(f"wo_{i}", heads * hd, hid),
            _w(f"wup_{i}", hid, ff),
            _w(f"wdown_{i}", ff, hid),
        ]
        for t in inits[-4:]:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * 0.05, t.name))
        pk, pv = f"past_key_values.{i}.key", f"past_key_values.{i}.value"
        for nm in (pk, pv):
            ins.append(
                helper.make_tensor_value_info(nm, TensorProto.FLOAT, ["batch", kv, "past", hd])
            )
        for nm in (f"present.{i}.key", f"present.{i}.value"):
            outs.append(
                helper.make_tensor_value_info(nm, TensorProto.FLOAT, ["batch", kv, "total", hd])
            )
        if skip is None:
            nodes.append(
                n("SimplifiedLayerNormalization", [h, f"ln1_{i}"], [f"x{i}"], epsilon=1e-6, axis=-1)
            )
            res = h
        else:
            nodes.append(
                n(
                    "SkipSimplifiedLayerNormalization",
                    [h, skip, f"ln1_{i}"],
                    [f"x{i}", "", "", f"res{i}"],
                    domain=ms,
                    epsilon=1e-6,
                )
            )
            res = f"res{i}"
        q, k, v = f"q{i}", f"k{i}", f"v{i}"
        nodes += [
            n("MatMul", [f"x{i}", f"wqkv_{i}"], [f"qkv{i}"]),
            n(
                "Split",
                [f"qkv{i}", f"split{i}"],
                [q, k, v],
                axis=-1,
            ),
            n(
                "GroupQueryAttention",
                [q, k, v, pk, pv, "seqlens_k", "total_len", "cos_cache", "sin_cache"],
                [f"att{i}", f"present.{i}.key", f"present.{i}.value"],
                domain=ms,
                num_heads=heads,
                kv_num_heads=kv,
                do_rotary=1,
            ),
            n("MatMul", [f"att{i}", f"wo_{i}"], [f"o{i}"]),
            n(
                "SkipSimplifiedLayerNormalization",
                [f"o{i}", res, f"ln2_{i}"],
                [f"y{i}", "", "", f"res2_{i}"],
                domain=ms,
                epsilon=1e-6,
            ),
            n("MatMul", [f"y{i}", f"wup_{i}"], [f"u{i}"]),
            n("Sigmoid", [f"u{i}"], [f"s{i}"]),
            n("Mul", [f"u{i}", f"s{i}"], [f"g{i}"]),
            n("MatMul", [f"g{i}", f"wdown_{i}"], [f"dn{i}"]),
        ]
        inits.append(
            numpy_helper.from_array(np.array([heads * hd, kv * hd, kv * hd], np.int64), f"split{i}")
        )
        h, skip = f"dn{i}", f"res2_{i}"
    inits.append(numpy_helper.from_array(np.ones(hid, np.float32), "lnf"))
    nodes += [
        n("SkipSimplifiedLayerNormalization", [h, skip, "lnf"], ["hf"], domain=ms, epsilon=1e-6),
        n("MatMul", ["hf", "lm_head"], ["logits"]),
    ]
    g = helper.make_graph(nodes, "genai", ins, outs, inits)
    model = _make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ms, 1)])
    with _quiet():
        qz = MatMulNBitsQuantizer(
            model, algo_config=DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True)
        )
        qz.process()
    p = d / "genai_gqa_nbits.onnx"
    _save(qz.model.model, p, check=False)
    return Case(
        "genai-style-gqa-nbits",
        p,
        dims={"batch": 2, "seq": 1, "past": 11, "total": 12},  # a decode step: GQA takes
        # several new tokens over a past only at batch 1
        int_ranges={"attention_mask": (1, 2), "input_ids": (0, vocab)},
    )


# --------------------------------------------------------------------------- session 11


class _RNNStack:
    """A 2-layer LSTM then a GRU, as torch's legacy exporter writes them (ONNX ``LSTM`` /
    ``GRU`` ops with their weights re-ordered into ONNX's gate layout)."""

    @staticmethod
    def make() -> Any:
        from torch import nn

        class Net(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.lstm = nn.LSTM(32, 64, num_layers=2, batch_first=True)
                self.gru = nn.GRU(64, 48, batch_first=True)
                self.fc = nn.Linear(48, 10)

            def forward(self, x: Any) -> Any:
                y, _ = self.lstm(x)
                z, h = self.gru(y)
                return self.fc(z), h

        _seed()
        return Net()


@builder("torch-lstm-gru-legacy")
def torch_rnn(d: Path) -> Case:
    import torch

    p = d / "lstm_gru.onnx"
    axes = {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}, "h": {1: "batch"}}
    _legacy(_RNNStack.make(), (torch.randn(2, 9, 32),), p, ["x"], ["y", "h"], axes, opset=14)
    return Case("torch-lstm-gru-legacy", p, dims={"batch": 3, "seq": 40})


@builder("onnx-bilstm-bigru-seqlens")
def bi_rnn_seqlens(d: Path) -> Case:
    """Bidirectional LSTM then a reverse GRU, both fed ``sequence_lens`` (padded batches, as
    speech/CTC exporters write them) and an initial state; the GRU with ``linear_before_reset``
    (not ``layout=1``: ONNX Runtime's CPU kernels refuse batch-major recurrences)."""
    hid, inp, hg = 32, 16, 24
    n = helper.make_node
    nodes = [
        n(
            "LSTM",
            ["x", "W", "R", "B", "seq_lens", "h0", ""],
            ["Y", "Yh", ""],
            direction="bidirectional",
            hidden_size=hid,
        ),
        # Y: [seq, 2, batch, hid] -> [seq, batch, 2 * hid]
        n("Transpose", ["Y"], ["Yt"], perm=[0, 2, 1, 3]),
        n("Reshape", ["Yt", "shp"], ["feat"]),
        n(
            "GRU",
            ["feat", "Wg", "Rg", "Bg", "seq_lens", ""],
            ["Z", "Zh"],
            direction="reverse",
            hidden_size=hg,
            linear_before_reset=1,
        ),
        n("Squeeze", ["Z", "ax1"], ["z"]),
        n("MatMul", ["z", "Wo"], ["logits"]),
        n("LogSoftmax", ["logits"], ["y"], axis=-1),
    ]
    inits = [
        _w("W", 2, 4 * hid, inp),
        _w("R", 2, 4 * hid, hid),
        _w("B", 2, 8 * hid),
        _w("Wg", 1, 3 * hg, 2 * hid),
        _w("Rg", 1, 3 * hg, hg),
        _w("Bg", 1, 6 * hg),
        _w("Wo", hg, 20),
        numpy_helper.from_array(np.array([0, 0, 2 * hid], np.int64), "shp"),
        numpy_helper.from_array(np.array([1], np.int64), "ax1"),
    ]
    for t in inits[:6]:
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * 0.2, t.name))
    g = helper.make_graph(
        nodes,
        "birnn",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", "batch", inp]),
            helper.make_tensor_value_info("seq_lens", TensorProto.INT32, ["batch"]),
            helper.make_tensor_value_info("h0", TensorProto.FLOAT, [2, "batch", hid]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["seq", "batch", 20]),
            helper.make_tensor_value_info("Yh", TensorProto.FLOAT, [2, "batch", hid]),
            helper.make_tensor_value_info("Zh", TensorProto.FLOAT, [1, "batch", hg]),
        ],
        inits,
    )
    m = _make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    p = d / "birnn_seqlens.onnx"
    _save(m, p)
    return Case(
        "onnx-bilstm-bigru-seqlens",
        p,
        dims={"seq": 50, "batch": 4},
        int_ranges={"seq_lens": (1, 51)},
    )


@builder("conformer-block-dynamo")
def conformer(d: Path) -> Case:
    """A Conformer-style speech encoder (conv subsampling, macaron half-step FFNs, MHSA, a
    conv module with GLU, depthwise Conv1d, BatchNorm and SiLU), dynamo-exported with a
    dynamic number of frames."""
    import torch
    from torch import nn

    dm = 64

    class ConvModule(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln = nn.LayerNorm(dm)
            self.pw1 = nn.Conv1d(dm, 2 * dm, 1)
            self.dw = nn.Conv1d(dm, dm, 15, padding=7, groups=dm)
            self.bn = nn.BatchNorm1d(dm)
            self.pw2 = nn.Conv1d(dm, dm, 1)

        def forward(self, x: Any) -> Any:
            y = self.ln(x).transpose(1, 2)
            y = nn.functional.glu(self.pw1(y), dim=1)
            y = nn.functional.silu(self.bn(self.dw(y)))
            return self.pw2(y).transpose(1, 2)

    class FFN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(
                nn.LayerNorm(dm), nn.Linear(dm, 4 * dm), nn.SiLU(), nn.Linear(4 * dm, dm)
            )

        def forward(self, x: Any) -> Any:
            return self.net(x)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ff1, self.ff2 = FFN(), FFN()
            self.ln_att = nn.LayerNorm(dm)
            self.att = nn.MultiheadAttention(dm, 4, batch_first=True)
            self.conv = ConvModule()
            self.ln = nn.LayerNorm(dm)

        def forward(self, x: Any) -> Any:
            x = x + 0.5 * self.ff1(x)
            a = self.ln_att(x)
            x = x + self.att(a, a, a, need_weights=False)[0]
            x = x + self.conv(x)
            x = x + 0.5 * self.ff2(x)
            return self.ln(x)

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.sub = nn.Sequential(
                nn.Conv2d(1, 16, 3, stride=2), nn.ReLU(), nn.Conv2d(16, 16, 3, stride=2), nn.ReLU()
            )
            self.proj = nn.Linear(16 * 19, dm)
            self.blocks = nn.ModuleList([Block(), Block()])
            self.out = nn.Linear(dm, 32)

        def forward(self, feats: Any) -> Any:
            y = self.sub(feats.unsqueeze(1))  # [b, 16, t', 19]
            b, c, t, f = y.shape
            y = self.proj(y.permute(0, 2, 1, 3).reshape(b, t, c * f))
            for blk in self.blocks:
                y = blk(y)
            return self.out(y).log_softmax(-1)

    _seed()
    m = Encoder()
    p = d / "conformer.onnx"
    frames = torch.export.Dim("frames", min=16, max=4000)
    _dynamo(
        m,
        (torch.randn(2, 120, 80),),
        p,
        ["feats"],
        ["logp"],
        ({0: torch.export.Dim("batch", min=1, max=64), 1: frames},),
    )
    return Case("conformer-block-dynamo", p, dims={"batch": 2, "frames": 400})


@builder("hf-whisper-decoder-past-legacy")
def hf_whisper_past(d: Path) -> Case:
    """Whisper's decoder step with its self-attention cache (the ``decoder_with_past`` file of
    an exported speech-to-text pair): the encoder's output and past keys/values in."""
    import torch
    import transformers

    cfg = transformers.WhisperConfig(
        vocab_size=300,
        num_mel_bins=16,
        encoder_layers=1,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        d_model=64,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_source_positions=50,
        max_target_positions=64,
        use_cache=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
    )
    _seed()
    inner = transformers.WhisperForConditionalGeneration(cfg).eval()
    dec, head = inner.get_decoder(), inner.proj_out

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dec, self.head = dec, head

        def forward(self, ids: Any, enc: Any, k0: Any, v0: Any, k1: Any, v1: Any) -> Any:
            cache = transformers.EncoderDecoderCache(
                transformers.DynamicCache(), transformers.DynamicCache()
            )
            cache.self_attention_cache.update(k0, v0, 0)
            cache.self_attention_cache.update(k1, v1, 1)
            o = self.dec(
                input_ids=ids, encoder_hidden_states=enc, past_key_values=cache, use_cache=True
            )
            sc = o.past_key_values.self_attention_cache
            return (
                self.head(o.last_hidden_state),
                sc.layers[0].keys,
                sc.layers[0].values,
                sc.layers[1].keys,
                sc.layers[1].values,
            )

    past = [torch.randn(2, 4, 5, 16) for _ in range(4)]
    args = (_tok(300, 2, 1), torch.randn(2, 50, 64), *past)
    names = ["input_ids", "encoder_hidden_states", "past_k0", "past_v0", "past_k1", "past_v1"]
    outs = ["logits", "present_k0", "present_v0", "present_k1", "present_v1"]
    axes: dict[str, dict[int, str]] = {
        "input_ids": {0: "batch"},
        "encoder_hidden_states": {0: "batch"},
    }
    for nm in names[2:]:
        axes[nm] = {0: "batch", 2: "past"}
    p = d / "whisper_dec_past.onnx"
    _legacy(W(), args, p, names, outs, axes, opset=17)
    return Case(
        "hf-whisper-decoder-past-legacy",
        p,
        dims={"batch": 2, "past": 20},
        int_ranges={"input_ids": (0, 300)},
    )


@builder("hf-t5-decoder-past-legacy")
def hf_t5_past(d: Path) -> Case:
    """T5's decoder step with past self-attention keys/values (relative position bias computed
    from the cache length), as exported for seq2seq generation."""
    import torch
    import transformers

    cfg = transformers.T5Config(
        vocab_size=300,
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_layers=1,
        num_decoder_layers=2,
        num_heads=4,
        use_cache=True,
        is_decoder=True,
    )
    _seed()
    inner = transformers.T5ForConditionalGeneration(cfg).eval()
    dec, head = inner.get_decoder(), inner.lm_head

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dec, self.head = dec, head

        def forward(
            self, ids: Any, enc: Any, emask: Any, k0: Any, v0: Any, k1: Any, v1: Any
        ) -> Any:
            cache = transformers.EncoderDecoderCache(
                transformers.DynamicCache(), transformers.DynamicCache()
            )
            cache.self_attention_cache.update(k0, v0, 0)
            cache.self_attention_cache.update(k1, v1, 1)
            o = self.dec(
                input_ids=ids,
                encoder_hidden_states=enc,
                encoder_attention_mask=emask,
                past_key_values=cache,
                use_cache=True,
            )
            sc = o.past_key_values.self_attention_cache
            return (
                self.head(o.last_hidden_state),
                sc.layers[0].keys,
                sc.layers[0].values,
                sc.layers[1].keys,
                sc.layers[1].values,
            )

    past = [torch.randn(2, 4, 5, 16) for _ in range(4)]
    args = (_tok(300, 2, 1), torch.randn(2, 7, 64), torch.ones(2, 7, dtype=torch.long), *past)
    names = ["input_ids", "encoder_hidden_states", "encoder_attention_mask"]
    names += ["past_k0", "past_v0", "past_k1", "past_v1"]
    outs = ["logits", "present_k0", "present_v0", "present_k1", "present_v1"]
    axes: dict[str, dict[int, str]] = {
        "input_ids": {0: "batch"},
        "encoder_hidden_states": {0: "batch", 1: "enc"},
        "encoder_attention_mask": {0: "batch", 1: "enc"},
    }
    for nm in names[3:]:
        axes[nm] = {0: "batch", 2: "past"}
    p = d / "t5_dec_past.onnx"
    _legacy(W(), args, p, names, outs, axes, opset=17)
    return Case(
        "hf-t5-decoder-past-legacy",
        p,
        dims={"batch": 2, "enc": 12, "past": 9},
        int_ranges={"encoder_attention_mask": (1, 2), "input_ids": (0, 300)},
    )


@builder("hf-sam-vit-1024-legacy")
def hf_sam_vit(d: Path) -> Case:
    """SAM's ViT image encoder at its native 1024² input: windowed attention (14², padded to
    whole windows) with decomposed relative positions, one global-attention layer over all
    4096 patches, and the conv neck."""
    import torch
    import transformers

    cfg = transformers.SamVisionConfig(
        hidden_size=64,
        output_channels=32,
        num_hidden_layers=3,
        num_attention_heads=2,
        mlp_dim=128,
        image_size=1024,
        patch_size=16,
        window_size=14,
        global_attn_indexes=[2],
        use_rel_pos=True,
    )
    _seed()
    inner = transformers.SamVisionModel(cfg).eval()

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = inner

        def forward(self, x: Any) -> Any:
            return self.m(pixel_values=x).last_hidden_state

    p = d / "sam_vit.onnx"
    _legacy(W(), (torch.randn(1, 3, 1024, 1024),), p, ["pixel_values"], ["embeddings"], {})
    return Case("hf-sam-vit-1024-legacy", p)


@builder("sd-vae-decoder-256-legacy")
def vae_decoder(d: Path) -> Case:
    """A Stable-Diffusion-style VAE decoder: latent 4×32² -> image 3×256², GroupNorm(32) + SiLU
    ResNet blocks, a single-head attention over the latent in the mid block, three nearest
    ×2 upsamplings; dynamic batch and latent H/W, as SD exporters write it."""
    import torch
    from torch import nn

    def gn(c: int) -> Any:
        return nn.GroupNorm(32, c, eps=1e-6)

    class Res(nn.Module):
        def __init__(self, ci: int, co: int) -> None:
            super().__init__()
            self.n1, self.c1 = gn(ci), nn.Conv2d(ci, co, 3, padding=1)
            self.n2, self.c2 = gn(co), nn.Conv2d(co, co, 3, padding=1)
            self.skip = nn.Conv2d(ci, co, 1) if ci != co else nn.Identity()

        def forward(self, x: Any) -> Any:
            h = self.c1(nn.functional.silu(self.n1(x)))
            h = self.c2(nn.functional.silu(self.n2(h)))
            return self.skip(x) + h

    class Attn(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.n = gn(c)
            self.q, self.k, self.v, self.o = (nn.Linear(c, c) for _ in range(4))

        def forward(self, x: Any) -> Any:
            b, c, h, w = x.shape
            t = self.n(x).reshape(b, c, h * w).transpose(1, 2)
            a = nn.functional.scaled_dot_product_attention(self.q(t), self.k(t), self.v(t))
            return x + self.o(a).transpose(1, 2).reshape(b, c, h, w)

    class Dec(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv_in = nn.Conv2d(4, 128, 3, padding=1)
            self.mid = nn.Sequential(Res(128, 128), Attn(128), Res(128, 128))
            chans = [128, 128, 64, 64]
            ups = []
            for i, (ci, co) in enumerate(zip([128, *chans[:-1]], chans, strict=True)):
                blocks: list[Any] = [Res(ci, co), Res(co, co)]
                if i < 3:
                    blocks += [nn.Upsample(scale_factor=2.0, mode="nearest")]
                    blocks += [nn.Conv2d(co, co, 3, padding=1)]
                ups.append(nn.Sequential(*blocks))
            self.up = nn.Sequential(*ups)
            self.norm, self.conv_out = gn(64), nn.Conv2d(64, 3, 3, padding=1)

        def forward(self, z: Any) -> Any:
            h = self.up(self.mid(self.conv_in(z / 0.18215)))
            return self.conv_out(nn.functional.silu(self.norm(h)))

    _seed()
    p = d / "vae_decoder.onnx"
    axes = {"latent": {0: "batch", 2: "h", 3: "w"}, "image": {0: "batch", 2: "H", 3: "W"}}
    _legacy(Dec(), (torch.randn(1, 4, 32, 32),), p, ["latent"], ["image"], axes, opset=17)
    return Case("sd-vae-decoder-256-legacy", p, dims={"batch": 1, "h": 32, "w": 32})


def _resnetish(d: Path, name: str) -> Path:
    """A small residual CNN with a Gemm head (static 1×3×64², opset 13) for the quantizers."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Conv2d(3, 32, 3, stride=2, padding=1)
            self.a = nn.Conv2d(32, 32, 3, padding=1)
            self.b = nn.Conv2d(32, 32, 3, padding=1)
            self.down = nn.Conv2d(32, 64, 3, stride=2, padding=1)
            self.fc = nn.Linear(64, 10)

        def forward(self, x: Any) -> Any:
            y = torch.relu(self.stem(x))
            y = torch.relu(y + self.b(torch.relu(self.a(y))))
            y = torch.relu(self.down(y))
            y = nn.functional.max_pool2d(y, 2)
            return self.fc(nn.functional.adaptive_avg_pool2d(y, 1).flatten(1))

    _seed()
    p = d / name
    _legacy(Net(), (torch.randn(1, 3, 64, 64),), p, ["x"], ["y"], {"x": {0: "batch"}}, opset=13)
    return p


@builder("ort-quantize-dynamic-convinteger-lstm")
def quant_dynamic_conv(d: Path) -> Case:
    """ORT's dynamic quantizer (QOperator is its only format) on a CNN and on an LSTM stack:
    ``ConvInteger`` with ``DynamicQuantizeLinear``, ``MatMulInteger``, and com.microsoft's
    ``DynamicQuantizeLSTM``."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = _resnetish(d, "resnetish_qdyn_src.onnx")
    p = d / "resnetish_qdyn.onnx"
    with _quiet():
        quantize_dynamic(
            str(src),
            str(p),
            weight_type=QuantType.QUInt8,
            op_types_to_quantize=["Conv", "MatMul", "Gemm"],
        )
    rsrc = d / "lstm_qdyn_src.onnx"
    axes = {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}, "h": {1: "batch"}}
    _legacy(_RNNStack.make(), (torch.randn(2, 9, 32),), rsrc, ["x"], ["y", "h"], axes, opset=14)
    rp = d / "lstm_qdyn.onnx"
    with _quiet():
        quantize_dynamic(
            str(rsrc), str(rp), weight_type=QuantType.QInt8, op_types_to_quantize=["LSTM", "MatMul"]
        )
    return [  # type: ignore[return-value]
        Case("ort-quantize-dynamic-convinteger", p, dims={"batch": 2}),
        Case("ort-quantize-dynamic-lstm", rp, dims={"batch": 3, "seq": 40}),
    ]


@builder("ort-quantize-static-qoperator-cnn")
def quant_static_qop(d: Path) -> Case:
    """ORT's static quantizer in QOperator format: ``QLinearConv``, ``QLinearAdd``,
    ``QLinearGlobalAveragePool``, ``QGemm`` (com.microsoft), uint8 activations, per-channel
    int8 weights."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    src = _resnetish(d, "resnetish_qop_src.onnx")

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(0)
            self.data = iter(
                [{"x": rng.standard_normal((1, 3, 64, 64), np.float32)} for _ in range(4)]
            )

        def get_next(self) -> Any:
            return next(self.data, None)

    p = d / "resnetish_qop.onnx"
    with _quiet():
        quantize_static(
            str(src),
            str(p),
            Reader(),
            quant_format=QuantFormat.QOperator,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            per_channel=True,
        )
    return Case("ort-quantize-static-qoperator-cnn", p, dims={"batch": 2})


@builder("onnxconverter-fp16-keepio-bert")
def fp16_keepio(d: Path) -> Case:
    """onnxconverter-common's ``float16`` converter with ``keep_io_types``: f32 inputs and
    outputs, Cast nodes at the edges, fp16 inside (LayerNorm, Softmax, Erf)."""
    from onnxconverter_common import float16

    # without the pooler: the converter leaves its Gather's output declared f32 while
    # writing the node in fp16, a file no runtime loads
    src = _bert_legacy(d, "bert_src_fp16c.onnx", ("last_hidden_state",))
    with _quiet():
        m16 = float16.convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    p = d / "bert_fp16_keepio.onnx"
    onnx.save(m16, str(p))
    return Case("onnxconverter-fp16-keepio-bert", p, dims=_BERT_DIMS, int_ranges=_BERT_RANGES)


@builder("onnx-nested-local-functions")
def nested_functions(d: Path) -> Case:
    """A transformer block written as ONNX local functions three deep (Block -> MLP ->
    GeluTanh, Block -> LayerNormF), functions with attributes bound through ``ref_attr_name``,
    a function in a domain of its own, and a function called from an If branch."""
    n = helper.make_node
    dom = "local.nn"
    ln = n("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)
    ln.attribute.append(  # bound to the caller's ``epsilon``
        helper.make_attribute_ref("epsilon", onnx.AttributeProto.FLOAT, "epsilon")
    )
    f_ln = helper.make_function(
        dom, "LayerNormF", ["x", "g", "b"], ["y"], [ln], [helper.make_opsetid("", 20)], ["epsilon"]
    )
    f_gelu = helper.make_function(
        dom,
        "GeluTanh",
        ["x"],
        ["y"],
        [n("Gelu", ["x"], ["y"], approximate="tanh")],
        [helper.make_opsetid("", 20)],
    )
    f_mlp = helper.make_function(
        dom,
        "MLP",
        ["x", "w1", "w2"],
        ["y"],
        [
            n("MatMul", ["x", "w1"], ["h"]),
            n("GeluTanh", ["h"], ["a"], domain=dom),
            n("MatMul", ["a", "w2"], ["y"]),
        ],
        [helper.make_opsetid("", 20), helper.make_opsetid(dom, 1)],
    )
    f_att = helper.make_function(
        "local.att",
        "SelfAttention",
        ["x", "wq", "wk", "wv"],
        ["y"],
        [
            n("MatMul", ["x", "wq"], ["q"]),
            n("MatMul", ["x", "wk"], ["k"]),
            n("MatMul", ["x", "wv"], ["v"]),
            n("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
            n("MatMul", ["q", "kt"], ["s"]),
            n("Constant", [], ["scale"], value_float=0.125),
            n("Mul", ["s", "scale"], ["ss"]),
            n("Softmax", ["ss"], ["p"], axis=-1),
            n("MatMul", ["p", "v"], ["y"]),
        ],
        [helper.make_opsetid("", 20)],
    )
    f_block = helper.make_function(
        dom,
        "Block",
        ["x", "g", "b", "wq", "wk", "wv", "w1", "w2"],
        ["y"],
        [
            n("LayerNormF", ["x", "g", "b"], ["h"], domain=dom, epsilon=1e-5),
            n("SelfAttention", ["h", "wq", "wk", "wv"], ["a"], domain="local.att"),
            n("Add", ["x", "a"], ["r"]),
            n("LayerNormF", ["r", "g", "b"], ["h2"], domain=dom, epsilon=1e-5),
            n("MLP", ["h2", "w1", "w2"], ["m"], domain=dom),
            n("Add", ["r", "m"], ["y"]),
        ],
        [
            helper.make_opsetid("", 20),
            helper.make_opsetid(dom, 1),
            helper.make_opsetid("local.att", 1),
        ],
    )
    hid, ff = 64, 256
    inits = [
        numpy_helper.from_array(np.ones(hid, np.float32), "g"),
        numpy_helper.from_array(np.zeros(hid, np.float32), "b"),
    ]
    nodes = []
    cur = "x"
    for i in range(3):
        ws = [f"wq{i}", f"wk{i}", f"wv{i}", f"w1_{i}", f"w2_{i}"]
        for nm, shape in zip(ws, [(hid, hid)] * 3 + [(hid, ff), (ff, hid)], strict=True):
            inits.append(numpy_helper.from_array(_arr(nm, shape) * 0.1, nm))
        nodes.append(n("Block", [cur, "g", "b", *ws], [f"h{i}"], domain=dom))
        cur = f"h{i}"
    # an If whose then-branch calls a function: the tail runs only when flag is set
    then_g = helper.make_graph(
        [n("GeluTanh", [cur], ["t_out"], domain=dom)],
        "then",
        [],
        [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, None)],
    )
    else_g = helper.make_graph(
        [n("Identity", [cur], ["e_out"])],
        "else",
        [],
        [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, None)],
    )
    nodes.append(n("If", ["flag"], ["y"], then_branch=then_g, else_branch=else_g))
    g = helper.make_graph(
        nodes,
        "nested_functions",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", hid]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", hid])],
        inits,
    )
    m = _make_model(
        g,
        opset_imports=[
            helper.make_opsetid("", 20),
            helper.make_opsetid(dom, 1),
            helper.make_opsetid("local.att", 1),
        ],
        functions=[f_ln, f_gelu, f_mlp, f_att, f_block],
    )
    p = d / "nested_functions.onnx"
    _save(m, p)
    return Case("onnx-nested-local-functions", p, dims={"batch": 2, "seq": 64})


def _arr(name: str, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    return rng.standard_normal(shape).astype(np.float32)


@builder("scan-reverse-axes-batch")
def scan_axes(d: Path) -> Case:
    """A Scan over axis 1 of a batch-major input, scanned in reverse, two loop-carried states
    (a GRU-like cell written out in ONNX ops) and a scan output written along axis 1 in
    reverse; the batch is dynamic inside the body."""
    n = helper.make_node
    h = 32
    body = helper.make_graph(
        [
            n("MatMul", ["h_in", "U"], ["hu"]),
            n("Add", ["x_t", "hu"], ["pre"]),
            n("Sigmoid", ["pre"], ["z"]),
            n("Tanh", ["pre"], ["c"]),
            n("Sub", ["one", "z"], ["omz"]),
            n("Mul", ["omz", "h_in"], ["keep"]),
            n("Mul", ["z", "c"], ["new"]),
            n("Add", ["keep", "new"], ["h_out"]),
            n("Add", ["acc_in", "h_out"], ["acc_out"]),
            n("Identity", ["h_out"], ["y_t"]),
        ],
        "cell",
        [
            helper.make_tensor_value_info("h_in", TensorProto.FLOAT, ["batch", h]),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, ["batch", h]),
            helper.make_tensor_value_info("x_t", TensorProto.FLOAT, ["batch", h]),
        ],
        [
            helper.make_tensor_value_info("h_out", TensorProto.FLOAT, ["batch", h]),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, ["batch", h]),
            helper.make_tensor_value_info("y_t", TensorProto.FLOAT, ["batch", h]),
        ],
    )
    g = helper.make_graph(
        [
            n("MatMul", ["x", "W"], ["xw"]),  # [batch, T, h]
            n("MatMul", ["x", "Z"], ["zero_bt"]),
            n("ReduceSum", ["zero_bt", "ax1"], ["h0"], keepdims=0),  # zeros [batch, h]
            n(
                "Scan",
                ["h0", "h0", "xw"],
                ["hf", "acc", "ys"],
                body=body,
                num_scan_inputs=1,
                scan_input_axes=[1],
                scan_input_directions=[1],
                scan_output_axes=[1],
                scan_output_directions=[1],
            ),
            n("Relu", ["ys"], ["y"]),
        ],
        "scan_axes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "T", 16])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "T", h]),
            helper.make_tensor_value_info("hf", TensorProto.FLOAT, ["batch", h]),
            helper.make_tensor_value_info("acc", TensorProto.FLOAT, ["batch", h]),
        ],
        initializer=[
            numpy_helper.from_array(_arr("U", (h, h)) * 0.2, "U"),
            numpy_helper.from_array(_arr("Wscan", (16, h)) * 0.2, "W"),
            numpy_helper.from_array(np.zeros((16, h), np.float32), "Z"),
            numpy_helper.from_array(np.array(1.0, np.float32), "one"),
            numpy_helper.from_array(np.array([1], np.int64), "ax1"),
        ],
    )
    m = _make_model(g, opset_imports=[helper.make_opsetid("", 16)])
    p = d / "scan_axes.onnx"
    _save(m, p)
    return Case("scan-reverse-axes-batch", p, dims={"batch": 3, "T": 25})


@builder("opset8-era-ir3")
def opset8(d: Path) -> Case:
    """A model as 2018-era converters wrote it: IR 3, opset 8, ops in their old forms (Upsample
    with a ``scales`` attribute, Slice / Pad / Unsqueeze / Split / ReduceMean with attribute
    arguments, Clip-6 with min/max attributes, BatchNormalization-7, Dropout-7, MaxPool-8,
    Gemm-7, Sum/Max of several inputs) which every runtime upgrades on load."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("BatchNormalization", ["c1", "s1", "o1", "m1", "v1"], ["bn1"], epsilon=1e-5),
        n("Clip", ["bn1"], ["r1"], min=0.0, max=6.0),
        n("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["p1", "w2", "b2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("Relu", ["c2"], ["r2"]),
        n("Split", ["r2"], ["sa", "sb"], axis=1, split=[8, 8]),
        n("Max", ["sa", "sb"], ["mx"]),
        n("Sum", ["sa", "sb", "mx"], ["sm"]),
        n("Upsample", ["sm"], ["up"], mode="nearest", scales=[1.0, 1.0, 2.0, 2.0]),
        n("Pad", ["up"], ["pd"], pads=[0, 0, 1, 1, 0, 0, 1, 1], mode="constant", value=0.0),
        n("Slice", ["pd"], ["sl"], axes=[2, 3], starts=[1, 1], ends=[-1, -1]),
        n("Dropout", ["sl"], ["dr"], ratio=0.1),
        n("Concat", ["dr", "r1"], ["cat"], axis=1),
        n("ReduceMean", ["cat"], ["gap"], axes=[2, 3], keepdims=0),
        n("Unsqueeze", ["gap"], ["gu"], axes=[2]),
        n("Flatten", ["gu"], ["fl"], axis=1),
        n("Gemm", ["fl", "wf", "bf"], ["logits"], transB=1),
        n("Softmax", ["logits"], ["y"], axis=1),
    ]
    inits = [
        _w("w1", 16, 3, 3, 3),
        _w("b1", 16),
        numpy_helper.from_array(np.ones(16, np.float32), "s1"),
        numpy_helper.from_array(np.zeros(16, np.float32), "o1"),
        numpy_helper.from_array(np.zeros(16, np.float32), "m1"),
        numpy_helper.from_array(np.ones(16, np.float32), "v1"),
        _w("w2", 16, 16, 3, 3),
        _w("b2", 16),
        _w("wf", 10, 24),
        _w("bf", 10),
    ]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 64, 64])]
    ins += [  # IR 3: every initializer is also a graph input
        helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits
    ]
    g = helper.make_graph(
        nodes,
        "opset8",
        ins,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 8)])
    m.ir_version = 3
    m.producer_name = "onnx-era-2018"
    p = d / "opset8.onnx"
    _save(m, p)
    return Case("opset8-era-ir3", p, dims={"N": 4})


@builder("external-data-many-files-offsets")
def external_many(d: Path) -> Case:
    """32 weights split over 12 small files: most at a nonzero, unaligned offset after a header,
    other tensors and gaps, the last tensor of every other file without a ``length`` key, the
    files in a nested folder with a dot in its name."""
    m = _mlp_graph(17, 16, 160)
    for t in m.graph.initializer:  # unit-variance activations: 16 layers of N(0, 1) weights
        # reach 1e15, where two GEMM paths' rounding reads as a mismatch at rtol 1e-5
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) / np.float32(9.0), t.name))
    sub = d / "extmany"
    wdir = sub / "w.d" / "parts"
    wdir.mkdir(parents=True, exist_ok=True)
    for f in wdir.iterdir():
        f.unlink()
    shards: dict[int, list[TensorProto]] = {}
    for i, t in enumerate(m.graph.initializer):
        shards.setdefault(i % 12, []).append(t)
    for k, ts in shards.items():
        loc = f"w.d/parts/shard-{k:02d}.bin"
        f = sub / loc
        f.write_bytes(b"" if k < 2 else b"HDR" * (k + 1))  # unaligned starts
        for j, t in enumerate(ts):
            raw = t.raw_data
            off = f.stat().st_size
            last = j == len(ts) - 1
            with open(f, "ab") as fh:
                fh.write(raw + (b"" if last else b"\0" * (j % 5)))  # gaps between tensors
            t.ClearField("raw_data")
            t.data_location = TensorProto.EXTERNAL
            kv = [("location", loc), ("offset", str(off))]
            if not (last and k % 2):  # the spec lets a file's last tensor omit its length
                kv.append(("length", str(len(raw))))
            for key, v in kv:
                e = t.external_data.add()
                e.key, e.value = key, v
    p = sub / "model.onnx"
    onnx.save(m, str(p))
    onnx.checker.check_model(str(p))
    return Case("external-data-many-files-offsets", p, dims={"batch": 8})


@builder("hf-whisper-encoder-legacy")
def hf_whisper_encoder(d: Path) -> Case:
    """Whisper's audio encoder alone, as speech pipelines ship it (two Conv1d, GELU, sinusoidal
    positions sliced to the frames, pre-LN blocks); legacy export, dynamic batch (Whisper fixes
    the frame count: max_source_positions × 2 mel frames)."""
    import torch
    import transformers

    cfg = transformers.WhisperConfig(
        vocab_size=300,
        num_mel_bins=80,
        encoder_layers=2,
        decoder_layers=1,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        d_model=128,
        encoder_ffn_dim=256,
        decoder_ffn_dim=256,
        max_source_positions=750,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
    )
    _seed()
    enc = transformers.WhisperForConditionalGeneration(cfg).eval().get_encoder()

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc = enc

        def forward(self, feats: Any) -> Any:
            return self.enc(input_features=feats).last_hidden_state

    p = d / "whisper_encoder.onnx"
    axes = {"input_features": {0: "batch"}, "last_hidden_state": {0: "batch"}}
    args = (torch.randn(1, 80, 1500),)
    _legacy(W(), args, p, ["input_features"], ["last_hidden_state"], axes, opset=17)
    return Case("hf-whisper-encoder-legacy", p, dims={"batch": 2})


@builder("hf-t5-encoder-legacy")
def hf_t5_encoder(d: Path) -> Case:
    """T5's encoder alone (relative-position buckets computed from the sequence length, RMS
    layer norm, no biases), as embedding / retrieval pipelines export it; legacy, batch and
    sequence dynamic."""
    import transformers

    cfg = transformers.T5Config(
        vocab_size=300, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, use_cache=False
    )
    _seed()
    enc = transformers.T5EncoderModel(cfg).eval()
    p = d / "t5_encoder.onnx"
    _legacy_text(enc, p, 300, ["last_hidden_state"], opset=17)
    return Case(
        "hf-t5-encoder-legacy",
        p,
        dims={"batch": 2, "seq": 96},
        int_ranges={"attention_mask": (1, 2), "input_ids": (0, 300)},
    )


@builder("onnx-int4-blockwise-dq-mlp")
def int4_blockwise(d: Path) -> Case:
    """Weight-only int4 as opset 21 writes it: ``INT4`` / ``UINT4`` initializers (two values a
    byte), ``DequantizeLinear`` with ``block_size`` 32 along K and per-block scales (and a
    uint4 zero point on one layer), feeding MatMuls; the token dim is dynamic."""
    n = helper.make_node
    k, hidden, block = 256, 256, 32
    rng = np.random.default_rng(21)
    nodes, inits, cur = [], [], "x"
    for i in range(4):
        signed = i != 2
        q = rng.integers(-8, 8, (k, hidden)) if signed else rng.integers(0, 16, (k, hidden))
        w = helper.make_tensor(
            f"w{i}", TensorProto.INT4 if signed else TensorProto.UINT4, [k, hidden], q.flatten()
        )
        scale = (rng.random((k // block, hidden)) * 0.02 + 0.005).astype(np.float32)
        inits += [w, numpy_helper.from_array(scale, f"s{i}")]
        dq_in = [f"w{i}", f"s{i}"]
        if not signed:
            zp = helper.make_tensor(
                f"z{i}", TensorProto.UINT4, [k // block, hidden], np.full(scale.size, 8)
            )
            inits.append(zp)
            dq_in.append(f"z{i}")
        nodes += [
            n("DequantizeLinear", dq_in, [f"wf{i}"], axis=0, block_size=block),
            n("MatMul", [cur, f"wf{i}"], [f"m{i}"]),
            n("Relu" if i < 3 else "Identity", [f"m{i}"], [f"r{i}"]),
        ]
        cur = f"r{i}"
    nodes.append(n("Identity", [cur], ["y"]))
    g = helper.make_graph(
        nodes,
        "int4",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["tokens", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["tokens", hidden])],
        inits,
    )
    m = _make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    p = d / "int4_blockwise.onnx"
    _save(m, p)
    return Case("onnx-int4-blockwise-dq-mlp", p, dims={"tokens": 64})


@builder("onnx-optional-ops")
def optional_ops(d: Path) -> Case:
    """Optional values inside a graph (opset 18): ``Optional`` wraps a tensor or nothing,
    ``OptionalHasElement`` picks the If branch, ``OptionalGetElement`` unwraps it; the
    branch output shapes differ (a projection or the input)."""
    n = helper.make_node
    opt_t = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    then_g = helper.make_graph(
        [
            n("OptionalGetElement", ["maybe"], ["got"]),
            n("MatMul", ["got", "W2"], ["t_out"]),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, None)],
    )
    else_g = helper.make_graph(
        [n("MatMul", ["h", "W3"], ["e_out"])],
        "else",
        [],
        [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, None)],
    )
    nodes = [
        n("MatMul", ["x", "W1"], ["h"]),
        n("Relu", ["h"], ["hr"]),
        n("ReduceSum", ["flag_f"], ["fs"], keepdims=0),
        n("Greater", ["fs", "zero"], ["use"]),
        n(
            "If",
            ["use"],
            ["maybe"],
            then_branch=helper.make_graph(
                [n("Optional", ["hr"], ["o_some"])],
                "some",
                [],
                [helper.make_value_info("o_some", opt_t)],
            ),
            else_branch=helper.make_graph(
                [n("Optional", [], ["o_none"], type=opt_t.optional_type.elem_type)],
                "none",
                [],
                [helper.make_value_info("o_none", opt_t)],
            ),
        ),
        n("OptionalHasElement", ["maybe"], ["has"]),
        n("If", ["has"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    g = helper.make_graph(
        nodes,
        "optional",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64]),
            helper.make_tensor_value_info("flag_f", TensorProto.FLOAT, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])],
        [
            numpy_helper.from_array(_arr("W1o", (64, 128)) * 0.1, "W1"),
            numpy_helper.from_array(_arr("W2o", (128, 64)) * 0.1, "W2"),
            numpy_helper.from_array(_arr("W3o", (128, 64)) * 0.1, "W3"),
            numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
        ],
    )
    m = _make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    p = d / "optional_ops.onnx"
    _save(m, p)
    return Case("onnx-optional-ops", p, dims={"batch": 8})


# ------------------------------------------------------------------------------- session 12


def _prefix_graph(g: onnx.GraphProto, pre: str, keep: set[str]) -> None:
    """Renames every value and node of ``g`` (and of its subgraphs) to ``pre + name``, except
    the names in ``keep`` (outer-scope values the graph reads): ONNX forbids a branch to reuse
    a name its sibling or the outer graph defines."""

    def ren(s: str) -> str:
        return s if not s or s in keep else pre + s

    for t in g.initializer:
        t.name = ren(t.name)
    for coll in (g.input, g.output, g.value_info):
        for vi in coll:
            vi.name = ren(vi.name)
    for nd in g.node:
        nd.name = ren(nd.name)
        nd.input[:] = [ren(s) for s in nd.input]
        nd.output[:] = [ren(s) for s in nd.output]
        for a in nd.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _prefix_graph(a.g, pre, keep)
            for sg in a.graphs:
                _prefix_graph(sg, pre, keep)


def merge_decoders_if(
    with_past: onnx.ModelProto, no_past: onnx.ModelProto, cond: str = "use_cache_branch"
) -> onnx.ModelProto:
    """An Optimum-style merged decoder: one ``If`` on a bool graph input picks the with-past or
    the without-past graph; initializers equal in bytes (the same weights, exported twice) are
    hoisted once into the outer graph and read by both branches, as Optimum's
    ``merge_decoders`` does. Graph inputs are the with-past model's plus ``cond``; the
    without-past branch reads only those it needs."""
    outer_inputs = {i.name for i in with_past.graph.input}
    assert {i.name for i in no_past.graph.input} <= outer_inputs
    shared: dict[tuple[int, tuple[int, ...], bytes], str] = {}
    hoisted: list[TensorProto] = []
    branches = []
    for tag, m in (("wp_", with_past), ("np_", no_past)):
        g = onnx.GraphProto()
        g.CopyFrom(m.graph)
        rename: dict[str, str] = {}
        keep_inits = []
        for t in g.initializer:
            arr = numpy_helper.to_array(t)
            key = (t.data_type, tuple(t.dims), arr.tobytes())
            if arr.size < 16:  # small constants stay in their branch, as Optimum leaves them
                keep_inits.append(t)
                continue
            if key not in shared:
                shared[key] = f"shared_{len(shared)}"
                hoisted.append(numpy_helper.from_array(arr, shared[key]))
            rename[t.name] = shared[key]
        del g.initializer[:]
        g.initializer.extend(keep_inits)
        for nd in g.node:
            nd.input[:] = [rename.get(s, s) for s in nd.input]
        _prefix_graph(g, tag, outer_inputs | set(shared.values()))
        del g.input[:]
        g.name = tag + "branch"
        branches.append(g)
    node = helper.make_node(
        "If",
        [cond],
        [o.name for o in with_past.graph.output],
        then_branch=branches[0],
        else_branch=branches[1],
        name="optimum::if",
    )
    g = helper.make_graph(
        [node],
        "merged_decoder",
        [*with_past.graph.input, helper.make_tensor_value_info(cond, TensorProto.BOOL, [1])],
        [*with_past.graph.output],
        hoisted,
    )
    return _make_model(g, opset_imports=with_past.opset_import)


@builder("optimum-merged-gpt2-if")
def optimum_merged(d: Path) -> Case:
    """GPT-2 exported twice (with and without past key/values), merged into one graph with an
    ``If`` on ``use_cache_branch`` whose branches share the hoisted weights (Optimum's
    ``decoder_model_merged.onnx``). The without-past branch reads the mask's last ``seq``
    columns (equal to the whole mask when past is empty, as on a first step), so one set of
    feeds is valid for both branches (verify's seeded bool feed picks one)."""
    import torch
    import transformers

    lm = _gpt2_lm()

    class WithPast(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, ids: Any, mask: Any, k0: Any, v0: Any, k1: Any, v1: Any) -> Any:
            cache = transformers.DynamicCache()
            cache.update(k0, v0, 0)
            cache.update(k1, v1, 1)
            out = self.lm(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
            pk = out.past_key_values
            return (
                out.logits,
                pk.layers[0].keys,
                pk.layers[0].values,
                pk.layers[1].keys,
                pk.layers[1].values,
            )

    class NoPast(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, ids: Any, mask: Any) -> Any:
            out = self.lm(input_ids=ids, attention_mask=mask[:, -ids.shape[1] :], use_cache=True)
            pk = out.past_key_values
            return (
                out.logits,
                pk.layers[0].keys,
                pk.layers[0].values,
                pk.layers[1].keys,
                pk.layers[1].values,
            )

    past = [torch.randn(2, 4, 5, 16) for _ in range(4)]
    ids = _tok(500, 2, 3)
    mask = torch.ones(2, 8, dtype=torch.long)
    names = ["input_ids", "attention_mask", "past_k0", "past_v0", "past_k1", "past_v1"]
    outs = ["logits", "present_k0", "present_v0", "present_k1", "present_v1"]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"}}
    for n in names[2:]:
        axes[n] = {0: "batch", 2: "past"}
    for o in outs[1:]:
        axes[o] = {0: "batch", 2: "present"}
    axes["logits"] = {0: "batch", 1: "seq"}
    wp, npast = d / "merged_wp.onnx", d / "merged_np.onnx"
    _legacy(WithPast(), (ids, mask, *past), wp, names, outs, axes, opset=14)
    _legacy(NoPast(), (ids, mask), npast, names[:2], outs, axes, opset=14)
    m = merge_decoders_if(onnx.load(str(wp)), onnx.load(str(npast)))
    wp.unlink()
    npast.unlink()
    p = d / "decoder_model_merged.onnx"
    _save(m, p)
    dims = {"batch": 2, "seq": 3, "past": 5, "total": 8}
    rng = {"attention_mask": (1, 2), "input_ids": (0, 500)}
    return Case("optimum-merged-gpt2-if", p, dims=dims, int_ranges=rng)


@builder("sd-unet-crossattn-legacy")
def sd_unet(d: Path) -> Case:
    """A Stable-Diffusion-style U-Net: latent 4 channels, sinusoidal timestep embedding fed
    per batch item, ResBlocks with GroupNorm(8) and the time embedding added, transformer
    blocks (self-attention over the latent pixels, cross-attention to text states, GEGLU
    feed-forward) at two levels, stride-2 down, nearest up with skip concat; dynamic batch,
    latent H/W and text length."""
    import math

    import torch
    from torch import nn

    class Res(nn.Module):
        def __init__(self, cin: int, cout: int, temb: int) -> None:
            super().__init__()
            self.n1, self.c1 = nn.GroupNorm(8, cin), nn.Conv2d(cin, cout, 3, padding=1)
            self.t = nn.Linear(temb, cout)
            self.n2, self.c2 = nn.GroupNorm(8, cout), nn.Conv2d(cout, cout, 3, padding=1)
            self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

        def forward(self, x: Any, t: Any) -> Any:
            h = self.c1(nn.functional.silu(self.n1(x)))
            h = h + self.t(nn.functional.silu(t))[:, :, None, None]
            h = self.c2(nn.functional.silu(self.n2(h)))
            return self.skip(x) + h

    class Attn(nn.Module):
        def __init__(self, c: int, kv: int, heads: int = 4) -> None:
            super().__init__()
            self.h = heads
            self.q, self.k, self.v = (
                nn.Linear(c, c, False),
                nn.Linear(kv, c, False),
                nn.Linear(kv, c, False),
            )
            self.o = nn.Linear(c, c)

        def forward(self, x: Any, ctx: Any) -> Any:
            b, n, c = x.shape
            q = self.q(x).reshape(b, n, self.h, c // self.h).transpose(1, 2)
            k = self.k(ctx).reshape(b, -1, self.h, c // self.h).transpose(1, 2)
            v = self.v(ctx).reshape(b, -1, self.h, c // self.h).transpose(1, 2)
            w = torch.softmax(q @ k.transpose(-1, -2) * (c // self.h) ** -0.5, dim=-1)
            return self.o((w @ v).transpose(1, 2).reshape(b, n, c))

    class Xformer(nn.Module):
        def __init__(self, c: int, ctx: int) -> None:
            super().__init__()
            self.norm, self.pin = nn.GroupNorm(8, c), nn.Conv2d(c, c, 1)
            self.l1, self.l2, self.l3 = nn.LayerNorm(c), nn.LayerNorm(c), nn.LayerNorm(c)
            self.sa, self.ca = Attn(c, c), Attn(c, ctx)
            self.ff1, self.ff2 = nn.Linear(c, 8 * c), nn.Linear(4 * c, c)
            self.pout = nn.Conv2d(c, c, 1)

        def forward(self, x: Any, ctx: Any) -> Any:
            b, c, h, w = x.shape
            y = self.pin(self.norm(x)).flatten(2).transpose(1, 2)
            q = self.l1(y)
            y = y + self.sa(q, q)
            y = y + self.ca(self.l2(y), ctx)
            a, g = self.ff1(self.l3(y)).chunk(2, dim=-1)
            y = y + self.ff2(a * nn.functional.gelu(g))
            return x + self.pout(y.transpose(1, 2).reshape(b, c, h, w))

    class UNet(nn.Module):
        def __init__(self, c: int = 32, ctx: int = 48, temb: int = 128) -> None:
            super().__init__()
            self.c = c
            self.tm = nn.Sequential(nn.Linear(c, temb), nn.SiLU(), nn.Linear(temb, temb))
            self.cin = nn.Conv2d(4, c, 3, padding=1)
            self.r1, self.x1 = Res(c, c, temb), Xformer(c, ctx)
            self.down = nn.Conv2d(c, c, 3, stride=2, padding=1)
            self.r2, self.x2 = Res(c, 2 * c, temb), Xformer(2 * c, ctx)
            self.mid = Res(2 * c, 2 * c, temb)
            self.r3, self.x3 = Res(4 * c, 2 * c, temb), Xformer(2 * c, ctx)
            self.up = nn.Conv2d(2 * c, c, 3, padding=1)
            self.r4 = Res(2 * c, c, temb)
            self.nout, self.cout = nn.GroupNorm(8, c), nn.Conv2d(c, 4, 3, padding=1)

        def forward(self, sample: Any, timestep: Any, text: Any) -> Any:
            half = self.c // 2
            f = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
            e = timestep[:, None].float() * f[None]
            t = self.tm(torch.cat([torch.cos(e), torch.sin(e)], dim=-1))
            h0 = self.x1(self.r1(self.cin(sample), t), text)
            h1 = self.x2(self.r2(self.down(h0), t), text)
            m = self.mid(h1, t)
            h = self.x3(self.r3(torch.cat([m, h1], 1), t), text)
            h = self.up(nn.functional.interpolate(h, scale_factor=2.0, mode="nearest"))
            h = self.r4(torch.cat([h, h0], 1), t)
            return self.cout(nn.functional.silu(self.nout(h)))

    _seed()
    p = d / "sd_unet.onnx"
    _legacy(
        UNet(),
        (torch.randn(2, 4, 16, 16), torch.tensor([10.0, 500.0]), torch.randn(2, 7, 48)),
        p,
        ["sample", "timestep", "encoder_hidden_states"],
        ["noise_pred"],
        {
            "sample": {0: "batch", 2: "height", 3: "width"},
            "timestep": {0: "batch"},
            "encoder_hidden_states": {0: "batch", 1: "text_len"},
            "noise_pred": {0: "batch", 2: "height", 3: "width"},
        },
        opset=17,
    )
    return Case(
        "sd-unet-crossattn-legacy",
        p,
        dims={"batch": 2, "height": 32, "width": 32, "text_len": 77},
    )


@builder("yolo-style-nms-topk")
def yolo_nms(d: Path) -> Case:
    """A YOLO-style detector: a CSP-ish SiLU backbone, three anchor-free heads (strides 8, 16,
    32) flattened and concatenated to [batch, boxes, 4 + classes] (legacy export, dynamic
    batch / H / W), then a post-process appended in ONNX as YOLO exports write it: center
    boxes to corners, class max, ``TopK`` of the best 300 (k = min(300, boxes), computed from
    the shape), ``GatherElements`` and ``NonMaxSuppression`` (per class, IoU 0.45, score
    0.25, 100 per class), outputs the selected triples and the top scores."""
    import torch
    from torch import nn

    def cbs(ci: int, co: int, s: int = 1) -> Any:
        return nn.Sequential(nn.Conv2d(ci, co, 3, s, 1), nn.BatchNorm2d(co), nn.SiLU())

    class Csp(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.a, self.b = nn.Conv2d(c, c // 2, 1), nn.Conv2d(c, c // 2, 1)
            self.m = nn.Sequential(cbs(c // 2, c // 2), cbs(c // 2, c // 2))
            self.o = nn.Conv2d(c, c, 1)

        def forward(self, x: Any) -> Any:
            return self.o(torch.cat([self.m(self.a(x)), self.b(x)], 1))

    class Yolo(nn.Module):
        def __init__(self, nc: int = 6) -> None:
            super().__init__()
            self.s1 = nn.Sequential(cbs(3, 16, 2), cbs(16, 32, 2), Csp(32), cbs(32, 48, 2), Csp(48))
            self.s2 = nn.Sequential(cbs(48, 64, 2), Csp(64))
            self.s3 = nn.Sequential(cbs(64, 96, 2), Csp(96))
            self.heads = nn.ModuleList(nn.Conv2d(c, 4 + nc, 1) for c in (48, 64, 96))

        def forward(self, x: Any) -> Any:
            f1 = self.s1(x)
            f2 = self.s2(f1)
            f3 = self.s3(f2)
            outs = []
            for f, h, s in zip((f1, f2, f3), self.heads, (8, 16, 32), strict=True):
                o = h(f)
                b, c, hh, ww = o.shape
                ys = torch.arange(hh, dtype=torch.float32)[:, None].expand(hh, ww)
                xs = torch.arange(ww, dtype=torch.float32)[None, :].expand(hh, ww)
                grid = torch.stack([xs, ys], 0).reshape(1, 2, hh * ww)
                o = o.flatten(2)
                xy = (o[:, :2].sigmoid() * 2 - 0.5 + grid) * s
                wh = (o[:, 2:4].sigmoid() * 2) ** 2 * s * 4
                outs.append(torch.cat([xy, wh, o[:, 4:].sigmoid()], 1))
            return torch.cat(outs, 2).transpose(1, 2)

    _seed()
    raw = d / "yolo_raw.onnx"
    _legacy(
        Yolo(),
        (torch.randn(1, 3, 128, 128),),
        raw,
        ["images"],
        ["pred"],
        {"images": {0: "batch", 2: "height", 3: "width"}, "pred": {0: "batch", 1: "boxes"}},
        opset=17,
    )
    m = onnx.load(str(raw))
    raw.unlink()
    n = helper.make_node
    c = numpy_helper.from_array
    m.graph.initializer.extend(
        [
            c(np.array([0], np.int64), "pp_0"),
            c(np.array([2], np.int64), "pp_2"),
            c(np.array([4], np.int64), "pp_4"),
            c(np.array([1 << 30], np.int64), "pp_end"),
            c(np.array([2], np.int64), "pp_ax2"),
            c(np.array([1], np.int64), "pp_1"),
            c(np.array([300], np.int64), "pp_k"),
            c(np.array(0.5, np.float32), "pp_half"),
            c(np.array([100], np.int64), "pp_maxout"),
            c(np.array([0.45], np.float32), "pp_iou"),
            c(np.array([0.25], np.float32), "pp_score"),
        ]
    )
    m.graph.node.extend(
        [
            n("Slice", ["pred", "pp_0", "pp_2", "pp_ax2"], ["xy"]),
            n("Slice", ["pred", "pp_2", "pp_4", "pp_ax2"], ["wh"]),
            n("Slice", ["pred", "pp_4", "pp_end", "pp_ax2"], ["cls"]),
            n("Mul", ["wh", "pp_half"], ["hwh"]),
            n("Sub", ["xy", "hwh"], ["p1"]),
            n("Add", ["xy", "hwh"], ["p2"]),
            n("Concat", ["p1", "p2"], ["corners"], axis=2),
            n("ReduceMax", ["cls"], ["best"], axes=[2], keepdims=0),
            n("Shape", ["best"], ["bshape"]),
            n("Slice", ["bshape", "pp_1", "pp_2"], ["nbox"]),
            n("Min", ["nbox", "pp_k"], ["k"]),
            n("TopK", ["best", "k"], ["top_scores", "top_idx"], axis=1),
            n("Unsqueeze", ["top_idx", "pp_ax2"], ["top_idx3"]),
            n("Shape", ["corners"], ["cshape"]),
            n("Slice", ["cshape", "pp_0", "pp_1"], ["bdim"]),
            n("Concat", ["bdim", "k", "pp_4"], ["gshape"], axis=0),
            n("Expand", ["top_idx3", "gshape"], ["gidx"]),
            n("GatherElements", ["corners", "gidx"], ["top_boxes"], axis=1),
            n("Shape", ["cls"], ["clshape"]),
            n("Slice", ["clshape", "pp_2", "pp_end"], ["ncls"]),
            n("Concat", ["bdim", "k", "ncls"], ["g2shape"], axis=0),
            n("Expand", ["top_idx3", "g2shape"], ["cidx"]),
            n("GatherElements", ["cls", "cidx"], ["top_cls"], axis=1),
            n("Transpose", ["top_cls"], ["nms_scores"], perm=[0, 2, 1]),
            n(
                "NonMaxSuppression",
                ["top_boxes", "nms_scores", "pp_maxout", "pp_iou", "pp_score"],
                ["selected"],
            ),
        ]
    )
    del m.graph.output[:]
    m.graph.output.extend(
        [
            helper.make_tensor_value_info("selected", TensorProto.INT64, ["n_sel", 3]),
            helper.make_tensor_value_info("top_scores", TensorProto.FLOAT, ["batch", "k_top"]),
            helper.make_tensor_value_info("top_boxes", TensorProto.FLOAT, ["batch", "k_top", 4]),
        ]
    )
    p = d / "yolo_nms.onnx"
    _save(m, p)
    return Case("yolo-style-nms-topk", p, dims={"batch": 2, "height": 320, "width": 320})


def _tv_video(name: str, fn: str, d: Path) -> Case:
    tv = _torchvision()
    import torch

    _seed()
    m = getattr(tv.models.video, fn)(weights=None, num_classes=10)
    p = d / f"{fn}.onnx"
    _legacy(
        m,
        (torch.randn(1, 3, 4, 56, 56),),
        p,
        ["clip"],
        ["logits"],
        {"clip": {0: "batch", 2: "frames", 3: "height", 4: "width"}},
        opset=17,
    )
    return Case(name, p, dims={"batch": 1, "frames": 8, "height": 112, "width": 112})


@builder("tv-r3d18-video-legacy")
def tv_r3d(d: Path) -> Case:
    """torchvision's R3D-18 (3-D convolutions over a clip; 33 M parameters), dynamic clip."""
    return _tv_video("tv-r3d18-video-legacy", "r3d_18", d)


@builder("tv-r2plus1d18-video-legacy")
def tv_r2plus1d(d: Path) -> Case:
    """torchvision's R(2+1)D-18: each 3-D convolution factored into a spatial (1×3×3) and a
    temporal (3×1×1) one."""
    return _tv_video("tv-r2plus1d18-video-legacy", "r2plus1d_18", d)


@builder("hf-encodec-legacy")
def hf_encodec(d: Path) -> Case:
    """Hugging Face's EnCodec audio codec, encode then decode: strided 1-D convolutions down,
    an LSTM, residual vector quantization (distances, ArgMin, codebook Gather, 4 codebooks),
    1-D transposed convolutions up; dynamic batch and signal length (bound to 2 s at 24 kHz)."""
    import torch
    import transformers

    cfg = transformers.EncodecConfig(
        num_filters=8,
        hidden_size=32,
        codebook_size=64,
        codebook_dim=32,
        upsampling_ratios=[8, 5, 4, 2],
        target_bandwidths=[1.5, 3.0],
        num_lstm_layers=1,
    )
    _seed()
    codec = transformers.EncodecModel(cfg).eval()

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = codec

        def forward(self, audio: Any) -> Any:
            enc = self.m.encode(audio, bandwidth=3.0)
            codes = enc.audio_codes
            return self.m.decode(codes, enc.audio_scales)[0], codes

    p = d / "encodec.onnx"
    _legacy(
        W(),
        (torch.randn(1, 1, 3200),),
        p,
        ["audio"],
        ["audio_values", "audio_codes"],
        {"audio": {0: "batch", 2: "samples"}},
        opset=17,
    )
    return Case("hf-encodec-legacy", p, dims={"batch": 2, "samples": 48000})


@builder("gnn-scatter-gathernd-legacy")
def gnn_scatter(d: Path) -> Case:
    """GNN-style message passing (torch legacy, dynamic node and edge counts): messages from
    source nodes (Gather), summed into target nodes with ``index_add`` (ScatterND with
    reduction add) and max-pooled with ``scatter_reduce`` (ScatterElements, reduction max),
    degree by scatter_add, an edge-pair read by advanced indexing (GatherND), three layers."""
    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(self, f: int) -> None:
            super().__init__()
            self.msg, self.upd = nn.Linear(2 * f, f), nn.Linear(3 * f, f)

        def forward(self, x: Any, src: Any, dst: Any) -> Any:
            m = torch.relu(self.msg(torch.cat([x[src], x[dst]], -1)))
            agg = torch.zeros_like(x).index_add(0, dst, m)
            deg = torch.zeros(x.shape[0], 1).scatter_add(
                0, dst[:, None], torch.ones(dst.shape[0], 1)
            )
            mx = torch.zeros_like(x).scatter_reduce(
                0, dst[:, None].expand_as(m), m, reduce="amax", include_self=True
            )
            return torch.relu(self.upd(torch.cat([x, agg / deg.clamp(min=1.0), mx], -1)))

    class Gnn(nn.Module):
        def __init__(self, fin: int = 16, f: int = 64) -> None:
            super().__init__()
            self.inp = nn.Linear(fin, f)
            self.layers = nn.ModuleList(Layer(f) for _ in range(3))
            self.out = nn.Linear(2 * f, 1)

        def forward(self, x: Any, edge_index: Any) -> Any:
            src, dst = edge_index[0], edge_index[1]
            h = self.inp(x)
            for layer in self.layers:
                h = layer(h, src, dst)
            pair = torch.stack([h, h], 0)[edge_index[0] % 2, src]  # GatherND over two axes
            return self.out(torch.cat([pair, h[dst]], -1)).squeeze(-1), h

    _seed()
    n, e = 20, 60
    g = torch.Generator().manual_seed(0)
    p = d / "gnn.onnx"
    _legacy(
        Gnn(),
        (torch.randn(n, 16), torch.randint(0, n, (2, e), generator=g)),
        p,
        ["x", "edge_index"],
        ["edge_score", "node_emb"],
        {"x": {0: "nodes"}, "edge_index": {1: "edges"}},
        opset=17,
    )
    return Case(
        "gnn-scatter-gathernd-legacy",
        p,
        dims={"nodes": 5000, "edges": 40000},
        int_ranges={"edge_index": (0, 5000)},
    )


@builder("external-over-2gib")
def over_2gib(d: Path) -> Case:
    """A model over 2 GiB (2.2 GiB of weights, external data only: a protobuf cannot hold
    it): a 1.1 M × 512 float32 embedding table read by Gather, then a 4-layer MLP. The data
    file is written in chunks so the builder never holds the table."""
    rows, dim = 1_100_000, 512
    data = d / "over_2gib.onnx.data"
    inits: list[TensorProto] = []
    offset = 0
    with open(data, "wb") as f:
        specs = [("embed", (rows, dim))] + [(f"W{i}", (dim, dim)) for i in range(4)]
        for name, shape in specs:
            rng = np.random.default_rng(zlib.crc32(name.encode()))
            left = int(np.prod(shape))
            scale = 1.0 / np.sqrt(shape[-1])
            while left:
                k = min(left, 1 << 24)
                f.write(
                    (rng.standard_normal(k, dtype=np.float32) * scale).astype(np.float32).tobytes()
                )
                left -= k
            t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=shape)
            t.data_location = TensorProto.EXTERNAL
            nbytes = int(np.prod(shape)) * 4
            for k, v in (("location", data.name), ("offset", str(offset)), ("length", str(nbytes))):
                e = t.external_data.add()
                e.key, e.value = k, v
            inits.append(t)
            offset += nbytes
            pad = -offset % 4096
            f.write(b"\0" * pad)
            offset += pad
    n = helper.make_node
    nodes = [n("Gather", ["embed", "ids"], ["h0"])]
    for i in range(4):
        nodes += [n("MatMul", [f"h{i}", f"W{i}"], [f"m{i}"]), n("Relu", [f"m{i}"], [f"h{i + 1}"])]
    g = helper.make_graph(
        nodes,
        "over2gib",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("h4", TensorProto.FLOAT, ["batch", "seq", dim])],
        inits,
    )
    m = _make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    p = d / "over_2gib.onnx"
    onnx.save(m, str(p))
    onnx.checker.check_model(str(p))  # by path: the checker finds the data file beside it
    return Case(
        "external-over-2gib", p, dims={"batch": 4, "seq": 256}, int_ranges={"ids": (0, rows)}
    )


@builder("unnamed-minus1-dims")
def unnamed_dims(d: Path) -> Case:
    """Graph inputs and outputs whose dims have no names: some unknown dims left empty (no
    ``dim_param``, no ``dim_value``, as ONNX allows) and some written as ``dim_value: -1``
    (as older converters and hand edits leave them; the spec reserves negatives); a
    conv + attention-ish graph whose value_info is stripped, so nothing names a dim."""
    import torch

    p = d / "unnamed_dims.onnx"
    _legacy(
        _cnn(),
        (torch.randn(2, 3, 32, 32),),
        p,
        ["x"],
        ["y"],
        {"x": {0: "batch", 2: "height", 3: "width"}, "y": {0: "batch"}},
        opset=17,
    )
    m = onnx.load(str(p))
    del m.graph.value_info[:]
    x = m.graph.input[0].type.tensor_type.shape.dim
    x[0].Clear()  # batch: unknown, unnamed
    for i in (2, 3):
        x[i].Clear()
        x[i].dim_value = -1
    y = m.graph.output[0].type.tensor_type.shape.dim
    y[0].Clear()
    y[0].dim_value = -1
    onnx.save(m, str(p))
    return Case("unnamed-minus1-dims", p, shapes={"x": (4, 3, 96, 96)})


def _ort_generation(d: Path, name: str, beams: int) -> Case:
    """ORT's ``convert_generation`` (onnxruntime.transformers) around a 2-layer GPT-2 decoder
    exported here in its subgraph interface (int32 ids / positions / mask, ``past_i`` =
    stacked keys and values): its own GPT-2 exporter fails on transformers 5 (the legacy
    tuple cache), ``--decoder_onnx`` skips it. The penalties it makes graph inputs become
    initializers (1.0): random feeds there would make a meaningless search."""
    import torch
    import transformers
    from onnxruntime.transformers import convert_generation as cg

    lm = _gpt2_lm()
    lm.config.bos_token_id = lm.config.eos_token_id = lm.config.pad_token_id = 1
    layers = 2

    class Dec(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = lm

        def forward(self, ids: Any, pos: Any, mask: Any, *past: Any) -> Any:
            cache = transformers.DynamicCache()
            for i, kv in enumerate(past):
                cache.update(kv[0], kv[1], i)
            out = self.m(
                input_ids=ids.long(),
                position_ids=pos.long(),
                attention_mask=mask.long(),
                past_key_values=cache,
                use_cache=True,
            )
            pk = out.past_key_values
            return (
                out.logits,
                *[torch.stack([pk.layers[i].keys, pk.layers[i].values]) for i in range(layers)],
            )

    work = d / f"{name}_work"
    work.mkdir(exist_ok=True)
    lm.save_pretrained(str(work / "hf"))
    b, s, past = 2, 3, 5
    names = ["input_ids", "position_ids", "attention_mask"] + [f"past_{i}" for i in range(layers)]
    outs = ["logits"] + [f"present_{i}" for i in range(layers)]
    axes = {
        "input_ids": {0: "batch_size", 1: "seq_len"},
        "position_ids": {0: "batch_size", 1: "seq_len"},
        "attention_mask": {0: "batch_size", 1: "total_seq_len"},
        "logits": {0: "batch_size", 1: "seq_len"},
    }
    for i in range(layers):
        axes[f"past_{i}"] = {1: "batch_size", 3: "past_seq_len"}
        axes[f"present_{i}"] = {1: "batch_size", 3: "total_seq_len"}
    feeds = (
        torch.randint(0, 500, (b, s), dtype=torch.int32),
        torch.arange(past, past + s, dtype=torch.int32)[None].expand(b, s),
        torch.ones(b, past + s, dtype=torch.int32),
        *[torch.randn(2, b, 4, past, 16) for _ in range(layers)],
    )
    dec = work / "decoder.onnx"
    _legacy(Dec(), feeds, dec, names, outs, axes, opset=17)
    raw = work / "generation.onnx"
    argv = ["-m", str(work / "hf"), "--model_type", "gpt2", "--decoder_onnx", str(dec)]
    argv += ["--output", str(raw), "--num_beams", str(beams), "--max_length", "32"]
    argv += ["--vocab_size", "500", "--eos_token_id", "1", "--pad_token_id", "1"]
    with _quiet():
        args = cg.parse_arguments(argv)
        gen = cg.GenerationType.GREEDYSEARCH if beams == 1 else cg.GenerationType.BEAMSEARCH
        cg.convert_generation_model(args, gen)
    m = onnx.load(str(raw))
    inputs = {i.name for i in m.graph.input}
    fixed = {k: 1.0 for k in ("length_penalty", "repetition_penalty") if k in inputs}
    keep = [i for i in m.graph.input if i.name not in fixed]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    m.graph.initializer.extend(
        numpy_helper.from_array(np.array([v], np.float32), k) for k, v in fixed.items()
    )
    # onnx 1.23 stamps IR 14, more than the EP venv's ORT (1.24) loads: at most 10, as the
    # other hand-assembled rows (``_make_model``)
    m.ir_version = min(m.ir_version, 10)
    p = d / f"{name}.onnx"
    _save(m, p, check=False)  # as ORT writes it: no com.microsoft opset import (ORT loads it)
    ranges = {"input_ids": (2, 500), "max_length": (32, 33), "min_length": (1, 2)}
    ranges |= {"num_beams": (beams, beams + 1), "num_return_sequences": (1, 2)}
    present = {i.name for i in m.graph.input}
    return Case(
        name,
        p,
        dims={"batch_size": 2, "sequence_length": 6},
        int_ranges={k: v for k, v in ranges.items() if k in present},
    )


@builder("ort-beamsearch-gpt2")
def ort_beamsearch(d: Path) -> Case:
    """com.microsoft ``BeamSearch`` (4 beams, 32 tokens) with GPT-2 decoder subgraphs (the
    first step's and the later steps', sharing weights), from ORT's ``convert_generation``."""
    return _ort_generation(d, "ort-beamsearch-gpt2", 4)


@builder("ort-greedysearch-gpt2")
def ort_greedysearch(d: Path) -> Case:
    """com.microsoft ``GreedySearch`` (32 tokens) with the same GPT-2 decoder subgraph."""
    return _ort_generation(d, "ort-greedysearch-gpt2", 1)


# ------------------------------------------------------------------------------- session 13


def _lm_logits(lm: Any, with_mask: bool) -> Any:
    """Wraps a causal LM: (input_ids[, attention_mask]) -> logits."""
    import torch

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = lm

        def forward(self, ids: Any, mask: Any = None) -> Any:
            return self.m(input_ids=ids, attention_mask=mask).logits

    return W().eval()


@builder("hf-mixtral-moe-batched-dynamo")
def hf_mixtral(d: Path) -> Case:
    """Mixtral's sparse MoE (4 experts, top-2 ``TopK`` routing, softmax over the chosen two)
    with transformers' ``batched_mm`` experts: each token gathers its experts' 3-D weights
    (``GatherND`` of [tokens, 2, 192, 64]) and multiplies them batched; dynamo, dynamic batch
    and sequence. (The default ``grouped_mm`` does not export: no ONNX rule for
    ``transformers::grouped_mm_fallback``.)"""
    import torch
    import transformers

    cfg = transformers.MixtralConfig(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=256,
        use_cache=False,
        experts_implementation="batched_mm",
    )
    _seed()
    m = _lm_logits(transformers.MixtralForCausalLM(cfg).eval(), False)
    b = torch.export.Dim("batch", min=1, max=64)
    s = torch.export.Dim("seq", min=2, max=256)
    p = d / "mixtral_moe.onnx"
    _dynamo(m, (_tok(300, 2, 8),), p, ["input_ids"], ["logits"], ({0: b, 1: s},))
    return Case(
        "hf-mixtral-moe-batched-dynamo",
        p,
        dims={"batch": 2, "seq": 128},
        int_ranges={"input_ids": (0, 300)},
    )


@builder("hf-qwen2moe-eager-legacy")
def hf_qwen2moe(d: Path) -> Case:
    """Qwen2-MoE (4 routed experts top-2 plus a sigmoid-gated shared expert) with the eager
    experts loop, legacy: per expert ``NonZero`` (``torch.where`` of its routing mask) picks
    the tokens, ``Gather`` / ``index_add_`` (ScatterElements add) put them back: data-dependent
    shapes in every layer. The loop over the experts the traced batch hit is unrolled."""
    import torch
    import transformers

    cfg = transformers.Qwen2MoeConfig(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=96,
        moe_intermediate_size=48,
        shared_expert_intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=256,
        use_cache=False,
        experts_implementation="eager",
    )
    _seed()
    m = _lm_logits(transformers.Qwen2MoeForCausalLM(cfg).eval(), True)
    names = ["input_ids", "attention_mask"]
    axes = {n: {0: "batch", 1: "seq"} for n in names}
    p = d / "qwen2moe.onnx"
    _legacy(m, (_tok(300, 2, 8), torch.ones(2, 8, dtype=torch.long)), p, names, ["logits"], axes)
    return Case(
        "hf-qwen2moe-eager-legacy",
        p,
        dims={"batch": 2, "seq": 96},
        int_ranges={"input_ids": (0, 300), "attention_mask": (1, 2)},
    )


@builder("dynamo-sdpa-opset23-attention")
def dynamo_sdpa23(d: Path) -> Case:
    """torch's ``scaled_dot_product_attention`` exported at opset 23: the exporter writes the
    standard ``Attention`` op itself (causal, 4 heads), inside a pre-norm encoder of 2 blocks
    with a padding mask as a boolean ``attn_mask`` in the second block; dynamic batch and
    sequence (bound to 512: [2, 4, 512, 512] scores)."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, causal: bool) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(64), nn.LayerNorm(64)
            self.qkv, self.o = nn.Linear(64, 192), nn.Linear(64, 64)
            self.ff = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
            self.causal = causal

        def forward(self, x: Any, keep: Any) -> Any:
            b, s, _ = x.shape
            q, k, v = self.qkv(self.n1(x)).view(b, s, 3, 4, 16).permute(2, 0, 3, 1, 4)
            if self.causal:
                a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                # [B, 1, S, S]: ONNX Runtime 1.32's Attention-23 refuses a mask broadcast over
                # the query rows ("inconsistent q_sequence_length"), which the spec allows
                mask = keep[:, None, None, :].expand(b, 1, s, s)
                a = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            x = x + self.o(a.transpose(1, 2).reshape(b, s, 64))
            return x + self.ff(self.n2(x))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([Block(True), Block(False)])

        def forward(self, x: Any, keep: Any) -> Any:
            for blk in self.blocks:
                x = blk(x, keep)
            return x

    _seed()
    b = torch.export.Dim("batch", min=1, max=64)
    s = torch.export.Dim("seq", min=2, max=1024)
    p = d / "sdpa_opset23.onnx"
    args = (torch.randn(2, 8, 64), torch.ones(2, 8, dtype=torch.bool))
    _dynamo(Net(), args, p, ["x", "keep"], ["y"], ({0: b, 1: s}, {0: b, 1: s}), opset=23)
    return Case("dynamo-sdpa-opset23-attention", p, dims={"batch": 2, "seq": 512})


@builder("dynamo-nonzero-cond-unrolled")
def dynamo_nonzero(d: Path) -> Case:
    """torch.export with data-dependent shapes: three unrolled steps, each a ``torch.cond``
    (If) and a boolean-mask row selection ``h[h.sum(-1) > 0]`` (``NonZero`` → a row count
    only the data knows), averaged back in; dynamic batch."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.ModuleList(nn.Linear(64, 64) for _ in range(3))
            self.b = nn.Linear(64, 64)

        def forward(self, x: Any) -> Any:
            h = x
            for la in self.a:

                def yes(h: Any, la: Any = la) -> Any:
                    return torch.relu(la(h))

                def no(h: Any) -> Any:
                    return torch.tanh(self.b(h)) * 0.5

                h = torch.cond(h.mean() > 0, yes, no, (h,)) + h
                h = h + h[h.sum(-1) > 0].mean(0)
            return h

    _seed()
    b = torch.export.Dim("batch", min=2, max=4096)
    p = d / "nonzero_cond.onnx"
    _dynamo(Net(), (torch.randn(4, 64),), p, ["x"], ["y"], ({0: b},))
    return Case("dynamo-nonzero-cond-unrolled", p, dims={"batch": 2048})


@builder("tv-raft-small-legacy")
def tv_raft(d: Path) -> Case:
    """torchvision's RAFT-small optical flow: two feature encoders, an all-pairs correlation
    volume ([H/8·W/8]² MatMul) and its 4-level pyramid, 4 recurrent refinement steps (unrolled)
    that each sample the pyramid with ``GridSample``, convex upsampling; dynamic batch, H, W."""
    tv = _torchvision()
    import torch

    _seed()
    raft = tv.models.optical_flow.raft_small(weights=None)

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = raft

        def forward(self, a: Any, b: Any) -> Any:
            return self.m(a, b, num_flow_updates=4)[-1]

    p = d / "raft_small.onnx"
    axes = {n: {0: "batch", 2: "height", 3: "width"} for n in ("image1", "image2")}
    args = (torch.randn(1, 3, 128, 128), torch.randn(1, 3, 128, 128))
    _legacy(W(), args, p, ["image1", "image2"], ["flow"], axes, opset=17)
    return Case("tv-raft-small-legacy", p, dims={"batch": 2, "height": 192, "width": 256})


@builder("hf-qwen2-sliding-window-dynamo")
def hf_qwen2_swa(d: Path) -> Case:
    """Qwen2 with sliding-window attention (window 16) in its first layer and full causal
    attention in the second: two masks built from the positions (the window's ``Sub`` /
    ``Greater`` beside the causal one), combined with the padding mask; dynamo, dynamic batch
    and sequence, bound past the window (seq 256)."""
    import torch
    import transformers

    cfg = transformers.Qwen2Config(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        use_cache=False,
        use_sliding_window=True,
        sliding_window=16,
        max_window_layers=1,
        layer_types=["sliding_attention", "full_attention"],
    )
    _seed()
    m = _lm_logits(transformers.Qwen2ForCausalLM(cfg).eval(), True)
    b = torch.export.Dim("batch", min=1, max=64)
    s = torch.export.Dim("seq", min=2, max=512)
    p = d / "qwen2_swa.onnx"
    args = (_tok(300, 2, 24), torch.ones(2, 24, dtype=torch.long))
    names = ["input_ids", "attention_mask"]
    _dynamo(m, args, p, names, ["logits"], ({0: b, 1: s}, {0: b, 1: s}))
    return Case(
        "hf-qwen2-sliding-window-dynamo",
        p,
        dims={"batch": 2, "seq": 256},
        int_ranges={"input_ids": (0, 300), "attention_mask": (1, 2)},
    )


@builder("tv-deeplabv3-resnet50-dynamo")
def tv_deeplab(d: Path) -> Case:
    """torchvision's DeepLabV3 with a ResNet-50 backbone at output stride 8 (dilations 2 and 4
    in the last two stages, ASPP at 12 / 24 / 36, global-pool branch, bilinear upsampling to
    the input; 42 M parameters, 159 MB embedded); dynamo with H and W declared multiples of 8,
    so the file's dims are the exporter's expressions ``8*h8`` / ``8*w8``."""
    tv = _torchvision()
    import torch

    _seed()
    net = tv.models.segmentation.deeplabv3_resnet50(
        weights=None, weights_backbone=None, num_classes=21, aux_loss=False
    )

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = net

        def forward(self, x: Any) -> Any:
            return self.m(x)["out"]

    b = torch.export.Dim("batch", min=1, max=16)
    h8 = torch.export.Dim("h8", min=8, max=128)
    w8 = torch.export.Dim("w8", min=8, max=128)
    p = d / "deeplabv3.onnx"
    args = (torch.randn(1, 3, 128, 128),)
    _dynamo(W(), args, p, ["image"], ["out"], ({0: b, 2: 8 * h8, 3: 8 * w8},))
    return Case("tv-deeplabv3-resnet50-dynamo", p, dims={"batch": 1, "8*h8": 256, "8*w8": 320})


@builder("hf-deformable-detr-legacy")
def hf_deformable_detr(d: Path) -> Case:
    """Deformable DETR (transformers ResNet backbone, 4 feature levels): multi-scale
    deformable attention samples each level with ``GridSample`` at learned offsets (2 points,
    4 heads), encoder and 2 decoder layers with iterative box refinement off; legacy, dynamic
    batch, H and W (the level shapes, valid ratios and reference points come from ``Shape``)."""
    import torch
    import transformers

    bb = transformers.ResNetConfig(
        num_channels=3,
        embedding_size=16,
        hidden_sizes=[16, 32, 64, 64],
        depths=[1, 1, 1, 1],
        out_features=["stage2", "stage3", "stage4"],
    )
    cfg = transformers.DeformableDetrConfig(
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        backbone_config=bb,
        d_model=64,
        encoder_layers=1,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        num_queries=50,
        num_feature_levels=4,
        encoder_n_points=2,
        decoder_n_points=2,
        num_labels=10,
    )
    _seed()
    det = transformers.DeformableDetrForObjectDetection(cfg).eval()

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = det

        def forward(self, x: Any) -> Any:
            o = self.m(pixel_values=x)
            return o.logits, o.pred_boxes

    p = d / "deformable_detr.onnx"
    axes = {"pixel_values": {0: "batch", 2: "height", 3: "width"}}
    outs = ["logits", "pred_boxes"]
    _legacy(W(), (torch.randn(1, 3, 128, 128),), p, ["pixel_values"], outs, axes, opset=17)
    return Case("hf-deformable-detr-legacy", p, dims={"batch": 2, "height": 256, "width": 320})


@builder("hf-mamba2-ssd-dynamo")
def hf_mamba2(d: Path) -> Case:
    """Mamba-2's state-space duality (SSD) in its chunked PyTorch form: the sequence cut into
    chunks of 16, a segment-sum mask (``CumSum``, ``Trilu``, ``Exp``), intra-chunk ``Einsum``s
    and the inter-chunk state recurrence as a matrix product; dynamo with the length a
    multiple of the chunk (the file's dim is ``16*chunks``), dynamic batch."""
    import torch
    import transformers

    cfg = transformers.Mamba2Config(
        vocab_size=300,
        hidden_size=64,
        state_size=16,
        num_hidden_layers=2,
        expand=2,
        conv_kernel=4,
        num_heads=8,
        head_dim=16,
        n_groups=1,
        chunk_size=16,
        use_cache=False,
    )
    _seed()
    m = _lm_logits(transformers.Mamba2ForCausalLM(cfg).eval(), False)
    b = torch.export.Dim("batch", min=1, max=64)
    chunks = torch.export.Dim("chunks", min=1, max=64)
    p = d / "mamba2.onnx"
    _dynamo(m, (_tok(300, 2, 32),), p, ["input_ids"], ["logits"], ({0: b, 1: 16 * chunks},))
    return Case(
        "hf-mamba2-ssd-dynamo",
        p,
        dims={"batch": 2, "16*chunks": 256},
        int_ranges={"input_ids": (0, 300)},
    )


@builder("hf-llama-bf16-dynamo")
def hf_llama_bf16(d: Path) -> Case:
    """A Llama (GQA 4/2, rotary) cast to ``torch.bfloat16`` before the dynamo export, as LLM
    checkpoints ship: bfloat16 initializers, activations and logits (the rotary tables and
    norms' variance are computed in f32 between Casts). ONNX Runtime's CPU provider has no
    bf16 kernels for MatMul / Add / Mul / Softmax (1.32), so only OpenVINO can run it."""
    import torch
    import transformers

    cfg = transformers.LlamaConfig(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        use_cache=False,
    )
    _seed()
    lm = transformers.LlamaForCausalLM(cfg).eval().to(torch.bfloat16)
    m = _lm_logits(lm, True)
    b = torch.export.Dim("batch", min=1, max=64)
    s = torch.export.Dim("seq", min=2, max=512)
    p = d / "llama_bf16.onnx"
    args = (_tok(300, 2, 8), torch.ones(2, 8, dtype=torch.long))
    names = ["input_ids", "attention_mask"]
    _dynamo(m, args, p, names, ["logits"], ({0: b, 1: s}, {0: b, 1: s}))
    return Case(
        "hf-llama-bf16-dynamo",
        p,
        dims={"batch": 2, "seq": 256},
        int_ranges={"input_ids": (0, 300), "attention_mask": (1, 2)},
    )


# ------------------------------------------------------------------------------- session 14


@builder("dlrm-embeddingbag-legacy")
def dlrm(d: Path) -> Case:
    """A DLRM-style recommender: a bottom MLP on 13 dense features, four embedding tables of
    60,000 × 64 (61 MB in all): two ``EmbeddingBag(mode="sum")`` over [batch, 8] id bags
    (legacy: a ``Loop`` over the bags, ``Gather`` + ``ReduceSum`` in its body) and two
    ``Embedding`` + ``sum`` (``Gather`` + ``ReduceSum``), the pairwise dot-product interaction
    (``MatMul`` of [B, 5, 64] by its transpose, the upper triangle), a top MLP; dynamic batch."""
    import torch
    from torch import nn

    rows, dim = 60000, 64

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bot = nn.Sequential(nn.Linear(13, 128), nn.ReLU(), nn.Linear(128, dim), nn.ReLU())
            self.bags = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(2))
            self.embs = nn.ModuleList(nn.Embedding(rows, dim) for _ in range(2))
            self.top = nn.Sequential(nn.Linear(dim + 10, 128), nn.ReLU(), nn.Linear(128, 1))
            self.iu = torch.triu_indices(5, 5, 1)

        def forward(self, dense: Any, s0: Any, s1: Any, s2: Any, s3: Any) -> Any:
            x = self.bot(dense)
            feats = [x, self.bags[0](s0), self.bags[1](s1)]
            feats += [self.embs[0](s2).sum(1), self.embs[1](s3).sum(1)]
            t = torch.stack(feats, 1)  # [B, 5, dim]
            z = torch.bmm(t, t.transpose(1, 2))[:, self.iu[0], self.iu[1]]
            return torch.sigmoid(self.top(torch.cat([x, z], 1)))

    _seed()
    names = ["dense", "sparse0", "sparse1", "sparse2", "sparse3"]
    ids = [torch.randint(0, rows, (4, 8)) for _ in range(4)]
    p = d / "dlrm.onnx"
    axes = {n: {0: "batch"} for n in names}
    _legacy(Net(), (torch.randn(4, 13), *ids), p, names, ["ctr"], axes, opset=17)
    return Case(
        "dlrm-embeddingbag-legacy",
        p,
        dims={"batch": 512},
        int_ranges={n: (0, rows) for n in names[1:]},
    )


@builder("tts-length-regulator-legacy")
def tts_length_regulator(d: Path) -> Case:
    """A FastSpeech-style TTS: phoneme embedding and conv encoder, a duration predictor (Conv1d
    → Linear → ``exp`` → round, clamped to 1…8 frames), the length regulator
    ``repeat_interleave(hidden, durations)`` (legacy: the mel length is data-dependent), a
    conv decoder to 80 mel bins; batch 1 as TTS runs, dynamic phoneme count."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(100, 128)
            self.enc = nn.Sequential(nn.Conv1d(128, 128, 5, padding=2), nn.ReLU())
            self.dur = nn.Sequential(nn.Conv1d(128, 64, 3, padding=1), nn.ReLU())
            self.dur_out = nn.Linear(64, 1)
            self.dec = nn.Sequential(
                nn.Conv1d(128, 256, 5, padding=2), nn.ReLU(), nn.Conv1d(256, 80, 5, padding=2)
            )

        def forward(self, ids: Any) -> Any:
            h = self.enc(self.emb(ids).transpose(1, 2))  # [1, 128, T]
            logd = self.dur_out(self.dur(h).transpose(1, 2)).squeeze(-1)  # [1, T]
            dur = torch.clamp(torch.round(torch.exp(logd)), 1, 8).long()
            frames = torch.repeat_interleave(h[0].transpose(0, 1), dur[0], dim=0)  # [F, 128]
            return self.dec(frames.transpose(0, 1).unsqueeze(0)), dur

    _seed()
    p = d / "tts_length_regulator.onnx"
    ids = torch.randint(0, 100, (1, 12))
    axes = {"phonemes": {1: "phones"}, "mel": {2: "frames"}, "durations": {1: "phones"}}
    _legacy(Net(), (ids,), p, ["phonemes"], ["mel", "durations"], axes, opset=17)
    return Case(
        "tts-length-regulator-legacy",
        p,
        dims={"phones": 400},
        int_ranges={"phonemes": (0, 100)},
    )


@builder("pointnet-knn-topk-dynamo")
def pointnet_knn(d: Path) -> Case:
    """A DGCNN / PointNet++-style point-cloud classifier: a pairwise distance matrix
    [B, N, N], ``TopK`` (smallest 16) over it for each point's neighbours, their features
    gathered by flattened batch offsets, EdgeConv MLPs on [B, N, k, C], max over k, then a
    global max pool; two such layers (the second's kNN in feature space); dynamic batch and
    point count."""
    import torch
    from torch import nn

    k = 16

    def knn_gather(x: Any) -> Any:  # x [B, N, C] -> neighbours [B, N, k, C]
        b, n, c = x.shape
        inner = x @ x.transpose(1, 2)
        sq = (x * x).sum(-1, keepdim=True)
        dist = sq - 2 * inner + sq.transpose(1, 2)
        idx = dist.topk(k, dim=-1, largest=False).indices  # [B, N, k]
        base = torch.arange(b, device=x.device).view(b, 1, 1) * n
        return x.reshape(b * n, c)[(idx + base).reshape(-1)].reshape(b, n, k, c)

    class Edge(nn.Module):
        def __init__(self, ci: int, co: int) -> None:
            super().__init__()
            self.mlp = nn.Sequential(nn.Linear(2 * ci, co), nn.LeakyReLU(0.2), nn.Linear(co, co))

        def forward(self, x: Any) -> Any:
            nb = knn_gather(x)
            ctr = x.unsqueeze(2).expand_as(nb)
            return self.mlp(torch.cat([ctr, nb - ctr], -1)).amax(2)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.e1, self.e2 = Edge(3, 64), Edge(64, 64)
            self.head = nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))

        def forward(self, pts: Any) -> Any:
            h1 = self.e1(pts)
            h2 = self.e2(h1)
            return self.head(torch.cat([h1, h2], -1).amax(1))

    _seed()
    b = torch.export.Dim("batch", min=1, max=64)
    n = torch.export.Dim("points", min=32, max=8192)
    p = d / "pointnet_knn.onnx"
    _dynamo(Net(), (torch.randn(2, 64, 3),), p, ["points"], ["logits"], ({0: b, 1: n},))
    return Case("pointnet-knn-topk-dynamo", p, dims={"batch": 2, "points": 1024})


@builder("hf-trocr-vision-encoder-decoder-legacy")
def hf_trocr(d: Path) -> Case:
    """A TrOCR-style ``VisionEncoderDecoderModel``: a ViT encoder on a 64 × 256 text-line
    image (16 × 16 patches: 64 tokens), a TrOCR decoder (learned positions, causal self-
    attention, cross-attention over the image tokens); legacy, dynamic batch and decoder
    length."""
    import torch
    import transformers

    enc = transformers.ViTConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        image_size=(64, 256),
        patch_size=16,
    )
    dec = transformers.TrOCRConfig(
        vocab_size=300,
        d_model=64,
        decoder_layers=2,
        decoder_attention_heads=4,
        decoder_ffn_dim=128,
        max_position_embeddings=256,
        cross_attention_hidden_size=64,
        use_cache=False,
    )
    _seed()
    cfg = transformers.VisionEncoderDecoderConfig.from_encoder_decoder_configs(enc, dec)
    m = transformers.VisionEncoderDecoderModel(cfg).eval()

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = m

        def forward(self, px: Any, ids: Any) -> Any:
            return self.m(pixel_values=px, decoder_input_ids=ids, use_cache=False).logits

    p = d / "trocr.onnx"
    names = ["pixel_values", "decoder_input_ids"]
    axes = {"pixel_values": {0: "batch"}, "decoder_input_ids": {0: "batch", 1: "seq"}}
    args = (torch.randn(2, 3, 64, 256), _tok(300, 2, 8))
    _legacy(W(), args, p, names, ["logits"], axes, opset=17)
    return Case(
        "hf-trocr-vision-encoder-decoder-legacy",
        p,
        dims={"batch": 4, "seq": 128},
        int_ranges={"decoder_input_ids": (0, 300)},
    )


@builder("hf-wav2vec2-30s-legacy")
def hf_wav2vec2_long(d: Path) -> Case:
    """wav2vec2 CTC with the real feature extractor's strides (5, 2, 2, 2, 2, 2, 2: 320
    samples a frame) on 30 s of 16 kHz audio (480,000 samples → 1,499 frames; conv activations
    [1, 32, 96,000] first), group norm, a small transformer; legacy, dynamic batch and
    length."""
    import torch
    import transformers

    cfg = transformers.Wav2Vec2Config(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        conv_dim=(32,) * 7,
        conv_stride=(5, 2, 2, 2, 2, 2, 2),
        conv_kernel=(10, 3, 3, 3, 3, 2, 2),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        vocab_size=32,
    )
    _seed()
    m = transformers.Wav2Vec2ForCTC(cfg).eval()

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = m

        def forward(self, x: Any) -> Any:
            return self.m(input_values=x).logits

    p = d / "wav2vec2_30s.onnx"
    axes = {"input_values": {0: "batch", 1: "samples"}}
    _legacy(W(), (torch.randn(1, 16000),), p, ["input_values"], ["logits"], axes, opset=17)
    return Case("hf-wav2vec2-30s-legacy", p, dims={"batch": 1, "samples": 480000})


@builder("hf-segformer-512-legacy")
def hf_segformer_512(d: Path) -> Case:
    """SegFormer-B0's layout (4 stages, spatial-reduction ratios 8 / 4 / 2 / 1 in the
    efficient self-attention: keys and values from a strided Conv + LayerNorm, Mix-FFN with a
    depthwise Conv) at 512 × 512: 16,384 queries against 256 keys in stage 1; the all-MLP
    decoder upsamples every stage to 128 × 128; legacy, dynamic batch, H, W."""
    import torch
    import transformers

    cfg = transformers.SegformerConfig(
        num_encoder_blocks=4,
        depths=[1, 1, 1, 1],
        sr_ratios=[8, 4, 2, 1],
        hidden_sizes=[16, 32, 64, 128],
        patch_sizes=[7, 3, 3, 3],
        strides=[4, 2, 2, 2],
        num_attention_heads=[1, 2, 4, 8],
        mlp_ratios=[4, 4, 4, 4],
        decoder_hidden_size=64,
        num_labels=19,
    )
    _seed()
    m = transformers.SegformerForSemanticSegmentation(cfg).eval()

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = m

        def forward(self, x: Any) -> Any:
            return self.m(pixel_values=x).logits

    p = d / "segformer_512.onnx"
    axes = {"pixel_values": {0: "batch", 2: "height", 3: "width"}}
    _legacy(W(), (torch.randn(1, 3, 128, 128),), p, ["pixel_values"], ["logits"], axes)
    return Case("hf-segformer-512-legacy", p, dims={"batch": 1, "height": 512, "width": 512})


@builder("hf-convnextv2-grn-legacy")
def hf_convnextv2(d: Path) -> Case:
    """HF ConvNeXt-V2 (global response normalization: the L2 norm over H, W
    (``ReduceL2``-style Pow / ReduceSum / Sqrt), divided by its channel mean) at 224 × 224,
    atto-like widths; legacy, dynamic batch."""
    import torch
    import transformers

    cfg = transformers.ConvNextV2Config(
        hidden_sizes=[40, 80, 160, 320], depths=[2, 2, 6, 2], num_labels=10
    )
    _seed()
    m = transformers.ConvNextV2ForImageClassification(cfg).eval()

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = m

        def forward(self, x: Any) -> Any:
            return self.m(pixel_values=x).logits

    p = d / "convnextv2_grn.onnx"
    axes = {"pixel_values": {0: "batch"}}
    _legacy(W(), (torch.randn(2, 3, 224, 224),), p, ["pixel_values"], ["logits"], axes)
    return Case("hf-convnextv2-grn-legacy", p, dims={"batch": 8})


# The tf2onnx and jax2onnx rows need packages the project does not install (TensorFlow beside
# torch in one interpreter fights over protobuf / numpy pins): they export in a child process
# whose path starts with the folder named by REAL_MODELS_TF_SITE / REAL_MODELS_JAX_SITE
# (``pip install --target DIR tensorflow-cpu==2.21.0 tf2onnx==1.17.0``; ``jax jaxlib
# jax2onnx``). Without it the row is skipped with that reason.

_TF_SCRIPT = r"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
import keras
import tf2onnx

kind, out = sys.argv[1], sys.argv[2]
keras.utils.set_random_seed(0)
L = keras.layers
if kind == "cnn":
    inp = keras.Input((None, None, 3), name="image")
    x = L.Conv2D(32, 3, strides=2, padding="same", use_bias=False)(inp)
    x = L.ReLU(6.0)(L.BatchNormalization()(x))
    x = L.DepthwiseConv2D(3, padding="same", use_bias=False)(x)
    x = L.ReLU(6.0)(L.BatchNormalization()(x))
    skip = L.Conv2D(64, 1)(x)
    x = L.MaxPooling2D(2)(skip)
    x = L.SeparableConv2D(64, 3, padding="same", activation="relu")(x)
    x = L.UpSampling2D(2)(x)
    x = L.Concatenate()([x, skip])
    x = L.Conv2D(32, 3, padding="same", activation="swish")(x)
    seg = L.Conv2D(8, 1, name="seg")(x)
    cls = L.Dense(10, name="cls")(L.GlobalAveragePooling2D()(x))
    model = keras.Model(inp, [seg, cls])
    spec = [tf.TensorSpec([None, None, None, 3], tf.float32, name="image")]
elif kind == "rnn":
    inp = keras.Input((None, 40), name="features")
    x = L.Bidirectional(L.LSTM(64, return_sequences=True))(inp)
    x = L.GRU(64, return_sequences=True)(x)
    x = L.LayerNormalization()(x)
    model = keras.Model(inp, L.Dense(30, name="logits")(x))
    spec = [tf.TensorSpec([None, None, 40], tf.float32, name="features")]
elif kind == "transformer":
    inp = keras.Input((None,), dtype="int32", name="tokens")
    x = L.Embedding(1000, 64)(inp)
    for _ in range(2):
        a = L.MultiHeadAttention(4, 16)(x, x, use_causal_mask=True)
        x = L.LayerNormalization()(x + a)
        # tanh GELU: Keras 3's exact one makes tf2onnx 1.17 write an ``Erfc`` node, which
        # is no ONNX op (every runtime refuses the file)
        gelu = L.Activation(lambda t: keras.activations.gelu(t, approximate=True))
        f = L.Dense(64)(gelu(L.Dense(256)(x)))
        x = L.LayerNormalization()(x + f)
    model = keras.Model(inp, L.Dense(1000, name="logits")(x))
    spec = [tf.TensorSpec([None, None], tf.int32, name="tokens")]
elif kind == "while":
    rng = np.random.default_rng(0)
    ws = [tf.Variable(rng.standard_normal((64, 64)).astype(np.float32) * 0.1) for _ in range(3)]
    spec = [
        tf.TensorSpec([None, 64], tf.float32, name="x"),
        tf.TensorSpec([], tf.int32, name="steps"),
    ]

    @tf.function(input_signature=spec)
    def model(x, steps):
        # six carried values: the counter, three states, a running max and a TensorArray
        def body(i, h1, h2, h3, mx, ta):
            h1 = tf.tanh(tf.matmul(h1, ws[0]) + h3)
            h2 = tf.nn.relu(tf.matmul(h2, ws[1]) + h1)
            h3 = 0.5 * h3 + tf.matmul(h2, ws[2])
            mx = tf.maximum(mx, h3)
            return i + 1, h1, h2, h3, mx, ta.write(i, tf.reduce_mean(h3, 1))

        ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
        init = [tf.constant(0), x, x * 2.0, x * 0.5, x, ta]
        _, h1, h2, h3, mx, ta = tf.while_loop(lambda i, *_: i < steps, body, init)
        return h1 + h2 + mx, tf.transpose(ta.stack())
else:
    raise SystemExit(f"unknown kind {kind}")
convert = tf2onnx.convert.from_keras if hasattr(model, "layers") else tf2onnx.convert.from_function
proto, _ = convert(model, input_signature=spec, opset=17)
import onnx
onnx.save_model(proto, out)
"""


def _side_run(env_key: str, probe: str, script: str, *argv: str) -> None:
    """Runs ``script`` in a child whose path starts with $``env_key`` (the side-installed
    exporter); raises ``RuntimeError("skipped: …")`` when that folder is unset or lacks
    ``probe``."""
    import os
    import subprocess

    site = os.environ.get(env_key)
    if not site or not (Path(site) / probe).exists():
        raise RuntimeError(
            f"skipped: {probe} not found; set {env_key} to a `pip install --target` folder with it"
        )
    env = dict(os.environ, PYTHONPATH=site)
    p = subprocess.run(
        [sys.executable, "-c", script, *argv], capture_output=True, text=True, env=env, timeout=900
    )
    if p.returncode:
        tail = [ln for ln in (p.stderr or p.stdout).strip().splitlines() if ln.strip()]
        raise RuntimeError(f"{probe} export failed: {tail[-1][:300] if tail else p.returncode}")


def _free_dims(path: Path, per_axis: dict[int, int]) -> dict[str, int]:
    """--dim bindings for an exporter's generated dim names (tf2onnx's ``unk__N``): each
    input's symbolic axis ``a`` gets ``per_axis[a]``."""
    m = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    dims: dict[str, int] = {}
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        for axis, dim in enumerate(vi.type.tensor_type.shape.dim):
            if dim.dim_param and axis in per_axis:
                dims[dim.dim_param] = per_axis[axis]
    return dims


def _tf(kind: str, name: str, d: Path, per_axis: dict[int, int], **kw: Any) -> Case:
    p = d / f"{name}.onnx"
    _side_run("REAL_MODELS_TF_SITE", "tf2onnx", _TF_SCRIPT, kind, str(p))
    return Case(name, p, dims=_free_dims(p, per_axis), **kw)


@builder("tf2onnx-keras-cnn-nhwc")
def tf_cnn(d: Path) -> Case:
    """A Keras CNN in NHWC (Conv + BatchNorm + ReLU6, depthwise, separable, max-pool,
    upsample, a skip Concat, swish, a segmentation head and a pooled classifier): tf2onnx
    wraps the NCHW Convs in ``Transpose`` pairs and folds what it can; batch, H, W free."""
    return _tf("cnn", "tf2onnx-keras-cnn-nhwc", d, {0: 2, 1: 256, 2: 256})


@builder("tf2onnx-keras-bilstm-gru")
def tf_rnn(d: Path) -> Case:
    """A Keras speech-style tagger: a bidirectional LSTM (tf2onnx: one ``LSTM`` node,
    direction bidirectional) then a GRU (tf2onnx: a ``Loop``), LayerNorm, Dense; batch and
    frames free."""
    return _tf("rnn", "tf2onnx-keras-bilstm-gru", d, {0: 4, 1: 400})


@builder("tf2onnx-while-loop-carried")
def tf_while(d: Path) -> Case:
    """A ``tf.function`` whose ``tf.while_loop`` carries six values (a counter, three states,
    a running max and a ``TensorArray``: tf2onnx's ``Loop`` with scan outputs) for a
    data-dependent trip count; batch free."""
    return _tf("while", "tf2onnx-while-loop-carried", d, {0: 512}, int_ranges={"steps": (4, 9)})


@builder("tf2onnx-keras-transformer")
def tf_transformer(d: Path) -> Case:
    """Two Keras transformer blocks (``MultiHeadAttention`` with a causal mask, post-norm,
    tanh-GELU MLP) over an Embedding, tf2onnx: the attention as ``Einsum``s; batch and length
    free."""
    ranges = {"tokens": (0, 1000)}
    return _tf("transformer", "tf2onnx-keras-transformer", d, {0: 2, 1: 256}, int_ranges=ranges)


_JAX_SCRIPT = r"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax2onnx import to_onnx
import onnx

out = sys.argv[1]
rng = np.random.default_rng(0)
w1 = jnp.asarray(rng.standard_normal((3, 3, 3, 16)).astype(np.float32) * 0.2)  # HWIO
w2 = jnp.asarray(rng.standard_normal((16 * 16, 64)).astype(np.float32) * 0.05)
w3 = jnp.asarray(rng.standard_normal((64, 10)).astype(np.float32) * 0.1)


def net(x):  # x [B, 32, 32, 3] NHWC
    y = jax.lax.conv_general_dilated(x, w1, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = jax.nn.gelu(y)
    # 4 x 4 max pooling as reshape + max: jax2onnx 0.17.1 writes ``lax.reduce_window`` as a
    # MaxPool over a 6-D tensor, which ONNX Runtime and OpenVINO refuse
    b = y.shape[0]
    y = y.reshape(b, 4, 4, 4, 4, 16).max(axis=(2, 4)).reshape(b, -1)
    h = jax.nn.relu(y @ w2)
    return jax.nn.log_softmax(h @ w3, axis=-1)


model = to_onnx(net, [("B", 32, 32, 3)])
onnx.save_model(model, out)
"""


@builder("jax2onnx-cnn")
def jax_cnn(d: Path) -> Case:
    """A JAX function (``lax.conv_general_dilated`` in NHWC, GELU, a 4 × 4 max pool as
    reshape + max, two matmuls, ``log_softmax``) through jax2onnx with a symbolic batch ``B``."""
    p = d / "jax2onnx-cnn.onnx"
    _side_run("REAL_MODELS_JAX_SITE", "jax2onnx", _JAX_SCRIPT, str(p))
    return Case("jax2onnx-cnn", p, dims=_free_dims(p, {0: 256}))


@builder("onnxscript-opset18-ops")
def onnxscript_opset18(d: Path) -> Case:
    """A model written in onnxscript with opset-18 forms: ``Col2Im`` (patch columns back to
    an image), ``ReduceMean`` with ``axes`` as an input, ``Split`` with ``num_outputs``,
    ``ScatterElements`` with ``reduction="max"``, a gated Conv between; dynamic batch."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from onnxscript_opset18 import net

    m = net.to_model_proto()
    # the weight as an initializer, as exporters write it (not a graph input)
    w = _w("w", 16, 16, 3, 3)
    keep = [i for i in m.graph.input if i.name != "w"]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    m.graph.initializer.append(w)
    m.ir_version = min(m.ir_version, 10)
    p = d / "onnxscript_opset18.onnx"
    _save(m, p)
    return Case("onnxscript-opset18-ops", p, dims={"batch": 16}, int_ranges={"where": (0, 1024)})


# ------------------------------------------------------------------------------- session 15
# What other tools leave behind before memshrink sees a file: ORT's quantizers and optimizers
# chained, onnxconverter-common fp16, onnxsim / onnxslim, real skl2onnx pipelines. The
# packages the project does not install (scikit-learn, skl2onnx, onnxconverter-common,
# onnxslim) come from the folder named by REAL_MODELS_ML_SITE (``pip install --target DIR
# scikit-learn skl2onnx onnxconverter-common onnxslim joblib threadpoolctl narwhals``), put at
# the end of the path so it never shadows the project's own packages; without it (and not
# installed) the row is skipped with that reason.


def _side_import(module: str) -> Any:
    """``module``, from this interpreter or $REAL_MODELS_ML_SITE; ``RuntimeError("skipped:
    …")`` when neither has it."""
    import importlib
    import os

    site = os.environ.get("REAL_MODELS_ML_SITE")
    if site and site not in sys.path:
        sys.path.append(site)
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise RuntimeError(
            f"skipped: {module} not importable ({exc}); set REAL_MODELS_ML_SITE to a "
            "`pip install --target` folder with it"
        ) from exc


_BERT_DIMS15 = {"batch": 8, "seq": 128}  # the tiny BERT's whole position table


class _Feeds:
    """A calibration reader over a fixed list of feeds (ORT's ``CalibrationDataReader``)."""

    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self.data = iter(feeds)

    def get_next(self) -> Any:
        return next(self.data, None)

    def rewind(self) -> None:  # some calibrators call it
        pass


def _bert_feeds(n: int, b: int = 1, s: int = 16) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [
        {
            "input_ids": rng.integers(0, 400, (b, s), dtype=np.int64),
            "attention_mask": np.ones((b, s), np.int64),
            "token_type_ids": rng.integers(0, 2, (b, s), dtype=np.int64),
        }
        for _ in range(n)
    ]


@builder("ort-optimizer-then-quantize-dynamic-bert")
def ort_opt_qdyn(d: Path) -> Case:
    """The recipe ORT's docs give for BERT on CPU: the transformers optimizer
    (SkipLayerNormalization, BiasGelu; transformers 5's attention pattern is not fused into
    ``Attention``) then ``quantize_dynamic`` (``MatMulInteger`` + ``DynamicQuantizeLinear``
    between com.microsoft ops, whose outputs onnx's shape inference cannot type: the
    quantizer needs ``DefaultTensorType``, as its own error message says)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers import optimizer

    src = _bert_legacy(d, "bert_src_oq.onnx")
    mid = d / "bert_oq_opt.onnx"
    with _quiet():
        opt = optimizer.optimize_model(
            str(src), model_type="bert", num_heads=4, hidden_size=64, opt_level=0
        )
        opt.save_model_to_file(str(mid))
        p = d / "bert_opt_qdyn.onnx"
        quantize_dynamic(
            str(mid),
            str(p),
            weight_type=QuantType.QInt8,
            extra_options={"DefaultTensorType": TensorProto.FLOAT},
        )
    mid.unlink()
    return Case(
        "ort-optimizer-then-quantize-dynamic-bert", p, dims=_BERT_DIMS15, int_ranges=_BERT_RANGES
    )


@builder("ort-qdq-perchannel-bert")
def ort_qdq_bert(d: Path) -> Case:
    """``quantize_static`` QDQ on a transformer (calibrated on token feeds): per-channel int8
    DequantizeLinear on every MatMul weight (axis 1), uint8 Q/DQ pairs on the activations
    between MatMul / Add / Softmax / LayerNorm, the embedding tables dequantized by Gather."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    src = _bert_legacy(d, "bert_src_qdq.onnx")
    p = d / "bert_qdq_pc.onnx"
    with _quiet():
        quantize_static(
            str(src),
            str(p),
            _Feeds(_bert_feeds(4)),  # type: ignore[arg-type]
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
        )
    return Case("ort-qdq-perchannel-bert", p, dims=_BERT_DIMS15, int_ranges=_BERT_RANGES)


@builder("ort-matmulnbits-asym-acc4-bert")
def ort_nbits_bert(d: Path) -> list[Case]:  # type: ignore[override]
    """``MatMulNBitsQuantizer`` on an encoder, two ways: asymmetric 4-bit with zero points
    and ``accuracy_level=4`` (int8 compute) as com.microsoft ``MatMulNBits``, and the same
    tool's ``quant_format=QDQ`` (block-wise int4 ``DequantizeLinear`` + ``MatMul``, opset
    21)."""
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    src = _bert_legacy(d, "bert_src_nbits.onnx")
    # the QDQ form needs opset 21 (int4 DequantizeLinear with block_size): the quantizer raises
    # the model's opset number without converting its nodes (ReduceMean's ``axes`` attribute
    # stays, which opset 18+ refuses), so the source is converted first, as its users must
    src21 = d / "bert_src_nbits21.onnx"
    onnx.save(onnx.version_converter.convert_version(onnx.load(str(src)), 21), str(src21))
    import logging

    # the quantizer logs every node it skips at INFO through its own handler
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    cases = []
    for name, cfg, base in (
        (
            "ort-matmulnbits-asym-acc4-bert",
            DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=False, accuracy_level=4),
            src,
        ),
        (
            "ort-nbits-qdq-int4-bert",
            DefaultWeightOnlyQuantConfig(
                block_size=32, is_symmetric=True, quant_format=QuantFormat.QDQ
            ),
            src21,
        ),
    ):
        with _quiet():
            q = MatMulNBitsQuantizer(onnx.load(str(base)), algo_config=cfg)
            q.process()
        p = d / f"{name}.onnx"
        _save(q.model.model, p, check=False)
        cases.append(Case(name, p, dims=_BERT_DIMS15, int_ranges=_BERT_RANGES))
    return cases


def _fp16_keepio(src: Case, name: str, d: Path, dims: dict[str, int]) -> Case:
    float16 = _side_import("onnxconverter_common.float16")
    with _quiet():
        m16 = float16.convert_float_to_float16(onnx.load(str(src.path)), keep_io_types=True)
    # onnxconverter-common 1.16 declares the output of a ``Cast(to=FLOAT)`` float16 in
    # value_info (and feeds it to float16 nodes) but leaves the node's ``to`` as it was: ONNX
    # Runtime refuses the file ("Type (tensor(float16)) of output arg (/Cast_output_0) of
    # node (/Cast) does not match expected type"). Mended as the converter meant it: the
    # Cast writes what its output is declared
    declared = {vi.name: vi.type.tensor_type.elem_type for vi in m16.graph.value_info}
    for n in m16.graph.node:
        if n.op_type == "Cast" and n.output[0] in declared:
            for a in n.attribute:
                if a.name == "to" and a.i == TensorProto.FLOAT:
                    a.i = declared[n.output[0]]
    p = d / f"{name}.onnx"
    onnx.save(m16, str(p))
    return Case(name, p, dims=dims, int_ranges=src.int_ranges)


@builder("onnxconverter-fp16-keepio-sd-unet")
def fp16_unet(d: Path) -> Case:
    """The SD-style U-Net (session 12) through onnxconverter-common's fp16 converter with
    ``keep_io_types``, as diffusion pipelines ship their U-Nets: GroupNorm (InstanceNorm +
    Reshape), cross-attention and GEGLU in fp16, f32 at the edges."""
    dims = {"batch": 2, "height": 48, "width": 48, "text_len": 77}  # a 384² image's latent
    return _fp16_keepio(sd_unet(d), "onnxconverter-fp16-keepio-sd-unet", d, dims)


@builder("onnxconverter-fp16-keepio-yolo-nms")
def fp16_yolo(d: Path) -> Case:
    """The YOLO-style detector with NMS (session 12) through the fp16 converter: its default
    block list keeps ``TopK``, ``NonMaxSuppression`` and ``Resize`` in f32, so Cast pairs
    surround them inside an fp16 backbone."""
    dims = {"batch": 2, "height": 640, "width": 640}
    return _fp16_keepio(yolo_nms(d), "onnxconverter-fp16-keepio-yolo-nms", d, dims)


@builder("onnxslim-output-yolo-nms")
def slim_yolo(d: Path) -> Case:
    """onnxslim's output of the YOLO-style detector (dynamic batch / H / W, the data-dependent
    NMS output): folded shape arithmetic, fused Conv + BN, shapes it inferred."""
    onnxslim = _side_import("onnxslim")
    src = yolo_nms(d)
    with _quiet():
        m = onnxslim.slim(str(src.path))
    p = d / "yolo_nms_slim.onnx"
    onnx.save(m, str(p))
    return Case("onnxslim-output-yolo-nms", p, dims={"batch": 2, "height": 640, "width": 640})


@builder("onnxsim-output-t5-decoder-past")
def sim_t5_past(d: Path) -> Case:
    """onnxsim's output of T5's decoder step with past keys / values (dynamic batch, encoder
    length and past length; relative position bias from the cache length)."""
    import onnxsim

    src = hf_t5_past(d)
    with _quiet():
        m, ok = onnxsim.simplify(str(src.path))
    if not ok:
        raise RuntimeError("onnxsim could not validate its output")
    p = d / "t5_dec_past_sim.onnx"
    onnx.save(m, str(p))
    return Case("onnxsim-output-t5-decoder-past", p, dims=src.dims, int_ranges=src.int_ranges)


@builder("ort-saved-optimized-models")
def ort_saved_optimized(d: Path) -> list[Case]:  # type: ignore[override]
    """What ONNX Runtime writes with ``SessionOptions.optimized_model_filepath``: a CNN at
    ``ORT_ENABLE_ALL`` (com.microsoft ``FusedConv``, the ``com.microsoft.nchwc`` layout:
    ``ReorderInput`` / ``ReorderOutput``, blocked Conv; valid on this CPU only) and BERT at
    ``ORT_ENABLE_EXTENDED`` (its own Attention / SkipLayerNormalization / Gelu fusions,
    ``FusedMatMul``). Users save these to skip the optimizer at start-up."""
    import onnxruntime as ort

    cases = []
    cnn = _resnetish(d, "resnetish_ortsave_src.onnx")
    bert = _bert_legacy(d, "bert_src_ortsave.onnx")
    for name, src, level, kw in (
        ("ort-saved-optimized-all-nchwc-cnn", cnn, "ORT_ENABLE_ALL", {"dims": {"batch": 4}}),
        (
            "ort-saved-optimized-extended-bert",
            bert,
            "ORT_ENABLE_EXTENDED",
            {"dims": _BERT_DIMS15, "int_ranges": _BERT_RANGES},
        ),
    ):
        p = d / f"{name}.onnx"
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        so.optimized_model_filepath = str(p)
        so.log_severity_level = 3
        ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
        cases.append(Case(name, p, **kw))
    return cases


def _skl_save(onx: onnx.ModelProto, name: str, d: Path) -> Path:
    onx.ir_version = min(onx.ir_version, 10)  # as _make_model: the EP's ORT loads IR <= 13
    p = d / f"{name}.onnx"
    onnx.save(onx, str(p))
    return p


@builder("skl2onnx-columntransformer-trees")
def skl_column_trees(d: Path) -> Case:
    """A tabular pipeline as skl2onnx writes it: two inputs (a float matrix and a string
    column), ``ColumnTransformer`` (StandardScaler on the numbers, OneHotEncoder on the
    strings: ai.onnx.ml ``Scaler``, ``OneHotEncoder``, ``Concat``), then an
    ``ExtraTreesClassifier`` (``TreeEnsembleClassifier``, 3 classes) and ``ZipMap`` to
    ``seq(map(int64, float))``. (HistGradientBoosting does not convert with skl2onnx 1.20 and
    scikit-learn 1.9: numpy uint32 in a node attribute.)"""
    skl2onnx = _side_import("skl2onnx")
    sk = _side_import("sklearn")  # noqa: F841  (imports the package before its submodules)
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import ExtraTreesClassifier
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    rng = np.random.default_rng(0)
    n = 600
    num = rng.standard_normal((n, 6)).astype(np.float32)
    cat = rng.choice(np.array(["red", "green", "blue", "black"]), (n, 1))
    y = (num[:, 0] + (cat[:, 0] == "red") * 1.5 + rng.standard_normal(n) * 0.3 > 0.5).astype(
        np.int64
    ) + (num[:, 1] > 1).astype(np.int64)
    import pandas as pd  # noqa: F401  (sklearn's ColumnTransformer wants named columns)

    frame = {f"f{i}": num[:, i] for i in range(6)} | {"color": cat[:, 0]}
    df = pd.DataFrame(frame)
    pipe = Pipeline(
        [
            (
                "cols",
                ColumnTransformer(
                    [
                        ("num", StandardScaler(), [f"f{i}" for i in range(6)]),
                        ("cat", OneHotEncoder(handle_unknown="ignore"), ["color"]),
                    ]
                ),
            ),
            ("trees", ExtraTreesClassifier(n_estimators=20, max_depth=8, random_state=0)),
        ]
    ).fit(df, y)
    types = [(f"f{i}", FloatTensorType([None, 1])) for i in range(6)]
    types.append(("color", StringTensorType([None, 1])))
    with _quiet():
        onx = skl2onnx.convert_sklearn(
            pipe, initial_types=types, target_opset={"": 17, "ai.onnx.ml": 3}
        )
    p = _skl_save(onx, "skl2onnx-columntransformer-trees", d)
    return Case("skl2onnx-columntransformer-trees", p, shapes={k: (64, 1) for k, _ in types})


@builder("skl2onnx-tfidf-text-logreg")
def skl_tfidf(d: Path) -> Case:
    """A text classifier as skl2onnx writes it: a string input through ``StringNormalizer``
    (lower case, locale C.UTF-8), com.microsoft ``Tokenizer`` (word regex),
    ``TfIdfVectorizer`` (1- and 2-grams seen twice or more: ~2,000 terms), the idf ``Mul``, ``LpNormalization``, then
    ``LogisticRegression`` (``LinearClassifier``, 4 classes) without ZipMap (probabilities as
    a tensor)."""
    skl2onnx = _side_import("skl2onnx")
    _side_import("sklearn")
    from skl2onnx.common.data_types import StringTensorType
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(60)]
    docs = [" ".join(rng.choice(words, int(rng.integers(3, 12)))) for _ in range(400)]
    y = rng.integers(0, 4, 400)
    pipe = Pipeline(
        [
            ("tfidf", TfidfVectorizer(ngram_range=(1, 2), min_df=2)),
            ("lr", LogisticRegression(max_iter=200)),
        ]
    ).fit(docs, y)
    opts = {
        TfidfVectorizer: {"tokenexp": r"\w+", "separators": None},
        LogisticRegression: {"zipmap": False},
    }
    with _quiet():
        onx = skl2onnx.convert_sklearn(
            pipe,
            initial_types=[("text", StringTensorType([None, 1]))],
            options=opts,
            target_opset={"": 17, "ai.onnx.ml": 3},
        )
    for node in onx.graph.node:
        if node.op_type == "StringNormalizer":
            # skl2onnx leaves the locale out and ONNX Runtime then asks for en_US.UTF-8, which
            # a bare machine lacks ("locale::facet::_S_create_c_locale name not valid")
            node.attribute.append(helper.make_attribute("locale", "C.UTF-8"))
    p = _skl_save(onx, "skl2onnx-tfidf-text-logreg", d)
    return Case("skl2onnx-tfidf-text-logreg", p, shapes={"text": (256, 1)})


@builder("skl2onnx-knn-regressor")
def skl_knn(d: Path) -> Case:
    """k-nearest-neighbour regression as skl2onnx writes it: the 20,000 × 32 training set as
    an initializer (2.4 MiB), squared distances by ``ReduceSumSquare`` / ``MatMul`` over the
    whole set per query row (a [batch, 20000] matrix), ``TopK`` smallest 5, ``Gather`` of the
    training targets, ``ReduceMean``; batch free."""
    skl2onnx = _side_import("skl2onnx")
    _side_import("sklearn")
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.neighbors import KNeighborsRegressor

    rng = np.random.default_rng(0)
    x = rng.standard_normal((20000, 32)).astype(np.float32)
    y = (x[:, :3].sum(1) + rng.standard_normal(20000) * 0.1).astype(np.float32)
    knn = KNeighborsRegressor(n_neighbors=5, algorithm="brute").fit(x, y)
    with _quiet():
        onx = skl2onnx.convert_sklearn(
            knn, initial_types=[("x", FloatTensorType([None, 32]))], target_opset=17
        )
    p = _skl_save(onx, "skl2onnx-knn-regressor", d)
    return Case("skl2onnx-knn-regressor", p, shapes={"x": (256, 32)})


def build_all(folder: Path, only: list[str] | None = None) -> tuple[list[Case], dict[str, str]]:
    """Build every model (or those named); returns the cases and {builder: error} for failures."""
    folder.mkdir(parents=True, exist_ok=True)
    cases: list[Case] = []
    failed: dict[str, str] = {}
    for name, fn in BUILDERS:
        if only and name not in only:
            continue
        try:
            out = fn(folder)
        except Exception as exc:  # a builder that fails is reported, not fatal
            failed[name] = (
                f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            )
            print(f"build {name}: FAILED {failed[name]}", file=sys.stderr)
            continue
        cases += out if isinstance(out, list) else [out]
        print(f"build {name}: ok", file=sys.stderr)
    return cases, failed
