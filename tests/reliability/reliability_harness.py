"""The equivalence oracle: ONNX's own backend test suite run through every memshrink pass.

Why: a rewrite that silently changes outputs is worse than no tool, and test data written by
the people who wrote the passes proves little. ONNX ships ~1,900 operator cases (generated in
memory by ``collect_testcases``) and model cases with data under
``onnx/backend/test/data/{simple,pytorch-converted,pytorch-operator,light}``; each has inputs
and reference outputs. For every case ONNX Runtime CPU can run as given, each registered pass
(and ``all``) rewrites it, the result is checked (``check_model``), saved by path, run by path,
and compared: bit-identical to the original's ORT outputs for a pass whose ``exact`` is True,
within its stated tolerance otherwise, and within the suite's own tolerance of the reference.

Used by the CI sample (``test_reliability_node_suite.py``) and the full sweep
(``docs/bench/reliability_sweep.py``).
"""

from __future__ import annotations

import contextlib
import glob
import io
import os
import random
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
from onnx import numpy_helper

from memshrink.manager import Pass

MODEL_KINDS = ("simple", "pytorch-converted", "pytorch-operator", "light")
ALL = "all"
DATA_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data"

#: Deliberate, documented skips: (case name regex, pass name or "*") -> reason.
#: Every entry is explained in docs/reliability.md; the sweep reports them as "skipped".
KNOWN_SKIPS: dict[tuple[str, str], str] = {}

#: Bugs of passes owned by other components, reported (minimal repro in docs/reliability.md,
#: "Known bugs") but not fixed here: (pass name, failure-reason regex) -> anchor. A matching
#: failure of that pass, or of ``all``, is counted as "known-bug", not "fail". Each entry has
#: a strict xfail in test_reliability_regressions.py: fixing the bug turns it into an error
#: that says to delete the entry.
# Known bugs: (pass, error pattern) -> anchor in docs/reliability.md. All found so far are
# fixed and pinned by tests in test_reliability_regressions.py; add new ones here.
KNOWN_BUGS: dict[tuple[str, str], str] = {}


def known_bug(pass_name: str, reason: str) -> str | None:
    for (p, pattern), anchor in KNOWN_BUGS.items():
        if (p == "*" or pass_name in (p, ALL)) and re.fullmatch(pattern, reason):
            return anchor
    return None


@dataclass
class Case:
    """One backend-suite case: a model (in memory or on disk) and its data sets."""

    name: str
    kind: str  # "node" or one of MODEL_KINDS
    rtol: float
    atol: float
    model: onnx.ModelProto | None = None
    model_path: Path | None = None
    data_sets: list[tuple[list[Any], list[Any]]] = field(default_factory=list)


@dataclass
class Outcome:
    """The verdict for one (case, pass)."""

    case: str
    kind: str
    pass_name: str
    status: str  # "pass" | "fail" | "skip" | "known-bug"
    reason: str = ""
    modified: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------------- collecting


def node_cases() -> list[Case]:
    """The operator cases ``onnx`` generates in memory (numpy warnings of its generators muted)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    return [
        Case(
            t.name,
            "node",
            t.rtol,
            t.atol,
            model=t.model,
            data_sets=[(list(i), list(o)) for i, o in t.data_sets or []],
        )
        for t in cases
    ]


def _load_pb(path: str, type_proto: onnx.TypeProto) -> Any:
    data = Path(path).read_bytes()
    if type_proto.HasField("sequence_type"):
        seq = onnx.SequenceProto()
        seq.ParseFromString(data)
        return numpy_helper.to_list(seq)
    if type_proto.HasField("optional_type"):
        opt = onnx.OptionalProto()
        opt.ParseFromString(data)
        return numpy_helper.to_optional(opt)
    tensor = onnx.TensorProto()
    tensor.ParseFromString(data)
    return numpy_helper.to_array(tensor)


def _light_inputs(model: onnx.ModelProto) -> list[np.ndarray]:
    """The inputs ONNX's runner feeds the ``light`` models: arange(n)/n in float32."""
    inits = {i.name for i in model.graph.initializer}
    feeds = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = tuple(
            d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim
        )
        n = int(np.prod(shape))
        feeds.append((np.arange(n).reshape(shape) / n).astype(np.float32))
    return feeds


def model_cases(kinds: Iterable[str] = MODEL_KINDS) -> list[Case]:
    """Model-level cases with data files shipped in the ``onnx`` wheel."""
    cases: list[Case] = []
    for kind in kinds:
        folder = DATA_DIR / kind
        if kind == "light":
            for onnx_path in sorted(folder.glob("light_*.onnx")):
                model = onnx.load(str(onnx_path), load_external_data=False)
                prefix = str(onnx_path)[: -len(".onnx")]
                outputs = [
                    _load_pb(f"{prefix}_output_{i}.pb", model.graph.output[i].type)
                    for i in range(len(model.graph.output))
                    if os.path.exists(f"{prefix}_output_{i}.pb")
                ]
                if len(outputs) != len(model.graph.output):
                    continue
                cases.append(
                    Case(
                        onnx_path.stem,
                        kind,
                        1e-3,
                        1e-7,
                        model_path=onnx_path,
                        data_sets=[(_light_inputs(model), outputs)],
                    )
                )
            continue
        for case_dir in sorted(p for p in folder.iterdir() if (p / "model.onnx").is_file()):
            model = onnx.load(str(case_dir / "model.onnx"), load_external_data=False)
            data_sets = []
            for ds in sorted(glob.glob(str(case_dir / "test_data_set*"))):
                n_in = len(glob.glob(os.path.join(ds, "input_*.pb")))
                n_out = len(glob.glob(os.path.join(ds, "output_*.pb")))
                inputs = [
                    _load_pb(os.path.join(ds, f"input_{i}.pb"), model.graph.input[i].type)
                    for i in range(n_in)
                ]
                outputs = [
                    _load_pb(os.path.join(ds, f"output_{i}.pb"), model.graph.output[i].type)
                    for i in range(n_out)
                ]
                data_sets.append((inputs, outputs))
            cases.append(
                Case(
                    case_dir.name,
                    kind,
                    1e-3,
                    1e-7,
                    model_path=case_dir / "model.onnx",
                    data_sets=data_sets,
                )
            )
    return cases


def sample(cases: Sequence[Case], n: int, seed: int) -> list[Case]:
    """A seeded random sample, in the suite's order (reproducible: same seed, same cases)."""
    if n >= len(cases):
        return list(cases)
    picked = sorted(random.Random(seed).sample(range(len(cases)), n))
    return [cases[i] for i in picked]


# ----------------------------------------------------------------------------- comparing


def _as_float(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64)


def compare(ref: Any, out: Any, *, rtol: float, atol: float, exact: bool = False) -> str | None:
    """None when ``out`` matches ``ref``; else a one-line description of the first difference.

    ``exact``: bit-identical (same dtype, shape and bytes; atol=0, rtol=0). Otherwise the
    suite's rule: same dtype and shape; strings, booleans and integers equal; floats within
    ``|out - ref| <= atol + rtol*|ref|`` with NaN meeting NaN (``np.testing.assert_allclose``).
    """
    if isinstance(ref, (list, tuple)) or isinstance(out, (list, tuple)):
        if not isinstance(ref, (list, tuple)) or not isinstance(out, (list, tuple)):
            return f"type differs: {type(ref).__name__} vs {type(out).__name__}"
        if len(ref) != len(out):
            return f"sequence length {len(out)} != {len(ref)}"
        for i, (r, o) in enumerate(zip(ref, out, strict=True)):
            msg = compare(r, o, rtol=rtol, atol=atol, exact=exact)
            if msg:
                return f"[{i}] {msg}"
        return None
    if ref is None or out is None:
        return None if ref is None and out is None else "one side is None (empty optional)"
    ref, out = np.asarray(ref), np.asarray(out)
    if ref.shape != out.shape:
        return f"shape {out.shape} != {ref.shape}"
    if ref.dtype == object or out.dtype == object:
        return None if np.array_equal(ref, out) else "string values differ"
    if ref.dtype != out.dtype:
        return f"dtype {out.dtype} != {ref.dtype}"
    if exact:
        if ref.tobytes() == out.tobytes():
            return None
        diff = int(np.sum(ref.reshape(-1).view(np.uint8) != out.reshape(-1).view(np.uint8)))
        return f"not bit-identical ({diff} byte(s) differ)"
    if ref.dtype.kind in "biu":
        n = int(np.sum(ref != out))
        return None if n == 0 else f"{n} element(s) differ"
    r, o = _as_float(ref), _as_float(out)
    with np.errstate(invalid="ignore", over="ignore"):
        ok = np.isclose(o, r, rtol=rtol, atol=atol, equal_nan=True)
    ok |= r == o  # infinities of the same sign
    if ok.all():
        return None
    bad = ~ok
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(o - r)[bad]
    return (
        f"{int(bad.sum())}/{ok.size} element(s) outside atol={atol:g} rtol={rtol:g} "
        f"(max abs err {np.nanmax(err) if err.size else float('nan'):.3g})"
    )


def compare_all(ref: Sequence[Any], out: Sequence[Any], **kw: Any) -> str | None:
    if len(ref) != len(out):
        return f"{len(out)} outputs, expected {len(ref)}"
    for i, (r, o) in enumerate(zip(ref, out, strict=True)):
        msg = compare(r, o, **kw)
        if msg:
            return f"output {i}: {msg}"
    return None


_TOL = re.compile(r"\b([ar]tol)\s*=?\s*([0-9.]+(?:e[-+]?[0-9]+)?)", re.I)


def stated_tolerance(
    exact: bool | str, fallback: tuple[float, float] = (1e-3, 1e-7)
) -> tuple[float, float] | None:
    """(rtol, atol) a pass states in its ``exact`` string; None for bit-exact passes.

    A promise that is not about outputs (e.g. flush-subnormals: "weights with |x| < 1.18e-38
    become 0") is held to ``fallback``, the suite's own output tolerance.
    """
    if exact is True:
        return None
    found = {k.lower(): float(v) for k, v in _TOL.findall(str(exact))}
    if "rtol" not in found and "atol" not in found:
        return fallback
    return found.get("rtol", 0.0), found.get("atol", 0.0)


# ----------------------------------------------------------------------------- running


def _session(path: Path):  # noqa: ANN202
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def normalize(value: Any) -> Any:
    """Suite data as ORT takes and returns it: TensorProto and numpy scalars become arrays."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, (list, tuple)):
        return [normalize(v) for v in value]
    if isinstance(value, np.generic):
        return np.asarray(value)
    return value


def _feeds(sess: Any, inputs: Sequence[Any]) -> dict[str, Any]:
    names = [i.name for i in sess.get_inputs()]
    return dict(zip(names, (normalize(x) for x in inputs), strict=False))


def run_ort(
    path: Path, data_sets: Sequence[tuple[list[Any], list[Any]]], *, partitioned: bool = False
) -> list[list[Any]]:
    """Outputs of every data set, running the model by path (as users do).

    ``partitioned``: ``path`` is a folder written for the ``partition`` pass, run with
    ``memshrink.runtime.PartitionedSession`` (streamed, one thread like the baseline).
    """
    if partitioned:
        from memshrink.runtime import PartitionedSession

        one_thread = {"intra_op_num_threads": 1, "inter_op_num_threads": 1}
        with PartitionedSession(path, "cpu", session_options=one_thread) as sess:
            return [sess.run(None, _feeds(sess, inputs)) for inputs, _ in data_sets]
    sess = _session(path)
    return [sess.run(None, _feeds(sess, inputs)) for inputs, _ in data_sets]


def run_ort_proto(
    model: onnx.ModelProto, data_sets: Sequence[tuple[list[Any], list[Any]]]
) -> list[list[Any]]:
    """``run_ort`` for an in-memory model: saved to a temp file first (ORT loads by path)."""
    with tempfile.TemporaryDirectory(prefix="msrel-") as tmp:
        path = Path(tmp) / "model.onnx"
        onnx.save_model(model, str(path))
        return run_ort(path, data_sets)


def _first_line(exc: BaseException) -> str:
    """One line: the message's first line, and its last one when it spans several."""
    text = [t.strip() for t in str(exc).strip().splitlines() if t.strip()]
    if not text:
        return type(exc).__name__
    msg = text[0][:240] + (f" … {text[-1][:240]}" if len(text) > 1 else "")
    return f"{type(exc).__name__}: {msg}"


def pass_names() -> list[str]:
    """Every pass registered right now, plus the ``all`` preset."""
    from memshrink.transforms import available_passes

    return sorted(available_passes()) + [ALL]


def _exactness(pipeline: str | list[Pass]) -> bool | str:
    """The promise a pass (or a pipeline: its weakest member) makes about outputs."""
    from memshrink.manager import PassManager

    promises = [p.exact for p in PassManager(pipeline).passes]
    loose = [e for e in promises if e is not True]
    return True if not loose else "; ".join(str(e) for e in loose)


def _known_skip(case: str, pass_name: str) -> str | None:
    for (pattern, p), reason in KNOWN_SKIPS.items():
        if (p in ("*", pass_name)) and re.fullmatch(pattern, case):
            return reason
    return None


def run_case(
    case: Case,
    passes: Sequence[str | Pass] | None = None,
    *,
    inspect: Callable[[ir.Model], None] | None = None,
    full_check: bool = False,
) -> list[Outcome]:
    """Run ``case`` through every pass in ``passes`` (default: all registered, and ``all``).

    An item is a pass or preset name, or a ``Pass`` instance (tests use one that is broken on
    purpose, to show the oracle catches it). ``inspect`` is called with each rewritten model
    (the fuzz tests check the estimator's plans there); ``full_check`` also runs
    ``onnx.checker`` with shape inference on each saved file.
    """
    passes = list(passes or pass_names())

    def outcome(p: str | Pass, status: str, reason: str = "", modified: bool = False) -> Outcome:
        return Outcome(case.name, case.kind, _name(p), status, reason, modified)

    with tempfile.TemporaryDirectory(prefix="msrel-") as tmp:
        work = Path(tmp)
        if case.model_path is not None:
            orig = case.model_path
        else:
            assert case.model is not None
            orig = work / "model.onnx"
            onnx.save_model(case.model, str(orig))
        try:
            baseline = run_ort(orig, case.data_sets)
            again = run_ort(orig, case.data_sets)
        except Exception as exc:
            reason = f"ORT CPU cannot run the original: {_first_line(exc)}"
            return [outcome(p, "skip", reason) for p in passes]
        deterministic = all(
            compare_all(a, b, rtol=0, atol=0, exact=True) is None
            for a, b in zip(baseline, again, strict=True)
        )
        ref_msgs = [
            compare_all(normalize(ref), got, rtol=case.rtol, atol=case.atol)
            for (_, ref), got in zip(case.data_sets, baseline, strict=True)
        ]
        ref_usable = all(m is None for m in ref_msgs)
        results = []
        for p in passes:
            skip = _known_skip(case.name, _name(p))
            if skip:
                results.append(outcome(p, "skip", skip))
                continue
            t0 = time.perf_counter()
            results.append(
                _run_pass(
                    case,
                    p,
                    orig,
                    work,
                    baseline,
                    deterministic,
                    ref_usable,
                    ref_msgs,
                    inspect,
                    full_check,
                )
            )
            results[-1].seconds = round(time.perf_counter() - t0, 3)
            anchor = known_bug(results[-1].pass_name, results[-1].reason)
            if results[-1].status == "fail" and anchor:
                results[-1].status = "known-bug"
                results[
                    -1
                ].reason = f"known bug (docs/reliability.md#{anchor}): {results[-1].reason}"
            # keep the temp folder small: each pass's output is only needed while compared
            for f in work.glob(f"{_name(p)}.*"):
                shutil.rmtree(f) if f.is_dir() else f.unlink()
    return results


def _name(p: str | Pass) -> str:
    return p if isinstance(p, str) else p.name


def _run_pass(
    case: Case,
    p: str | Pass,
    orig: Path,
    work: Path,
    baseline: list[list[Any]],
    deterministic: bool,
    ref_usable: bool,
    ref_msgs: list[str | None],
    inspect: Callable[[ir.Model], None] | None = None,
    full_check: bool = False,
) -> Outcome:
    from memshrink.checks import check_model
    from memshrink.manager import PassContext, PassManager
    from memshrink.model import META_PARTITION, load
    from memshrink.writer import save_model

    def out(status: str, reason: str = "", modified: bool = False) -> Outcome:
        return Outcome(case.name, case.kind, _name(p), status, reason, modified)

    pipeline: str | list[Pass] = p if isinstance(p, str) else [p]
    exact = _exactness(pipeline)
    try:
        model = load(orig)
        model, report = PassManager(pipeline).run(model, PassContext())
    except Exception as exc:
        return out("fail", f"pass raised {_first_line(exc)}")
    modified = report.modified
    try:
        check_model(model)
    except Exception as exc:
        return out("fail", f"invalid model after the pass: {_first_line(exc)}", modified)
    if inspect is not None:
        try:
            inspect(model)
        except Exception as exc:
            return out(
                "fail", f"inspection of the rewritten model failed: {_first_line(exc)}", modified
            )
    partitioned = bool(model.meta.get(META_PARTITION))
    dst = work / (f"{_name(p)}.parts" if partitioned else f"{_name(p)}.onnx")
    try:
        save_model(model, dst)
    except Exception as exc:
        return out("fail", f"save failed: {_first_line(exc)}", modified)
    del model
    if full_check and not partitioned:
        try:
            onnx.checker.check_model(str(dst), full_check=True)
        except Exception as exc:
            return out(
                "fail", f"saved model fails onnx.checker (full): {_first_line(exc)}", modified
            )
    try:
        got = run_ort(dst, case.data_sets, partitioned=partitioned)
    except Exception as exc:
        return out("fail", f"ORT cannot run the rewritten model: {_first_line(exc)}", modified)
    notes = []
    tol = stated_tolerance(exact, (case.rtol, case.atol))
    for base, new in zip(baseline, got, strict=True):
        if tol is None:
            if not deterministic:
                notes.append("bit-identity not checked: the original's ORT outputs vary run to run")
                msg = None
            else:
                msg = compare_all(base, new, rtol=0.0, atol=0.0, exact=True)
        else:
            msg = compare_all(base, new, rtol=tol[0], atol=tol[1])
        if msg:
            kind = "bit-identical" if tol is None else f"rtol={tol[0]:g} atol={tol[1]:g}"
            return out("fail", f"differs from the original under ORT ({kind}): {msg}", modified)
    if ref_usable:
        for (_, ref), new in zip(case.data_sets, got, strict=True):
            msg = compare_all(normalize(ref), new, rtol=case.rtol, atol=case.atol)
            if msg and deterministic:
                return out("fail", f"differs from the suite's reference: {msg}", modified)
    else:
        first = next(m for m in ref_msgs if m)
        notes.append(f"reference not checked: ORT's original output already differs ({first})")
    return out("pass", "; ".join(dict.fromkeys(notes)), modified)
