"""Hugging Face transformers built from their default configs, random init, no downloads.

Exported like users export them: ``torch.onnx.export`` with dynamic ``batch``/``sequence``
dims, so the graphs carry the exporter's Shape->Gather->Concat->Reshape chains. The feed
shapes (seq 128, batch 4 x seq 512, ...) live in the sidecar, not in the graph; variants
that differ only in feed shape or weight storage share one export.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from models.export import seeded, torch_export
from models.suite import Feed, ModelSpec, register

# Bump when a change here alters any built file's bytes: cached builds of older versions
# are then rebuilt (the version is part of the sidecar's fingerprint).
BUILD_VERSION = 1

# Masks are fed all ones ([1, 2)): a fully masked row is legal but makes SDPA return NaN,
# which would turn every output comparison into NaN handling.
MASK_RANGE = (1, 2)


@dataclass(frozen=True)
class Arch:
    key: str
    kind: str  # bert | gpt2 | vit
    config: dict[str, Any] = field(default_factory=dict)  # overrides of the default config
    label: str = ""


def _module(arch: Arch) -> Any:
    import transformers

    if arch.kind == "bert":
        bert_cfg = transformers.BertConfig(**arch.config)
        return transformers.BertModel(bert_cfg, add_pooling_layer=True)
    if arch.kind == "gpt2":
        gpt_cfg = transformers.GPT2Config(use_cache=False, **arch.config)
        return transformers.GPT2LMHeadModel(gpt_cfg)
    if arch.kind == "vit":
        vit_cfg = transformers.ViTConfig(**arch.config)
        return transformers.ViTModel(vit_cfg)
    raise ValueError(arch.kind)


def _vocab(arch: Arch) -> int:
    defaults = {"bert": 30522, "gpt2": 50257}
    return int(arch.config.get("vocab_size", defaults[arch.kind]))


def _example_inputs(arch: Arch, seq: int) -> tuple[dict[str, Any], dict[str, dict[int, str]]]:
    """Example tensors for tracing (batch 2: torch.export specialises dims of size 1)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    if arch.kind == "vit":
        size = int(arch.config.get("image_size", 224))
        pixels = torch.randn(2, 3, size, size, generator=gen)
        return {"pixel_values": pixels}, {"pixel_values": {0: "batch"}}
    ids = torch.randint(0, _vocab(arch), (2, seq), generator=gen)
    mask = torch.ones(2, seq, dtype=torch.long)
    axes = {0: "batch", 1: "sequence"}
    if arch.kind == "bert":
        types = torch.zeros(2, seq, dtype=torch.long)
        return (
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": types},
            {"input_ids": axes, "attention_mask": axes, "token_type_ids": axes},
        )
    return {"input_ids": ids, "attention_mask": mask}, {"input_ids": axes, "attention_mask": axes}


_OUTPUTS = {
    "bert": ["last_hidden_state", "pooler_output"],
    "gpt2": ["logits"],
    "vit": ["last_hidden_state", "pooler_output"],
}


def _maker(arch: Arch, seed: int, trace_seq: int) -> Any:
    def make() -> Any:
        module = seeded(seed, lambda: _module(arch))
        kwargs, dynamic = _example_inputs(arch, trace_seq)
        return torch_export(module, kwargs, _OUTPUTS[arch.kind], dynamic)

    return make


def _feeds(arch: Arch, batch: int, seq: int) -> tuple[Feed, ...]:
    if arch.kind == "vit":
        size = int(arch.config.get("image_size", 224))
        return (Feed("pixel_values", (batch, 3, size, size), "float32"),)
    ids = Feed("input_ids", (batch, seq), "int64", (0, _vocab(arch)))
    mask = Feed("attention_mask", (batch, seq), "int64", MASK_RANGE)
    if arch.kind == "bert":
        return (ids, mask, Feed("token_type_ids", (batch, seq), "int64", (0, 2)))
    return (ids, mask)


def add(
    name: str,
    arch: Arch,
    description: str,
    batch: int = 1,
    seq: int = 128,
    tags: tuple[str, ...] = (),
    seed: int = 0,
    external: tuple[bool, ...] = (False, True),
    trace_seq: int = 16,
) -> None:
    """Register ``name`` (embedded weights) and ``name-ext`` (external data) as asked."""
    dims = {"batch": batch} if arch.kind == "vit" else {"batch": batch, "sequence": seq}
    extra: dict[str, Any] = {"architecture": arch.label or arch.kind}
    if arch.kind != "vit":
        extra["vocab_size"] = _vocab(arch)
    for ext in external:
        register(
            ModelSpec(
                name=name + ("-ext" if ext else ""),
                description=description + (", external data" if ext else ", weights embedded"),
                family="transformer",
                tags=("transformer", arch.kind, "external" if ext else "embedded", *tags),
                source=f"hf:{arch.key}:seed{seed}",
                make=_maker(arch, seed, trace_seq),
                feeds=_feeds(arch, batch, seq),
                external_data=ext,
                seed=seed,
                dims=dims,
                extra=extra,
            )
        )


BERT_BASE = Arch("bert-base", "bert", label="BERT-base (12 layers, hidden 768)")
GPT2_SMALL = Arch("gpt2", "gpt2", label="GPT-2 small (12 layers, hidden 768) + LM head")
VIT_B16 = Arch("vit-b16", "vit", label="ViT-B/16 (12 layers, hidden 768, 224x224)")
GPT2_LARGE = Arch(
    "gpt2-large",
    "gpt2",
    {"n_embd": 1280, "n_layer": 36, "n_head": 20},
    label="GPT-2 large (36 layers, hidden 1280) + LM head",
)
BERT_TINY = Arch(
    "bert-tiny",
    "bert",
    {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 256,
        "vocab_size": 1024,
        "max_position_embeddings": 128,
    },
    label="BERT, tiny config (2 layers, hidden 64)",
)
GPT2_TINY = Arch(
    "gpt2-tiny",
    "gpt2",
    {
        "n_embd": 64,
        "n_layer": 2,
        "n_head": 2,
        "vocab_size": 1024,
        "n_positions": 128,
        "bos_token_id": 1023,
        "eos_token_id": 1023,
    },
    label="GPT-2, tiny config (2 layers, hidden 64) + LM head",
)
VIT_TINY = Arch(
    "vit-tiny",
    "vit",
    {
        "image_size": 32,
        "patch_size": 8,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 256,
    },
    label="ViT, tiny config (2 layers, hidden 64, 32x32, patch 8)",
)

add("bert-base", BERT_BASE, "BERT-base, seq 128")
add("bert-base-b4s512", BERT_BASE, "BERT-base, batch 4 x seq 512", batch=4, seq=512)
add("gpt2", GPT2_SMALL, "GPT-2 small + LM head, seq 128")
add("gpt2-s1024", GPT2_SMALL, "GPT-2 small + LM head, seq 1024", seq=1024)
add("vit-b16", VIT_B16, "ViT-B/16, 224x224")
add(
    "gpt2-large",
    GPT2_LARGE,
    "GPT-2 large + LM head (3.1 GB fp32, over the 2 GB protobuf limit), seq 128",
    tags=("big",),
    external=(True,),
)
add("bert-tiny", BERT_TINY, "BERT tiny config, seq 32", seq=32, tags=("tiny", "ci"))
add("gpt2-tiny", GPT2_TINY, "GPT-2 tiny config, seq 32", seq=32, tags=("tiny", "ci"))
add("vit-tiny", VIT_TINY, "ViT tiny config, 32x32", tags=("tiny", "ci"))
