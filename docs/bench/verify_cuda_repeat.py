"""CUDA EP memory, repeated: is the per-process GPU figure reproducible? (GPU machine only)."""

from memshrink.verify import profile, verify

M = ".cache/models/"


def g(r):
    return [round(s["gpu"]["peak"] / 2**20) for s in r.stages]


for i in range(3):
    p = profile(M + "bert-base-ext.onnx", backends=("cuda",), runs=2)
    print("profile ext", i, g(p.runs[0]), flush=True)
for i in range(2):
    p = profile(M + "bert-base.onnx", backends=("cuda",), runs=2)
    print("profile emb", i, g(p.runs[0]), flush=True)
p = profile(
    M + "bert-base-ext.onnx",
    backends=("cuda",),
    runs=2,
    provider_options={"cuda": {"arena_extend_strategy": "kSameAsRequested"}},
)
print("profile ext kSameAsRequested", g(p.runs[0]), flush=True)
for a, b in (
    ("bert-base", "bert-base-ext"),
    ("bert-base-ext", "bert-base-ext"),
    ("bert-base-ext", "bert-base"),
):
    v = verify(M + a + ".onnx", M + b + ".onnx", backends=("cuda",), runs=2)
    print("verify", a, b, "orig", g(v.runs[0]), "rewr", g(v.runs[1]), v.status, flush=True)
