"""Small hand-built graphs shared by the tests and the bench scripts (built in code, no blobs).

Why here: bench scripts do not import from ``tests/``, and a fixture written twice drifts.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper


def zipmap_classifier(
    features: int = 4, scaler: bool = False, batch_dim: str | None = "n"
) -> onnx.ModelProto:
    """What skl2onnx writes for a classifier: ai.onnx.ml ops ending in a ZipMap whose output is
    ``seq(map(int64, float))`` — a type onnx_ir cannot hold, so memshrink must carry it through.

    ``batch_dim=None`` leaves the first input dim with neither dim_value nor dim_param, as
    skl2onnx does.
    """
    nodes = []
    first = "X"
    if scaler:
        nodes.append(
            helper.make_node(
                "Scaler",
                ["X"],
                ["xs"],
                domain="ai.onnx.ml",
                offset=[0.1] * features,
                scale=[2.0] * features,
            )
        )
        first = "xs"
    nodes += [
        helper.make_node(
            "LinearClassifier",
            [first],
            ["label", "prob"],
            domain="ai.onnx.ml",
            coefficients=[float(i % 7) / 7 for i in range(3 * features)],
            intercepts=[0.1, 0.2, 0.3],
            classlabels_ints=[0, 1, 2],
            post_transform="SOFTMAX",
        ),
        helper.make_node(
            "ZipMap", ["prob"], ["probabilities"], domain="ai.onnx.ml", classlabels_int64s=[0, 1, 2]
        ),
    ]
    seq_map = helper.make_sequence_type_proto(
        helper.make_map_type_proto(
            TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])
        )
    )
    g = helper.make_graph(
        nodes,
        "skl",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [batch_dim, features])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, [batch_dim]),
            helper.make_value_info("probabilities", seq_map),
        ],
    )
    return helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("ai.onnx.ml", 1)]
    )
