"""bfloat16 outputs: numpy has no bf16, so ORT's ``run`` cannot return them (the verifier's
child failed with "No corresponding Numpy type for Tensor Type. bfloat16" on a bf16 Llama on
the CUDA EP). The child reads them through OrtValues and widens them to float32 exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from memshrink.verify import EXIT_OK, verify
from memshrink.verify.child import _ortvalue_array

# exactly representable in bfloat16 (8 significant bits), so the bf16 round trip is exact
X = np.array([[1.5, -2.0, 0.15625], [2.0**100, -0.0, 65280.0]], np.float32)


def _bf16_out(path: Path, scale: float = 1.0) -> Path:
    """y = Cast<bf16>(x * scale): ORT CPU has Cast and Mul (f32) kernels, so it runs."""
    s = helper.make_tensor("s", TensorProto.FLOAT, [], [scale])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "s"], ["m"]),
         helper.make_node("Cast", ["m"], ["y"], to=TensorProto.BFLOAT16)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 3])],
        [s],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_a_bf16_ortvalue_widens_to_the_same_float32(tmp_path: Path) -> None:
    sess = ort.InferenceSession(
        str(_bf16_out(tmp_path / "m.onnx")), providers=["CPUExecutionProvider"]
    )
    (out,) = sess.run_with_ort_values(["y"], {"x": ort.OrtValue.ortvalue_from_numpy(X)})
    got = _ortvalue_array(out)
    assert got.dtype == np.float32 and got.shape == (2, 3)
    np.testing.assert_array_equal(got, X)  # atol = rtol = 0: every value is exact in bf16
    assert np.signbit(got[1, 1])  # -0.0 keeps its sign


def test_verify_compares_bf16_outputs_on_ort_cpu(tmp_path: Path) -> None:
    a = _bf16_out(tmp_path / "a.onnx")
    same = verify(a, _bf16_out(tmp_path / "b.onnx"), backends=["cpu"], runs=1)
    assert same.exit_code == EXIT_OK, same.format_table()
    off = verify(a, _bf16_out(tmp_path / "c.onnx", scale=2.0), backends=["cpu"], runs=1)
    assert off.exit_code != EXIT_OK and not off.ok
