"""Partitioning: cut a model into sequential parts that runtimes load one at a time.

``plan`` chooses cut points from shapes only, ``save`` writes the folder of parts (each a
standalone .onnx with its own aligned external data, shared weights stored once), ``manifest``
describes and validates the chain. ``memshrink.runtime.PartitionedSession`` runs a folder.
"""

from __future__ import annotations

from memshrink.partition.manifest import (
    MANIFEST_NAME,
    Manifest,
    ManifestError,
    PartSpec,
    TensorSpec,
    is_partition_folder,
    read_manifest,
)

__all__ = [
    "MANIFEST_NAME",
    "Manifest",
    "ManifestError",
    "PartSpec",
    "TensorSpec",
    "is_partition_folder",
    "read_manifest",
]
