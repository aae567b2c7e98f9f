"""chunk: weightless cores cut along the attention heads, and the file order of channel slices.

Hand-built two-layer attention block (``test_transforms_chunk_weightless.bert_like``) and a
transformer FFN (``test_transforms_chunk_channels.ffn``). Tolerances: the heads chunks run the
same kernels on fewer heads (atol 1e-5, rtol 1e-5 on ONNX Runtime CPU); the channel split sums
partial products in another order (the pass's stated atol 1e-4, rtol 1e-4).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from fixtures_onnx import run_ort
from transforms.test_transforms_chunk_channels import _feeds as ffn_feeds
from transforms.test_transforms_chunk_channels import ffn
from transforms.test_transforms_chunk_weightless import (
    _feeds,
    _readers,
    bert_batch_region,
    bert_like,
)

from memshrink.checks import check_model
from memshrink.manager import PassContext, PassManager
from memshrink.model import load
from memshrink.transforms.chunk import ChunkPass, _predict, _shapes, apply
from memshrink.transforms.chunking import weightless
from memshrink.transforms.chunking.channel_choice import ORDER_GAIN
from memshrink.transforms.chunking.channels import REVERSED, SERIAL, split_channels
from memshrink.writer import save_model


def test_heads_stretch_is_the_attention_between_the_head_reshapes(tmp_path: Path) -> None:
    model, shapes, batch = bert_batch_region(tmp_path)
    core = weightless.cores(batch, model.graph)[0]
    r = weightless.heads(core, model.graph, shapes, 18, "h")
    # Q, K, V reshapes/transposes run whole: the heads are an axis only after them
    assert [n.op_type for n in r.nodes] == [
        "MatMul", "Div", "Add", "Softmax", "MatMul", "Transpose", "Reshape"
    ]  # fmt: skip
    assert {v.name: r.axes[v] for v in r.externals} == {"l0_qt": 1, "l0_kt": 1, "l0_vt": 1}
    assert [v.name for v in r.outputs] == ["l0_of"]


@pytest.mark.parametrize("count", [2, 4])
def test_heads_chunks_match_and_share_no_weight(tmp_path: Path, count: int) -> None:
    src = tmp_path / "bert.onnx"
    onnx.save_model(bert_like(), src)
    model = load(src)
    _, est = _predict(model, PassContext())
    _, st = apply(model, _shapes(est), "batch", count, 2, weightless=True, heads=True)
    check_model(model)
    assert st.outputs == ["l0_of", "l1_of"] and st.extra_flops == 0.0
    two_d = {
        k for k, v in model.graph.initializers.items() if v.shape is not None and len(v.shape) == 2
    }
    assert two_d and all(c == 1 for k, c in _readers(model).items() if k in two_d)
    assert sum(n.op_type == "Softmax" for n in model.graph) == 2 * count
    out = tmp_path / f"h{count}.onnx"
    save_model(model, out)
    feeds = _feeds()
    np.testing.assert_allclose(run_ort(out, feeds)[0], run_ort(src, feeds)[0], atol=1e-5, rtol=1e-5)


def test_the_pass_offers_heads_candidates_for_the_divisors_of_the_heads(tmp_path: Path) -> None:
    src = tmp_path / "bert.onnx"
    onnx.save_model(bert_like(seq=128), src)  # 4 heads
    p = ChunkPass()
    p.options.modes = "batch"
    res = p.run(load(src), PassContext())
    hd = [c for c in res.stats["candidates"] if c.get("heads")]
    assert {c["chunks"] for c in hd} == {2, 4}
    assert all("predicted_activations" in c for c in hd)
    # x4 heads quarter the scores as x4 samples do
    assert (
        min(c["predicted_activations"] for c in hd)
        < 0.5 * res.stats["predicted_activations_before"]
    )


def _split(proto: onnx.ModelProto, tmp: Path, order: str) -> tuple[Path, int]:
    src = tmp / "ffn.onnx"
    onnx.save_model(proto, src)
    model = load(src)
    _, est = _predict(model, PassContext())
    st = split_channels(model.graph, _shapes(est), 4, order=order)
    assert st.blocks == 1
    check_model(model)
    out = tmp / f"ffn_{order}.onnx"
    save_model(model, out)
    return out, _predict(load(out), PassContext())[0]


def test_reversed_slices_match_and_are_written_last_first(tmp_path: Path) -> None:
    proto = ffn()
    out, _ = _split(proto, tmp_path, REVERSED)
    nodes = list(onnx.load(out).graph.node)
    # the reduces read row slices of w2 ("w2__ch<lo>_<hi>"): the last slice first
    reduces = [i for i, n in enumerate(nodes) if any(x.startswith("w2__ch") for x in n.input)]
    assert [nodes[i].input[1] for i in reduces] == [
        "w2__ch768_1024", "w2__ch512_768", "w2__ch256_512", "w2__ch0_256"
    ]  # fmt: skip
    # the Adds that accumulate the slices come after every slice
    sums = [i for i, n in enumerate(nodes) if "__sum" in n.output[0]]
    assert len(sums) == 2 and max(reduces) < min(sums)
    feeds = ffn_feeds(proto)
    src = tmp_path / "ffn.onnx"
    np.testing.assert_allclose(run_ort(out, feeds)[0], run_ort(src, feeds)[0], atol=1e-4, rtol=1e-4)


def test_channel_choice_keeps_serial_unless_another_order_is_predicted_clearly_lower(
    tmp_path: Path,
) -> None:
    """Both orders are candidates; of the chosen split, REVERSED is kept only when predicted
    lower than SERIAL by more than ORDER_GAIN (else SERIAL: within the estimator's error)."""
    proto = ffn()
    src = tmp_path / "ffn.onnx"
    onnx.save_model(proto, src)
    _, report = PassManager(["chunk"], options={"chunk": {"modes": "channels"}}).run(src)
    st = report.passes[0].stats["channels"]
    pred = {
        c.get("order", SERIAL): c["predicted_activations"]
        for c in st["candidates"]
        if c["chunks"] == st["chunks"] and c["min_bytes"] == st["min_bytes"] and "refused" not in c
    }
    assert set(pred) == {SERIAL, REVERSED}
    clearly = pred[REVERSED] < pred[SERIAL] * (1 - ORDER_GAIN)
    assert st["order"] == (REVERSED if clearly else SERIAL)
    assert st["predicted_activations_after"] == pred[st["order"]]
