"""Turn a spec into files: ``NAME.onnx`` [+ ``NAME.onnx.data``] + ``NAME.onnx.json``.

Writes are atomic: everything is saved into a private temp folder inside the output folder,
then renamed into place data first, model second, sidecar last. A build counts as done only
when its sidecar exists, so a killed build never leaves a half file that "exists".
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from models.suite import ModelSpec, get_spec

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = REPO_ROOT / ".cache" / "models"

# One export kept in memory: variants of one source (embedded/external, other feed shapes)
# are built back to back by build_many, so a single slot is enough and bounds memory.
_last_export: tuple[str, Any] | None = None


def cache_dir(out_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where built models go: ``out_dir``, else ``$MEMSHRINK_MODELS_DIR``, else ``.cache/models``."""
    if out_dir is not None:
        return Path(out_dir)
    env = os.environ.get("MEMSHRINK_MODELS_DIR")
    return Path(env) if env else DEFAULT_CACHE


def model_path(name: str, out_dir: str | os.PathLike[str] | None = None) -> Path:
    return cache_dir(out_dir) / f"{name}.onnx"


def fingerprint(spec: ModelSpec) -> str:
    """Builder versions that shape this model's bytes, e.g. ``cnn1-export1``.

    Stored in the sidecar; a cached build whose fingerprint differs is stale and rebuilt, so
    nobody benchmarks a model made by an older builder. Each family module (and the export
    glue) carries a ``BUILD_VERSION`` that is bumped whenever a change alters built bytes.
    """
    from models import cnn, export, hf, zoo

    module = {"transformer": hf, "zoo": zoo}.get(spec.family, cnn)
    name = module.__name__.rsplit(".", 1)[-1]
    parts = [f"{name}{module.BUILD_VERSION}"]
    if spec.needs_torch:
        parts.append(f"export{export.BUILD_VERSION}")
    if spec.version != 1:
        parts.append(f"v{spec.version}")
    return "-".join(parts)


def is_built(name: str, out_dir: str | os.PathLike[str] | None = None) -> bool:
    """True when the model, its data file (if external) and a current sidecar all exist."""
    spec = get_spec(name)
    path = model_path(name, out_dir)
    sidecar = Path(str(path) + ".json")
    if not (path.is_file() and sidecar.is_file()):
        return False
    if spec.external_data and not Path(str(path) + ".data").is_file():
        return False
    try:
        return json.loads(sidecar.read_text()).get("fingerprint") == fingerprint(spec)
    except ValueError:
        return False


def _export(spec: ModelSpec) -> Any:
    global _last_export
    if _last_export is not None and _last_export[0] == spec.source:
        return _last_export[1]
    _last_export = None  # drop the previous export before making the next one
    model = spec.make()
    _last_export = (spec.source, model)
    return model


def forget_exports() -> None:
    """Release the cached export (tests and long builds call this to bound memory)."""
    global _last_export
    _last_export = None


def _graph_stats(model: Any) -> tuple[int, int, int]:
    """(weight bytes, node count incl. subgraphs, default-domain opset) from the IR, no weight reads."""
    import onnx_ir as ir

    weight_bytes = 0
    for value in model.graph.initializers.values():
        tensor = value.const_value
        if tensor is not None:
            weight_bytes += int(tensor.nbytes)
    node_count = sum(1 for _ in ir.traversal.RecursiveGraphIterator(model.graph))
    opset = int(model.opset_imports.get("", 0))
    return weight_bytes, node_count, opset


def sidecar_dict(spec: ModelSpec, model: Any) -> dict[str, Any]:
    weight_bytes, node_count, opset = _graph_stats(model)
    data: dict[str, Any] = {
        "name": spec.name,
        "description": spec.description,
        "family": spec.family,
        "tags": list(spec.tags),
        "inputs": [f.to_json() for f in spec.feeds],
        "outputs": [v.name for v in model.graph.outputs],
        "dims": dict(spec.dims),
        "weight_bytes": weight_bytes,
        "node_count": node_count,
        "opset": opset,
        "external_data": spec.external_data,
        "seed": spec.seed,
        "fingerprint": fingerprint(spec),
    }
    data.update(spec.extra)
    return data


def _write(spec: ModelSpec, model: Any, out: Path) -> Path:
    import onnx_ir as ir

    out.mkdir(parents=True, exist_ok=True)
    final = out / f"{spec.name}.onnx"
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{spec.name}-", dir=out))
    try:
        tmp_model = tmp / final.name
        data_name = final.name + ".data"
        if spec.external_data:
            ir.save(model, tmp_model, external_data=data_name)
        else:
            ir.save(model, tmp_model)
        sidecar = json.dumps(sidecar_dict(spec, model), indent=2, sort_keys=True) + "\n"
        (tmp / (final.name + ".json")).write_text(sidecar)
        # Data, then model, then sidecar: the sidecar's presence marks a complete build.
        Path(str(final) + ".json").unlink(missing_ok=True)
        if spec.external_data:
            os.replace(tmp / data_name, out / data_name)
        else:
            Path(str(final) + ".data").unlink(missing_ok=True)
        os.replace(tmp_model, final)
        os.replace(tmp / (final.name + ".json"), Path(str(final) + ".json"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def build(name: str, out_dir: str | os.PathLike[str] | None = None, force: bool = False) -> Path:
    """Build one model (skipped when already built) and return the path to its ``.onnx``.

    The sidecar is at ``path + ".json"``; external data, if any, at ``path + ".data"``.
    """
    spec = get_spec(name)
    out = cache_dir(out_dir)
    final = out / f"{name}.onnx"
    if not force and is_built(name, out):
        return final
    if spec.needs_torch:
        _require_torch(name)
    model = _export(spec)
    return _write(spec, model, out)


def build_many(
    names: Iterable[str],
    out_dir: str | os.PathLike[str] | None = None,
    force: bool = False,
    log: bool = True,
    keep_export: bool = False,
) -> list[tuple[str, Path, float, bool]]:
    """Build several models, grouped by source so each export runs once.

    Returns ``(name, path, seconds, skipped)`` per model, in the order built. The last
    export is released at the end unless ``keep_export`` (for callers building one by one).
    """
    specs = [get_spec(n) for n in dict.fromkeys(names)]
    order: list[str] = []
    for spec in specs:  # stable grouping by first appearance of each source
        if spec.source not in order:
            order.append(spec.source)
    specs.sort(key=lambda s: order.index(s.source))
    results = []
    for spec in specs:
        start, cpu_start = time.perf_counter(), _cpu_seconds()
        skipped = not force and is_built(spec.name, out_dir)
        if log:
            print(f"[models] {'skip ' if skipped else 'build'} {spec.name}", file=sys.stderr)
        path = build(spec.name, out_dir, force=force)
        seconds = time.perf_counter() - start
        if log and not skipped:
            cpu = _cpu_seconds() - cpu_start
            print(
                f"[models]   done {spec.name} in {seconds:.1f} s ({cpu:.1f} CPU-s) -> {path}",
                file=sys.stderr,
            )
        results.append((spec.name, path, seconds, skipped))
    if not keep_export:
        forget_exports()
    return results


def _cpu_seconds() -> float:
    """This process's user+system CPU time: a build-cost figure that load on the box can't inflate."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _require_torch(name: str) -> None:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(
            f"building {name!r} needs the 'models' extra (torch, transformers): "
            "pip install torch==2.13.0 && pip install -e '.[models]'"
        ) from exc
