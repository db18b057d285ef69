"""Synthetic TpuGraphs `tile:xla` data: trees in the real collection's npz format
(`{train,valid,test}/<tile_id>.npz`, see `tpu_tiles_models.formats`) made from a seed, whose
runtimes come from a cost model that reads only the features (docs/synthetic.md; its
modules: docs/layout.md).
"""

from __future__ import annotations

from tpu_tiles_models.synthetic.command import SynthArgs, add_flags, run
from tpu_tiles_models.synthetic.families import (
    DEFAULT_FAMILY,
    FAMILIES,
    Family,
    UnknownFamilyError,
    get_family,
    noise_free_runtime,
    register,
)
from tpu_tiles_models.synthetic.features import MAX_NODES, OPCODES
from tpu_tiles_models.synthetic.geometry import KernelGeometry, kernel_geometry
from tpu_tiles_models.synthetic.writer import (
    SPLITS,
    DataSetExistsError,
    ValidationSplitWarning,
    generate,
    usable_valid_kernels,
)

__all__ = [
    "DEFAULT_FAMILY",
    "FAMILIES",
    "MAX_NODES",
    "OPCODES",
    "SPLITS",
    "DataSetExistsError",
    "Family",
    "KernelGeometry",
    "SynthArgs",
    "UnknownFamilyError",
    "ValidationSplitWarning",
    "add_flags",
    "generate",
    "get_family",
    "kernel_geometry",
    "noise_free_runtime",
    "register",
    "run",
    "usable_valid_kernels",
]
