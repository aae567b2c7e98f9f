"""Models from non-torch exporters: tf2onnx (Keras, tf.function), skl2onnx, onnxmltools.

    /tmp/exporters9/venv/bin/python docs/bench/exporters_build.py OUT_DIR [--only NAME ...]

Runs in its own venv (``python -m venv V && V/bin/pip install tensorflow-cpu tf2onnx skl2onnx
onnxmltools lightgbm scikit-learn``; the session-11 ColumnTransformer rows also need pandas), never in memshrink's Python: TensorFlow and the converters
pin protobuf / numpy versions of their own. Weights are random (Keras ``weights=None``) or fitted
in a second on seeded synthetic data; nothing is downloaded. Writes each model into OUT_DIR and
``OUT_DIR/cases.json``: per model its file and the ``--dim`` / ``--shape`` bindings the sweep
(``exporters_sweep.py``, memshrink's Python) feeds it with. tf2onnx names a free dimension
``unk__N`` with a number of its own choosing, so the bindings are read back from the written file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import onnx  # noqa: E402

SEED = 20261127
OPSET_TF = 17  # tf2onnx's newest well-tested opset (1.17 supports 18 with warnings)
BUILDERS: list[tuple[str, Callable[[Path], dict[str, Any]]]] = []


def builder(
    name: str,
) -> Callable[[Callable[[Path], dict[str, Any]]], Callable[[Path], dict[str, Any]]]:
    def deco(fn: Callable[[Path], dict[str, Any]]) -> Callable[[Path], dict[str, Any]]:
        BUILDERS.append((name, fn))
        return fn

    return deco


def _free_dims(path: Path) -> dict[str, list[tuple[int, str]]]:
    """input name -> [(axis, dim_param)] of its symbolic dims (tf2onnx: ``unk__N``)."""
    m = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    out: dict[str, list[tuple[int, str]]] = {}
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        dims = vi.type.tensor_type.shape.dim
        out[vi.name] = [(i, d.dim_param) for i, d in enumerate(dims) if not d.HasField("dim_value")]
    return out


def _bind(path: Path, per_axis: dict[int, int]) -> dict[str, int]:
    """--dim bindings: every input's symbolic axis ``a`` gets ``per_axis[a]``."""
    dims: dict[str, int] = {}
    for _, free in _free_dims(path).items():
        for axis, sym in free:
            if sym:
                dims[sym] = per_axis[axis]
    return dims


def _tf2onnx(src: Any, spec: list[Any], path: Path, large: bool = False) -> None:
    """A Keras model through ``from_keras``, a ``tf.function`` through ``from_function`` (its
    weights must be ``tf.Variable``s: tf2onnx 1.17 on TF 2.21 turns captured eager constants
    into required graph inputs)."""
    import tf2onnx

    convert = tf2onnx.convert.from_function
    if hasattr(src, "layers"):
        convert = tf2onnx.convert.from_keras
    model, _ = convert(src, input_signature=spec, opset=OPSET_TF)
    if large:
        onnx.save_model(
            model,
            str(path),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=path.name + ".data",
            size_threshold=1024,
        )
    else:
        onnx.save_model(model, str(path))


def _keras_app(name: str, d: Path, ctor: str, size: int) -> dict[str, Any]:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(SEED)
    model = getattr(keras.applications, ctor)(
        weights=None, input_shape=(size, size, 3), include_top=True, classes=1000
    )
    spec = [tf.TensorSpec([None, size, size, 3], tf.float32, name="images")]

    p = d / f"{name}.onnx"
    _tf2onnx(model, spec, p)
    return {"path": p.name, "dims": _bind(p, {0: 2}), "note": f"keras.applications.{ctor}"}


@builder("tf-keras-mobilenetv3small")
def mobilenetv3(d: Path) -> dict[str, Any]:
    return _keras_app("tf-keras-mobilenetv3small", d, "MobileNetV3Small", 224)


@builder("tf-keras-efficientnetb0")
def efficientnetb0(d: Path) -> dict[str, Any]:
    return _keras_app("tf-keras-efficientnetb0", d, "EfficientNetB0", 224)


@builder("tf-keras-lstm-gru-text")
def lstm_text(d: Path) -> dict[str, Any]:
    """Embedding -> LSTM -> GRU -> Dense, batch and sequence length free."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(SEED)
    inp = keras.Input(shape=(None,), dtype="int32", name="tokens")
    h = keras.layers.Embedding(5000, 64)(inp)
    h = keras.layers.LSTM(96, return_sequences=True)(h)
    h = keras.layers.GRU(64)(h)
    out = keras.layers.Dense(4, activation="softmax")(h)
    model = keras.Model(inp, out)
    spec = [tf.TensorSpec([None, None], tf.int32, name="tokens")]

    p = d / "tf-keras-lstm-gru-text.onnx"
    _tf2onnx(model, spec, p)
    return {
        "path": p.name,
        "dims": _bind(p, {0: 2, 1: 32}),
        "int_ranges": {"tokens": [0, 5000]},
        "note": "Keras LSTM + GRU",
    }


@builder("tf-function-while-cond")
def while_cond(d: Path) -> dict[str, Any]:
    """tf.while_loop with a data-dependent trip count and a tf.cond on a reduced value."""
    import tensorflow as tf

    rng = np.random.default_rng(SEED)
    w = tf.Variable(rng.standard_normal((64, 64)).astype(np.float32) * 0.1)
    w2 = tf.Variable(rng.standard_normal((64, 64)).astype(np.float32) * 0.1)
    spec = [
        tf.TensorSpec([None, 64], tf.float32, name="x"),
        tf.TensorSpec([], tf.int32, name="steps"),
    ]

    @tf.function(input_signature=spec)
    def fn(x: Any, steps: Any) -> Any:
        def body(i: Any, h: Any) -> Any:
            h = tf.tanh(tf.matmul(h, w) + h)
            return i + 1, h

        _, h = tf.while_loop(lambda i, h: i < steps, body, [tf.constant(0), x])
        s = tf.reduce_mean(h)
        y = tf.cond(s > 0.0, lambda: tf.matmul(h, w2), lambda: tf.nn.relu(h) * 2.0)
        return y

    p = d / "tf-function-while-cond.onnx"
    _tf2onnx(fn, spec, p)
    return {
        "path": p.name,
        "dims": _bind(p, {0: 8}),
        "int_ranges": {"steps": [3, 4]},
        "note": "tf.while_loop + tf.cond (Loop, If)",
    }


@builder("tf-keras-big-embedding-extdata")
def big_embedding(d: Path) -> dict[str, Any]:
    """> 100 MB: a 100k x 256 Embedding and a Dense stack, saved with external data."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(SEED)
    inp = keras.Input(shape=(None,), dtype="int32", name="ids")
    h = keras.layers.Embedding(100_000, 256)(inp)
    h = keras.layers.GlobalAveragePooling1D()(h)
    for _ in range(3):
        h = keras.layers.Dense(1024, activation="relu")(h)
    out = keras.layers.Dense(1000)(h)
    model = keras.Model(inp, out)
    spec = [tf.TensorSpec([None, None], tf.int32, name="ids")]

    p = d / "tf-keras-big-embedding-extdata.onnx"
    _tf2onnx(model, spec, p, large=True)
    return {
        "path": p.name,
        "dims": _bind(p, {0: 4, 1: 64}),
        "int_ranges": {"ids": [0, 100_000]},
        "note": "external data (~108 MB)",
    }


def _xy(n: int = 400, f: int = 10, classes: int = 3) -> tuple[Any, Any]:
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((n, f)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64) + (x[:, 2] > 1).astype(np.int64)
    return x, y % classes


def _skl(model: Any, name: str, d: Path, options: dict[Any, Any] | None = None) -> dict[str, Any]:
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType

    onx = to_onnx(
        model,
        initial_types=[("X", FloatTensorType([None, 10]))],
        options=options,
        target_opset={"": 17, "ai.onnx.ml": 3},
    )
    p = d / f"{name}.onnx"
    onnx.save_model(onx, str(p))
    return {"path": p.name, "shapes": {"X": [5, 10]}}


@builder("skl-randomforest-zipmap")
def rf_zipmap(d: Path) -> dict[str, Any]:
    from sklearn.ensemble import RandomForestClassifier

    x, y = _xy()
    m = RandomForestClassifier(n_estimators=30, max_depth=8, random_state=0).fit(x, y)
    return _skl(m, "skl-randomforest-zipmap", d) | {"note": "TreeEnsembleClassifier + ZipMap"}


@builder("skl-randomforest-nozipmap")
def rf_nozipmap(d: Path) -> dict[str, Any]:
    from sklearn.ensemble import RandomForestClassifier

    x, y = _xy()
    m = RandomForestClassifier(n_estimators=30, max_depth=8, random_state=0).fit(x, y)
    out = _skl(m, "skl-randomforest-nozipmap", d, options={id(m): {"zipmap": False}})
    return out | {"note": "TreeEnsembleClassifier, tensor probabilities"}


@builder("skl-randomforest-big")
def rf_big(d: Path) -> dict[str, Any]:
    """A forest of fully grown trees (~490k nodes, ~24 MB): ORT CPU's parsed trees dominate."""
    from sklearn.ensemble import RandomForestClassifier

    rng = np.random.default_rng(0)
    x = rng.standard_normal((30000, 10)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] * x[:, 2] + rng.standard_normal(30000) > 0).astype(np.int64)
    y += (x[:, 3] > 0.5).astype(np.int64)
    m = RandomForestClassifier(n_estimators=60, random_state=0, n_jobs=1).fit(x, y)
    out = _skl(m, "skl-randomforest-big", d, options={id(m): {"zipmap": False}})
    return out | {"note": "TreeEnsembleClassifier, ~490k nodes"}


@builder("skl-gradboost-stringlabels")
def gb_strings(d: Path) -> dict[str, Any]:
    from sklearn.ensemble import GradientBoostingClassifier

    x, y = _xy()
    labels = np.array(["cat", "dog", "eel"])[y]
    m = GradientBoostingClassifier(n_estimators=20, max_depth=3, random_state=0).fit(x, labels)
    out = _skl(m, "skl-gradboost-stringlabels", d)
    return out | {"note": "string labels, ZipMap map(string, float)"}


@builder("skl-pipeline-scaler-logreg")
def pipeline(d: Path) -> dict[str, Any]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = _xy()
    m = Pipeline([("scale", StandardScaler()), ("lr", LogisticRegression(max_iter=200))]).fit(x, y)
    return _skl(m, "skl-pipeline-scaler-logreg", d) | {"note": "Scaler + LinearClassifier + ZipMap"}


@builder("lgbm-regressor-onnxmltools")
def lgbm(d: Path) -> dict[str, Any]:
    import lightgbm
    import onnxmltools
    from onnxmltools.convert.common.data_types import FloatTensorType

    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((500, 10)).astype(np.float32)
    yv = x[:, 0] * 2 + np.sin(x[:, 1]) + 0.1 * rng.standard_normal(500)
    m = lightgbm.LGBMRegressor(n_estimators=50, num_leaves=15, verbose=-1, random_state=0)
    m.fit(x, yv)
    onx = onnxmltools.convert_lightgbm(
        m, initial_types=[("X", FloatTensorType([None, 10]))], target_opset=15
    )
    p = d / "lgbm-regressor-onnxmltools.onnx"
    onnx.save_model(onx, str(p))
    return {"path": p.name, "shapes": {"X": [5, 10]}, "note": "TreeEnsembleRegressor"}


def _mixed_frame(n: int = 300) -> tuple[Any, Any]:
    """A data frame of three column kinds (float, string, int64 codes) and a 3-class label."""
    import pandas as pd

    rng = np.random.default_rng(SEED)
    num = rng.standard_normal((n, 3)).astype(np.float32)
    cat = rng.choice(["red", "green", "blue", "cyan"], size=(n, 2))
    code = rng.integers(0, 5, size=(n, 1))
    y = (num[:, 0] > 0).astype(np.int64) + (cat[:, 0] == "red") + (code[:, 0] > 2)
    df = pd.DataFrame(
        {"n0": num[:, 0], "n1": num[:, 1], "n2": num[:, 2], "c0": cat[:, 0], "c1": cat[:, 1]}
    )
    df["k0"] = code[:, 0]
    return df, y % 3


def _typed_inputs(cols: dict[str, tuple[str, int]]) -> list[tuple[str, Any]]:
    from skl2onnx.common.data_types import FloatTensorType, Int64TensorType, StringTensorType

    kinds = {"float": FloatTensorType, "string": StringTensorType, "int64": Int64TensorType}
    return [(name, kinds[k]([None, w])) for name, (k, w) in cols.items()]


@builder("skl-columntransformer-typed-inputs-zipmap")
def column_transformer(d: Path) -> dict[str, Any]:
    """A ColumnTransformer fed three inputs of three dtypes (float, string, int64 codes):
    StandardScaler, OneHotEncoder on strings and on codes, then LogisticRegression whose
    probabilities come out as ZipMap's sequence of maps."""
    from skl2onnx import to_onnx
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    df, y = _mixed_frame()
    pre = ColumnTransformer(
        [
            ("num", StandardScaler(), ["n0", "n1", "n2"]),
            ("cat", OneHotEncoder(handle_unknown="ignore"), ["c0", "c1"]),
            ("code", OneHotEncoder(handle_unknown="ignore"), ["k0"]),
        ]
    )
    m = Pipeline([("pre", pre), ("lr", LogisticRegression(max_iter=300))]).fit(df, y)
    # skl2onnx maps each input to the ColumnTransformer's columns by name: one input per column
    cols = {c: ("float", 1) for c in ("n0", "n1", "n2")}
    cols |= {"c0": ("string", 1), "c1": ("string", 1), "k0": ("int64", 1)}
    onx = to_onnx(m, initial_types=_typed_inputs(cols), target_opset={"": 17, "ai.onnx.ml": 3})
    p = d / "skl-columntransformer-typed-inputs-zipmap.onnx"
    onnx.save_model(onx, str(p))
    shapes = {c: [6, 1] for c in cols}
    return {
        "path": p.name,
        "shapes": shapes,
        "int_ranges": {"k0": [0, 5]},
        "note": "ColumnTransformer: Scaler, OneHotEncoder(string, int64), LinearClassifier, ZipMap",
    }


@builder("skl-tfidf-text-logreg-zipmap")
def tfidf_text(d: Path) -> dict[str, Any]:
    """Text in, classes out: TfidfVectorizer (StringNormalizer, com.microsoft Tokenizer,
    TfIdfVectorizer with word bigrams) then LogisticRegression and ZipMap. StringNormalizer's
    locale is set to "C": skl2onnx's default (none, which ORT reads as en_US.UTF-8) fails to
    load where that locale is not installed, as on this box."""
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import StringTensorType
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    rng = np.random.default_rng(SEED)
    words = np.array(
        ["the", "a", "cat", "dog", "sat", "ran", "on", "under", "mat", "log", "big", "small", "red"]
    )
    texts = [" ".join(rng.choice(words, size=rng.integers(3, 9))) for _ in range(200)]
    y = np.array([("cat" in t) + ("big" in t) for t in texts]) % 3
    m = Pipeline(
        [("tfidf", TfidfVectorizer(ngram_range=(1, 2))), ("lr", LogisticRegression(max_iter=300))]
    ).fit(texts, y)
    onx = to_onnx(
        m,
        initial_types=[("text", StringTensorType([None, 1]))],
        target_opset={"": 17, "ai.onnx.ml": 3},
        options={TfidfVectorizer: {"tokenexp": r"\w+", "locale": "C"}},
    )
    p = d / "skl-tfidf-text-logreg-zipmap.onnx"
    onnx.save_model(onx, str(p))
    return {"path": p.name, "shapes": {"text": [4, 1]}, "note": "Tokenizer, TfIdfVectorizer"}


@builder("skl-imputer-ordinal-svc")
def svc_ordinal(d: Path) -> dict[str, Any]:
    """SimpleImputer on floats with NaNs, OrdinalEncoder on strings, then
    an RBF SVC with probabilities (SVMClassifier) and ZipMap. (HistGradientBoosting fails in
    skl2onnx 1.20 with scikit-learn 1.9: a bool in an ``ints`` attribute.)"""
    from skl2onnx import to_onnx
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OrdinalEncoder
    from sklearn.svm import SVC

    df, y = _mixed_frame()
    df.loc[::7, "n1"] = np.nan
    pre = ColumnTransformer(
        [
            ("num", SimpleImputer(strategy="median"), ["n0", "n1", "n2"]),
            ("cat", OrdinalEncoder(), ["c0", "c1"]),
        ]
    )
    m = Pipeline([("pre", pre), ("svc", SVC(probability=True, random_state=0))]).fit(df, y)
    cols = {c: ("float", 1) for c in ("n0", "n1", "n2")} | {
        "c0": ("string", 1),
        "c1": ("string", 1),
    }
    onx = to_onnx(m, initial_types=_typed_inputs(cols), target_opset={"": 17, "ai.onnx.ml": 3})
    p = d / "skl-imputer-ordinal-svc.onnx"
    onnx.save_model(onx, str(p))
    return {
        "path": p.name,
        "shapes": {c: [6, 1] for c in cols},
        "note": "SimpleImputer, OrdinalEncoder(string), SVMClassifier, ZipMap",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--only", action="append")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    manifest = args.out / "cases.json"
    cases: dict[str, Any] = json.loads(manifest.read_text()) if manifest.exists() else {}
    failed = 0
    for name, fn in BUILDERS:
        if args.only and name not in args.only:
            continue
        try:
            case = fn(args.out)
        except Exception as exc:  # a builder that fails is reported, the others still run
            failed += 1
            traceback.print_exc()
            cases.pop(name, None)
            print(f"build {name}: FAILED {type(exc).__name__}: {exc}"[:400], file=sys.stderr)
            continue
        m = onnx.load(str(args.out / case["path"]), load_external_data=False)
        case["producer"] = f"{m.producer_name} {m.producer_version}".strip()
        case["opsets"] = {o.domain or "ai.onnx": o.version for o in m.opset_import}
        cases[name] = case
        print(f"build {name}: ok {case}", file=sys.stderr, flush=True)
        manifest.write_text(json.dumps(cases, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
