"""The graph ONNX Runtime CPU really runs: its fusion and NCHWc transformers, emulated.

With the default ``ORT_ENABLE_ALL`` the CPU session does not run the graph as written. Three
rewrites change which activations exist, how big they are and in which order they are made
(read in ``onnxruntime/core/optimizer``; checked against ``optimized_model_filepath`` dumps):

* level 1: ``EliminateDropout``; ``PadFusion`` (a zero Pad of H/W into the Conv reading it);
  in place (the Conv keeps its node index) ``ConvBNFusion``,
  ``ConvMulFusion``, ``ConvAddFusion`` fold a BatchNormalization / Mul / Add of constants into
  the Conv, repeated until nothing matches;
* level 1, transformer shapes: Transpose -> size-1 Reshape -> Transpose merged, Slices that
  tile a tensor -> ``Split``, MatMul + bias Add -> Reshape/``Gemm``/Reshape (except an
  attention block's projections, which the level-2 run of ``MatMulAddFusion`` fuses);
* level 2, ``GemmActivationFusion`` and ``ConvActivationFusion``: Gemm/Conv + an activation
  become one new ``FusedGemm``/``FusedConv`` node; Add + LayerNormalization ->
  ``SkipLayerNormalization``, ``x * Sigmoid(x)`` -> ``QuickGelu`` (tf2onnx's Swish), MatMul
  of scalar-scaled inputs -> ``FusedMatMul`` (checked
  against ORT's dump of the batch-chunked BERT: the same op counts, and its memory-pattern
  block to the byte; FastGelu (GPT-2's tanh Gelu), BiasGelu and Attention fusions are not
  emulated: BERT's Erf Gelu stays unfused in ORT too);
* level 3, ``nchwc_transformer.cc`` (x86 with AVX2: block 8; AVX-512F: block 16): fp32 2-D
  Conv/FusedConv with constant weights, block-aligned channels (or fewer input channels than a
  block: NCHW input read directly) become ``nchwc`` Conv nodes whose outputs are padded to the
  block; MaxPool/AveragePool (channels aligned), and — when every producer is NCHWc —
  Global pools, Concat on axis 1, Add/Sum, Mul, Relu/Sigmoid/Tanh/HardSigmoid, QuickGelu, Gelu and
  BatchNormalization follow (``x * HardSigmoid(x, 1/6, 0.5)`` after a Conv: its HardSwish);
  a Mul by a per-channel constant becomes a depthwise NCHWc Conv;
  ``Transpose`` to NCHW before a ReorderInput / to NHWC after a blocked tensor becomes a
  ``channels_last`` Reorder. An Add whose input shapes ORT cannot prove equal (it traces each
  dim to the tensor it derives from, ``NchwcArgument::Shape``, then compares declared dims)
  runs on the blocked tensors through ``Reshape``s, unfused.
  An Add of a single-use, activation-free NCHWc Conv and another NCHWc tensor of the same
  shape is fused as the Conv's ``Sum`` input (the kernel accumulates into that buffer:
  ``MayInplace(3, 0)``); a later activation then fuses too. ``ReorderInput`` nodes convert
  NCHW inputs, ``ReorderOutput`` nodes convert back wherever a plain consumer or a graph
  output needs the tensor.

Each transformer walks the graph in its current DEFAULT topological order and appends the
nodes it creates, so new nodes are numbered in that order; ORT's DEFAULT execution order (a
reverse DFS steered by node index, ``schedule.ort_default``) is then taken on the rewritten
graph. That renumbering is why PRIORITY_BASED runs about ``D(F)`` and DEFAULT about
``D(D(F))`` on heavily fused models (``docs/activation-passes.md``).

Only shapes, dtypes and small attributes are read: no weight byte.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memshrink.estimate.graph import GraphInfo, NodeInfo, TensorInfo
from memshrink.estimate.ort_weights import nchwc_block_size
from memshrink.estimate.schedule import reverse_dfs
from memshrink.estimate.weights import FLOAT

NCHWC_DOMAIN = "com.microsoft.nchwc"
MS_DOMAIN = "com.microsoft"
CONV_ACTIVATIONS = frozenset({"Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "HardSigmoid"})
NCHWC_ACTIVATIONS = frozenset({"Relu", "Sigmoid", "Tanh"})
#: com.microsoft elementwise ops ORT 1.32 runs on an NCHWc tensor as it is (its dumps)
NCHWC_MS_ELEMENTWISE = frozenset({"QuickGelu", "Gelu"})
#: Coordinate modes under which ORT's NCHWc transformer turns a linear Resize by integer
#: H/W factors into an NCHWc ``Upsample`` (ORT 1.32 dumps; ``pytorch_half_pixel`` stays NCHW).
LINEAR_UPSAMPLE_MODES = frozenset({"half_pixel", "asymmetric", "align_corners"})
GEMM_ACTIVATIONS = frozenset(
    {"Relu", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "Elu", "Selu", "Softplus", "Softsign"}
)


@dataclass
class _Node:
    idx: int  # ORT node index: survivors keep theirs, new nodes are appended
    name: str
    op_type: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    orig: NodeInfo | None = None  # the node it came from (control flow, implicit inputs)


@dataclass
class OptimizedGraph:
    """The rewritten graph (``graph``) and what the rewrite did (for the assumptions)."""

    graph: GraphInfo
    block: int
    counts: dict[str, int]


class _Rewriter:
    def __init__(self, g: GraphInfo, block: int) -> None:
        self.g = g
        self.block = block
        self.tensors: dict[str, TensorInfo] = dict(g.tensors)
        self.nodes: dict[int, _Node] = {}
        for n in g.nodes:
            if n.index in g.folded:
                continue
            self.nodes[n.index] = _Node(
                n.index, n.name, n.op_type, n.domain, list(n.inputs), list(n.outputs),
                dict(n.attrs), n,
            )  # fmt: skip
        self.next_idx = len(g.nodes)
        self.counts: dict[str, int] = {}
        self.outputs = set(g.outputs)
        self._orig_cons: dict[str, list[int]] = {}  # readers before NCHWc conversion
        self._cons: tuple[tuple[int, int, int], dict[str, list[int]]] | None = None

    # ------------------------------------------------------------------ graph helpers
    def _bump(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1

    def producers(self) -> dict[str, int]:
        return {o: n.idx for n in self.nodes.values() for o in n.outputs if o}

    def _version(self) -> tuple[int, int, int]:
        """Changes whenever the graph does: every rewrite adds or drops nodes or counts itself
        in ``counts`` (``_bump``)."""
        return self.next_idx, len(self.nodes), sum(self.counts.values())

    def consumers(self) -> dict[str, list[int]]:
        """Value -> the nodes reading it, in node order. One map per graph version: most
        fusions find nothing to fuse, and each used to rebuild it (a chunk search estimates
        dozens of 30,000-node trial graphs: ~240 rebuilds). A fusion that rewrites keeps the
        map it got in step (``_unread`` / ``_read``) or bumps the version."""
        version = self._version()
        if self._cons is not None and self._cons[0] == version:
            return self._cons[1]
        out: dict[str, list[int]] = {}
        for n in self.nodes.values():
            for i in self._reads(n):
                out.setdefault(i, []).append(n.idx)
        self._cons = (version, out)
        return out

    def _unread(self, cons: dict[str, list[int]], n: _Node) -> None:
        """Update a ``consumers()`` map for ``n`` leaving the graph (O(reads), not O(N): a
        chunked ResNet-50 has ~2,000 nodes and ~1,000 fusions)."""
        for i in self._reads(n):
            readers = cons.get(i)
            if readers is not None:
                readers.remove(n.idx)  # one read, one entry: a node reading i twice is listed twice
                if not readers:
                    del cons[i]

    def _read(self, cons: dict[str, list[int]], n: _Node) -> None:
        """Update a ``consumers()`` map for ``n`` just added (last in node order, as there)."""
        for i in self._reads(n):
            cons.setdefault(i, []).append(n.idx)

    def _read_in_order(self, cons: dict[str, list[int]], n: _Node) -> None:
        """``_read`` for a node rewritten in place (not the newest index): node order is
        index order, so insert where ``consumers()`` would list it."""
        for i in self._reads(n):
            bisect.insort(cons.setdefault(i, []), n.idx)

    def _fuse(self, gone: Sequence[_Node], cons: dict[str, list[int]], prods: dict[str, int],
              name: str, op: str, ins: list[str], outs: list[str],
              orig: NodeInfo | None) -> _Node:  # fmt: skip
        """Replace ``gone`` by one new contrib node ``op`` (last in node order, as ORT adds it),
        keeping the ``consumers()`` / ``producers()`` maps in step; counted in ``counts``."""
        for g in gone:
            self.nodes.pop(g.idx, None)  # some fusions drop a node while they match
            self._unread(cons, g)
            self._unproduce(prods, g)
        new = self.add(name, op, MS_DOMAIN, ins, outs, {}, orig)
        self._read(cons, new)
        self._produce(prods, new)
        self._bump(op)
        return new

    @staticmethod
    def _unproduce(prods: dict[str, int], n: _Node) -> None:
        """Update a ``producers()`` map for ``n`` leaving the graph."""
        for o in n.outputs:
            if o and prods.get(o) == n.idx:
                del prods[o]

    @staticmethod
    def _produce(prods: dict[str, int], n: _Node) -> None:
        """Update a ``producers()`` map for ``n`` added (or rewritten in place)."""
        for o in n.outputs:
            if o:
                prods[o] = n.idx

    @staticmethod
    def _reads(n: _Node) -> list[str]:
        extra = n.orig.implicit_inputs if n.orig is not None else []
        return [i for i in n.inputs + extra if i]

    def topo(self) -> list[int]:
        """ORT's DEFAULT order of the current graph (reverse DFS from the leaves)."""
        prod = self.producers()
        preds = {
            n.idx: sorted({prod[i] for i in self._reads(n) if i in prod})
            for n in self.nodes.values()
        }
        return reverse_dfs(sorted(self.nodes), preds)

    def _scan(self, op: str) -> list[int]:
        """The DEFAULT order to scan for a fusion rooted at ``op``; empty (no DFS) when the
        graph has no such node, which keeps graphs without, say, Convs cheap to estimate."""
        if not any(n.op_type == op for n in self.nodes.values()):
            return []
        return self.topo()

    def add(self, name: str, op: str, domain: str, ins: list[str], outs: list[str],
            attrs: dict[str, Any] | None = None, orig: NodeInfo | None = None) -> _Node:  # fmt: skip
        n = _Node(self.next_idx, name, op, domain, ins, outs, dict(attrs or {}), orig)
        self.nodes[n.idx] = n
        self.next_idx += 1
        return n

    def t(self, name: str) -> TensorInfo | None:
        return self.tensors.get(name) if name else None

    def _is_const(self, name: str) -> bool:
        t = self.t(name)
        return t is not None and t.kind == "initializer"

    def _single_use(self, name: str, cons: dict[str, list[int]]) -> bool:
        return name not in self.outputs and len(cons.get(name, [])) == 1

    # ------------------------------------------------------------------ level 1 and 2
    def eliminate_dropout(self) -> None:
        """Level 1, EliminateDropout: an inference Dropout whose mask nobody reads is removed
        and its readers take its input."""
        cons = self.consumers()
        for n in list(self.nodes.values()):
            if n.op_type != "Dropout" or n.domain not in ("", "ai.onnx") or not n.inputs:
                continue
            out = n.outputs[0]
            mask = n.outputs[1] if len(n.outputs) > 1 else ""
            if out in self.outputs or (mask and (mask in cons or mask in self.outputs)):
                continue
            for c in cons.get(out, []):
                m = self.nodes[c]
                m.inputs = [n.inputs[0] if i == out else i for i in m.inputs]
            del self.nodes[n.idx]
            self._bump("EliminateDropout")

    def pad_fusion(self) -> None:
        """Level 1, ``PadFusion``: a constant-mode ``Pad`` by zeros of the spatial dims only, read
        by nothing but a Conv (explicit pads), is folded into the Conv's ``pads``; the padded
        copy is never made (tf2onnx writes Keras' ``ZeroPadding2D`` before strided depthwise
        Convs so: ORT 1.32's dump of EfficientNetB0 has none of its 4 Pads). Pad amounts are
        read from the shapes: N and C unchanged, no spatial dim shrinks; a ``constant_value``
        input (value unread) or ``axes`` keeps the Pad."""
        cons = self.consumers()
        for n in list(self.nodes.values()):
            if n.op_type != "Pad" or n.domain not in ("", "ai.onnx") or len(n.inputs) < 2:
                continue
            mode = n.attrs.get("mode", "constant")
            if (mode.decode() if isinstance(mode, bytes) else mode) != "constant":
                continue
            if len([i for i in n.inputs if i]) != 2 or not self._is_const(n.inputs[1]):
                continue
            out = n.outputs[0]
            if not self._single_use(out, cons):
                continue
            conv = self.nodes[cons[out][0]]
            if (
                conv.op_type != "Conv"
                or conv.domain not in ("", "ai.onnx")
                or conv.inputs[0] != out
            ):
                continue
            auto = conv.attrs.get("auto_pad", "NOTSET")
            if (auto.decode() if isinstance(auto, bytes) else auto) != "NOTSET":
                continue
            x, y = self.t(n.inputs[0]), self.t(out)
            if x is None or y is None or x.shape is None or y.shape is None:
                continue
            if len(x.shape) != len(y.shape) or x.shape[:2] != y.shape[:2]:
                continue
            if any(b < a for a, b in zip(x.shape[2:], y.shape[2:], strict=True)):
                continue
            conv.inputs[0] = n.inputs[0]
            del self.nodes[n.idx]
            self._unread(cons, n)
            del cons[out]
            bisect.insort(cons.setdefault(n.inputs[0], []), conv.idx)
            self._bump("PadFusion")

    def conv_const_fusions(self) -> None:
        """Level 1, in place: ConvBNFusion, ConvAddFusion, ConvMulFusion (constants folded
        into the Conv's weights; the Conv keeps its index and takes the fused output)."""
        changed = True
        while changed:  # rule-based: applied until nothing matches (Conv -> BN -> Mul -> Add)
            changed = self._conv_const_round()

    def _conv_const_round(self) -> bool:
        changed = False
        for op in ("BatchNormalization", "Mul", "Add"):
            cons = self.consumers()
            for idx in self._scan("Conv"):
                n = self.nodes.get(idx)
                if n is None or n.op_type != "Conv" or n.domain not in ("", "ai.onnx"):
                    continue
                out = n.outputs[0]
                if not self._single_use(out, cons) or not all(
                    self._is_const(i) for i in n.inputs[1:] if i
                ):
                    continue
                nxt = self.nodes[cons[out][0]]
                if nxt.op_type != op or nxt.domain not in ("", "ai.onnx"):
                    continue
                others = [i for i in nxt.inputs if i and i != out]
                if not others or not all(self._is_const(i) for i in others):
                    continue
                if len([o for o in nxt.outputs if o]) > 1:
                    continue
                n.outputs[0] = nxt.outputs[0]
                del self.nodes[nxt.idx]
                self._unread(cons, nxt)  # same map as consumers() again, without the O(N) walk
                self._bump(f"Conv+{op}")
                changed = True
        return changed

    def activation_fusions(self, ep: str = "cpu") -> None:
        """Level 2 in ORT's order: GemmActivationFusion, MatMulAddFusion's second run,
        ConvActivationFusion (new FusedGemm, Gemm, FusedConv nodes). Traced: BERT b4x512 after
        ``--passes all`` packs the pooler's FusedGemm before the attention Gemms; ORT's
        dump: the level-2 MatMulAddFusion runs before SkipLayerNormFusion (the output
        projection's bias ends in its Gemm). ``ep="cuda"``: FusedGemm has only a CPU kernel
        and the CUDA FusedConv only Relu (``gemm_activation_fusion.cc``,
        ``conv_activation_fusion.cc``)."""
        if ep == "cpu":
            self._activation_fusion("Gemm", "FusedGemm", GEMM_ACTIVATIONS)
        self.matmul_add_fusion(preserve_attention=False)
        acts = CONV_ACTIVATIONS if ep == "cpu" else frozenset({"Relu"})
        self._activation_fusion("Conv", "FusedConv", acts)

    def _activation_fusion(self, op: str, fused: str, acts: frozenset[str]) -> None:
        cons = self.consumers()
        for idx in self._scan(op):
            n = self.nodes.get(idx)
            if n is None or n.op_type != op or n.domain not in ("", "ai.onnx"):
                continue
            out = n.outputs[0]
            if not self._single_use(out, cons):
                continue
            act = self.nodes[cons[out][0]]
            if act.op_type not in acts or act.domain not in ("", "ai.onnx"):
                continue
            if act.op_type == "Clip" and not all(self._is_const(i) for i in act.inputs[1:] if i):
                continue
            attrs = dict(n.attrs, activation=act.op_type)
            del self.nodes[n.idx], self.nodes[act.idx]
            self._unread(cons, n)
            self._unread(cons, act)
            self._read(cons, self.add(n.name + "_fused", fused, MS_DOMAIN, list(n.inputs),
                                      [act.outputs[0]], attrs, n.orig))  # fmt: skip
            self._bump(fused)

    # ------------------------------------------------------------------ transformer fusions
    def merge_transposes(self) -> None:
        """Level 1, the transpose optimizer: a Reshape that only adds or drops size-1 dims acts
        like an Unsqueeze/Squeeze, which Transposes are pushed through, so Transpose -> such a
        Reshape -> Transpose (-> such a Reshape) collapses to one Transpose writing the last
        tensor (ORT's dump of BERT chunked to batch 1: one Transpose per K projection where
        the export wrote two). The first Transpose's output is not materialized."""
        cons, prods = self.consumers(), self.producers()
        for idx in self._scan("Transpose"):
            t2 = self.nodes.get(idx)
            if t2 is None or t2.op_type != "Transpose" or t2.domain not in ("", "ai.onnx"):
                continue
            r = self.nodes.get(prods.get(t2.inputs[0], -1))
            if r is None or not self._unit_reshape(r, cons):
                continue
            t1 = self.nodes.get(prods.get(r.inputs[0], -1))
            if t1 is None or t1.op_type != "Transpose" or t1.domain not in ("", "ai.onnx"):
                continue
            if not self._single_use(t1.outputs[0], cons):
                continue
            out = t2.outputs[0]
            nxt = self.nodes.get(cons[out][0]) if self._single_use(out, cons) else None
            gone = [t1, r, t2]
            if nxt is not None and self._unit_reshape(nxt, cons, allow_output=True):
                out = nxt.outputs[0]
                del self.nodes[nxt.idx]
                gone.append(nxt)
            del self.nodes[t1.idx], self.nodes[r.idx]
            for g in gone:  # the maps as consumers()/producers() give them, without O(N)
                self._unread(cons, g)
                self._unproduce(prods, g)
            t2.inputs[0], t2.outputs[0] = t1.inputs[0], out
            self._read_in_order(cons, t2)
            self._produce(prods, t2)
            self._bump("Transpose+Reshape+Transpose")

    def _unit_reshape(
        self, n: _Node, cons: dict[str, list[int]], allow_output: bool = False
    ) -> bool:
        """A single-use Reshape whose input and output have the same dims once 1s are dropped."""
        if n.op_type != "Reshape" or n.domain not in ("", "ai.onnx") or not n.inputs:
            return False
        a, b = self.t(n.inputs[0]), self.t(n.outputs[0])
        if a is None or b is None or a.shape is None or b.shape is None:
            return False
        if not allow_output and not self._single_use(n.outputs[0], cons):
            return False
        if not self._single_use(n.inputs[0], cons):
            return False
        return [d for d in a.shape if d != 1] == [d for d in b.shape if d != 1]

    def reshape_fusion(self) -> None:
        """Level 1, ``ReshapeFusion``: a Reshape whose target shape is a Concat, read by that
        Reshape alone, of constants and ``Unsqueeze(Gather(Shape(X), j))`` with ``j`` the
        Concat position and ``X``'s dim ``j`` equal to the Reshape input's dim there (the same
        tensor, or an equal value / name) gets a constant shape (0 = copy that dim); the Concat
        and the Shape -> Gather -> Unsqueeze chains nobody else reads are removed. ORT 1.32's
        dump of HuBERT / wav2vec2 attention: the ``view(bsz, heads, tgt, dim)`` Concats go,
        the one shared by the q/k/v Reshapes stays. Why it matters: a Shape of the value
        projection is a second reader that would pull that branch ahead of the scores in
        DEFAULT's order, and every removed Gather is an arena chunk. A Concat with the same
        inputs as another is left alone (ORT's CSE merges them into one with several readers)."""
        cons, prods = self.consumers(), self.producers()
        # CommonSubexpressionElimination (level 1, before) merges Concats of the same inputs:
        # the merged one has several readers (the q/k/v Reshapes' shared target)
        memo: dict[str, Any] = {}
        same: dict[Any, int] = {}
        for n in self.nodes.values():
            if n.op_type == "Concat":
                key = self._cse_key(n.outputs[0], prods, memo)
                same[key] = same.get(key, 0) + 1
        for r in [n for n in self.nodes.values() if n.op_type == "Reshape"]:
            if r.domain not in ("", "ai.onnx") or len(r.inputs) < 2 or r.idx not in self.nodes:
                continue
            root, shape = self.t(r.inputs[0]), r.inputs[1]
            c = self.nodes.get(prods.get(shape, -1))
            if root is None or root.sym_shape is None or c is None or c.op_type != "Concat":
                continue
            if not self._single_use(shape, cons) or int(c.attrs.get("axis", 0)) != 0:
                continue
            if same.get(self._cse_key(shape, prods, memo), 0) > 1:
                continue
            chain = self._shape_chains(c, r.inputs[0], root, prods, cons)
            if chain is None:
                continue
            new = _copy(self.tensors[shape])
            new.kind, new.producer, new.folded = "initializer", None, True
            self.tensors[shape] = new
            for n in [c, *chain]:  # consumers first: a chain goes once nothing reads it
                if n.idx not in self.nodes:
                    continue  # a Shape two Gathers read, already gone
                if n is not c and any(o in self.outputs or cons.get(o) for o in n.outputs if o):
                    continue
                del self.nodes[n.idx]
                self._unread(cons, n)
                self._unproduce(prods, n)
            self._bump("ReshapeFusion")

    def _shape_chains(
        self, c: _Node, data: str, root: TensorInfo, prods: dict[str, int],
        cons: dict[str, list[int]],
    ) -> list[_Node] | None:  # fmt: skip
        """The Unsqueeze, Gather, Shape nodes (consumers first) feeding ``c`` when every
        input is a constant or a matching dim; None otherwise."""
        chain: list[_Node] = []
        assert root.sym_shape is not None
        for pos, name in enumerate(c.inputs):
            if self._is_const(name):
                continue
            u = self._producer(name, "Unsqueeze", prods)
            ga = self._producer(u.inputs[0], "Gather", prods) if u else None
            sh = self._producer(ga.inputs[0], "Shape", prods) if ga else None
            if u is None or ga is None or sh is None or len(ga.inputs) < 2:
                return None
            src, idx = self.t(sh.inputs[0]), self.t(ga.inputs[1])
            if src is None or src.sym_shape is None or idx is None or idx.small != (pos,):
                return None
            if sh.attrs.get("start") or pos >= len(root.sym_shape) or pos >= len(src.sym_shape):
                return None
            if sh.inputs[0] != data and not _same_dim(src.sym_shape[pos], root.sym_shape[pos]):
                return None
            chain += [u, ga, sh]
        return chain

    def _producer(self, name: str, op: str, prods: dict[str, int]) -> _Node | None:
        """The standard-domain ``op`` node writing ``name``, if that is what writes it."""
        n = self.nodes.get(prods.get(name, -1))
        return n if n is not None and n.op_type == op and n.domain in ("", "ai.onnx") else None

    def _cse_key(self, name: str, prods: dict[str, int], memo: dict[str, Any]) -> Any:
        """What ORT's CSE sees of a shape computation's tensor, as a small interned id: a tiny
        constant by value, a Shape by the tensor it reads, a shape-arithmetic node by (op,
        attributes, its inputs' ids); anything else by name (CSE matters here only for the
        Concats ``reshape_fusion`` reads, whose inputs are shape computations)."""
        if name in memo:
            return memo[name]
        ids: dict[Any, int] = memo.setdefault("\0ids", {})
        t = self.t(name)
        n = self.nodes.get(prods.get(name, -1))
        if t is not None and t.small is not None:
            key: Any = ("v", t.small)
        elif n is None or n.op_type not in _CSE_OPS or n.domain not in ("", "ai.onnx"):
            key = ("n", name)
        else:
            attrs = tuple(sorted((k, repr(v)) for k, v in n.attrs.items()))
            ins: tuple[Any, ...] = (
                tuple(n.inputs)  # Shape / Size: the tensor itself
                if n.op_type in ("Shape", "Size")
                else tuple(self._cse_key(i, prods, memo) for i in n.inputs)
            )
            key = (n.op_type, attrs, ins, n.outputs.index(name))
        memo[name] = ids.setdefault(key, len(ids))
        return memo[name]

    def slices_to_split(self) -> None:
        """Level 1 (``GatherSliceToSplitFusion`` family): Slices of one tensor whose outputs
        tile it along one axis (shapes equal elsewhere, sizes summing to the axis) become one
        new ``Split``: every part is written at once and the source is freed right after
        (ORT's dump of the batch-chunked BERT: 3 Splits for 12 Slices)."""
        groups: dict[str, list[_Node]] = {}
        for idx in self._scan("Slice"):
            n = self.nodes[idx]
            if n.op_type == "Slice" and n.domain in ("", "ai.onnx") and n.inputs:
                groups.setdefault(n.inputs[0], []).append(n)
        for src, sl in groups.items():
            t = self.t(src)
            outs = [self.t(n.outputs[0]) for n in sl]
            if len(sl) < 2 or t is None or t.shape is None:
                continue
            if any(o is None or o.shape is None or len(o.shape) != len(t.shape) for o in outs):
                continue
            full = t.shape
            shapes = [o.shape for o in outs if o is not None and o.shape is not None]
            axes = {k for sh in shapes for k, d in enumerate(sh) if d != full[k]}
            if len(axes) != 1:
                continue
            ax = axes.pop()
            if sum(sh[ax] for sh in shapes) != full[ax]:
                continue
            sl.sort(key=lambda n: n.idx)  # parts in the order they were written
            for n in sl:
                del self.nodes[n.idx]
            self.add(src + "/split", "Split", "", [src], [n.outputs[0] for n in sl],
                     {"axis": ax})  # fmt: skip
            self._bump("Slice->Split")

    def matmul_add_fusion(self, *, preserve_attention: bool = True) -> None:
        """``MatMulAddFusion``: MatMul(A, B 2-D) whose only reader is an Add of a
        bias becomes ``Gemm``; an A of rank > 2 is reshaped to 2-D first and the Gemm's 2-D
        output reshaped back (new Reshape, Gemm, Reshape nodes). The MatMul's own output is gone.

        ORT registers it twice (``matmul_add_fusion.h``): at level 1 with
        ``preserve_attention_pattern`` on, which leaves an attention block's four projections
        (``_attention_pair``) for AttentionFusion, and at level 2 with it off, which fuses
        what is left. So those Gemms are numbered after every level-1 node, and ORT prepacks
        their B later (``ort_weights.pack_events``): ORT 1.32's dump of a LayerNorm -> Q/K/V
        -> O -> LayerNorm -> FFN micro-graph has 1 Gemm at level basic, 5 at extended."""
        cons = self.consumers()
        prods = self.producers()
        attn_ln: set[int] = set()  # ORT's AttentionPatternCache
        attn_add: set[int] = set()
        for idx in self._scan("MatMul"):
            n = self.nodes.get(idx)
            if n is None or n.op_type != "MatMul" or n.domain not in ("", "ai.onnx"):
                continue
            a, b = (self.t(i) for i in n.inputs[:2])
            out = n.outputs[0]
            o = self.t(out)
            if a is None or b is None or o is None or not self._single_use(out, cons):
                continue
            if b.shape is None or len(b.shape) != 2 or a.shape is None or len(a.shape) < 2:
                continue
            # an A of rank > 2 needs a concrete shape as ORT sees it at session creation
            # (``a_shape.Size() == -1`` skips): symbolic batch / sequence dims leave every
            # MatMul + Add apart (ORT's dump of BERT-base, DistilBERT, Swin: 0 Gemm)
            if len(a.shape) > 2 and (
                a.sym_shape is None or not all(isinstance(d, int) and d >= 0 for d in a.sym_shape)
            ):
                continue
            add = self.nodes[cons[out][0]]
            if add.op_type != "Add" or add.domain not in ("", "ai.onnx") or len(add.inputs) != 2:
                continue
            bias = self.t(next((i for i in add.inputs if i != out), ""))
            if (
                bias is None
                or bias.shape is None
                or len(bias.shape) > 1
                and any(d != 1 for d in bias.shape[:-1])
            ):
                continue  # only a bias broadcast along the rows is Gemm's C
            if len(a.shape) > 2 and len(bias.shape) != 1:
                continue  # reshaped to 2-D: only a 1-D bias (N) is accepted
            if (
                preserve_attention
                and len(a.shape) > 2
                and self._attention_pair(n, add, cons, prods, attn_ln, attn_add)
            ):
                continue  # left for the level-2 run
            res = add.outputs[0]
            del self.nodes[n.idx], self.nodes[add.idx]
            self._unread(cons, n)
            self._unread(cons, add)
            self._unproduce(prods, n)
            self._unproduce(prods, add)
            first = self.next_idx
            if len(a.shape) == 2:
                self.add(n.name + "/gemm", "Gemm", "", [n.inputs[0], n.inputs[1], bias.name],
                         [res], {}, n.orig)  # fmt: skip
            else:
                rows = 1
                for d in a.shape[:-1]:
                    rows *= d
                a2, o2 = f"{n.inputs[0]}/gemm_in_{n.idx}", f"{res}/gemm_out"
                self.tensors[a2] = _reshaped(a, a2, (rows, a.shape[-1]))
                self.tensors[o2] = _reshaped(o, o2, (rows, b.shape[1]))
                self.add(a2 + "/Reshape", "Reshape", "", [n.inputs[0]], [a2])
                self.add(n.name + "/gemm", "Gemm", "", [a2, n.inputs[1], bias.name], [o2],
                         {}, n.orig)  # fmt: skip
                self.add(o2 + "/Reshape", "Reshape", "", [o2], [res])
            for i in range(first, self.next_idx):
                self._read(cons, self.nodes[i])
                self._produce(prods, self.nodes[i])
            self._bump("MatMul+Add->Gemm")

    def _attention_pair(
        self,
        mm: _Node,
        add: _Node,
        cons: dict[str, list[int]],
        prods: dict[str, int],
        attn_ln: set[int],
        attn_add: set[int],
    ) -> bool:
        """ORT's ``AttentionPatternCache::IsAttentionPattern``: the MatMul reads a
        LayerNormalization whose readers are exactly 3 MatMuls (Q, K, V), one Add (the
        residual) and any number of Shape nodes, and the residual Add's other input comes from
        an Add (the output projection's bias). That LayerNorm's MatMuls and that bias Add are
        skipped, also when met later in the scan."""
        parent = self.nodes.get(prods.get(mm.inputs[0], -1))
        if parent is None:
            return False
        if parent.idx in attn_ln or add.idx in attn_add:
            return True
        if parent.op_type != "LayerNormalization":
            return False
        readers = [self.nodes[c] for o in parent.outputs if o for c in cons.get(o, [])]
        adds = [r for r in readers if r.op_type == "Add"]
        n_mm = sum(r.op_type == "MatMul" for r in readers)
        n_shape = sum(r.op_type == "Shape" for r in readers)
        if len(adds) != 1 or n_mm != 3 or n_shape != len(readers) - 4:
            return False
        ln_add = adds[0]
        other = [i for i in ln_add.inputs if i and i != parent.outputs[0]]
        src = self.nodes.get(prods.get(other[0], -1)) if other else None
        if src is None or src.op_type != "Add":
            return False
        attn_ln.add(parent.idx)
        attn_add.add(src.idx)
        return True

    def skip_layer_norm_fusion(self) -> None:
        """Level 2, ``SkipLayerNormFusion``: Add(X, skip) read only by a LayerNormalization
        over the last axis of 3-D tensors becomes one ``SkipLayerNormalization`` (new node):
        the sum is not materialized."""
        cons, prods = self.consumers(), self.producers()
        for idx in self._scan("LayerNormalization"):
            n = self.nodes.get(idx)
            if n is None or n.op_type != "LayerNormalization" or n.domain not in ("", "ai.onnx"):
                continue
            if int(n.attrs.get("axis", -1)) not in (-1, 2) or len(n.inputs) < 2:
                continue
            x = n.inputs[0]
            prod = prods.get(x)
            add = self.nodes.get(prod) if prod is not None else None
            if add is None or add.op_type != "Add" or add.domain not in ("", "ai.onnx"):
                continue
            if not self._single_use(x, cons) or len([o for o in n.outputs if o]) != 1:
                continue
            ins = [self.t(i) for i in add.inputs]
            if len(ins) != 2 or any(t is None or t.shape is None or len(t.shape) != 3 for t in ins):
                continue
            if not _same_sym(ins[0], ins[1]):  # type: ignore[arg-type]
                continue  # ORT compares the shapes it has at session creation
            # a bias Add on one side, Add(MatMul(.), bias 1-D), read only here, is absorbed
            # as the fused node's bias (ORT's dump of BERT-base: 24 such, no Gemm)
            gone, ins_names, bias = [n, add], list(add.inputs), []
            for k, name in enumerate(add.inputs):
                b_add = self.nodes.get(prods.get(name, -1))
                if b_add is None or b_add.op_type != "Add" or not self._single_use(name, cons):
                    continue
                consts = [i for i in b_add.inputs if self._is_const(i)]
                ct = self.t(consts[0]) if len(consts) == 1 else None
                src = next((i for i in b_add.inputs if not self._is_const(i)), "")
                mm = self.nodes.get(prods.get(src, -1))
                if ct is None or ct.shape is None or len(ct.shape) != 1 or mm is None:
                    continue
                if mm.op_type != "MatMul":
                    continue
                ins_names[k], bias = src, [consts[0]]
                gone.append(b_add)
                break
            self._fuse(gone, cons, prods, n.name + "/skip", "SkipLayerNormalization",
                       ins_names + list(n.inputs[1:3]) + bias, [n.outputs[0]], n.orig)  # fmt: skip

    def gelu_fusion(self) -> None:
        """Level 2, ``GeluFusion`` (``gelu_fusion.cc``, before ``MatMulScaleFusion``): the Erf
        form ``Div(x, s) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5)``, or with ``Mul(x, 0.5)`` as
        the last Mul's other input, becomes one ``Gelu`` (new node): none of the four
        intermediates is materialized, and the 0.5 Mul is no longer there for a following
        MatMul to absorb (ORT's dump of a legacy-exported ViT-base: 96 Gelu, the MLP's second
        MatMul stays a MatMul). Dynamo's ``(0.5 * (erf + 1)) * x`` matches neither form
        (BERT-base: no Gelu in ORT's dump either)."""
        cons, prods = self.consumers(), self.producers()

        def node(name: str, op: str) -> _Node | None:
            p = self.nodes.get(prods.get(name, -1))
            if p is None or p.op_type != op or p.domain not in ("", "ai.onnx"):
                return None
            return p if self._single_use(name, cons) else None

        def scalar(name: str) -> bool:
            t = self.t(name)
            return t is not None and t.kind == "initializer" and _is_scalar(t)

        def other(n: _Node, name: str) -> str | None:
            if len(n.inputs) != 2 or name not in n.inputs:
                return None
            return n.inputs[1] if n.inputs[0] == name else n.inputs[0]

        for idx in self._scan("Erf"):
            erf = self.nodes.get(idx)
            if erf is None or erf.op_type != "Erf" or not erf.inputs:
                continue
            div = node(erf.inputs[0], "Div")
            if div is None or len(div.inputs) != 2 or not scalar(div.inputs[1]):
                continue
            x = div.inputs[0]
            add_i = cons.get(erf.outputs[0], [])
            add = self.nodes.get(add_i[0]) if len(add_i) == 1 else None
            if add is None or add.op_type != "Add" or not scalar(other(add, erf.outputs[0]) or ""):
                continue
            mul_i = cons.get(add.outputs[0], []) if self._single_use(add.outputs[0], cons) else []
            mul = self.nodes.get(mul_i[0]) if mul_i else None
            if mul is None or mul.op_type != "Mul":
                continue
            m_other = other(mul, add.outputs[0])
            gone = [div, erf, add, mul]
            if m_other == x:  # form 1: the last Mul scales by 0.5
                last_i = cons.get(mul.outputs[0], [])
                last = self.nodes.get(last_i[0]) if len(last_i) == 1 else None
                if last is None or last.op_type != "Mul" or mul.outputs[0] in self.outputs:
                    continue
                if not scalar(other(last, mul.outputs[0]) or ""):
                    continue
                gone.append(last)
                out = last.outputs[0]
            else:  # form 2: Mul(x, 0.5) is the Mul's other input
                half = node(m_other or "", "Mul")
                if half is None or x not in half.inputs or not scalar(other(half, x) or ""):
                    continue
                gone.append(half)
                out = mul.outputs[0]
            self._fuse(gone, cons, prods, erf.name + "/gelu", "Gelu", [x], [out], erf.orig)

    def quick_gelu_fusion(self) -> None:
        """Level 2, ``QuickGeluFusion``: Swish / SiLU written as ``Mul(x, Sigmoid(x))`` (tf2onnx,
        Keras), optionally ``Mul(x, Sigmoid(Mul(x, alpha)))``, becomes one ``QuickGelu`` (new
        node). The Sigmoid's output is never materialized, and ``QuickGelu`` is registered
        without ``MayInplace``: where ``x`` was alive with two tensors of its size, one new one
        is written (ORT 1.32's dump of Keras EfficientNetB0: 49 QuickGelu, 16 Sigmoids left,
        the SE gates)."""
        cons, prods = self.consumers(), self.producers()

        def scalar(name: str) -> bool:
            t = self.t(name)
            return t is not None and t.kind == "initializer" and _is_scalar(t)

        for idx in self._scan("Sigmoid"):
            sig = self.nodes.get(idx)
            if sig is None or sig.op_type != "Sigmoid" or sig.domain not in ("", "ai.onnx"):
                continue
            if not sig.inputs or not self._single_use(sig.outputs[0], cons):
                continue
            mul = self.nodes[cons[sig.outputs[0]][0]]
            if mul.op_type != "Mul" or mul.domain not in ("", "ai.onnx") or len(mul.inputs) != 2:
                continue
            x, gone = sig.inputs[0], [sig, mul]
            scale = self.nodes.get(prods.get(x, -1))
            other = mul.inputs[1] if mul.inputs[0] == sig.outputs[0] else mul.inputs[0]
            if other != x:  # the alpha form: Sigmoid(Mul(x, alpha)) * x
                if scale is None or scale.op_type != "Mul" or scale.domain not in ("", "ai.onnx"):
                    continue
                if other not in scale.inputs or not self._single_use(x, cons):
                    continue
                if not scalar(scale.inputs[1] if scale.inputs[0] == other else scale.inputs[0]):
                    continue
                gone.append(scale)
                x = other
            t = self.t(x)
            if t is None or t.elem_type != FLOAT:
                continue
            self._fuse(gone, cons, prods, sig.name + "/quick_gelu", "QuickGelu", [x],
                       [mul.outputs[0]], sig.orig)  # fmt: skip

    def bias_gelu_fusion(self) -> None:
        """Level 2, ``BiasGeluFusion`` (after GeluFusion): ``Gelu(Add(x, bias))`` with a 1-D
        constant bias read only by the Gelu becomes one ``BiasGelu``: the sum is not
        materialized (ORT's dump of ViT-base with a symbolic batch, whose MatMul + Add stay
        apart: 12 BiasGelu)."""
        cons, prods = self.consumers(), self.producers()
        for idx in self._scan("Gelu"):
            n = self.nodes.get(idx)
            if n is None or n.op_type != "Gelu" or n.domain != MS_DOMAIN or not n.inputs:
                continue
            add = self.nodes.get(prods.get(n.inputs[0], -1))
            if add is None or add.op_type != "Add" or add.domain not in ("", "ai.onnx"):
                continue
            if not self._single_use(n.inputs[0], cons) or len(add.inputs) != 2:
                continue
            consts = [i for i in add.inputs if self._is_const(i)]
            t = self.t(consts[0]) if len(consts) == 1 else None
            if t is None or t.shape is None or len(t.shape) != 1:
                continue
            x = next(i for i in add.inputs if i != consts[0])
            self._fuse([n, add], cons, prods, n.name + "/bias", "BiasGelu", [x, consts[0]],
                       list(n.outputs), n.orig)  # fmt: skip

    def matmul_scale_fusion(self) -> None:
        """Level 2, ``MatMulScaleFusion`` (``matmul_scale_fusion.cc``): a MatMul input scaled
        by a scalar constant (Mul or Div read only by the MatMul) is read unscaled, and a
        MatMul whose one reader is such a Mul or Div writes that node's output itself, by
        one ``FusedMatMul`` (alpha): the scaled copies are not materialized. The trailing
        form is attention's ``(q @ k^T) * scale``: one [batch, heads, n, n] score tensor
        less when the scale is a constant (docs/estimate.md, "MatMulScaleFusion")."""
        cons, prods = self.consumers(), self.producers()
        for idx in self._scan("MatMul"):
            n = self.nodes.get(idx)
            if n is None or n.op_type != "MatMul" or n.domain not in ("", "ai.onnx"):
                continue
            ins, gone = list(n.inputs[:2]), [n]
            for k, name in enumerate(ins):
                p = self.nodes.get(prods.get(name, -1))
                if p is None or not self._single_use(name, cons):
                    continue
                x = self._scaled_by_const(p)
                if x is not None:
                    ins[k] = x
                    del self.nodes[p.idx]
                    gone.append(p)
            outs = list(n.outputs)
            if outs and self._single_use(outs[0], cons):
                c = self.nodes.get(cons[outs[0]][0])
                if c is not None and self._scaled_by_const(c) == outs[0]:
                    del self.nodes[c.idx]
                    gone.append(c)
                    outs = list(c.outputs[:1])
            if len(gone) == 1:
                continue
            self._fuse(gone, cons, prods, n.name + "/scaled", "FusedMatMul", ins, outs, n.orig)

    def _scaled_by_const(self, p: _Node) -> str | None:
        """The tensor ``p`` scales when ``p`` is ``x * s``, ``s * x`` or ``x / s`` by a
        one-element constant of no higher rank than ``x`` (a scale that broadcasts ``x`` up is
        not fused: ``GetScalarConstantInitializer``), else None."""
        if p.op_type not in ("Mul", "Div") or p.domain not in ("", "ai.onnx"):
            return None
        if len(p.inputs) != 2:
            return None
        for j, other in ((0, 1), (1, 0)):
            if p.op_type == "Div" and other == 0:
                continue  # only x / s scales x
            c, x = self.t(p.inputs[other]), self.t(p.inputs[j])
            if c is None or c.kind != "initializer" or not _is_scalar(c):
                continue
            known = x is not None and x.shape is not None and c.shape is not None
            if known and len(c.shape) > len(x.shape):  # type: ignore[union-attr,arg-type]
                continue
            return p.inputs[j]
        return None

    # ------------------------------------------------------------------ level 3: NCHWc
    def nchwc(self) -> None:
        b = self.block
        args: dict[str, _Arg] = {}  # original tensor -> its NCHWc form
        reordered: dict[str, str] = {}  # NCHW tensor -> its ReorderInput output
        orig_cons = self.consumers()
        # a node is converted before any reader of its output (DEFAULT order below), so the
        # readers of an original tensor are still those of the unconverted graph (``_uses``)
        self._orig_cons = orig_cons
        prod = self.producers()
        converted: set[int] = set()  # nodes whose output edges were removed
        counter = [0]

        def new_name(base: str) -> str:
            counter[0] += 1
            return f"{base}/nchwc_{counter[0]}"

        def make_arg(orig: str, node: _Node, channels: int,
                     origin: tuple | None = None) -> None:  # fmt: skip
            """CreateNchwcArgument: the node now writes a padded NCHWc tensor."""
            t = self.tensors[orig]
            name = new_name(orig)
            self.tensors[name] = _padded(t, name, b)
            uses = len(orig_cons.get(orig, [])) + (1 if orig in self.outputs else 0)
            args[orig] = _Arg(node, name, uses, uses, channels, origin or ((orig, 0),) * 4)
            node.outputs[0] = name

        def reorder_input(node: _Node) -> None:
            src = node.inputs[0]
            if src not in reordered:
                name = new_name(src)
                self.tensors[name] = _padded(self.tensors[src], name, b)
                reordered[src] = name
                read, attrs = src, {}
                tr = self._nhwc_transpose(src, prod, orig_cons)
                if tr is not None:  # ReorderInput reads the NHWC tensor (channels_last)
                    read, attrs = tr.inputs[0], {"channels_last": 1}
                    del self.nodes[tr.idx]
                    self._bump("NchwcTransposeInput")
                self.add(name + "/ReorderInput", "ReorderInput", NCHWC_DOMAIN, [read], [name],
                         attrs)  # fmt: skip
                self._bump("ReorderInput")
            node.inputs[0] = reordered[src]

        def use(orig: str) -> str:
            a = args[orig]
            a.remaining -= 1
            return a.name

        def all_edges_converted(n: _Node) -> bool:
            ps = [prod[i] for i in n.inputs if i and i in prod]
            return bool(n.inputs) and all(p in converted for p in ps)

        for idx in self.topo():
            n = self.nodes.get(idx)
            if n is None:
                continue
            std = n.domain in ("", "ai.onnx")
            op = n.op_type
            if (op == "Conv" and std) or (op == "FusedConv" and n.domain == MS_DOMAIN):
                self._conv(n, args, make_arg, reorder_input, use, converted)
            elif op in ("MaxPool", "AveragePool") and std:
                self._pool(n, args, make_arg, reorder_input, use, converted, need_nchwc=False)
            elif std and all_edges_converted(n):
                if op in ("Add", "Sum", "Mul"):
                    self._binary(n, args, make_arg, use, converted, add=op != "Mul")
                elif op == "Concat":
                    self._concat(n, args, make_arg, use, converted)
                elif op in NCHWC_ACTIVATIONS:
                    self._activation(n, args, make_arg, use, converted)
                elif op == "HardSigmoid":
                    if not self._hard_swish(n, args, use, converted):
                        self._activation(n, args, make_arg, use, converted)
                elif op == "BatchNormalization":
                    self._batchnorm(n, args, make_arg, use, converted)
                elif op in ("GlobalAveragePool", "GlobalMaxPool"):
                    self._pool(n, args, make_arg, reorder_input, use, converted, need_nchwc=True)
                elif op == "Resize":
                    self._resize(n, args, make_arg, use, converted)
            elif op == "Transpose" and std and all_edges_converted(n):
                self._transpose(n, args)
            elif op in NCHWC_MS_ELEMENTWISE and n.domain == MS_DOMAIN and all_edges_converted(n):
                self._elementwise(n, args, make_arg, use, converted)
        # Finalize: back to NCHW where a plain use remains. ORT walks an unordered_map keyed by
        # NodeArg pointers, so its numbering of these nodes changes from process to process
        # (measured: U-Net's PRIORITY_BASED order differs between runs); creation order here.
        for orig, a in args.items():
            if a.remaining > 0:
                self.add(orig + "/ReorderOutput", "ReorderOutput", NCHWC_DOMAIN, [a.name], [orig],
                         {"channels": a.channels})  # fmt: skip
                self._bump("ReorderOutput")

    def _conv(self, n: _Node, args: dict, make_arg: Any, reorder_input: Any, use: Any,
              converted: set[int]) -> None:  # fmt: skip
        w = self.t(n.inputs[1]) if len(n.inputs) > 1 else None
        if w is None or w.kind != "initializer" or w.elem_type != FLOAT:
            return
        ws = w.shape
        if ws is None or len(ws) != 4:
            return
        out_c, in_c = ws[0], ws[1]
        group = int(n.attrs.get("group", 1))
        b = self.block
        # the same eligibility as ort_weights.nchwc_filter_shape (ORT 1.32, optimized graph
        # dumped: C_in 12 -> 16 and 500 -> 504 padded, a 20-channel depthwise Conv converted
        # with C_out padded to 24; a grouped Conv with unaligned channels per group stays NCHW)
        reorder = in_c >= b or group > 1  # C_in < block (group 1): NCHW input read directly
        depthwise = in_c == 1 and out_c == group
        if group > 1 and not depthwise and (out_c % b or in_c % b or (out_c // group) % b):
            return
        if len(n.inputs) > 2 and n.inputs[2] and not self._is_const(n.inputs[2]):
            return
        self._to_nchwc(n, "Conv", out_c, args, make_arg, reorder_input if reorder else None, use,
                       converted)  # fmt: skip
        self._bump("NchwcConv")

    def _to_nchwc(self, n: _Node, op: str, channels: int, args: dict, make_arg: Any,
                  reorder_input: Any, use: Any, converted: set[int]) -> None:  # fmt: skip
        """Replace ``n`` by its NCHWc-domain twin reading the NCHWc form of its input (made by a
        ReorderInput unless the producer already writes it; ``reorder_input=None``: the NCHW
        input is read as is) and writing a padded NCHWc output."""
        src, out = n.inputs[0], n.outputs[0]
        # NchwcArgument::Shape: the output's own dims, or ConvPoolShapeInference's from an
        # input that already was an NCHWc argument (not one made by ReorderInput)
        origin = None
        if src in args and reorder_input is not None:
            origin = self._conv_pool_origin(n, args[src].origin, out)
        del self.nodes[n.idx]
        nn = self.add(n.name + "_nchwc", op, NCHWC_DOMAIN, list(n.inputs), list(n.outputs),
                      dict(n.attrs), n.orig)  # fmt: skip
        if reorder_input is not None:
            if nn.inputs[0] in args:
                nn.inputs[0] = use(nn.inputs[0])
            else:
                reorder_input(nn)
        converted.add(n.idx)
        make_arg(out, nn, channels, origin)

    def _conv_pool_origin(self, n: _Node, o_in: tuple, out: str) -> tuple:
        """ConvPoolShapeInference (``nchwc_transformer.cc``): the batch dim is the input's; a
        spatial dim is the input's, halved once more per stride 2, when the padding keeps it
        (``pads + 1 == kernel`` or ``SAME``) at dilation 1 and stride 1 or 2."""
        own = [(out, 0)] * 4
        own[0] = o_in[0]
        a = n.attrs
        pads, strides, dil = a.get("pads"), a.get("strides"), a.get("dilations")
        if (pads is not None and len(pads) != 4) or (strides is not None and len(strides) != 2):
            return tuple(own)
        if dil is not None and len(dil) != 2:
            return tuple(own)
        if n.op_type in ("Conv", "FusedConv"):
            w = self.t(n.inputs[1]) if len(n.inputs) > 1 else None
            kernel = list(w.shape[2:]) if w is not None and w.shape is not None else None
        else:
            kernel = list(a.get("kernel_shape", [])) or None
        if kernel is None or len(kernel) != 2:
            return tuple(own)
        auto = a.get("auto_pad", "NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        if auto not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
            return tuple(own)
        same = auto in ("SAME_UPPER", "SAME_LOWER")
        if auto != "NOTSET":
            pads = None
        for i in range(2):
            if dil is not None and dil[i] != 1:
                continue
            stride = strides[i] if strides is not None else 1
            if stride not in (1, 2):
                continue
            padding = pads[i] + pads[i + 2] if pads is not None else 0
            if padding + 1 == kernel[i] or same:
                name, shift = o_in[2 + i]
                own[2 + i] = (name, shift + stride - 1)
        return tuple(own)

    def _pool(self, n: _Node, args: dict, make_arg: Any, reorder_input: Any, use: Any,
              converted: set[int], *, need_nchwc: bool) -> None:  # fmt: skip
        if len([o for o in n.outputs if o]) > 1:
            return
        x = self.t(n.inputs[0])
        if x is None or x.elem_type != FLOAT or x.shape is None or len(x.shape) != 4:
            return
        c = x.shape[1]
        if c % self.block or (need_nchwc and n.inputs[0] not in args):
            return
        self._to_nchwc(n, n.op_type, c, args, make_arg, reorder_input, use, converted)
        self._bump("NchwcPool")

    def _binary(self, n: _Node, args: dict, make_arg: Any, use: Any, converted: set[int],
                *, add: bool) -> None:  # fmt: skip
        ins = [i for i in n.inputs if i]
        if (
            not add
            and len(ins) == 2
            and ins[0] in args
            and self._channel_const(ins[1], args[ins[0]])
        ):
            # Mul by a per-channel constant: a depthwise 1x1 NCHWc Conv ("mul_scale"; checked
            # against ORT 1.32's optimized DenseNet-121)
            a = args[ins[0]]
            del self.nodes[n.idx]
            nn = self.add(n.name + "_mul_nchwc", "Conv", NCHWC_DOMAIN, [use(ins[0])],
                          list(n.outputs), {"group": a.channels}, n.orig)  # fmt: skip
            converted.add(n.idx)
            make_arg(n.outputs[0], nn, a.channels, (a.origin[0], (n.outputs[0], 0), *a.origin[2:]))
            self._bump("NchwcMulScale")
            return
        if not ins or not all(i in args for i in ins):
            return
        a0 = args[ins[0]]
        if any(args[i].channels != a0.channels for i in ins[1:]):
            return
        if not all(self._dims_equal(ins[0], i, args) for i in ins[1:]):
            if add:
                self._reshaped_add(n, ins, args, make_arg, use, converted)
            return
        origin = a0.origin
        n.inputs = [use(i) for i in ins]
        converted.add(n.idx)
        if add and len(ins) == 2:
            for k in (0, 1):
                a = args[ins[k]]
                cn = a.node
                if (
                    cn.op_type == "Conv"
                    and cn.domain == NCHWC_DOMAIN
                    and len(cn.inputs) < 4
                    and a.starting == 1
                    and "activation" not in cn.attrs
                ):
                    cn.inputs = (cn.inputs + ["", ""])[:3] + [args[ins[k ^ 1]].node.outputs[0]]
                    del self.nodes[n.idx]
                    args[n.outputs[0]] = _Arg(
                        cn, cn.outputs[0], *self._uses(n), a.channels, a.origin
                    )
                    self._bump("NchwcConvSum")
                    return
        make_arg(n.outputs[0], n, a0.channels, origin)

    def _dims_equal(self, x: str, y: str, args: dict) -> bool:
        """TransformBinary's shape test, per dim: derived from the same tensor (the NCHWc
        arguments' origins), else equal in the shapes ORT holds (values, or dim names)."""
        sx, sy = self.tensors[x].sym_shape, self.tensors[y].sym_shape
        ox, oy = args[x].origin, args[y].origin
        for d in range(4):
            if d < len(ox) and d < len(oy) and ox[d] == oy[d]:
                continue
            if sx is None or sy is None or len(sx) != 4 or len(sy) != 4:
                return False
            v = sx[d]
            if v != sy[d] or v is None or v == "" or (isinstance(v, int) and v <= 0):
                return False
        return True

    def _reshaped_add(self, n: _Node, ins: list[str], args: dict, make_arg: Any, use: Any,
                      converted: set[int]) -> None:  # fmt: skip
        """TransformBinary's other branch: an Add/Sum of NCHWc tensors with the same channels
        whose shapes ORT cannot prove equal (tf2onnx declares a fresh ``unk__N`` batch per
        tensor) reads them through ``Reshape`` to ``(N, C/b, H, W, b)`` and writes a plain
        Add output, reshaped back as the NCHWc tensor: no ReorderOutput / ReorderInput around
        it, and no ``Sum`` fusion into the Conv (ORT 1.32's dump of Keras EfficientNetB0: all
        9 residual Adds so)."""
        b = self.block
        first = self.tensors[args[ins[0]].name]
        shape = first.shape if first.shape is not None and len(first.shape) == 4 else None
        sym = first.sym_shape if first.sym_shape is not None and len(first.sym_shape) == 4 else None

        def five(s: Any) -> Any:
            if s is None or not isinstance(s[1], int):
                return None
            return (s[0], s[1] // b, s[2], s[3], b)

        def t5(name: str) -> TensorInfo:
            return TensorInfo(name=name, kind="activation", elem_type=first.elem_type or FLOAT,
                              sym_shape=five(sym), shape=five(shape))  # fmt: skip

        reads = []
        for i in ins:
            src = use(i)
            name = f"{src}/reshape"
            self.tensors[name] = t5(name)
            self.add(name + "/Reshape", "Reshape", "", [src], [name])
            reads.append(name)
        n.inputs = reads
        out = f"{n.outputs[0]}/reshape"
        self.tensors[out] = t5(out)
        orig_out = n.outputs[0]
        n.outputs[0] = out
        back = self.add(orig_out + "/Reshape", "Reshape", "", [out], [orig_out])
        converted.add(n.idx)
        make_arg(orig_out, back, args[ins[0]].channels)
        self._bump("NchwcReshapedAdd")

    def _resize(self, n: _Node, args: dict, make_arg: Any, use: Any, converted: set[int]) -> None:
        """TransformResize: a nearest ``asymmetric``/``floor`` Resize of an NCHWc tensor by
        integer H/W factors (N, C kept) becomes an NCHWc ``Upsample``, so the chain stays
        blocked and a following Add fuses into the lateral Conv as its ``Sum`` (checked against
        ORT 1.32's optimized ``fpn-800``: the three top-down Resizes are NCHWc Upsamples, each
        Add a Conv's Sum input). The factors are read from the shapes (the estimator reads no
        constant values). A ``linear`` Resize becomes one too under ``half_pixel``,
        ``asymmetric`` or ``align_corners`` (not ``pytorch_half_pixel``), channels aligned or
        not, its output padded to the block: measured with ORT 1.32's dumps over modes, factors
        2/3/16 and 16/21 channels (``test_linear_resize_becomes_an_nchwc_upsample_like_ort``);
        ``deeplab-800``'s ×16 bilinear head is one (a 32-channel 800² output at block 16).
        Cubic and other modes stay NCHW ``Resize``."""
        src = n.inputs[0]
        x, y = self.t(src), self.t(n.outputs[0] if n.outputs else "")
        if src not in args or x is None or y is None or x.shape is None or y.shape is None:
            return
        if len(x.shape) != 4 or x.shape[:2] != y.shape[:2] or x.elem_type != FLOAT:
            return
        if any(a == 0 or b % a for a, b in zip(x.shape[2:], y.shape[2:], strict=True)):
            return
        attr = {k: v.decode() if isinstance(v, bytes) else v for k, v in n.attrs.items()}
        mode = attr.get("mode", "nearest")
        ctm = attr.get("coordinate_transformation_mode", "half_pixel")
        if mode == "nearest":
            if (ctm, attr.get("nearest_mode", "round_prefer_floor")) != ("asymmetric", "floor"):
                return
        elif mode != "linear" or ctm not in LINEAR_UPSAMPLE_MODES:
            return
        a = args[src]
        del self.nodes[n.idx]
        nn = self.add(n.name + "_nchwc", "Upsample", NCHWC_DOMAIN, [use(src)], list(n.outputs),
                      {"mode": mode}, n.orig)  # fmt: skip
        converted.add(n.idx)
        make_arg(n.outputs[0], nn, a.channels)
        self._bump("NchwcUpsample")

    def _channel_const(self, name: str, a: _Arg) -> bool:
        t = self.t(name)
        if t is None or t.kind != "initializer" or t.elem_type != FLOAT or t.shape is None:
            return False
        return t.shape in ((a.channels, 1, 1), (1, a.channels, 1, 1))

    def _uses(self, n: _Node) -> tuple[int, int]:
        cons = self._orig_cons
        u = len(cons.get(n.outputs[0], [])) + (1 if n.outputs[0] in self.outputs else 0)
        return u, u

    def _concat(self, n: _Node, args: dict, make_arg: Any, use: Any, converted: set[int]) -> None:
        ins = [i for i in n.inputs if i]
        if not ins or not all(i in args for i in ins):
            return
        if int(n.attrs.get("axis", 0)) != 1:
            return
        if any(args[i].channels % self.block for i in ins):
            return
        n.inputs = [use(i) for i in ins]
        converted.add(n.idx)
        o = args[ins[0]].origin
        make_arg(
            n.outputs[0], n, sum(args[i].channels for i in ins), (o[0], (n.outputs[0], 0), *o[2:])
        )

    def _activation(self, n: _Node, args: dict, make_arg: Any, use: Any,
                    converted: set[int]) -> None:  # fmt: skip
        src = n.inputs[0]
        if src not in args:
            return
        a = args[src]
        n.inputs[0] = use(src)
        converted.add(n.idx)
        cn = a.node
        if (
            cn.op_type == "Conv"
            and cn.domain == NCHWC_DOMAIN
            and a.starting == 1
            and "activation" not in cn.attrs
        ):
            cn.attrs["activation"] = n.op_type
            del self.nodes[n.idx]
            args[n.outputs[0]] = _Arg(cn, cn.outputs[0], *self._uses(n), a.channels, a.origin)
            self._bump("NchwcConvActivation")
            return
        make_arg(n.outputs[0], n, a.channels, a.origin)

    def _hard_swish(self, n: _Node, args: dict, use: Any, converted: set[int]) -> bool:
        """HardSwish, inlined at load (``ort_inline``) or written as the pair:
        ``x * HardSigmoid(x, 1/6, 0.5)`` right after an activation-free NCHWc Conv whose
        output nothing else reads becomes the Conv's ``HardSwish`` activation (ORT 1.32 dumps
        at level all: inlined or written as the pair, either Mul operand order; not with
        another alpha, another reader of ``x``, a Conv that already has an activation, or
        the Mul's output a graph output). Otherwise the HardSigmoid runs on the blocked tensor
        like Relu (``_activation``) and the Mul of two NCHWc tensors follows (``_binary``);
        ORT's dumps have no ReorderOutput between them. True when fused."""
        src = n.inputs[0] if n.inputs else ""
        a = args.get(src)
        if a is None or n.outputs[0] in self.outputs:
            return False
        alpha, beta = float(n.attrs.get("alpha", 0.2)), float(n.attrs.get("beta", 0.5))
        if abs(alpha - 1 / 6) > 1e-6 or abs(beta - 0.5) > 1e-6:
            return False
        cn = a.node
        if cn.op_type != "Conv" or cn.domain != NCHWC_DOMAIN or "activation" in cn.attrs:
            return False
        readers = self._orig_cons.get(n.outputs[0], [])
        mul = self.nodes.get(readers[0]) if len(readers) == 1 else None
        if (
            mul is None
            or mul.op_type != "Mul"
            or mul.domain not in ("", "ai.onnx")
            or sorted(mul.inputs) != sorted([src, n.outputs[0]])
            or mul.outputs[0] in self.outputs
            or a.starting != 2
            or sorted(self._orig_cons.get(src, [])) != sorted([n.idx, mul.idx])
        ):
            return False
        use(src)
        use(src)
        cn.attrs["activation"] = "HardSwish"
        converted.update((n.idx, mul.idx))
        del self.nodes[n.idx]
        del self.nodes[mul.idx]
        args[mul.outputs[0]] = _Arg(cn, cn.outputs[0], *self._uses(mul), a.channels, a.origin)
        self._bump("NchwcConvHardSwish")
        return True

    def _nhwc_transpose(self, src: str, prod: dict[str, int], cons: dict) -> _Node | None:
        """The ``Transpose(perm=0,3,1,2)`` writing ``src`` for nothing but this ReorderInput,
        which then reads the NHWC tensor itself (``channels_last``; ORT 1.32's dumps of
        tf2onnx graphs: the NHWC input's Transpose is gone when its Conv is blocked)."""
        tr = self.nodes.get(prod.get(src, -1))
        if tr is None or tr.op_type != "Transpose" or tr.domain not in ("", "ai.onnx"):
            return None
        if list(tr.attrs.get("perm", [])) != [0, 3, 1, 2] or not tr.inputs:
            return None
        if src in self.outputs or len(cons.get(src, [])) != 1:
            return None
        return tr

    def _transpose(self, n: _Node, args: dict) -> None:
        """TransformTranspose: an NCHWc tensor transposed to NHWC (``perm=0,2,3,1``) is one
        ``ReorderOutput`` with ``channels_last`` (no NCHW copy in between)."""
        src = n.inputs[0] if n.inputs else ""
        if src not in args or list(n.attrs.get("perm", [])) != [0, 2, 3, 1]:
            return
        a = args[src]
        a.remaining -= 1
        del self.nodes[n.idx]
        self.add(n.name + "/ReorderOutput", "ReorderOutput", NCHWC_DOMAIN, [a.name],
                 list(n.outputs), {"channels": a.channels, "channels_last": 1})  # fmt: skip
        self._bump("NchwcTransposeOutput")

    def _elementwise(self, n: _Node, args: dict, make_arg: Any, use: Any,
                     converted: set[int]) -> None:  # fmt: skip
        """An elementwise op that reads the NCHWc tensor as it is and is never fused into the
        Conv: ``QuickGelu`` (ORT 1.32's dumps: ``Conv -> QuickGelu`` stays two nodes, both
        blocked, no Reorder between) and the Erf ``Gelu`` (session 11: graphsurgeon's
        ``Conv -> Gelu -> Resize`` runs ``Gelu`` and an NCHWc ``Upsample`` on the blocked
        tensor, one ``ReorderOutput`` after them)."""
        src = n.inputs[0] if n.inputs else ""
        if src not in args:
            return
        a = args[src]
        n.inputs[0] = use(src)
        converted.add(n.idx)
        make_arg(n.outputs[0], n, a.channels, a.origin)
        self._bump("NchwcElementwise")

    def _batchnorm(self, n: _Node, args: dict, make_arg: Any, use: Any,
                   converted: set[int]) -> None:  # fmt: skip
        src = n.inputs[0]
        if src not in args or len([o for o in n.outputs if o]) > 1:
            return
        if not all(self._is_const(i) for i in n.inputs[1:5]):
            return
        a = args[src]
        del self.nodes[n.idx]
        nn = self.add(n.name + "_bn_nchwc", "Conv", NCHWC_DOMAIN, [use(src)], list(n.outputs),
                      {"group": a.channels}, n.orig)  # fmt: skip
        converted.add(n.idx)
        make_arg(n.outputs[0], nn, a.channels, a.origin)
        self._bump("NchwcBatchNorm")

    # ------------------------------------------------------------------ result
    def build(self) -> GraphInfo:
        """Renumber compactly in ORT index order and rebuild producers/consumers."""
        nodes = [self.nodes[i] for i in sorted(self.nodes)]
        tensors: dict[str, TensorInfo] = {}

        def info(name: str) -> TensorInfo:
            t = tensors.get(name)
            if t is None:
                src = self.tensors[name]
                t = _copy(src)
                tensors[name] = t
            return t

        for name in list(self.g.inputs) + list(self.g.initializers):
            info(name)
        out_nodes: list[NodeInfo] = []
        for k, n in enumerate(nodes):
            orig = n.orig
            ni = NodeInfo(
                index=k,
                name=n.name,
                op_type=n.op_type,
                domain=n.domain,
                inputs=list(n.inputs),
                outputs=list(n.outputs),
                implicit_inputs=list(orig.implicit_inputs) if orig is not None else [],
                subgraphs=list(orig.subgraphs) if orig is not None else [],
                attrs=dict(n.attrs),
            )
            out_nodes.append(ni)
            for i in ni.inputs + ni.implicit_inputs:
                if i:
                    info(i).consumers.append(k)
            for o in ni.outputs:
                if o:
                    info(o).producer = k
        for o in self.g.outputs:
            if o in tensors:
                tensors[o].is_output = True
        return GraphInfo(
            nodes=out_nodes,
            tensors=tensors,
            inputs=list(self.g.inputs),
            outputs=list(self.g.outputs),
            initializers=[i for i in self.g.initializers if i in tensors],
            unknown=[u for u in self.g.unknown if u in tensors],
            declared_unk=self.g.declared_unk,
        )


@dataclass
class _Arg:
    node: _Node  # the NCHWc node writing it
    name: str  # the NCHWc tensor
    starting: int  # uses of the original tensor when converted
    remaining: int  # uses still wanting NCHW (ReorderOutput if > 0 at the end)
    channels: int  # logical (unpadded) channels
    # per dim, the tensor ORT's NchwcArgument::Shape says it derives from (IsDimEqual)
    origin: tuple[tuple[str, int], ...] = ()  # (tensor, times halved by a stride 2)


def _copy(t: TensorInfo) -> TensorInfo:
    return TensorInfo(
        name=t.name, kind=t.kind, elem_type=t.elem_type, sym_shape=t.sym_shape, shape=t.shape,
        producer=None, consumers=[], is_output=False, external=t.external,
        init_bytes=t.init_bytes, folded=t.folded, small=t.small,
    )  # fmt: skip


def _reshaped(t: TensorInfo, name: str, shape: tuple[int, ...]) -> TensorInfo:
    return TensorInfo(
        name=name, kind="activation", elem_type=t.elem_type, sym_shape=shape, shape=shape
    )


def _same_sym(a: TensorInfo, b: TensorInfo) -> bool:
    """Equal shapes as ORT's optimizer compares them at session creation: equal values or
    equal named dims (``unk__N`` names are ONNX inference's, unnamed to ORT)."""
    sa, sb = a.sym_shape, b.sym_shape
    if sa is None or sb is None or len(sa) != len(sb):
        return False
    for x, y in zip(sa, sb, strict=True):
        if isinstance(x, int) and isinstance(y, int) and x == y and x >= 0:
            continue
        if isinstance(x, str) and x == y and x and not x.startswith("unk__"):
            continue
        return False
    return True


#: ops of the small shape computations whose equal copies ORT's CSE merges (``_cse_key``)
_CSE_OPS = frozenset(
    {"Shape", "Size", "Gather", "Unsqueeze", "Squeeze", "Concat", "Cast", "Slice", "Add",
     "Sub", "Mul", "Div", "Floor", "Ceil", "Mod", "Min", "Max"}
)  # fmt: skip


def _same_dim(x: Any, y: Any) -> bool:
    """One dim as ``_same_sym`` compares them."""
    if isinstance(x, int) and isinstance(y, int):
        return x == y and x >= 0
    return isinstance(x, str) and x == y and bool(x) and not x.startswith("unk__")


def _is_scalar(t: TensorInfo) -> bool:
    return t.shape is not None and all(d == 1 for d in t.shape)


def _padded(t: TensorInfo, name: str, block: int) -> TensorInfo:
    """The NCHWc form of ``t``: channels rounded up to the block (zero padded by MLAS)."""

    def pad(shape: Any) -> Any:
        if shape is None or len(shape) < 2 or not isinstance(shape[1], int):
            return shape
        s = list(shape)
        s[1] = -(-s[1] // block) * block
        return tuple(s)

    return TensorInfo(
        name=name, kind="activation", elem_type=t.elem_type or FLOAT,
        sym_shape=pad(t.sym_shape), shape=pad(t.shape),
    )  # fmt: skip


def optimize(
    g: GraphInfo, *, level: str = "all", block: int | None = None, ep: str = "cpu"
) -> OptimizedGraph:
    """Return the graph ORT CPU runs at graph optimization ``level`` (``all`` | ``extended``
    | ``basic`` | ``disable``). ``block``: NCHWc block size (default: this host's).
    ``ep="cuda"``: the graph the CUDA EP runs (the same level 1 and 2 transformers, with the
    CUDA kernels' activation fusions; no NCHWc, which is CPU-only)."""
    b = nchwc_block_size() if block is None else block
    if ep != "cpu":
        level = "extended" if level == "all" else level
    rw = _Rewriter(g, b)
    if level in ("basic", "extended", "all"):
        rw.eliminate_dropout()
        rw.pad_fusion()
        rw.conv_const_fusions()
        rw.merge_transposes()
        rw.slices_to_split()
        rw.reshape_fusion()
        rw.matmul_add_fusion()
    if level in ("extended", "all"):
        rw.activation_fusions(ep)
        rw.gelu_fusion()
        rw.skip_layer_norm_fusion()
        rw.bias_gelu_fusion()
        rw.quick_gelu_fusion()
        rw.matmul_scale_fusion()
    if level == "all" and b > 1:
        rw.nchwc()
    return OptimizedGraph(rw.build(), b if level == "all" else 1, dict(rw.counts))
