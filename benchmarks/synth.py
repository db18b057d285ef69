"""`tpu-tiles synth` with the benchmark families (`synth_families`: alt, fusion, inference) as
well as the package's `roofline`; the same flags and files.

    python benchmarks/synth.py OUT --family fusion --train 1000 --valid 200 --test 20
    python benchmarks/synth.py OUT --scale full --family fusion --test_ids_from sample.csv
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))  # synth_families alone
import synth_families  # noqa: F401  (registers the families)

from tpu_tiles_models import cli

if __name__ == "__main__":
    sys.argv = ["tpu-tiles", "synth", *sys.argv[1:]]  # run as the program, Ctrl-C included
    sys.exit(cli.main())
