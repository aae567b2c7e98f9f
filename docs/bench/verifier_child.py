"""Launch `memshrink verify`'s child by hand, with a hook, the way the verifier would.

Why: the glibc benches (``glibc_heap_walk.py``, ``malloc_trace.py``) must run the very child the
verifier runs (same imports, feeds and stages), from a neutral directory, so that the heap they
look at is the one ``verify`` measures (docs/estimate.md, "Which glibc mode…"). One place
writes the feeds and the hook, builds the child's spec and its environment, and reads its stage
peaks, so both scripts launch the same process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20


@dataclass(frozen=True)
class ChildInputs:
    """What every process of one model shares: the feeds file, their names, the outputs."""

    model: Path
    folder: Path
    feeds: Path
    feed_names: list[str]
    output_names: list[str]
    hook: Path


def write_child_inputs(model: str | Path, folder: str | Path, hook: str) -> ChildInputs:
    """Write the verifier's feeds for ``model`` (``feeds.npz``, members ``i0, i1, …`` as the
    runner writes them) and the hook script (``hook.py``) into ``folder``."""
    if str(ROOT / "src") not in sys.path:
        sys.path.insert(0, str(ROOT / "src"))
    import numpy as np

    from memshrink.verify.inputs import make_feeds
    from memshrink.verify.modelinfo import read_model_io

    wd = Path(folder)
    wd.mkdir(parents=True, exist_ok=True)
    io = read_model_io(str(model))
    feeds, _ = make_feeds(io, str(model))
    names = list(feeds)
    np.savez(wd / "feeds.npz", **{f"i{k}": feeds[n] for k, n in enumerate(names)})
    (wd / "hook.py").write_text(hook)
    return ChildInputs(
        Path(model).resolve(),
        wd,
        wd / "feeds.npz",
        names,
        [o.name for o in io.outputs],
        wd / "hook.py",
    )


def child_spec(inputs: ChildInputs, index: int, label: str, runs: int = 3) -> dict[str, object]:
    """The child's spec for process ``index`` (ORT CPU, default options), results in the folder
    as ``r{index}.json`` / ``o{index}.npz``."""
    wd = inputs.folder
    return {
        "model": {"kind": "onnx", "path": str(inputs.model)},
        "backend": "cpu", "label": label, "feeds": str(inputs.feeds),
        "feed_names": inputs.feed_names, "output_names": inputs.output_names, "runs": runs,
        "session_options": {}, "provider_options": {},
        "result": str(wd / f"r{index}.json"), "outputs": str(wd / f"o{index}.npz"),
    }  # fmt: skip


def run_child(
    inputs: ChildInputs,
    index: int,
    label: str,
    env: dict[str, str] | None = None,
    prefix: list[str] | None = None,
) -> dict[str, object]:
    """Run process ``index`` (the hook with its spec, ``PYTHONPATH`` the worktree's ``src``,
    ``env`` added, ``prefix`` before the interpreter, e.g. ``setarch -R``) from the temp dir and
    return its result JSON."""
    spec = inputs.folder / f"s{index}.json"
    spec.write_text(json.dumps(child_spec(inputs, index, label)))
    full = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})}
    cmd = [*(prefix or []), sys.executable, str(inputs.hook), str(spec)]
    subprocess.run(cmd, env=full, cwd=tempfile.gettempdir(), capture_output=True, check=False)
    result: dict[str, object] = json.loads((inputs.folder / f"r{index}.json").read_text())
    return result


def stage_peaks(result: dict[str, object]) -> list[float]:
    """Each stage's peak over the child's baseline, MiB."""
    base = result["baseline"]["rss"]  # type: ignore[index]
    return [(s["peak"] - base) / MiB for s in result["stages"]]  # type: ignore[attr-defined]
