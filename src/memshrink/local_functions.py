"""Inline model-local functions in an ``onnx_ir.Model``, in place (the ``inline-functions``
pass and the estimator's view of a model that calls functions share this one inliner).

ONNX's function semantics, exactly: attribute references take the call's attribute, else the
function's default, else the attribute is dropped (the op's own default); absent optional
inputs stay absent; nested calls and calls in If / Loop / Scan bodies (also those inside
function bodies) are inlined. Weights are never read: initializers are not touched and a body's
tensor attribute is shared by its copies. Left as calls (counted in ``InlineReport.skipped``):
functions in a call cycle; a function importing another version of a domain than the model
where one of its ops is defined differently at the model's version (its meaning would change;
ONNX's checker refuses such a function too); a call passing a graph-valued attribute; a
function named like an op of its domain (runtimes run the op). Malformed functions and calls
(recursion, a call of an undefined function, an attribute of the wrong type) are refused
(``memshrink.local_function_checks``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import onnx
import onnx_ir as ir

from memshrink.errors import ModelLoadError, PassError
from memshrink.irgraphs import graphs
from memshrink.local_function_checks import check_functions

FunctionId = tuple[str, str, str]
_STANDARD = ("", "ai.onnx.ml", "ai.onnx.preview.training")


def _dom(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


def _subgraphs(node: ir.Node) -> Iterable[ir.Graph]:
    for attr in node.attributes.values():
        if attr.is_ref():
            continue
        if attr.type == ir.AttributeType.GRAPH:
            yield attr.as_graph()
        elif attr.type == ir.AttributeType.GRAPHS:
            yield from attr.as_graphs()


def _calls(nodes: Iterable[ir.Node]) -> Iterable[ir.Node]:
    """Every node, recursively into subgraphs."""
    for node in nodes:
        yield node
        for sub in _subgraphs(node):
            yield from _calls(sub)


def _in_cycle(functions: Mapping[FunctionId, ir.Function]) -> set[FunctionId]:
    """Functions that reach themselves through calls (ONNX forbids it; never inlined)."""
    deps = {
        fid: {n.op_identifier() for n in _calls(f)} & set(functions) for fid, f in functions.items()
    }
    cyclic: set[FunctionId] = set()
    for start in deps:
        seen: set[FunctionId] = set()
        todo = list(deps[start])
        while todo:
            fid = todo.pop()
            if fid == start:
                cyclic.add(start)
                break
            if fid not in seen:
                seen.add(fid)
                todo.extend(deps.get(fid, ()))
    return cyclic


def _opset_conflict(
    fn: ir.Function, model_opsets: Mapping[str, int], functions: Mapping[FunctionId, ir.Function]
) -> str | None:
    """Why the body would mean something else at the model's opsets, or None when it would not."""
    model = {_dom(d): v for d, v in model_opsets.items()}
    for domain, version in fn.opset_imports.items():
        d = _dom(domain)
        theirs = model.get(d)
        if theirs is None or theirs == version:
            continue
        ops = {
            n.op_type
            for n in _calls(fn)
            if _dom(n.domain) == d and n.op_identifier() not in functions
        }
        for op in sorted(ops):
            if d not in _STANDARD:
                return f"imports {d} {version}, the model {theirs}"
            try:
                mine = onnx.defs.get_schema(op, version, d).since_version
                other = onnx.defs.get_schema(op, theirs, d).since_version
            except onnx.defs.SchemaError:
                return f"{op} has no schema at {d or 'ai.onnx'} {version} or {theirs}"
            if mine != other:
                return f"{op} differs between {d or 'ai.onnx'} {version} and {theirs}"
    return None


class _Inliner:
    """Inlines calls top-down into graphs (never into function bodies: a call's attributes
    are concrete there, so every reference resolves at the one clone)."""

    def __init__(self, model: ir.Model, skip: Mapping[FunctionId, str]) -> None:
        self.functions = model.functions
        self.skip = skip
        self.values: set[str] = set()
        self.nodes: set[str] = set()
        for graph in graphs(model):  # every name of every (sub)graph: SSA across scopes
            self.values.update(v.name for v in graph.inputs if v.name)
            self.values.update(graph.initializers)
            for node in graph:
                if node.name:
                    self.nodes.add(node.name)
                self.values.update(v.name for v in node.outputs if v.name)
        self.inlined: Counter[FunctionId] = Counter()
        self.skipped: Counter[str] = Counter()
        self.nodes_added = 0
        self.identities = 0

    def graph(self, graph: ir.Graph) -> None:
        for node in list(graph):
            self._visit(graph, node)

    def _visit(self, graph: ir.Graph, node: ir.Node) -> None:
        fid = node.op_identifier()
        fn = self.functions.get(fid)
        if fn is not None and fid not in self.skip:
            reason = self._call_problem(node, fn)
            if reason is None:
                for new in self._instantiate(graph, node, fn):
                    self._visit(graph, new)
                return
            self.skipped[reason] += 1
        elif fn is not None:
            self.skipped[self.skip[fid]] += 1
        for sub in _subgraphs(node):
            self.graph(sub)

    @staticmethod
    def _call_problem(node: ir.Node, fn: ir.Function) -> str | None:
        if len(node.inputs) > len(fn.inputs) or len(node.outputs) > len(fn.outputs):
            raise ModelLoadError(
                f"node {node.name!r} calls {fn.domain}.{fn.name} with {len(node.inputs)} inputs / "
                f"{len(node.outputs)} outputs; the function has {len(fn.inputs)} / "
                f"{len(fn.outputs)}"
            )
        graph_attr = (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
        if any(a.type in graph_attr for a in node.attributes.values()):
            return "a call passes a graph-valued attribute"
        return None

    def _unique(self, used: set[str], prefix: str, name: str) -> str:
        base = f"{prefix}/{name}"
        cand, k = base, 1
        while cand in used:
            k += 1
            cand = f"{base}_{k}"
        used.add(cand)
        return cand

    def _instantiate(self, graph: ir.Graph, call: ir.Node, fn: ir.Function) -> list[ir.Node]:
        fid = call.op_identifier()
        self.inlined[fid] += 1
        prefix = call.name or self._unique(self.nodes, fn.name, str(self.inlined[fid]))
        attrs = {k: a for k, a in fn.attributes.items() if a.value is not None}  # defaults
        attrs.update(call.attributes)
        for body_node in _calls(fn):
            for key, a in body_node.attributes.items():
                src = attrs.get(a.ref_attr_name or "") if a.is_ref() else None
                if src is not None and a.type != ir.AttributeType.UNDEFINED and src.type != a.type:
                    raise ModelLoadError(
                        f"node {call.name!r} gives {fn.domain}.{fn.name} attribute "
                        f"{a.ref_attr_name!r} as {src.type.name}; the body's {body_node.op_type} "
                        f"reads it as {key!r}, a {a.type.name}"
                    )
        vmap: dict[ir.Value, ir.Value | None] = {}
        for i, v in enumerate(fn.inputs):
            vmap[v] = call.inputs[i] if i < len(call.inputs) else None
        new_nodes = [self._clone(n, vmap, attrs, prefix) for n in fn]
        produced = {v for n in new_nodes for v in n.outputs}
        taken: set[ir.Value] = set()
        for old, inner in zip(call.outputs, fn.outputs, strict=False):
            new = vmap.get(inner)
            if new is None or new not in produced or new in taken:
                # an output that is an input (or another output) of the function: a fresh
                # value, so the caller's names and values stay distinct
                ident = ir.Node(
                    "", "Identity", [new], name=self._unique(self.nodes, prefix, "Identity")
                )
                new_nodes.append(ident)
                self.identities += 1
                new = ident.outputs[0]
            taken.add(new)
            if old.name:
                new.name = old.name
            elif not new.name:
                new.name = self._unique(self.values, prefix, "out")
            new.type = old.type if old.type is not None else new.type
            new.shape = old.shape if old.shape is not None else new.shape
            ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
        graph.insert_after(call, new_nodes)
        graph.remove(call, safe=True)
        self.nodes_added += len(new_nodes)
        return new_nodes

    def _clone(
        self,
        node: ir.Node,
        vmap: dict[ir.Value, ir.Value | None],
        attrs: Mapping[str, ir.Attr],
        prefix: str,
    ) -> ir.Node:
        inputs: list[ir.Value | None] = []
        for v in node.inputs:
            if v is not None and v not in vmap:
                raise ModelLoadError(
                    f"a function body's {node.op_type} node {node.name!r} reads {v.name!r}, "
                    "which the function never defines"
                )
            inputs.append(None if v is None else vmap[v])
        new_attrs = []
        for key, a in node.attributes.items():
            if a.is_ref():
                src = attrs.get(a.ref_attr_name or "")
                if src is not None:  # absent: dropped, the op's default applies
                    new_attrs.append(ir.Attr(key, src.type, src.value))
            elif a.type == ir.AttributeType.GRAPH:
                new_attrs.append(
                    ir.Attr(key, a.type, self._clone_graph(a.as_graph(), vmap, attrs, prefix))
                )
            elif a.type == ir.AttributeType.GRAPHS:
                gs = [self._clone_graph(g, vmap, attrs, prefix) for g in a.as_graphs()]
                new_attrs.append(ir.Attr(key, a.type, gs))
            else:  # the value (a tensor attribute too) is shared, never copied
                new_attrs.append(ir.Attr(key, a.type, a.value, doc_string=a.doc_string))
        outputs = [self._fresh(v, prefix) for v in node.outputs]
        vmap.update(zip(node.outputs, outputs, strict=True))
        return ir.Node(
            node.domain,
            node.op_type,
            inputs,
            new_attrs,
            overload=node.overload,
            outputs=outputs,
            version=node.version,
            name=self._unique(self.nodes, prefix, node.name or node.op_type),
            doc_string=node.doc_string,
            metadata_props=dict(node.metadata_props),
        )

    def _fresh(self, v: ir.Value, prefix: str, const: bool = False) -> ir.Value:
        # an unnamed body output (an optional output left out) stays unnamed
        name = self._unique(self.values, prefix, v.name) if v.name else ""
        return ir.Value(
            name=name,
            type=v.type,
            shape=v.shape.copy() if v.shape is not None else None,
            const_value=v.const_value if const else None,
        )

    def _clone_graph(
        self,
        g: ir.Graph,
        vmap: dict[ir.Value, ir.Value | None],
        attrs: Mapping[str, ir.Attr],
        prefix: str,
    ) -> ir.Graph:
        inputs = [self._fresh(v, prefix) for v in g.inputs]
        vmap.update(zip(g.inputs, inputs, strict=True))
        inits = [self._fresh(v, prefix, const=True) for v in g.initializers.values()]
        vmap.update(zip(g.initializers.values(), inits, strict=True))
        nodes = [self._clone(n, vmap, attrs, prefix) for n in g]
        outputs = []
        for v in g.outputs:
            out = vmap.get(v)
            if out is None:
                raise PassError(f"subgraph {g.name!r} in a function returns undefined {v.name!r}")
            outputs.append(out)
        return ir.Graph(
            inputs,
            outputs,
            nodes=nodes,
            initializers=inits,
            name=g.name,
            opset_imports=dict(g.opset_imports),
            doc_string=g.doc_string,
        )


def _used_domains(model: ir.Model) -> set[str]:
    used = {_dom(n.domain) for g in graphs(model) for n in g}
    for fn in model.functions.values():
        used.update(_dom(n.domain) for n in _calls(fn))
    return used


def _remove_unused_functions(model: ir.Model) -> None:
    """Drop functions no graph calls, directly or through a kept function."""
    reached: set[FunctionId] = set()
    todo = [n.op_identifier() for g in graphs(model) for n in g]
    while todo:
        fid = todo.pop()
        if fid in model.functions and fid not in reached:
            reached.add(fid)
            todo.extend(n.op_identifier() for n in _calls(model.functions[fid]))
    for fid in [f for f in model.functions if f not in reached]:
        del model.functions[fid]


@dataclass
class InlineReport:
    """What ``inline_functions`` did."""

    calls_inlined: int = 0
    functions_inlined: int = 0
    functions_removed: int = 0
    nodes_added: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> calls left


def calls_functions(model: ir.Model) -> bool:
    """Whether any graph of the model calls one of its local functions."""
    if not model.functions:
        return False
    return any(n.op_identifier() in model.functions for g in graphs(model) for n in g)


def inline_functions(model: ir.Model) -> InlineReport:
    """Inline every inlinable call, drop the functions no graph calls any more and the opset
    imports only those calls used; see the module docstring for what stays a call."""
    report = InlineReport()
    functions = model.functions
    if not functions:
        return report
    every = _calls(n for g in [model.graph, *functions.values()] for n in g)
    skip: dict[FunctionId, str] = check_functions(model, every, _in_cycle(functions))
    for fid, fn in functions.items():
        if fid not in skip and (why := _opset_conflict(fn, model.opset_imports, functions)):
            skip[fid] = why
    inliner = _Inliner(model, skip)
    inliner.graph(model.graph)
    report.skipped = dict(inliner.skipped)
    if not inliner.inlined:
        return report
    call_domains = {_dom(fid[0]) for fid in functions}
    have = {_dom(d) for d in model.opset_imports}
    for fid in inliner.inlined:
        for domain, version in functions[fid].opset_imports.items():
            if _dom(domain) not in have:
                model.opset_imports[domain] = version
                have.add(_dom(domain))
    if inliner.identities and "" not in have:
        model.opset_imports[""] = 1  # Identity-1: the same op at every version
    before = len(functions)
    _remove_unused_functions(model)
    used = _used_domains(model)
    for domain in list(model.opset_imports):
        if _dom(domain) in call_domains and _dom(domain) not in used:
            del model.opset_imports[domain]
    report.calls_inlined = sum(inliner.inlined.values())
    report.functions_inlined = len(inliner.inlined)
    report.functions_removed = before - len(model.functions)
    report.nodes_added = inliner.nodes_added
    return report
