"""Which glibc heap an embedded model's ORT CPU session lands in, per fresh process, under a
fixed or random address layout and hash seed, with or without threads.

    python docs/bench/glibc_coin_probe.py MODEL.onnx --folder DIR [-n 6] [--aslr-off]
        [--seed random|fixed:K|vary:K] [--variant verifier|hook|nosampler|plain]
        [--sopt '{"intra_op_num_threads": 1}'] [--tag T]

Why: embedded models' session-creation peaks take one of two or three values per process
(docs/estimate.md, "What decides the mode"). One JSON line per process: session-creation
peak, anon after creation (MiB over the baseline) and run 1's peak. Variants:
``verifier`` runs ``python -m memshrink.verify.child`` exactly as ``verify`` does; ``hook``
the same child from a script (``C.main``, no runpy); ``nosampler`` that script with the
meter's 1 ms sampler thread never started; ``plain`` ``import onnxruntime`` and one
``InferenceSession`` (no feeds, no meter). ``--aslr-off`` runs the process under
``setarch -R``; ``--seed`` sets ``PYTHONHASHSEED`` (``vary:K``: K, K+1, … per process).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verifier_child import ROOT, MiB, child_spec, write_child_inputs  # noqa: E402

PLAIN = r"""
import json, sys
import onnxruntime as ort
def st():
    d = {}
    for line in open('/proc/self/status'):
        k, _, v = line.partition(':')
        if k in ('VmHWM', 'RssAnon', 'VmRSS'):
            d[k] = int(v.split()[0]) * 1024
    return d
b = st()
so = ort.SessionOptions()
for k, v in json.loads(sys.argv[2]).items():
    setattr(so, k, v)
s = ort.InferenceSession(sys.argv[1], so, providers=['CPUExecutionProvider'])
a = st()
json.dump({'peak': (a['VmHWM'] - b['VmRSS']) / 2**20,
           'anon': (a['RssAnon'] - b['RssAnon']) / 2**20}, sys.stdout)
"""
HOOKS = {
    "hook": "import sys\nimport memshrink.verify.child as C\nsys.exit(C.main(sys.argv[1:]))\n",
    "nosampler": (
        "import sys\nimport memshrink.verify.measure as M\n"
        "M._Sampler.start = lambda self: None\n"
        "M._Sampler.join = lambda self, timeout=None: None\n"
        "import memshrink.verify.child as C\nsys.exit(C.main(sys.argv[1:]))\n"
    ),
}


def run_one(
    folder: Path, inputs: object, idx: int, prefix: list[str], env: dict[str, str],
    variant: str, sopt: dict[str, object],
) -> tuple[float, float, float | None]:  # fmt: skip
    """(creation peak, anon after creation, run 1 peak) of one fresh process, MiB."""
    full = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **env}
    if "PYTHONHASHSEED" not in env:
        full.pop("PYTHONHASHSEED", None)
    cwd = tempfile.gettempdir()
    if variant == "plain":
        model = str(inputs.model)  # type: ignore[attr-defined]
        cmd = [*prefix, sys.executable, "-c", PLAIN, model, json.dumps(sopt)]
        out = subprocess.run(cmd, env=full, cwd=cwd, capture_output=True, text=True, check=True)
        r = json.loads(out.stdout)
        return r["peak"], r["anon"], None
    spec = child_spec(inputs, idx, "probe")  # type: ignore[arg-type]
    spec["session_options"] = sopt
    sp = folder / f"s{idx}.json"
    sp.write_text(json.dumps(spec))
    if variant == "verifier":
        cmd = [*prefix, sys.executable, "-m", "memshrink.verify.child", str(sp)]
    else:
        hook = folder / f"{variant}.py"
        hook.write_text(HOOKS[variant])
        cmd = [*prefix, sys.executable, str(hook), str(sp)]
    subprocess.run(cmd, env=full, cwd=cwd, capture_output=True, check=False)
    r = json.loads((folder / f"r{idx}.json").read_text())
    base, st = r["baseline"], r["stages"]
    peaks = [(s["peak"] - base["rss"]) / MiB for s in st]
    anon = (st[0]["anon_after"] - base["anon"]) / MiB
    return peaks[0], anon, peaks[1] if len(peaks) > 1 else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("-n", type=int, default=6)
    ap.add_argument("--aslr-off", action="store_true", help="setarch -R")
    ap.add_argument("--seed", default="random", help="random | fixed:K | vary:K")
    ap.add_argument("--variant", default="verifier", choices=["verifier", "plain", *HOOKS])
    ap.add_argument("--sopt", default="{}", help="ORT session options, JSON")
    ap.add_argument("--folder", required=True)
    ap.add_argument("--tag", default="")
    a = ap.parse_args(argv)
    folder = Path(a.folder)
    inputs = write_child_inputs(a.model, folder, "")
    prefix = ["setarch", "-R"] if a.aslr_off else []
    for i in range(a.n):
        env = {}
        if a.seed.startswith("fixed:"):
            env["PYTHONHASHSEED"] = a.seed[6:]
        elif a.seed.startswith("vary:"):
            env["PYTHONHASHSEED"] = str(int(a.seed[5:]) + i)
        t = time.time()
        peak, anon, run1 = run_one(folder, inputs, i, prefix, env, a.variant, json.loads(a.sopt))
        row = {
            "tag": a.tag, "model": Path(a.model).stem, "aslr_off": a.aslr_off,
            "seed": env.get("PYTHONHASHSEED", "random"), "variant": a.variant, "sopt": a.sopt,
            "create": round(peak, 1), "anon": round(anon, 1),
            "run1": None if run1 is None else round(run1, 1), "s": round(time.time() - t, 1),
        }  # fmt: skip
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
