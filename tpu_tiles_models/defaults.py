"""The defaults every command (and the drop-in `tiles_gen_predictions_csv.py`) shares: where
the data is, where its cache goes, where runs go. Standard library only: the drop-in script
reads it before anything heavy.
"""

from __future__ import annotations

import os
from typing import Sequence

# The course handout's place for the data (upstream's README downloads it there).
HOME_DATA_ROOT = "~/data/tpugraphs/npz/tile/xla"
# Where a Kaggle notebook finds the competition's data (data set predict-ai-model-runtime).
KAGGLE_DATA_ROOT = "/kaggle/input/predict-ai-model-runtime/npz_all/npz/tile/xla"
DATA_ROOTS = (HOME_DATA_ROOT, KAGGLE_DATA_ROOT)
# The cache of loaded arrays, for every command that reads the data ('' on a flag: none).
CACHE_DIR = "~/data/tpugraphs/cache/tile"
# Where training (and `ensemble`) writes its artifacts, as upstream's tiles_train.py does.
OUT_DIR = "~/out/tpugraphs_tiles"


def data_root(candidates: Sequence[str] | None = None) -> str:
    """The default `--data_root`: the first of `candidates` that is a folder, else the first
    (a message about missing data then names the usual place)."""
    candidates = DATA_ROOTS if candidates is None else candidates
    for candidate in candidates:
        if os.path.isdir(os.path.expanduser(candidate)):
            return candidate
    return candidates[0]


# (Kaggle's path is not spelled out: argparse would wrap it at its hyphens.)
DATA_ROOT_HELP = (
    f"folder holding the train/, valid/ and test/ npz files (default: {HOME_DATA_ROOT}, or "
    "the competition's copy under /kaggle/input when only that exists)"
)
CACHE_DIR_HELP = f"cache of loaded arrays; '' for none (default: {CACHE_DIR})"
