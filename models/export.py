"""Export a torch module the way users do: ``torch.onnx.export`` with its defaults (dynamo).

torch 2.13's default exporter is the dynamo one (torch.export + onnxscript, with its graph
optimizer on). We only pin the opset (18) and name inputs, outputs and dynamic dims. Its
output was checked to be byte-identical across processes for the same seed, so nothing
needs normalising; ``tests/models`` keeps checking that.
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
BUILD_VERSION = 1


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
    return program.model
