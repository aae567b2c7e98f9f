"""Estimator accuracy on held-out exports at realistic sizes (issue #5): predicted vs measured.

    python docs/bench/estimate_heldout.py build   [--dir /tmp/heldout] [--only NAME ...]
    python docs/bench/estimate_heldout.py measure [--dir /tmp/heldout] [--only NAME ...]
    python docs/bench/estimate_heldout.py table   [--dir /tmp/heldout] [--json out.json]

The estimator was tuned on the ``models/`` suite and the zoo graphs; these models are none of
them. Hugging Face architectures at their real configs with random (seeded) weights, nothing
downloaded, exported by both torch exporters (legacy TorchScript and dynamo) with dynamic axes
bound at measure time by ``--dim``; some with weights embedded in the ``.onnx``, some in one
external file (what ``onnx.save_model(save_as_external_data=True)`` writes). ``build`` exports
each original and writes its ``memshrink optimize --passes all`` output (with the same
bindings) beside it; ``measure`` runs ``memshrink.verify.profile`` (one fresh child per
backend: ORT CPU, OpenVINO CPU, the ORT OpenVINO EP in ``.cache/venv-ovep``) and stores the
stage peaks in ``DIR/NAME.VARIANT.meas.json``; ``table`` estimates with the current code and
prints predicted vs measured per stage (deltas over the empty process, MiB; error =
(pred - meas) / meas). Measuring is the slow part and is kept, so the estimator can be changed
and re-tabled at once. Everything is built under ``--dir``, nothing in git but this code.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(HERE))

import real_models_build as rb  # noqa: E402

MiB = 1 << 20
OVEP_PY = str(ROOT / ".cache/venv-ovep/bin/python")
BACKENDS = ("cpu", "openvino", "ort-openvino")

BUILDERS: dict[str, Callable[[Path], rb.Case]] = {}


def builder(name: str) -> Callable[[Callable[[Path], rb.Case]], Callable[[Path], rb.Case]]:
    def deco(fn: Callable[[Path], rb.Case]) -> Callable[[Path], rb.Case]:
        BUILDERS[name] = fn
        return fn

    return deco


def _externalize(path: Path) -> None:
    """Move every initializer of ``path`` into one ``.data`` file beside it, as users do."""
    import onnx

    m = onnx.load(str(path))
    data = path.name + ".data"
    (path.parent / data).unlink(missing_ok=True)
    onnx.save_model(
        m, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=data,
        size_threshold=1024,
    )  # fmt: skip


def _text_inputs(vocab: int, b: int, s: int, types: bool = False) -> dict[str, Any]:
    import torch

    out = {"input_ids": rb._tok(vocab, b, s), "attention_mask": torch.ones(b, s, dtype=torch.long)}
    if types:
        out["token_type_ids"] = torch.zeros(b, s, dtype=torch.long)
    return out


@builder("vit-base-legacy-ext")
def vit_base(d: Path) -> rb.Case:
    import torch
    import transformers

    rb._seed()
    m = transformers.ViTModel(transformers.ViTConfig(), add_pooling_layer=True)  # base, 224/16
    p = d / "vit-base-legacy-ext.onnx"
    rb._legacy(
        m, (torch.randn(1, 3, 224, 224),), p, ["pixel_values"], ["last_hidden_state", "pooler"],
        {"pixel_values": {0: "batch"}}, opset=17,
    )  # fmt: skip
    _externalize(p)
    return rb.Case("vit-base-legacy-ext", p, dims={"batch": 2})


@builder("distilbert-dynamo")
def distilbert(d: Path) -> rb.Case:
    import transformers

    rb._seed()
    m = transformers.DistilBertModel(transformers.DistilBertConfig())  # base: 6 x 768
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    return rb._hf_dynamo(
        "distilbert-dynamo", m, _text_inputs(30522, 2, 16), dyn, d, {"batch": 1, "seq": 384},
        {"attention_mask": (1, 2)},
    )  # fmt: skip


@builder("roberta-base-legacy")
def roberta(d: Path) -> rb.Case:
    import transformers

    rb._seed()
    cfg = transformers.RobertaConfig(vocab_size=50265, max_position_embeddings=514)
    inner = transformers.RobertaModel(cfg).eval()
    p = d / "roberta-base-legacy.onnx"
    rb._legacy_text(inner, p, 50265, ["last_hidden_state"], opset=14)
    return rb.Case(
        "roberta-base-legacy", p, dims={"batch": 2, "seq": 256},
        int_ranges={"attention_mask": (1, 2)},
    )  # fmt: skip


@builder("t5-small-dynamo-ext")
def t5_small(d: Path) -> rb.Case:
    import torch
    import transformers

    rb._seed()
    cfg = transformers.T5Config(
        vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
        use_cache=False,
    )  # fmt: skip
    m = transformers.T5ForConditionalGeneration(cfg)
    inputs = {
        "input_ids": rb._tok(32128, 2, 16),
        "attention_mask": torch.ones(2, 16, dtype=torch.long),
        "decoder_input_ids": rb._tok(32128, 2, 6),
    }
    dyn = {
        "input_ids": {0: "batch", 1: "enc"},
        "attention_mask": {0: "batch", 1: "enc"},
        "decoder_input_ids": {0: "batch", 1: "dec"},
    }
    c = rb._hf_dynamo(
        "t5-small-dynamo-ext", m, inputs, dyn, d, {"batch": 1, "enc": 256, "dec": 64},
        {"attention_mask": (1, 2)},
    )  # fmt: skip
    _externalize(c.path)
    return c


@builder("whisper-base-enc-legacy")
def whisper_enc(d: Path) -> rb.Case:
    import torch
    import transformers

    rb._seed()
    cfg = transformers.WhisperConfig(
        d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
        decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
    )  # fmt: skip
    enc = transformers.WhisperModel(cfg).get_encoder().eval()

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc = enc

        def forward(self, x: Any) -> Any:
            return self.enc(input_features=x).last_hidden_state

    p = d / "whisper-base-enc-legacy.onnx"
    rb._legacy(
        W(), (torch.randn(1, 80, 3000),), p, ["input_features"], ["last_hidden_state"],
        {"input_features": {0: "batch"}}, opset=17,
    )  # fmt: skip
    return rb.Case("whisper-base-enc-legacy", p, dims={"batch": 1})


@builder("llama-130m-gqa-dynamo-ext")
def llama(d: Path) -> rb.Case:
    import transformers

    rb._seed()
    cfg = transformers.LlamaConfig(
        vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
        num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=2048,
        use_cache=False,
    )  # fmt: skip
    m = transformers.LlamaForCausalLM(cfg)
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    c = rb._hf_dynamo(
        "llama-130m-gqa-dynamo-ext", m, _text_inputs(32000, 2, 16), dyn, d,
        {"batch": 1, "seq": 256}, {"attention_mask": (1, 2)},
    )  # fmt: skip
    _externalize(c.path)
    return c


@builder("convnext-tiny-legacy")
def convnext(d: Path) -> rb.Case:
    import torch
    import transformers

    rb._seed()
    inner = transformers.ConvNextForImageClassification(transformers.ConvNextConfig()).eval()

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = inner

        def forward(self, x: Any) -> Any:
            return self.m(pixel_values=x).logits

    p = d / "convnext-tiny-legacy.onnx"
    rb._legacy(
        W(), (torch.randn(1, 3, 224, 224),), p, ["pixel_values"], ["logits"],
        {"pixel_values": {0: "batch", 2: "h", 3: "w"}}, opset=17,
    )  # fmt: skip
    return rb.Case("convnext-tiny-legacy", p, dims={"batch": 4, "h": 224, "w": 224})


@builder("swin-tiny-dynamo-ext")
def swin(d: Path) -> rb.Case:
    import torch
    import transformers

    rb._seed()
    m = transformers.SwinForImageClassification(transformers.SwinConfig())  # tiny, 224, window 7
    c = rb._hf_dynamo(
        "swin-tiny-dynamo-ext", m, {"pixel_values": torch.randn(2, 3, 224, 224)},
        {"pixel_values": {0: "batch"}}, d, {"batch": 2},
    )  # fmt: skip
    _externalize(c.path)
    return c


# --------------------------------------------------------------------------- driver


def _case_file(d: Path, name: str) -> Path:
    return d / f"{name}.case.json"


def _load_case(d: Path, name: str) -> dict[str, Any]:
    return json.loads(_case_file(d, name).read_text())


def _bind_args(case: dict[str, Any]) -> list[str]:
    return [a for k, v in case["dims"].items() for a in ("--dim", f"{k}={v}")]


def build(d: Path, names: list[str]) -> None:
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}:{ROOT}")
    for name in names:
        if not _case_file(d, name).is_file():
            t = time.perf_counter()
            c = BUILDERS[name](d)
            case = {"name": name, "path": str(c.path), "dims": c.dims, "ranges": c.int_ranges}
            _case_file(d, name).write_text(json.dumps(case))
            print(f"{name}: exported in {time.perf_counter() - t:.0f} s", flush=True)
        case = _load_case(d, name)
        out = d / f"{name}.all.onnx"
        if not out.is_file():
            t = time.perf_counter()
            cmd = [sys.executable, "-m", "memshrink.cli", "optimize", case["path"], str(out)]
            cmd += ["--passes", "all", "-q", *_bind_args(case)]
            p = subprocess.run(cmd, capture_output=True, text=True, env=env)
            took = time.perf_counter() - t
            print(f"{name}: optimize --passes all rc={p.returncode} {took:.0f} s", flush=True)
            if p.returncode:
                print(p.stderr[-2000:], flush=True)


def variants(d: Path, name: str) -> list[tuple[str, Path]]:
    case = _load_case(d, name)
    out = [("original", Path(case["path"]))]
    if (d / f"{name}.all.onnx").is_file():
        out.append(("all", d / f"{name}.all.onnx"))
    return out


def measure(d: Path, names: list[str], backends: tuple[str, ...]) -> None:
    from memshrink.verify import profile

    for name in names:
        case = _load_case(d, name)
        ranges = {k: tuple(v) for k, v in case["ranges"].items()}
        for var, path in variants(d, name):
            js = d / f"{name}.{var}.meas.json"
            got = json.loads(js.read_text()) if js.is_file() else {}
            todo = [b for b in backends if b not in got]
            if not todo:
                continue
            for b in todo:
                t = time.perf_counter()
                rep = profile(
                    str(path), backends=(b,), dims=case["dims"], int_ranges=ranges,
                    python={"ort-openvino": OVEP_PY}, timeout=1200,
                )  # fmt: skip
                run = rep.runs[0].to_dict()
                if run["status"] != "ok":
                    got[b] = {"status": run["status"], "error": str(run.get("error"))[:300]}
                else:
                    got[b] = {s["name"]: s["peak_delta"] for s in run["stages"]}
                js.write_text(json.dumps(got, indent=1))
                print(f"{name} {var} {b}: {time.perf_counter() - t:.0f} s", flush=True)


def pct(p: float, m: float) -> float:
    return 100.0 * (p - m) / m if m else float("nan")


def table(d: Path, names: list[str], backends: tuple[str, ...], out: str | None) -> None:
    from memshrink.estimate import estimate
    from memshrink.estimate.backends import VERIFY_STAGES

    rows = []
    print("| model | variant | backend | stage | pred MiB | meas MiB | err % |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: |")
    for name in names:
        case = _load_case(d, name)
        for var, path in variants(d, name):
            js = d / f"{name}.{var}.meas.json"
            meas = json.loads(js.read_text()) if js.is_file() else {}
            for b in backends:
                m = meas.get(b)
                if not m or "status" in m:
                    continue
                pred = estimate(str(path), backend=b, dims=case["dims"]).stage_peaks()
                for st, ms in VERIFY_STAGES[b].items():
                    p, mm = pred[st] / MiB, m[ms] / MiB
                    e = pct(p, mm)
                    rows.append(
                        {"model": name, "variant": var, "backend": b, "stage": st,
                         "pred": round(p, 1), "meas": round(mm, 1), "err": round(e, 1)}
                    )  # fmt: skip
                    flag = " **" if abs(e) > 10 else ""
                    print(
                        f"| {name} | {var} | {b} | {st} | {p:.0f} | {mm:.0f} | {e:+.1f}{flag} |",
                        flush=True,
                    )
    if rows:
        ok = sum(abs(r["err"]) <= 10 for r in rows)
        print(f"\nwithin ±10 %: {ok}/{len(rows)} stage peaks")
    if out:
        Path(out).write_text(json.dumps(rows, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cmd", choices=["build", "measure", "table"])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/heldout"))
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--backends", nargs="*", default=list(BACKENDS))
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    a.dir.mkdir(parents=True, exist_ok=True)
    names = a.only or list(BUILDERS)
    if a.cmd == "build":
        build(a.dir, names)
    else:
        names = [n for n in names if _case_file(a.dir, n).is_file()]
        if a.cmd == "measure":
            measure(a.dir, names, tuple(a.backends))
        else:
            table(a.dir, names, tuple(a.backends), a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
