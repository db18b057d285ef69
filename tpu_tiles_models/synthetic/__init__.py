"""Synthetic TpuGraphs `tile:xla` data: fused XLA kernels, tile configs and runtimes.

Real TpuGraphs data cannot be downloaded everywhere, so this package writes trees in the
exact on-disk format of the real collection (`{train,valid,test}/<tile_id>.npz`, see
`tpu_tiles_models.formats`) from a seed:

- **Kernels** are fused HLO subgraphs whose 140 node features are filled at the documented
  indices (shape dims/sum/product, element type, window and convolution fields, slice/pad
  fields, layout). Nodes are in topological order and edges are `[consumer, producer]`.
  Opcode ids are those of the TpuGraphs featuriser
  (`tpu_graphs/process_data/xla/hlo_opcode.h`), listed in `OPCODES`.
- **Configs** are tile bounds in the 24-wide layout (kernel, output and input bounds, each 6
  dims + sum + product). Like a real autotuner's log, a kernel holds only tiles that compile
  (their working set fits the scratchpad), at most a kernel-specific factor slower than its
  best.
- **Runtimes** come from a TPU-like cost model that reads *only the features*
  (`noise_free_runtime`), so a config's rank is learnable from the graph and the tile.
  Measured runtimes add noise; normalisers are the runtime of a default tile with per-row
  jitter; a few configs are duplicated with different noise.

Generator families (`FAMILIES`, chosen with `generate(..., family=...)` or `tpu-tiles synth
--family`) differ in how kernels are built and how tiles change runtime, so benchmarks can
check that a model does not overfit one generator.

Modules: `features` (the npz feature layout), `graph` (building a kernel node by node),
`geometry` (reading a kernel back from its features), `tiling` (config helpers, and the tile
quantities of `roofline` and `alt`), `kernels` and `analytic` (the HLO fusions and the
pipeline `roofline` and `alt` share), one module per family (`roofline`, `alt`, and `fusion`
with its graph builder `fusion_graphs`), `families` (families by name), `writer` (ids,
splits, npz files, summary) and `command` (the `tpu-tiles synth` flags).
"""

from __future__ import annotations

from tpu_tiles_models.formats import CONFIG_FEAT_DIM, NODE_FEAT_DIM
from tpu_tiles_models.synthetic.analytic import MAX_CONFIGS_DEFAULT
from tpu_tiles_models.synthetic.command import SynthArgs, add_flags, format_summary, run
from tpu_tiles_models.synthetic.families import (
    COST_MODELS,
    DEFAULT_FAMILY,
    FAMILIES,
    HARDWARE,
    Family,
    UnknownFamilyError,
    default_config,
    geometry_runtime,
    get_family,
    make_kernel,
    noise_free_runtime,
)
from tpu_tiles_models.synthetic.features import (
    CFG_INPUT,
    CFG_KERNEL,
    CFG_OUTPUT,
    MAX_NODES,
    OPCODES,
    REAL_CONFIG_SCALES,
    REAL_NODE_SCALES,
)
from tpu_tiles_models.synthetic.geometry import KernelGeometry, kernel_geometry
from tpu_tiles_models.synthetic.tiling import DOT_K_CHUNK, Hardware
from tpu_tiles_models.synthetic.writer import (
    SPLITS,
    UPSTREAM_BATCH,
    UPSTREAM_CONFIGS,
    DataSetExistsError,
    ValidationSplitWarning,
    generate,
    read_test_ids,
    usable_valid_kernels,
)

__all__ = [
    "CFG_INPUT",
    "CFG_KERNEL",
    "CFG_OUTPUT",
    "CONFIG_FEAT_DIM",
    "COST_MODELS",
    "DEFAULT_FAMILY",
    "DOT_K_CHUNK",
    "FAMILIES",
    "HARDWARE",
    "MAX_CONFIGS_DEFAULT",
    "MAX_NODES",
    "NODE_FEAT_DIM",
    "OPCODES",
    "REAL_CONFIG_SCALES",
    "REAL_NODE_SCALES",
    "SPLITS",
    "UPSTREAM_BATCH",
    "UPSTREAM_CONFIGS",
    "DataSetExistsError",
    "Family",
    "Hardware",
    "SynthArgs",
    "KernelGeometry",
    "UnknownFamilyError",
    "ValidationSplitWarning",
    "add_flags",
    "default_config",
    "format_summary",
    "generate",
    "geometry_runtime",
    "get_family",
    "kernel_geometry",
    "make_kernel",
    "noise_free_runtime",
    "read_test_ids",
    "run",
    "usable_valid_kernels",
]
