"""One part (or one whole model) loaded by path on one runtime, behind a two-method interface.

Why a tiny interface: ``PartitionedSession`` creates, runs and releases parts one after another
and must treat ONNX Runtime (CPU, CUDA, OpenVINO EP) and OpenVINO native alike. Imports are
stdlib, numpy and the runtime only (this runs inside measuring children, possibly under an
interpreter without ``onnx``).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

BACKENDS = ("cpu", "openvino", "ort-openvino", "cuda")

ORT_PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "ort-openvino": "OpenVINOExecutionProvider",
}
ORT_DEFAULT_PROVIDER_OPTIONS: dict[str, dict[str, str]] = {
    # TF32 off so CUDA outputs are comparable to CPU (GPU.md: 2.5e-3 vs 3.8e-6 on BERT).
    "cuda": {"use_tf32": "0"},
    "ort-openvino": {"device_type": "CPU"},
}


class BackendUnavailable(RuntimeError):
    """The runtime or execution provider is not installed in this interpreter."""


class Runner(Protocol):
    def run(self, names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]: ...

    def close(self) -> None: ...


def import_ort() -> Any:
    """``onnxruntime``, or BackendUnavailable naming this interpreter (each EP may live in
    its own venv, so the message says which Python lacked it)."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise BackendUnavailable(
            f"onnxruntime is not importable by {sys.executable}: {exc}"
        ) from exc
    return ort


def ort_providers(
    ort: Any, backend: str, provider_options: Mapping[str, Any] | None = None
) -> tuple[str, dict[str, str], list[Any]]:
    """``backend``'s execution provider, its options (defaults, then the caller's) and the
    ``providers`` argument of an ``InferenceSession``. Raises BackendUnavailable where this
    onnxruntime lacks the provider: a silent CPU fallback would measure the wrong runtime."""
    provider = ORT_PROVIDERS[backend]
    if provider not in ort.get_available_providers():
        raise BackendUnavailable(
            f"{provider} is not available in onnxruntime {ort.__version__} under "
            f"{sys.executable} (available: {', '.join(ort.get_available_providers())})"
        )
    popts = dict(ORT_DEFAULT_PROVIDER_OPTIONS.get(backend, {}))
    popts.update({k: str(v) for k, v in (provider_options or {}).items()})
    return provider, popts, [(provider, popts)] if backend != "cpu" else [provider]


def ort_session_options(ort: Any, opts: Any) -> Any:
    """An ``ort.SessionOptions`` from a dict (``execution_order='PRIORITY_BASED'``, config
    entries with a dot like ``session.use_env_allocators``) or an existing object."""
    if opts is not None and not isinstance(opts, Mapping):
        return opts
    so = ort.SessionOptions()
    so.log_severity_level = 3
    enums = {
        "execution_order": ort.ExecutionOrder,
        "graph_optimization_level": ort.GraphOptimizationLevel,
        "execution_mode": ort.ExecutionMode,
    }
    for key, value in (opts or {}).items():
        if key in enums and isinstance(value, str):
            setattr(so, key, getattr(enums[key], value))
        elif "." in key:
            so.add_session_config_entry(key, str(value))
        elif hasattr(so, key):
            setattr(so, key, value)
        else:
            raise ValueError(f"unknown ONNX Runtime session option {key!r}")
    return so


class OrtRunner:
    def __init__(
        self,
        path: str,
        backend: str,
        session_options: Any = None,
        provider_options: Mapping[str, Any] | None = None,
    ) -> None:
        ort = import_ort()
        provider, _, providers = ort_providers(ort, backend, provider_options)
        so = ort_session_options(ort, session_options)
        self.session = ort.InferenceSession(path, sess_options=so, providers=providers)
        got = self.session.get_providers()
        if got[0] != provider:
            raise RuntimeError(f"session runs on {got[0]}, not {provider} (no silent fallback)")
        self.providers = got

    def run(self, names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        return list(self.session.run(list(names), dict(feeds)))

    def close(self) -> None:
        del self.session


#: OpenVINO properties that ``read_model`` takes, not ``compile_model`` (which accepts and
#: ignores them: the model is already read). ``ENABLE_MMAP=NO`` reads external weights into
#: memory instead of mapping the data file: measured EfficientFormer-L1 after ``safe``,
#: infer 156 -> 136 MiB (docs/optimize.md, "External data on OpenVINO").
OV_READ_PROPERTIES = frozenset({"ENABLE_MMAP"})


def ov_split_config(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(read_model's config, compile_model's config) from one mapping of OpenVINO options."""
    read = {  # all boolean: as users write them ("NO", "0", "false", ...)
        k.upper(): str(v).strip().lower() not in ("0", "no", "false", "off")
        for k, v in config.items()
        if k.upper() in OV_READ_PROPERTIES
    }
    return read, {k: v for k, v in config.items() if k.upper() not in OV_READ_PROPERTIES}


class OpenVinoRunner:
    _core: Any = None

    def __init__(
        self,
        path: str,
        session_options: Mapping[str, Any] | None = None,
        provider_options: Mapping[str, Any] | None = None,
    ) -> None:
        core = _openvino_core()
        popts = dict(provider_options or {})
        device = str(popts.pop("device", "CPU"))
        read, config = ov_split_config({**popts, **dict(session_options or {})})
        model = core.read_model(path, config=read)
        self.compiled = core.compile_model(model, device, config)
        del model  # compile_model(read_model(path)): the ov.Model is not kept
        self.request = self.compiled.create_infer_request()
        self.providers = [f"openvino:{device}"]

    def run(self, names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        ports = []
        for name in names:
            port = next((o for o in self.compiled.outputs if name in o.get_names()), None)
            if port is None:
                raise RuntimeError(f"OpenVINO model has no output named {name!r}")
            ports.append(port)
        self.request.infer(dict(feeds))
        return [np.array(self.request.get_tensor(p).data, copy=True) for p in ports]

    def close(self) -> None:
        del self.request
        del self.compiled
        gc.collect()


def _openvino_core() -> Any:
    """The process's one ``ov.Core`` (created on first use); BackendUnavailable without
    openvino."""
    try:
        import openvino as ov
    except ImportError as exc:
        raise BackendUnavailable(f"openvino is not importable by {sys.executable}: {exc}") from exc
    if OpenVinoRunner._core is None:
        OpenVinoRunner._core = ov.Core()
    return OpenVinoRunner._core


def preload(backend: str, provider_options: Mapping[str, Any] | None = None) -> None:
    """Import ``backend``'s runtime now (OpenVINO: also create the shared ``Core``), as the
    verifier's single-model children do before their baseline: a measuring child that loads
    it lazily inside the first stage counts the libraries (~28 MiB for OpenVINO) as the
    model's memory. Raises BackendUnavailable when the runtime or its EP is missing."""
    if backend == "openvino":
        _openvino_core()
        return
    ort_providers(import_ort(), backend, provider_options)


def make_runner(
    path: str,
    backend: str,
    session_options: Any = None,
    provider_options: Mapping[str, Any] | None = None,
) -> Runner:
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "openvino":
        return OpenVinoRunner(path, session_options, provider_options)
    return OrtRunner(path, backend, session_options, provider_options)
