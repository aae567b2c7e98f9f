"""onnxsim in a child process: the same result as in-process onnxsim, its imports never in
ours, and its failures (an exception, a crash) a skipped pass rather than a failed run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import numpy_helper

from memshrink import onnxsim_child
from memshrink.manager import PassContext
from memshrink.model import load
from memshrink.onnxsim_child import ChildOnnxsim, OnnxsimError, import_onnxsim
from memshrink.transforms import get_pass

pytest.importorskip("onnxsim")
F = onnx.TensorProto.FLOAT
OPTIONS = {"check_n": 0, "tensor_size_threshold": "1048576B", "mutable_initializer": False}


def _foldable() -> onnx.ModelProto:
    """``y = x * (c1 + c2)``: onnxsim folds ``c1 + c2`` into one constant (3.0 each)."""
    g = oh.make_graph(
        [oh.make_node("Add", ["c1", "c2"], ["c"]), oh.make_node("Mul", ["x", "c"], ["y"])],
        "fold",
        [oh.make_tensor_value_info("x", F, [2, 4])],
        [oh.make_tensor_value_info("y", F, [2, 4])],
        [
            numpy_helper.from_array(np.full((4,), 1.0, np.float32), "c1"),
            numpy_helper.from_array(np.full((4,), 2.0, np.float32), "c2"),
        ],
    )
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def test_the_child_gives_in_process_onnxsims_bytes() -> None:
    proto = _foldable()
    child, ok = ChildOnnxsim().simplify(proto, **OPTIONS)
    here, ok_here = import_onnxsim().simplify(proto, **OPTIONS)
    assert ok and ok_here
    assert child.SerializeToString() == here.SerializeToString()
    assert [n.op_type for n in child.graph.node] == ["Mul"]
    (c,) = [numpy_helper.to_array(t) for t in child.graph.initializer]
    np.testing.assert_allclose(c, np.full((4,), 3.0, np.float32), rtol=0, atol=0)


def test_onnxsims_exception_comes_back_with_its_type_name() -> None:
    bad = dict(OPTIONS, tensor_size_threshold="lots")  # onnxsim can't parse the size
    with pytest.raises(Exception) as here:
        import_onnxsim().simplify(_foldable(), **bad)
    with pytest.raises(OnnxsimError) as child:
        ChildOnnxsim().simplify(_foldable(), **bad)
    assert child.value.kind == type(here.value).__name__
    assert str(child.value) == str(here.value)


def test_a_crashed_child_skips_the_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A child that dies (a segfault in onnxsim, out of memory) leaves the model as it was."""
    monkeypatch.setattr(onnxsim_child, "_CHILD_CODE", "import os; os._exit(9)")
    src = tmp_path / "m.onnx"
    onnx.save_model(_foldable(), src)
    result = get_pass("simplify")().run(load(src), PassContext())
    assert not result.modified
    assert result.stats["reason"] == (
        "skipped: onnxsim failed: RuntimeError: onnxsim's process exited with 9"
    )


def test_the_pass_leaves_onnxsim_and_onnx_runtime_out_of_our_process(tmp_path: Path) -> None:
    """What the child is for: ``simplify`` changes the model, and neither onnxsim nor ONNX
    Runtime (which onnxsim folds with: +34 MiB) is imported here afterwards."""
    src = tmp_path / "m.onnx"
    onnx.save_model(_foldable(), src)
    code = (
        "import sys\n"
        "from memshrink.manager import PassContext\n"
        "from memshrink.model import load\n"
        "from memshrink.transforms import get_pass\n"
        f"r = get_pass('simplify')().run(load({str(src)!r}), PassContext())\n"
        "assert r.modified, r.stats\n"
        "print(sorted(m for m in ('onnxsim', 'onnxruntime') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_the_child_runs_this_memshrink_when_only_sys_path_names_it(tmp_path: Path) -> None:
    """A script that put ``src`` on ``sys.path`` itself (no PYTHONPATH): the child imports
    the same memshrink, not whichever the bare interpreter finds (an older one may lack
    ``onnxsim_child``)."""
    import os

    src = Path(onnxsim_child.__file__).resolve().parents[1]
    path = tmp_path / "m.onnx"
    onnx.save_model(_foldable(), path)
    code = (
        f"import sys; sys.path.insert(0, {str(src)!r})\n"
        "import onnx\n"
        "from memshrink.onnxsim_child import ChildOnnxsim\n"
        f"m, ok = ChildOnnxsim().simplify(onnx.load({str(path)!r}), **{OPTIONS!r})\n"
        "print(ok, [n.op_type for n in m.graph.node])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "True ['Mul']"
