"""``chunk``'s cross-runtime choice (``chunking.choice``) and batch prefix cuts (``partial``).

Why: a layout ranked first on ORT CPU can raise OpenVINO's process peak (one compiled primitive
per copied Conv/FC node); the choice walks the ranking for one that keeps the preferred
backends, else keeps ORT CPU's best within a hard cap (``prefer_cap``, 5 % / 2 MiB), else none, and
never breaks the guarded backends.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from memshrink.manager import PassContext
from memshrink.transforms.chunk import ChunkPass, _predict, _shapes, apply
from memshrink.transforms.chunking.choice import Chooser, kernels, rank
from memshrink.transforms.predicted import process_figures
from memshrink.transforms.saved_layout import clone_with_meta

MiB = 1 << 20


def _stages(batch: int = 8, hw: int = 32, depth: int = 3) -> onnx.ModelProto:
    """Conv+Relu stages, each halving H and W (stride 2) after the first: large tensors first,
    as in a CNN's stem."""
    rng = np.random.default_rng(0)
    f = TensorProto.FLOAT
    nodes, inits, x, c = [], [], "x", 3
    for i in range(depth):
        w = f"w{i}"
        inits.append(numpy_helper.from_array(
            rng.standard_normal((8, c, 3, 3)).astype(np.float32) * 0.2, w))  # fmt: skip
        s = 1 if i == 0 else 2
        nodes.append(helper.make_node("Conv", [x, w], [f"c{i}"], pads=[1, 1, 1, 1], strides=[s, s]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        x, c = f"r{i}", 8
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["y"]))
    g = helper.make_graph(
        nodes, "stages", [helper.make_tensor_value_info("x", f, [batch, 3, hw, hw])],
        [helper.make_tensor_value_info("y", f, [batch, 8, 1, 1])], inits,
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _run(proto: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def test_a_prefix_cut_chunks_only_the_first_stage_and_keeps_outputs() -> None:
    proto = _stages()
    model = ir.from_proto(proto)
    shapes = _shapes(_predict(model, PassContext())[1])
    region, st = apply(model, shapes, "batch", 4, 2, cut=1)
    # cut 1: up to the last op whose output is as large as the largest (the first stage)
    assert [n.op_type for n in region.nodes] == ["Conv", "Relu"]
    assert st.outputs == ["r0"]
    assert kernels(model) == 4 + 2  # 4 chunk copies of the first Conv, the others once
    x = np.random.default_rng(1).standard_normal((8, 3, 32, 32)).astype(np.float32)
    got, want = _run(ir.to_proto(model), x), _run(proto, x)
    np.testing.assert_allclose(got, want, atol=0, rtol=0)  # batch chunks: bit-identical


def test_rank_puts_the_fewest_chunks_within_3_percent_first() -> None:
    cands = [
        {"chunks": 8, "predicted_activations": 100, "extra_flops": 0.0, "stagger": 0},
        {"chunks": 2, "predicted_activations": 102, "extra_flops": 0.0, "stagger": 0},
        {"chunks": 4, "predicted_activations": 150, "extra_flops": 0.0, "stagger": 0},
    ]
    keys = lambda c: (c["chunks"], c["extra_flops"], c["stagger"])  # noqa: E731
    fit = lambda c: (c["extra_flops"], c["chunks"])  # noqa: E731
    assert [c["chunks"] for c in rank(cands, 0, keys, fit)] == [2, 8, 4]
    assert [c["chunks"] for c in rank(cands, 160, keys, fit)][0] == 2  # all fit: fewest
    assert rank([], 0, keys, fit) == []


def _chooser(base: ir.Model, trials: dict[str, ir.Model], prefer: list[str],
             per_kernel: int) -> Chooser:  # fmt: skip
    return Chooser(base, PassContext(), [], prefer, lambda c: trials[c["name"]],
                   per_kernel=per_kernel)  # fmt: skip


def _variants() -> tuple[ir.Model, dict[str, ir.Model]]:
    """The model, its batch x8 chunking (7 x 3 more Conv primitives) and itself unchanged."""
    base = ir.from_proto(_stages(depth=3, hw=8))
    shapes = _shapes(_predict(base, PassContext())[1])
    many = clone_with_meta(base)
    apply(many, shapes, "batch", 8, 2)
    return base, {"many": many, "same": clone_with_meta(base)}


def test_preference_walks_past_a_layout_that_raises_openvino() -> None:
    """The ORT pick adds 21 Conv primitives (5.25 MiB at 0.25 MiB each, calibrated): with a
    per-primitive bound of 1 MiB it must raise OpenVINO by more than 8 MiB, so the next one,
    which keeps OpenVINO, is taken without estimating the first."""
    base, trials = _variants()
    ch = _chooser(base, trials, ["openvino"], per_kernel=1 * MiB)
    got = ch.choose([{"name": "many", "chunks": 8}, {"name": "same", "chunks": 2}])
    assert got is not None and got["name"] == "same"
    first, second = ch.report["tried"]
    assert "bound" in first["openvino"] and "primitives" in first["not preferred"]
    assert second["openvino"]["peak"] == ch.report["before"]["openvino"]["peak"]
    assert "preference" not in ch.report


def test_no_layout_keeps_openvino_and_over_the_cap_means_no_chunk() -> None:
    """The only candidate's bound (21 primitives at 1 MiB) is far over the 5 % / 2 MiB cap on
    the tiny model's OpenVINO peak: refused without a prediction, and the reason is reported."""
    base, trials = _variants()
    ch = _chooser(base, trials, ["openvino"], per_kernel=1 * MiB)
    assert ch.choose([{"name": "many", "chunks": 8}]) is None
    (row,) = ch.report["tried"]
    assert "bound" in row["openvino"] and "> 5%" in row["over cap"]
    assert "5%" in ch.report["refused"] and "chosen" not in ch.report


def test_without_a_cap_or_within_it_the_ort_pick_is_kept() -> None:
    base, trials = _variants()
    off = _chooser(base, trials, ["openvino"], per_kernel=1 * MiB)
    off.cap = 0  # the behaviour before the cap: ORT CPU's pick wins
    got = off.choose([{"name": "many", "chunks": 8}])
    assert got is not None and got["name"] == "many"
    assert off.report["preference"] == "no candidate tried keeps openvino"
    wide = _chooser(base, trials, ["openvino"], per_kernel=1 * MiB)
    wide.cap = 100.0  # the bound is within: predicted, and kept with the note
    got = wide.choose([{"name": "many", "chunks": 8}])
    assert got is not None and got["name"] == "many"
    row = wide.report["tried"][0]
    assert "peak" in row["openvino"] and 0 < row["rise"] < 100
    assert wide.report["preference"].endswith("the best on ORT CPU within the 10000% cap kept")


def test_the_openvino_prediction_itself_decides_without_the_bound() -> None:
    """per_kernel = 0: the estimator's OpenVINO prediction of the trial is compared instead."""
    base, trials = _variants()
    ch = _chooser(base, trials, ["openvino"], per_kernel=0)
    ch.choose([{"name": "many", "chunks": 8}, {"name": "same", "chunks": 2}])
    first = ch.report["tried"][0]
    assert "peak" in first["openvino"]  # predicted, not bounded
    before = ch.report["before"]["openvino"]["peak"]
    assert first["openvino"]["peak"] > before  # more primitives: a higher predicted peak


def test_chunk_pass_reports_the_preferred_backends_and_keeps_its_pick() -> None:
    """At the old 25 % / 8 MiB cap, ORT CPU's pick (batch x8) keeps OpenVINO within 5 % / 8
    MiB here (a few more primitives, smaller activations): the pass takes it, reports both
    preferred backends, and without them picks the same layout. At the default 5 % / 2 MiB
    cap the x8 split's predicted OpenVINO rise is over 2 MiB: the pass walks on to batch x4,
    within 2 MiB."""
    old = ChunkPass(guard_backends="", prefer_cap=0.25, prefer_cap_bytes=8 * MiB)
    res = old.run(ir.from_proto(_stages(hw=64)), PassContext())
    assert res.modified, res.stats
    g = res.stats["guard"]
    assert set(g["before"]) == set(g["after"]) == {"openvino", "ort-openvino"}
    assert "preference" not in g and 2 * MiB < g["change"]["openvino"]["peak"] < 8 * MiB
    off = ChunkPass(guard_backends="", prefer_backends="").run(
        ir.from_proto(_stages(hw=64)), PassContext()
    )
    assert "guard" not in off.stats
    keys = ("mode", "chunks", "stagger", "edges", "cut")
    assert [off.stats[k] for k in keys] == [res.stats[k] for k in keys]
    tight = ChunkPass(guard_backends="").run(ir.from_proto(_stages(hw=64)), PassContext())
    assert (tight.stats["mode"], tight.stats["chunks"], res.stats["chunks"]) == ("batch", 4, 8)
    assert tight.stats["guard"]["change"]["openvino"]["peak"] <= 2 * MiB


def test_naming_the_deploy_runtime_drops_the_preferred_backends() -> None:
    """optimize --backend ort: the user deploys on ORT CPU only, so OpenVINO and its EP are
    neither predicted nor weighed, and the layout is ORT CPU's own pick."""
    only = ChunkPass(guard_backends="").run(
        ir.from_proto(_stages(hw=64)), PassContext(backend="ort", deploy_only=True)
    )
    assert only.modified and "guard" not in only.stats
    free = ChunkPass(guard_backends="", prefer_backends="").run(
        ir.from_proto(_stages(hw=64)), PassContext()
    )
    keys = ("mode", "chunks", "stagger", "edges", "cut")
    assert [only.stats[k] for k in keys] == [free.stats[k] for k in keys]


def _ffn_stack(batch: int = 8, seq: int = 1024, h: int = 128, hidden: int = 1024,
               layers: int = 2) -> onnx.ModelProto:  # fmt: skip
    """Transformer FFNs (MatMul, Relu, MatMul, residual) in a row: a batch region whose
    4x-wide hidden tensors are also channel-split blocks, so ``chunk`` takes two steps."""
    rng = np.random.default_rng(0)
    f = TensorProto.FLOAT
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        inits += [
            numpy_helper.from_array((rng.standard_normal((h, hidden)) * 0.1).astype(np.float32),
                                    f"w1_{i}"),
            numpy_helper.from_array((rng.standard_normal((hidden, h)) * 0.05).astype(np.float32),
                                    f"w2_{i}"),
        ]  # fmt: skip
        nodes += [
            helper.make_node("MatMul", [x, f"w1_{i}"], [f"a{i}"]),
            helper.make_node("Relu", [f"a{i}"], [f"r{i}"]),
            helper.make_node("MatMul", [f"r{i}", f"w2_{i}"], [f"o{i}"]),
            helper.make_node("Add", [f"o{i}", x], [f"y{i}"]),
        ]
        x = f"y{i}"
    g = helper.make_graph(
        nodes, "ffns", [helper.make_tensor_value_info("x", f, [batch, seq, h])],
        [helper.make_tensor_value_info(x, f, [batch, seq, h])], inits,
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def test_the_cap_bounds_the_whole_pass_not_each_step() -> None:
    """A later step of the pass (the channel split after a batch split) is judged against the
    *original's* predicted peak (``Chooser.origin``): a candidate within 5 % of its own step's
    model, but whose input is already far over the original, is refused (the DeiT /
    EfficientFormer WORSE rows of session 7: batch +20.8 %, then channels, each inside 25 %,
    together over it). Known answer: the unchanged model is exactly its step's peak."""
    base, trials = _variants()
    ctx = PassContext()
    peak = process_figures(base, ctx, "openvino")["peak"]
    # the step's input is 40 % over the original and more than RISE_BYTES above it
    origin_peak = int(peak / 1.4)
    assert peak - origin_peak > 8 << 20

    free = _chooser(base, trials, ["openvino"], per_kernel=0)
    assert free.choose([{"name": "same", "chunks": 2}]) == {
        "name": "same",
        "chunks": 2,
    }  # within 5 % of its step

    capped = _chooser(base, trials, ["openvino"], per_kernel=0)
    capped.origin = {"openvino": {"peak": origin_peak}}
    assert capped.choose([{"name": "same", "chunks": 2}]) is None
    row = capped.report["tried"][0]
    assert "over the pass's input" in row["not preferred"]
    assert "over the pass's input" in row["over cap"] and "+40%" in row["over cap"]
    assert capped.report["origin"]["openvino"]["peak"] == origin_peak
    assert "5%" in capped.report["refused"]


def test_chunk_passes_the_originals_figures_to_the_channel_step() -> None:
    """The wiring: after a batch step, ``chunk`` gives the channel step the original's
    predicted figures (its ``stats["guard"]["before"]``) as the cap's reference."""
    done = ChunkPass(guard_backends="", prefer_cap=100.0).run(
        ir.from_proto(_ffn_stack(seq=2048)), PassContext()
    )
    st = done.stats
    assert st["mode"] == "batch" and st["channels"].get("chunks"), st["channels"]
    origin = st["channels"]["guard"]["origin"]["openvino"]["peak"]
    assert origin == st["guard"]["before"]["openvino"]["peak"]


def _fixed(monkeypatch, figures: dict[str, dict[str, int]]) -> None:  # noqa: ANN001
    """``process_figures`` of each trial (by name) fixed to ``figures``: the rule alone."""
    from memshrink.transforms.chunking import choice

    monkeypatch.setattr(choice, "process_figures", lambda m, c, b: dict(figures[m.graph.name]))


def _named(name: str) -> ir.Model:
    m = ir.from_proto(_stages(depth=1, hw=4))
    m.graph.name = name
    return m


def test_the_cap_keeps_a_margin_for_openvinos_underpredicted_rises(monkeypatch) -> None:
    """Known answer at a 25 % cap (the default before session 10): a predicted +20 % OpenVINO
    rise (100 -> 120 MiB) is inside it, but OpenVINO rises have measured up to 5.5 % above prediction (DeiT batch x2: predicted
    x1.212, measured x1.279), so the cap is judged at 1.25 / 1.06 = x1.179: refused; +15 %
    is kept. Without the margin (``CAP_MARGIN`` empty) +20 % is kept, as before."""
    from memshrink.transforms.chunking import choice

    _fixed(monkeypatch, {"up20": {"peak": 120 * MiB, "activations": 0},
                         "up15": {"peak": 115 * MiB, "activations": 0}})  # fmt: skip
    trials = {"up20": _named("up20"), "up15": _named("up15")}
    origin = {"openvino": {"peak": 100 * MiB, "activations": MiB}}

    def pick(cands: list[str]) -> str | None:
        ch = _chooser(_named("base"), trials, ["openvino"], per_kernel=0)
        ch.cap, ch.cap_bytes = 0.25, 8 * MiB
        ch.known, ch.origin = {"openvino": {"peak": 100 * MiB, "activations": MiB}}, origin
        got = ch.choose([{"name": n, "chunks": 2} for n in cands])
        return got["name"] if got else None

    assert pick(["up20"]) is None
    assert pick(["up20", "up15"]) == "up15"
    monkeypatch.setattr(choice, "CAP_MARGIN", {})
    assert pick(["up20"]) == "up20"


def test_the_cap_compares_saved_peaks_when_a_folded_file_is_released(monkeypatch) -> None:
    """Known answer: the pass's input predicts 118 MiB in memory but 100 MiB as saved (its
    folded weights' file, 18 MiB, released after compile: ``saved_peak``); a trial at 120
    MiB in memory, 120 saved (its split weights no longer fold) is +20 % over the saved base,
    not +1.7 % over the in-memory one: refused (EfficientFormer, in-pass +7.5 %, files +23 %).
    A trial that keeps the credit (saved 110) is +10 %: kept at a 25 % cap."""
    _fixed(monkeypatch, {
        "lost": {"peak": 120 * MiB, "saved_peak": 120 * MiB, "activations": 0},
        "kept": {"peak": 128 * MiB, "saved_peak": 110 * MiB, "activations": 0},
    })  # fmt: skip
    trials = {"lost": _named("lost"), "kept": _named("kept")}
    rows = {}
    for name, want in (("lost", None), ("kept", "kept")):
        ch = _chooser(_named("base"), trials, ["openvino"], per_kernel=0)
        ch.cap, ch.cap_bytes = 0.25, 8 * MiB
        base = {"peak": 118 * MiB, "saved_peak": 100 * MiB, "activations": MiB}
        ch.known, ch.origin = {"openvino": base}, {"openvino": base}
        got = ch.choose([{"name": name, "chunks": 2}])
        assert (got["name"] if got else None) == want, ch.report
        rows[name] = ch.report["tried"][0]
    assert "+20%" in rows["lost"]["over cap"] and rows["lost"]["rise"] == 0.2
    assert rows["kept"]["rise"] == 0.1


def test_saved_peak_credits_exactly_the_folded_file_the_save_writes(tmp_path) -> None:  # noqa: ANN001
    """A Conv scaled by a per-channel Mul (OpenVINO folds it: new Constant) and a plain Conv:
    ``external-data`` sends the first weight to ``OUT.folded.data``; the in-memory figures'
    ``saved_peak`` is the peak less its bytes after compile, and the saved file's own
    prediction agrees within the data files' alignment padding."""
    from memshrink.estimate import estimate
    from memshrink.transforms.external_data import ExternalDataPass
    from memshrink.transforms.predicted import folded_file_bytes
    from memshrink.writer import save_model

    rng = np.random.default_rng(0)
    c = 128
    inits = [
        numpy_helper.from_array(rng.standard_normal((c, c, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((1, c, 1, 1)).astype(np.float32), "s"),
        numpy_helper.from_array(rng.standard_normal((c, c, 3, 3)).astype(np.float32), "w2"),
    ]
    g = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1]),
            helper.make_node("Mul", ["h", "s"], ["hs"]),
            helper.make_node("Relu", ["hs"], ["r"]),
            helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 16, 16])],
        inits,
    )
    model = ir.from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    ExternalDataPass(threshold=1024).run(model, PassContext())
    w1 = model.graph.initializers["w1"].const_value.nbytes
    assert folded_file_bytes(model) == w1  # w1 only: w2's Conv is not scaled
    fig = process_figures(model, PassContext(), "openvino")
    est = estimate(model, backend="openvino", embedded=False)
    peaks = est.stage_peaks()
    want = max(peaks["compile_model"], peaks["steady_state"] - w1, peaks["read_model"])
    assert fig["saved_peak"] == want and fig["peak"] == max(peaks.values())
    save_model(model, tmp_path / "m.onnx")
    disk = max(estimate(str(tmp_path / "m.onnx"), backend="openvino").stage_peaks().values())
    assert abs(disk - fig["saved_peak"]) <= 3 * (64 << 10), (disk, fig)


def test_a_preferred_layout_that_loses_the_folded_file_is_still_capped(monkeypatch) -> None:
    """First step (no ``origin``): in memory the trial is +2.5 % (inside the 5 % preference),
    saved it is +21 % (its split weights no longer fold, so their file stays mapped): over
    ×1.179, refused; with the cap off it is kept as before."""
    _fixed(monkeypatch, {
        "base": {"peak": 118 * MiB, "saved_peak": 100 * MiB, "activations": MiB},
        "t": {"peak": 121 * MiB, "saved_peak": 121 * MiB, "activations": 0},
    })  # fmt: skip
    ch = _chooser(_named("base"), {"t": _named("t")}, ["openvino"], per_kernel=0)
    assert ch.choose([{"name": "t", "chunks": 2}]) is None
    assert "+21%" in ch.report["tried"][0]["not preferred"]
    off = _chooser(_named("base"), {"t": _named("t")}, ["openvino"], per_kernel=0)
    off.cap = 0
    assert off.choose([{"name": "t", "chunks": 2}]) == {"name": "t", "chunks": 2}


def test_the_default_cap_is_5_percent_or_2_mib(monkeypatch) -> None:
    """Known answers for the default (``PREFER_CAP`` 5 %, ``CAP_BYTES`` 2 MiB, session 10): on
    OpenVINO the fraction is judged at 1.05 / 1.06 < 1, so only the 2 MiB floor is left: a
    saved peak 100 -> 101.5 MiB is kept, 100 -> 103 MiB (+3 %) refused (EfficientFormer's
    channels x4: predicted +2 %, measured +12 %). The EP has no margin: +4.5 % kept, +6 %
    refused. At the old 25 % / 8 MiB, +3 % is kept on OpenVINO."""
    _fixed(monkeypatch, {n: {"peak": int(p * MiB), "activations": 0} for n, p in
                         (("a", 101.5), ("b", 103), ("c", 104.5), ("d", 106))})  # fmt: skip
    trials = {n: _named(n) for n in "abcd"}

    def pick(name: str, backend: str, cap: float | None = None, floor: int = 0) -> bool:
        ch = _chooser(_named("base"), trials, [backend], per_kernel=0)
        if cap is not None:
            ch.cap, ch.cap_bytes = cap, floor
        ch.known = {backend: {"peak": 100 * MiB, "activations": MiB}}
        return ch.choose([{"name": name, "chunks": 2}]) is not None

    assert Chooser(_named("base"), PassContext(), [], [], lambda c: _named("x")).cap == 0.05
    assert ChunkPass().options.prefer_cap == 0.05
    assert ChunkPass().options.prefer_cap_bytes == 2 * MiB
    assert [pick(n, "openvino") for n in "ab"] == [True, False]
    assert [pick(n, "ort-openvino") for n in "cd"] == [True, False]
    assert pick("b", "openvino", 0.25, 8 * MiB)
