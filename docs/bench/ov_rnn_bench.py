"""OpenVINO: a native LSTM / GRU / RNN node's memory, measured against the estimate.

    python docs/bench/ov_rnn_bench.py LSTM,400,64,64,64 GRU,400,64,64,128,forward,f32

Each spec is OP,S,B,I,H[,direction[,precision]]: one node on x [S, B, I] with every output
(the ORT recurrent tests' ``_rnn`` builder), external weights, measured by
``memshrink.verify.profile`` (its own process, float32 feeds, stage peaks over the baseline)
and predicted by ``memshrink estimate --backend openvino``.
Results: docs/estimate.md, "Session 13: plain runtime nodes, native recurrent nodes".
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from estimate.test_estimate_openvino import _save  # noqa: E402
from estimate.test_estimate_ort_rnn_scratch import _rnn  # noqa: E402

import memshrink  # noqa: E402
from memshrink.verify import profile  # noqa: E402

M = 2**20


def main() -> None:
    out = Path("/tmp/ov_rnn_bench")
    out.mkdir(exist_ok=True)
    for spec in sys.argv[1:]:
        op, s, b, i, h, *rest = spec.split(",")
        direction = rest[0] if rest else "forward"
        opts = {"INFERENCE_PRECISION_HINT": rest[1]} if len(rest) > 1 else {}
        p = out / f"{op}_{s}_{b}_{i}_{h}_{direction}.onnx"
        for q in (p, Path(str(p) + ".data")):
            q.unlink(missing_ok=True)
        _save(_rnn(op, int(s), int(b), int(i), int(h), direction=direction), p)
        run = profile(str(p), backends=("openvino",), runs=3, session_options=opts)
        st = {x["name"]: x["peak_delta"] / M for x in run.to_dict()["runs"][0]["stages"]}
        e = memshrink.estimate(str(p), backend="openvino", session_options=opts).stage_peaks()
        print(
            f"{spec}: measured compile {st['compile']:.1f} infer3 {st['infer3']:.1f} | "
            f"predicted compile {e['compile_model'] / M:.1f} steady {e['steady_state'] / M:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
