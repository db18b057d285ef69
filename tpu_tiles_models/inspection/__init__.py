"""`tpu-tiles inspect`: a data report for any tile:xla data root, real or synthetic.

`inspect_root` (`report`) reads every kernel of each split once, one at a time, into fixed-size
accumulators (`stats`) and one number per kernel, and returns a JSON-ready dict whose keys it
documents; `format_table` and `draw` (`render`) show it; `command` is the CLI. The figures are
described in docs/synthetic.md ("Inspecting a data root"); beyond it:

- runtime falls as the output tile grows: the correlation of runtime with `config_feat` column
  14 (the output bounds' sum) is below -0.17 within the kernel; so in 83% of real train
  kernels, a ranking signal in the config features alone.
- a duplicate row's gap: |runtime - the first copy's| / the first copy's runtime.
- heavy-tailed: a normal column of 13 million rows stays within about 6 stds of its mean, an
  exponential one reaches about ln(rows) - 1; past `tail_sigmas` (default 10) min-max
  scaling, as upstream does, squashes the other values.
- percentiles: of per-kernel figures exact (numpy's linear rule); over all configs (the
  ratio, duplicate gaps) from 1,000 log-spaced bins per decade, within 0.25% of exact.
"""

from tpu_tiles_models.inspection.command import EPILOG, add_flags, check_outputs, run
from tpu_tiles_models.inspection.render import format_table
from tpu_tiles_models.inspection.report import (
    CONFIG_BINS,
    FORMAT,
    TAIL_SIGMAS,
    InspectError,
    inspect_root,
)
from tpu_tiles_models.inspection.stats import QUANTILES

__all__ = [
    "CONFIG_BINS",
    "EPILOG",
    "FORMAT",
    "QUANTILES",
    "TAIL_SIGMAS",
    "InspectError",
    "add_flags",
    "check_outputs",
    "format_table",
    "inspect_root",
    "run",
]
