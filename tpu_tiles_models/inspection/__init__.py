"""`tpu-tiles inspect`: a data report for any tile:xla data root, real or synthetic.

`inspect_root` reads every kernel of each split once, one at a time (`kernel_files.iter_kernels`:
every file validated as training would, a few files in memory, never a split), into
fixed-size accumulators and one number per kernel, and returns a JSON-ready dict whose keys
it documents; `format_table` prints it, `write_json` / `read_json` save and reopen it,
`plot` draws its histograms. What the figures mean:

- ratio: a config's runtime / its normaliser, the competition's target (the normaliser is
  the default config's runtime, measured in another run).
- config 0 is the default: |runtime / normaliser - 1| <= 5% on config 0
  (`DEFAULT_TOLERANCE`); config 0 is the fastest: no config of its kernel runs faster.
  config 0 / best: its runtime over the kernel's best; the mean minus 1 is the top-1 error
  of always picking config 0.
- runtime falls as the output tile grows: within a kernel, the correlation of runtime with
  `config_feat` column 14 (the sum of the output bounds) is below -0.17; the real train
  split has it in 83% of kernels, a ranking signal in the config features alone.
- duplicate row: a `config_feat` row equal to an earlier row of the same kernel; its gap is
  |runtime - the first copy's runtime| / the first copy's runtime.
- program: the tile id without its last `_part` (`kernel_files.benchmark_of`); test ids are
  anonymised (32 hex digits) and have none.
- feature columns: constant (one value over the split), two-valued (every row at the min or
  the max: an indicator), heavy-tailed (more values, and the min or max lies more than
  `tail_sigmas`, default 10, standard deviations from the mean). A normal column of 13
  million rows stays within about 6 stds, an exponential one reaches about ln(rows) - 1
  (15 there, 6 at 1,000 rows): a flagged column has a tail under which min-max scaling, as
  upstream does, squashes the other values.
- percentiles: of per-kernel figures exact (numpy's linear rule); over all configs (the
  ratio, duplicate gaps) read from a histogram of 1,000 log-spaced bins per decade, within
  0.25% of exact.
"""

from tpu_tiles_models.inspection.command import EPILOG, add_flags, check_outputs, run
from tpu_tiles_models.inspection.render import CONFIG_COLUMNS, format_table, plot
from tpu_tiles_models.inspection.report import (
    CONFIG_BINS,
    DEFAULT_ROOT,
    DEFAULT_TOLERANCE,
    FORMAT,
    SIZE_BINS,
    TAIL_SIGMAS,
    InspectError,
    inspect_root,
    program_of,
    read_json,
    write_json,
)
from tpu_tiles_models.inspection.stats import QUANTILES, distribution

__all__ = [
    "CONFIG_BINS",
    "CONFIG_COLUMNS",
    "DEFAULT_ROOT",
    "DEFAULT_TOLERANCE",
    "EPILOG",
    "FORMAT",
    "QUANTILES",
    "SIZE_BINS",
    "TAIL_SIGMAS",
    "InspectError",
    "add_flags",
    "check_outputs",
    "distribution",
    "format_table",
    "inspect_root",
    "plot",
    "program_of",
    "read_json",
    "run",
    "write_json",
]
