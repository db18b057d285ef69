"""`tpu-tiles inspect`: a data report for any tile:xla data root, real or synthetic.

`inspect_root` (`report`) reads each kernel once into fixed-size accumulators (`stats`) and
returns a JSON-ready dict whose keys it documents; `format_table` and `draw` (`render`) show
it; `command` is the CLI. The figures: docs/synthetic.md ("Inspecting a data root").
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
