"""``VERIFY_STAGES`` pairs every estimated stage with a stage the verifier really measures.

Benches (``docs/bench/``) compare predictions with measurements through this one map; if either
side renamed a stage, their error columns would go silently empty. Both sides run here on a
tiny model and every mapped name must exist on both.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from memshrink.estimate.backends import VERIFY_STAGES


def _tiny(path: Path) -> Path:
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("backend", sorted(VERIFY_STAGES))
def test_the_map_names_every_estimated_stage(tmp_path: Path, backend: str) -> None:
    from memshrink.estimate import estimate

    predicted = estimate(str(_tiny(tmp_path / "m.onnx")), backend=backend).stage_peaks()
    assert list(VERIFY_STAGES[backend]) == list(predicted)  # same names, same order


# CUDA and the OpenVINO EP need their runtimes; they run in the same ORT child as cpu (below)
@pytest.mark.parametrize("backend", ["cpu", "openvino"])
def test_every_mapped_stage_is_measured_by_verify(tmp_path: Path, backend: str) -> None:
    from memshrink.verify import profile

    run = profile(str(_tiny(tmp_path / "m.onnx")), backends=(backend,)).runs[0].to_dict()
    assert run["status"] == "ok", run["error"]  # verify's default runs: the map assumes them
    measured = {s["name"] for s in run["stages"]}
    for est_stage, verify_stage in VERIFY_STAGES[backend].items():
        assert verify_stage in measured, (est_stage, verify_stage, sorted(measured))


def test_ort_based_backends_share_the_ort_childs_stage_names() -> None:
    # the OpenVINO EP and CUDA run in the verifier's ORT child (``run_ort``): same stages as CPU
    assert VERIFY_STAGES["ort-openvino"] == VERIFY_STAGES["cpu"]
    assert VERIFY_STAGES["cuda"] == VERIFY_STAGES["cpu"]
