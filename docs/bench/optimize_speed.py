"""Process CPU time and peak RSS of `optimize --passes all` on the 5,000-node graph, per pass
and per estimate. The peak of a step is VmHWM after it, reset before it (``/proc/self/clear_refs``
5), so each row is the largest RSS seen while that step ran; `rss` is the RSS after it.
python docs/bench/optimize_speed.py [--profile OUT.prof] [--nodes 5000] [--src MODEL.onnx]
       [-O chunk.min_saving=0 ...] [--shape X=5,10 ...] (as `optimize -O` / `--shape`)"""

# ruff: noqa: E402  (faulthandler first: stack samples of a long pass)

import faulthandler

faulthandler.dump_traceback_later(45, repeat=True)
import argparse
import cProfile
import os
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
ap.add_argument("--src", help="optimize this model instead of the generated graph")
ap.add_argument("-O", dest="opts", action="append", default=[], help="a pass option")
ap.add_argument("--shape", action="append", default=[], help="an input shape binding")
a = ap.parse_args()
os.makedirs(a.dir, exist_ok=True)
src = a.src or f"{a.dir}/big{a.nodes}.onnx"
if not os.path.exists(src):
    onnx.save(big_graph(a.nodes), src)
import memshrink.lazy_modules as lazy_modules

lazy_modules.defer()  # as cli.main does: the imports below would load sympy first (+34 MiB)
import memshrink.cli as cli
import memshrink.hooks as hooks
import memshrink.pipeline as pipeline


def _status_mib(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


_overall = [0.0]


def _reset_peak() -> None:
    """Fold VmHWM into the run's peak, then reset it (ru_maxrss would reset with it)."""
    _overall[0] = max(_overall[0], _status_mib("VmHWM"))
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


rec = []
orig_est = hooks._estimate_summary


def est(model, context):
    _reset_peak()
    c = time.process_time()
    r = orig_est(model, context)
    rec.append(("estimate", time.process_time() - c, _status_mib("VmHWM"), _status_mib("VmRSS")))
    return r


hooks._estimate_summary = est
orig_resolve = pipeline.resolve_pipeline


def resolve(*args, **kw):
    ps = orig_resolve(*args, **kw)
    for p in ps:
        run = p.run

        def wrapped(model, context, _run=run, _n=p.name):
            _reset_peak()
            c = time.process_time()
            r = _run(model, context)
            rec.append((_n, time.process_time() - c, _status_mib("VmHWM"), _status_mib("VmRSS")))
            return r

        p.run = wrapped
    return ps


pipeline.resolve_pipeline = resolve


def _step(name, fn):
    def wrapped(*args, **kw):
        _reset_peak()
        c = time.process_time()
        r = fn(*args, **kw)
        rec.append((name, time.process_time() - c, _status_mib("VmHWM"), _status_mib("VmRSS")))
        return r

    return wrapped


import memshrink.commands as commands  # noqa: E402
import memshrink.model as model_mod  # noqa: E402
import memshrink.writer as writer  # noqa: E402

model_mod.load = _step("(load)", model_mod.load)
writer.save_model = _step("(save)", writer.save_model)
commands._add_recommendations = _step("(recommendations)", commands._add_recommendations)
commands._other_backends = _step("(other runtimes)", commands._other_backends)
c0 = time.process_time()
w0 = time.perf_counter()
argv = ["optimize", src, f"{a.dir}/out.onnx", "--passes", a.passes, "--json", f"{a.dir}/rep.json"]
for o in a.opts:
    argv += ["-O", o]
for o in a.shape:
    argv += ["--shape", o]
if a.profile:
    pr = cProfile.Profile(time.process_time)  # CPU time: wall time is noisy on a shared box
    pr.enable()
code = cli.main(argv)
if a.profile:
    pr.disable()
    pr.dump_stats(a.profile)
tot = time.process_time() - c0
print(
    f"exit {code}; total process CPU {tot:.2f} s, wall {time.perf_counter() - w0:.1f} s, peak RSS {max(_overall[0], _status_mib('VmHWM')):.0f} MiB"
)
s = 0
print(f"  {'step':24s} {'CPU s':>7s} {'peak MiB':>9s} {'RSS after':>9s}")
for n, t, hwm, rss in rec:
    print(f"  {n:24s} {t:7.2f} {hwm:9.0f} {rss:9.0f}")
    s += t
print(f"  passes+estimates {s:.2f}; rest (load, save, other-backend predictions) {tot - s:.2f}")
