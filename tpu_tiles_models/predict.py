"""The course's prediction command: rank every test kernel with a trained model, write a CSV.

`tiles_gen_predictions_csv.py` and `tpu-tiles predict` both call `predict_to_csv`: the model is
reopened with `runs.TrainedRun` (the course's reload procedure) and scored with `scoring`.
Each kernel is ranked by the model's own rule (`--keep_default=auto`: config 0, the compiler's
default, kept in its top 5 when the model's gate says so, as the course script's `forward`
ranks), or as the user says (`yes`, `no`) on the model's scores without its rule.
"""

from __future__ import annotations

import os
from pathlib import Path

from tpu_tiles_models import kaggle, registry, run_file, safe, scoring
from tpu_tiles_models.errors import FlagError
from tpu_tiles_models.runs import TrainedRun

# `--keep_default`: follow the model's rule, always keep config 0 in the top 5, never.
KEEP_DEFAULT_MODES = ("auto", "yes", "no")


def predict_to_csv(
    model_dir: str | os.PathLike,
    data_root: str | os.PathLike,
    out: str | os.PathLike,
    *,
    top_k: int = kaggle.TOP_K,
    keep_default: str = "auto",
    cache_dir: str | None = None,
    models_path: str | os.PathLike | None = None,
    progress: bool = True,
) -> tuple[Path, int]:
    """Ranks every test kernel of `data_root` with the run of `model_dir` and writes `out`,
    `ID,TopConfigs` rows, as `tpu-tiles predict`'s flags say; returns its path and row count.

    Raises:
      FlagError: a bad `--top_k` or `--keep_default`, or `out` clashing with an input.
      ExportError: a model folder or run file missing, damaged or of another model.
      DataError: a test file no model can read.
      NonFiniteScores: the model scores a config NaN or infinite.
    """
    if top_k < 1:
        raise FlagError(f"--top_k must be at least 1, got {top_k}")
    if keep_default not in KEEP_DEFAULT_MODES:
        raise FlagError(
            f"--keep_default must be one of {', '.join(KEEP_DEFAULT_MODES)}, got {keep_default!r}"
        )
    run = TrainedRun.open(model_dir, models_path=models_path)
    inputs = run_file.run_inputs(run.model_dir) + safe.split_inputs(data_root)
    safe.claim([safe.Output(out, "--out")], inputs + registry.models_inputs(models_path))
    model, dataset = run.load(data_root, cache_dir=cache_dir, progress=progress)
    keep = run.keeps_default_in(model) if keep_default == "auto" else keep_default == "yes"
    scored = scoring.score_split(
        model, dataset.test, dataset.stats, progress=progress, desc="test", who=str(run.model_dir)
    )
    rows = scoring.prediction_rows(scored, top_k, keep_default=keep)
    kaggle.write_predictions_csv(out, rows)
    return Path(out), len(rows)
