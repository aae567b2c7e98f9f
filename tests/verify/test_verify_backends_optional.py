"""Backends that need another interpreter or a GPU; skipped cleanly where they are missing.

ORT OpenVINO EP: set MEMSHRINK_PYTHON_ORT_OPENVINO to a Python with ``onnxruntime-openvino``
(or create ``.cache/venv-ovep``, see docs/verify.md). CUDA: ``onnxruntime-gpu`` and
``nvidia-ml-py`` importable by MEMSHRINK_PYTHON_CUDA or this Python; run on the GPU machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from interpreters import NO_CUDA, NO_OVEP, cuda_python, ovep_python

from memshrink.verify import EXIT_MISMATCH, EXIT_OK, verify

REPO = Path(__file__).resolve().parents[2]


def test_ort_openvino_ep(tmp_path: Path, embed_mlp) -> None:  # type: ignore[no-untyped-def]
    py = ovep_python()
    if py is None:
        pytest.skip(NO_OVEP)
    a, b = embed_mlp(tmp_path / "a.onnx"), embed_mlp(tmp_path / "b.onnx", external=True)
    pyarg = {"ort-openvino": py}
    report = verify(a, b, backends=("ort-openvino",), dims={"batch": 2}, python=pyarg)
    assert report.exit_code == EXIT_OK, report.format_table()
    run = report.run("original", "ort-openvino")
    assert run is not None and run.child["runtime"]["providers"][0] == "OpenVINOExecutionProvider"


@pytest.mark.cuda
def test_cuda_ep_measures_gpu_and_catches_a_change(tmp_path: Path, embed_mlp) -> None:  # type: ignore[no-untyped-def]
    py = cuda_python()
    if py is None:
        pytest.skip(NO_CUDA)
    a, b = (
        embed_mlp(tmp_path / "a.onnx", hidden=512),
        embed_mlp(tmp_path / "b.onnx", hidden=512, external=True),
    )
    bad = embed_mlp(tmp_path / "bad.onnx", hidden=512, perturb=1e-2)
    pyarg = {"cuda": py}
    report = verify(a, b, backends=("cpu", "cuda"), dims={"batch": 2}, python=pyarg)
    print(report.format_table())
    assert report.exit_code == EXIT_OK, report.format_table()
    run = report.run("original", "cuda")
    assert run is not None and run.child["runtime"]["providers"][0] == "CUDAExecutionProvider"
    gpu = run.child["gpu"]
    assert gpu["empty_session_baseline"] > 0 and "NVML" in gpu["method"]
    peaks = [s["gpu"]["peak"] for s in run.stages]
    assert peaks[0] > 0 and peaks == sorted(peaks)  # the arena never gives memory back
    # A ~1 MB model costs next to nothing over an empty session (which already ran once, so it
    # holds the cuBLAS/cuDNN state a first run loads): same method, same order of magnitude.
    assert abs(peaks[-1] - gpu["empty_session_baseline"]) < 64 * 1024 * 1024
    # TF32 off by default: CUDA within 1e-3 of CPU here (K=512 fp32 dot products; TF32 would not be).
    (cross,) = report.cross_backend
    assert cross.outputs[0].max_abs is not None and cross.outputs[0].max_abs < 1e-3
    assert (
        verify(a, bad, backends=("cuda",), dims={"batch": 2}, python=pyarg).exit_code
        == EXIT_MISMATCH
    )
