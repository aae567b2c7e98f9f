"""Process CPU time of `optimize --passes all` on the 5,000-node graph, per pass and per estimate.
python docs/bench/optimize_speed.py [--profile OUT.prof] [--nodes 5000]"""

# ruff: noqa: E402  (faulthandler first: stack samples of a long pass)

import faulthandler

faulthandler.dump_traceback_later(45, repeat=True)
import argparse
import cProfile
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx
from estimate_speed import big_graph

ap = argparse.ArgumentParser()
ap.add_argument("--profile")
ap.add_argument("--nodes", type=int, default=5000)
ap.add_argument("--dir", default="/tmp/memshrink-optimize-speed")
ap.add_argument("--passes", default="all")
a = ap.parse_args()
os.makedirs(a.dir, exist_ok=True)
src = f"{a.dir}/big{a.nodes}.onnx"
if not os.path.exists(src):
    onnx.save(big_graph(a.nodes), src)
import memshrink.cli as cli
import memshrink.hooks as hooks
import memshrink.pipeline as pipeline

rec = []
orig_est = hooks._estimate_summary


def est(model, context):
    c = time.process_time()
    r = orig_est(model, context)
    rec.append(("estimate", time.process_time() - c))
    return r


hooks._estimate_summary = est
orig_resolve = pipeline.resolve_pipeline


def resolve(*args, **kw):
    ps = orig_resolve(*args, **kw)
    for p in ps:
        run = p.run

        def wrapped(model, context, _run=run, _n=p.name):
            c = time.process_time()
            r = _run(model, context)
            rec.append((_n, time.process_time() - c))
            return r

        p.run = wrapped
    return ps


pipeline.resolve_pipeline = resolve
c0 = time.process_time()
w0 = time.perf_counter()
argv = ["optimize", src, f"{a.dir}/out.onnx", "--passes", a.passes, "--json", f"{a.dir}/rep.json"]
if a.profile:
    pr = cProfile.Profile()
    pr.enable()
code = cli.main(argv)
if a.profile:
    pr.disable()
    pr.dump_stats(a.profile)
tot = time.process_time() - c0
print(
    f"exit {code}; total process CPU {tot:.2f} s, wall {time.perf_counter() - w0:.1f} s, maxrss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
)
s = 0
for n, t in rec:
    print(f"  {n:24s} {t:7.2f}")
    s += t
print(f"  passes+estimates {s:.2f}; rest (load, save, other-backend predictions) {tot - s:.2f}")
