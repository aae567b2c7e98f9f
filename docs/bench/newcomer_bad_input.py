"""The newcomer audit's bad-input rows (docs/reliability.md, "Session 9"), through the CLI.

Each row runs ``memshrink`` (``--cli``: e.g. ``memshrink`` of a fresh venv, or
``python -m memshrink``) and prints its exit code, the last error lines, whether the input files
are byte-identical afterwards and which files appeared in the output folder. ``--ro`` and
``--full`` name a read-only and a small (~2 MiB) mounted folder; without them those rows skip.

    python docs/bench/newcomer_bad_input.py --model demo.onnx --work /tmp/x \\
        --ro /mnt/ro --full /mnt/full --cli "python -m memshrink"
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shlex
import shutil
import subprocess
from pathlib import Path

import onnx

_PROGRESS = ("[", "loaded", "reorder:", "chunk:", "predicting")


def _digest(p: Path) -> str | None:
    return hashlib.sha256(p.read_bytes()).hexdigest()[:12] if p.exists() else None


class Audit:
    def __init__(self, cli: list[str]) -> None:
        self.cli = cli

    def row(
        self, name: str, args: list[str], inputs: list[Path], out: Path, fsize: int = 0
    ) -> None:
        before = {p: _digest(p) for p in inputs}
        listed = set(os.listdir(out)) if out.is_dir() else set()

        def limit() -> None:
            if fsize:
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

        r = subprocess.run(self.cli + args, capture_output=True, text=True, preexec_fn=limit)
        same = before == {p: _digest(p) for p in inputs}
        new = sorted((set(os.listdir(out)) if out.is_dir() else set()) - listed)
        print(f"== {name}: exit {r.returncode}; input untouched: {same}; new files in out: {new}")
        err = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith(_PROGRESS)]
        for ln in err[-3:]:
            print("   stderr:", ln[:300])


def _fill(folder: Path) -> Path:
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\1" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True, help="a model with a sidecar (the demo)")
    ap.add_argument("--work", type=Path, required=True, help="scratch folder (emptied)")
    ap.add_argument("--cli", default="python -m memshrink")
    ap.add_argument("--ro", type=Path, help="a read-only mounted folder")
    ap.add_argument("--full", type=Path, help="a small mounted folder to fill")
    a = ap.parse_args()
    audit, src, w = Audit(shlex.split(a.cli)), a.model, a.work
    shutil.rmtree(w, ignore_errors=True)
    w.mkdir(parents=True)

    t = w / "trunc.onnx"
    t.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    audit.row("truncated: optimize", ["optimize", str(t), str(w / "o1.onnx")], [t], w)
    audit.row("truncated: estimate", ["estimate", str(t)], [t], w)
    audit.row("truncated: verify", ["verify", str(src), str(t), "--backends", "cpu"], [t, src], w)

    ext = w / "ext"
    ext.mkdir()
    subprocess.run(audit.cli + ["optimize", str(src), str(ext / "m.onnx"), "--passes",
                                "external-data", "-q"], check=True, capture_output=True)  # fmt: skip
    (ext / "m.onnx.data").rename(w / "moved.data")
    m = ext / "m.onnx"
    audit.row("missing data: optimize", ["optimize", str(m), str(w / "o2.onnx")], [m], w)
    audit.row("missing data: estimate", ["estimate", str(m)], [m], w)
    audit.row("missing data: verify", ["verify", str(src), str(m), "--backends", "cpu"], [m], w)
    audit.row("unknown pass", ["optimize", str(src), str(w / "o3.onnx"), "--passes",
                               "prune,nosuchpass"], [src], w)  # fmt: skip

    proto = onnx.load(str(src), load_external_data=False)
    for i in proto.graph.input:
        dims = i.type.tensor_type.shape.dim
        dims[len(dims) - 1].dim_param = "seq"
    sym = w / "sym.onnx"  # no sidecar: nothing binds 'seq'
    onnx.save(proto, str(sym))
    audit.row("unbound dim: optimize", ["optimize", str(sym), str(w / "o4.onnx")], [sym], w)
    audit.row("unbound dim: estimate", ["estimate", str(sym)], [sym], w)
    audit.row("unbound dim: verify", ["verify", str(sym), str(sym), "--backends", "cpu"], [sym], w)

    if a.ro:
        ro = a.ro
        audit.row("read-only: optimize", ["optimize", str(src), str(ro / "o.onnx")], [src], ro)
        audit.row("read-only: verify --json", ["verify", str(src), str(src), "--backends", "cpu",
                                               "--json", str(ro / "r.json")], [src], ro)  # fmt: skip
        audit.row("read-only: estimate --json", ["estimate", str(src), "--json",
                                                 str(ro / "e.json")], [src], ro)  # fmt: skip
    if a.full:
        full = a.full
        for f in full.iterdir():
            f.unlink()
        for name, passes in (("all", "all"), ("safe", "safe"), ("prune (embedded)", "prune")):
            audit.row(f"full disk: optimize {name}", ["optimize", str(src), str(full / "o.onnx"),
                                                      "--passes", passes], [src], full)  # fmt: skip
        old = full / "old.json"
        old.write_text('{"old": true}\n')
        filler = _fill(full)
        audit.row("full disk (filled): estimate --json over an old report",
                  ["estimate", str(src), "--json", str(old)], [src, old], full)  # fmt: skip
        audit.row("full disk (filled): estimate --plot",
                  ["estimate", str(src), "--plot", str(full / "p.png")], [src], full)  # fmt: skip
        audit.row("full disk (filled): verify --json", ["verify", str(src), str(src), "--backends",
                  "cpu", "--json", str(full / "v.json")], [src], full)  # fmt: skip
        filler.unlink()
    mib = 1 << 20
    audit.row("RLIMIT_FSIZE 1 MiB: optimize", ["optimize", str(src), str(w / "o5.onnx")], [src],
              w, fsize=mib)  # fmt: skip
    audit.row("RLIMIT_FSIZE 1 MiB: optimize safe", ["optimize", str(src), str(w / "o6.onnx"),
              "--passes", "safe"], [src], w, fsize=mib)  # fmt: skip


if __name__ == "__main__":
    main()
