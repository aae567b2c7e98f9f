"""``fold-weight-transforms``: apply Cast/Transpose/Reshape-like ops and Conv+BatchNorm to
weights ahead of time.

Why: a runtime that finds ``Transpose(W)`` or ``Cast(W)`` on an initializer folds it at session
creation — into a fresh heap copy, next to the mapped original — and ONNX Runtime fuses
Conv+BatchNormalization the same way. Done once here, the saved file holds the weights in the
form the kernels read, and the runtime maps them instead of copying. Reshape, Squeeze,
Unsqueeze and Flatten change only the shape: the folded weight keeps pointing at the same bytes
(no data read). Transpose and Cast read one weight at a time, block by block with ``pread``
(``weight_io``: a memory map would keep the pages resident), and write the result to a spill
file (``SpillFile``), so weights are never all in memory. A transform is folded only when it is the
weight's only reader (folding a shared weight would store it twice); a shared weight's
``MatMul(x, Transpose(W))`` is rewritten as ``Transpose(MatMul(W, xT))`` instead
(``tied_matmul.py``: no runtime copies W then).

Cast/Transpose/Reshape folds are bit-exact; Conv+BatchNorm folding changes rounding (relative
error ~1e-6, option ``conv_bn``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from memshrink.irgraphs import graphs
from memshrink.manager import Pass, PassContext, PassResult
from memshrink.transforms import register
from memshrink.transforms.tied_matmul import swap_tied_matmul
from memshrink.transforms.weight_io import (
    SPILL_MIN_BYTES,
    SpillFile,
    iter_blocks,
    read_array,
    transpose_2d_to_spill,
)

_SHAPE_OPS = ("Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity")
_NUMERIC = {
    ir.DataType.FLOAT,
    ir.DataType.DOUBLE,
    ir.DataType.FLOAT16,
    ir.DataType.INT8,
    ir.DataType.INT16,
    ir.DataType.INT32,
    ir.DataType.INT64,
    ir.DataType.UINT8,
    ir.DataType.UINT16,
    ir.DataType.UINT32,
    ir.DataType.UINT64,
    ir.DataType.BOOL,
}


def _const(value: ir.Value | None) -> ir.TensorProtocol | None:
    """The constant tensor behind ``value`` (an initializer that is not a graph input)."""
    if value is None or value.const_value is None or not value.is_initializer():
        return None
    if value.is_graph_input():
        return None  # a caller may override it at run time
    return value.const_value


def _ints(value: ir.Value | None) -> list[int] | None:
    t = _const(value)
    if t is None or t.dtype not in (ir.DataType.INT64, ir.DataType.INT32):
        return None
    return [int(x) for x in read_array(t).reshape(-1)]


def _attr_ints(node: ir.Node, name: str) -> list[int] | None:
    attr = node.attributes.get(name)
    return None if attr is None else [int(x) for x in attr.value]


def _shape_after(node: ir.Node, shape: Sequence[int]) -> tuple[int, ...] | None:
    """Output shape of a shape-only op on a constant input, or None when it can't be known."""
    op = node.op_type
    rank = len(shape)
    if op == "Identity":
        return tuple(shape)
    if op == "Flatten":
        axis = node.attributes.get("axis")
        a = int(axis.value) if axis is not None else 1
        a = a + rank if a < 0 else a
        return (int(np.prod(shape[:a], dtype=np.int64)), int(np.prod(shape[a:], dtype=np.int64)))
    if op == "Reshape":
        target = _ints(node.inputs[1] if len(node.inputs) > 1 else None)
        if target is None:
            return None
        allowzero = node.attributes.get("allowzero")
        out = [
            shape[i] if d == 0 and not (allowzero and allowzero.value) and i < rank else d
            for i, d in enumerate(target)
        ]
        try:
            return tuple(np.empty(shape, dtype=np.bool_).reshape(out).shape)
        except ValueError:
            return None
    axes = _ints(node.inputs[1]) if len(node.inputs) > 1 else _attr_ints(node, "axes")
    if op == "Squeeze":
        if axes is None:
            return tuple(d for d in shape if d != 1)
        drop = {a + rank if a < 0 else a for a in axes}
        return tuple(d for i, d in enumerate(shape) if i not in drop)
    if op == "Unsqueeze" and axes is not None:
        out_rank = rank + len(axes)
        norm = sorted(a + out_rank if a < 0 else a for a in axes)
        dims = list(shape)
        for a in norm:
            dims.insert(a, 1)
        return tuple(dims)
    return None


def _replace_with_initializer(
    graph: ir.Graph, node: ir.Node, tensor: ir.TensorProtocol, old_inputs: Sequence[ir.Value]
) -> None:
    """Swap ``node``'s single output for a new initializer holding ``tensor``."""
    out = node.outputs[0]
    name = out.name
    new = ir.Value(
        name=f"{name}__folded",
        shape=ir.Shape(tensor.shape.numpy()),
        type=ir.TensorType(tensor.dtype),
    )
    new.const_value = tensor
    out.replace_all_uses_with(new)
    graph.remove(node, safe=True)
    new.name = name
    tensor.name = name
    graph.register_initializer(new)
    for value in old_inputs:
        unused = value.is_initializer() and not value.uses() and not value.is_graph_output()
        if unused and value.name and value.name in graph.initializers:
            del graph.initializers[value.name]


@register
class FoldWeightTransformsPass(Pass):
    name = "fold-weight-transforms"
    summary = "Fold Cast/Transpose/Reshape of weights and Conv+BatchNorm ahead of time."
    targets = ("session-creation", "weights")
    _shared: bool = True  # fold_shared for this run (see Options.fold_shared)
    _swap: bool = True  # tied_matmul for this run (see Options.tied_matmul)
    exact = (
        "Cast/Transpose/Reshape folds are bit-exact; Conv+BatchNorm folding changes rounding "
        "(relative error ~1e-6; conv_bn=false keeps the pass bit-exact)"
    )

    @dataclass
    class Options:
        conv_bn: bool = True
        # Fold a transform even when its weight has other readers (tied embedding / LM head):
        # the file stores both forms, and the runtime maps them instead of building a heap copy.
        # Only when the pipeline names one runtime other than OpenVINO (optimize --backend
        # ort / ort-openvino / cuda). OpenVINO's FC takes the transpose itself, so there the
        # folded copy is pure cost; without --backend (deploy anywhere) it is a trade the
        # unfolded model wins: GPT-2 all, measured process peaks folded / unfolded: ORT CPU
        # 633 / 633, OpenVINO 1228 / 1007 (original 1007), its EP 1256 / 1351 (original
        # 2063) MiB: unfolded, no runtime ends above the original (docs/compare.md). Since
        # session 12 ``tied_matmul`` (below) takes MatMul readers first, so this folds only
        # for other readers, and for all under --backend cuda.
        fold_shared: bool = True
        # A shared weight read through ``MatMul(x, Transpose(W))`` (the tied LM head) becomes
        # ``Transpose(MatMul(W, xT))``: no runtime folds or prepacks a copy of W then
        # (``tied_matmul.py``; GPT-2 all, ORT CPU 633 -> 579, OpenVINO 1005 -> 959, EP 1351 ->
        # 987 MiB). Tried before ``fold_shared``; not under ``--backend cuda`` (not measured).
        tied_matmul: bool = True
        # ... only for a weight of at least this many bytes: the swap's transposes cost a few
        # MiB of kernels and buffers whatever W's size (T5's 75 KB tied head, simplify skipped:
        # OpenVINO compile 53.4 -> 55.0, infer 58.2 -> 59.5 MiB, measured side by side,
        # session 12 sweep), while what it saves is about W (EP) to 2 W (ORT CPU's fold +
        # prepack). Below 4 MiB the saving can't pay for it.
        tied_matmul_min_bytes: int = 4 * 1024 * 1024

    def run(self, model: ir.Model, context: PassContext) -> PassResult:
        stats = {
            "reshape_like": 0,
            "transpose": 0,
            "cast": 0,
            "conv_bn": 0,
            "bytes_rewritten": 0,
            "bytes_added": 0,
            "tied_matmul": 0,
        }
        self._swap = self.options.tied_matmul and not (
            context.deploy_only and context.backend == "cuda"
        )
        self._shared = (
            self.options.fold_shared and context.deploy_only and context.backend != "openvino"
        )
        for graph in graphs(model):
            changed = True
            while changed:
                changed = False
                for node in list(graph):
                    if node.domain not in ("", "ai.onnx"):
                        continue
                    if self._fold_one(graph, node, stats):
                        changed = True
        folded = sum(v for k, v in stats.items() if not k.startswith("bytes"))
        return PassResult(modified=folded > 0, stats=stats)

    def _fold_one(self, graph: ir.Graph, node: ir.Node, stats: dict[str, int]) -> bool:
        op = node.op_type
        if op == "Conv" and self.options.conv_bn:
            return self._fold_conv_bn(graph, node, stats)
        if op not in (*_SHAPE_OPS, "Transpose", "Cast") or len(node.outputs) != 1:
            return False
        src = node.inputs[0] if node.inputs else None
        tensor = _const(src)
        out = node.outputs[0]
        if tensor is None or src is None or out.is_graph_output():
            return False
        if tensor.dtype not in _NUMERIC:
            return False
        shared = len(src.uses()) != 1
        shape = tuple(tensor.shape.numpy())
        transpose_2d = op == "Transpose" and (_attr_ints(node, "perm") or [1, 0]) == [1, 0]
        big = tensor.nbytes >= self.options.tied_matmul_min_bytes
        if shared and self._swap and transpose_2d and len(shape) == 2 and big:
            swapped = swap_tied_matmul(graph, node, src)
            if swapped:
                stats["tied_matmul"] += swapped
                return True
        if shared and not self._shared:
            return False  # folding would store the weight twice
        name = out.name or ""
        if op in _SHAPE_OPS:
            new_shape = _shape_after(node, shape)
            if new_shape is None:
                return False
            folded = _reshaped(tensor, new_shape, name)
            stats["reshape_like"] += 1
        elif op == "Transpose":
            perm = _attr_ints(node, "perm") or list(reversed(range(len(shape))))
            folded = _transposed(tensor, perm, name)
            stats["transpose"] += 1
            stats["bytes_rewritten"] += tensor.nbytes
        else:  # Cast
            to = ir.DataType(int(node.attributes["to"].value))
            if to not in _NUMERIC:
                return False
            folded = _cast(tensor, to, name)
            stats["cast"] += 1
            stats["bytes_rewritten"] += folded.nbytes
        if shared:
            stats["bytes_added"] += folded.nbytes
        _replace_with_initializer(graph, node, folded, [v for v in node.inputs if v is not None])
        return True

    def _fold_conv_bn(self, graph: ir.Graph, conv: ir.Node, stats: dict[str, int]) -> bool:
        y = conv.outputs[0]
        uses = y.uses()
        if len(uses) != 1 or y.is_graph_output():
            return False
        bn = next(iter(uses)).node
        if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx"):
            return False
        if len(bn.outputs) != 1 or (
            bn.attributes.get("training_mode") and bn.attributes["training_mode"].value
        ):
            return False
        if bn.outputs[0].is_graph_output():
            return False
        w_val = conv.inputs[1]
        b_val = conv.inputs[2] if len(conv.inputs) > 2 else None
        params = [_const(v) for v in bn.inputs[1:5]]
        w = _const(w_val)
        if w is None or w.dtype != ir.DataType.FLOAT or any(p is None for p in params):
            return False
        if w_val is None or len(w_val.uses()) != 1:
            return False
        if any(v is None or len(v.uses()) != 1 for v in bn.inputs[1:5]):
            return False
        b = _const(b_val) if b_val is not None else None
        if b_val is not None and (b is None or len(b_val.uses()) != 1):
            return False
        eps_attr = bn.attributes.get("epsilon")
        eps = float(eps_attr.value) if eps_attr is not None else 1e-5
        scale, bias, mean, var = (np.asarray(read_array(p), dtype=np.float64) for p in params)  # type: ignore[arg-type]
        s = scale / np.sqrt(var + eps)
        w_arr = np.asarray(read_array(w), dtype=np.float64)
        w_new = (w_arr * s.reshape((-1,) + (1,) * (w_arr.ndim - 1))).astype(np.float32)
        del w_arr
        b_arr = np.asarray(read_array(b), dtype=np.float64) if b is not None else 0.0
        b_new = ((b_arr - mean) * s + bias).astype(np.float32)
        spill = SpillFile.shared()
        w_name = f"{w_val.name}_bnfolded"
        b_name = f"{bn.outputs[0].name}_bias_bnfolded"
        w_value = ir.Value(
            name=w_name, shape=ir.Shape(w_new.shape), type=ir.TensorType(ir.DataType.FLOAT)
        )
        w_value.const_value = spill.add_array(w_new, ir.DataType.FLOAT, w_name)
        b_value = ir.Value(
            name=b_name, shape=ir.Shape(b_new.shape), type=ir.TensorType(ir.DataType.FLOAT)
        )
        b_value.const_value = ir.Tensor(b_new, name=b_name)
        graph.register_initializer(w_value)
        graph.register_initializer(b_value)
        conv.replace_input_with(1, w_value)
        if b_val is not None:
            conv.replace_input_with(2, b_value)
        else:
            conv.resize_inputs(3)
            conv.replace_input_with(2, b_value)
        old = [w_val, *(v for v in bn.inputs[1:5] if v is not None)]
        if b_val is not None:
            old.append(b_val)
        bn.outputs[0].replace_all_uses_with(y)
        graph.remove(bn, safe=True)
        for value in old:
            if not value.uses() and value.name and value.name in graph.initializers:
                del graph.initializers[value.name]
        stats["conv_bn"] += 1
        stats["bytes_rewritten"] += w.nbytes
        return True


def _reshaped(tensor: ir.TensorProtocol, shape: tuple[int, ...], name: str) -> ir.TensorProtocol:
    """The same bytes under a new shape (a file-backed tensor stays file-backed, unread)."""
    if isinstance(tensor, ir.ExternalTensor):
        return ir.ExternalTensor(
            tensor.location,
            tensor.offset,
            tensor.length,
            tensor.dtype,
            shape=ir.Shape(shape),
            name=name,
            base_dir=tensor.base_dir,
        )
    return ir.Tensor(np.asarray(tensor.numpy()).reshape(shape), dtype=tensor.dtype, name=name)


def _transposed(tensor: ir.TensorProtocol, perm: list[int], name: str) -> ir.TensorProtocol:
    """``tensor`` transposed; a file-backed 2-D weight is transposed block by block into the
    spill file (``transpose_2d_to_spill``), so only one block is ever in memory."""
    if isinstance(tensor, ir.ExternalTensor) and perm == [1, 0] and tensor.dtype.bitwidth % 8 == 0:
        return transpose_2d_to_spill(tensor, name)
    arr = read_array(tensor)
    return SpillFile.shared().add_array(arr.transpose(perm), tensor.dtype, name)


def _cast(tensor: ir.TensorProtocol, to: ir.DataType, name: str) -> ir.TensorProtocol:
    """``tensor`` cast to ``to`` (numpy's conversion); a file-backed weight whose result goes
    to the spill file is converted block by block."""
    out_bytes = tensor.size * to.itemsize
    if not isinstance(tensor, ir.ExternalTensor) or out_bytes < SPILL_MIN_BYTES:
        return SpillFile.shared().add_array(read_array(tensor).astype(to.numpy()), to, name)
    spill = SpillFile.shared()
    offset = spill.begin()
    for block in iter_blocks(tensor):
        spill.write(block.astype(np.dtype(to.numpy()).newbyteorder("<")).view(np.uint8).data)
    return spill.tensor(offset, to, tuple(tensor.shape.numpy()), name)
