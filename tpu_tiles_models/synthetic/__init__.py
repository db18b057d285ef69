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
  dims + sum + product). Like the real collection's autotuner logs (`autotuner`): as many
  as the kernel's tile search space warrants (2 to 10,000, about 1,900 on average), only
  tiles that compile, **config 0 the compiler's default tile**, about 2% re-measured rows.
- **Runtimes** come from a TPU-like cost model that reads *only the features*
  (`noise_free_runtime`), so a config's rank is learnable from the graph and the tile.
  Measured runtimes add kernel-specific noise (0.03% to about 4% between two runs of one
  tile); every row's normaliser is the default tile measured again.
- **Programs**: train kernels come from 61 programs of uneven size, valid kernels from 7
  others, test kernels (anonymised ids) from 8 more.

Generator families (`FAMILIES`, chosen with `generate(..., family=...)` or `tpu-tiles synth
--family`) differ in how kernels are built and how tiles change runtime. The package holds
`roofline`; the benchmarks register more (`families.register`, benchmarks/synth_families) to
check that a model does not overfit one generator.

Modules: `features` (the npz feature layout), `graph` (building a kernel node by node),
`geometry` (reading a kernel back from its features), `tiling` (option grids and per-config
tile quantities), `autotuner` (a kernel's log from its search space, for every family),
`kernels` and `analytic` (the HLO fusions and the pipeline of a family timed by an analytic
cost model), `roofline` (that family), `families` (families by name), `writer` (programs,
ids, splits, npz files) and `command` (the `tpu-tiles synth` flags).
"""

from __future__ import annotations

from tpu_tiles_models.formats import CONFIG_FEAT_DIM, NODE_FEAT_DIM
from tpu_tiles_models.synthetic.autotuner import MAX_CONFIGS
from tpu_tiles_models.synthetic.command import SynthArgs, add_flags, format_summary, run
from tpu_tiles_models.synthetic.families import (
    DEFAULT_FAMILY,
    FAMILIES,
    Family,
    UnknownFamilyError,
    get_family,
    make_kernel,
    noise_free_runtime,
    register,
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
from tpu_tiles_models.synthetic.tiling import Hardware
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
    "DEFAULT_FAMILY",
    "FAMILIES",
    "MAX_CONFIGS",
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
    "format_summary",
    "generate",
    "get_family",
    "kernel_geometry",
    "make_kernel",
    "noise_free_runtime",
    "read_test_ids",
    "register",
    "run",
    "usable_valid_kernels",
]
