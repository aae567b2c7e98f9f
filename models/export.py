"""Export a torch module the way users do: ``torch.onnx.export`` with its defaults (dynamo).

torch 2.13's default exporter is the dynamo one (torch.export + onnxscript, with its graph
optimizer on). We only pin the opset (18) and name inputs, outputs and dynamic dims. Its
output is byte-identical across processes for the same seed except for one thing we
normalise: per-node source stack traces (absolute paths, line numbers). ``tests/models``
keeps checking determinism.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

OPSET = 18

# Bump when a change here alters any built file's bytes: cached builds of older versions
# are then rebuilt (the version is part of the sidecar's fingerprint).
BUILD_VERSION = 2  # 2: source stack traces stripped from node metadata


def seeded(seed: int, factory: Callable[[], Any]) -> Any:
    """Build a module with every torch RNG seeded, in eval mode, with gradients off."""
    import torch

    torch.manual_seed(seed)
    module = factory()
    module.eval()
    for p in module.parameters():
        p.requires_grad_(False)
    return module


def torch_export(
    module: Any,
    kwargs: dict[str, Any],
    output_names: Sequence[str],
    dynamic: dict[str, dict[int, str]] | None = None,
    positional: bool = False,
) -> Any:
    """Export ``module(**kwargs)`` and return the exporter's ``onnx_ir.Model``.

    ``dynamic`` maps an input name to ``{axis: dim_name}``; the dim names end up as the
    graph's ``dim_param`` (inputs sharing a name share the symbol, as in user exports).
    ``positional`` passes the inputs as positional args (graph inputs keep the dict's names).
    """
    import torch

    dynamic_shapes = None
    if dynamic:
        symbols: dict[str, Any] = {}
        dynamic_shapes = {
            name: {
                axis: symbols.setdefault(dim, torch.export.Dim(dim, min=1 if dim == "batch" else 2))
                for axis, dim in axes.items()
            }
            for name, axes in dynamic.items()
        }
        for name in kwargs:
            dynamic_shapes.setdefault(name, None)  # type: ignore[arg-type]
    # The exporter prints progress on stdout; keep stdout clean for --json users.
    with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr), torch.no_grad():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module,
            tuple(kwargs.values()) if positional else (),
            kwargs=None if positional else kwargs,
            input_names=list(kwargs),
            output_names=list(output_names),
            opset_version=OPSET,
            dynamic_shapes=(
                tuple(dynamic_shapes.values()) if positional and dynamic_shapes else dynamic_shapes
            ),
            verbose=False,
        )
    assert program is not None
    return _strip_source_locations(program.model)


# The exporter records each node's Python stack trace (absolute file paths and line numbers
# of the builder and of site-packages): bytes would change with the checkout folder or any
# edit that shifts a line. Everything else it records (module names, fx nodes) is stable.
_UNSTABLE_KEYS = ("pkg.torch.onnx.stack_trace",)


def _strip_source_locations(model: Any) -> Any:
    import onnx_ir as ir

    def clean(props: dict[str, str]) -> None:
        for key in _UNSTABLE_KEYS:
            props.pop(key, None)

    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        clean(node.metadata_props)
        for value in node.outputs:
            clean(value.metadata_props)
    for value in (*model.graph.inputs, *model.graph.initializers.values()):
        clean(value.metadata_props)
    return model
