"""The course's prediction command: rank every test kernel with a trained model, write a CSV.

`tiles_gen_predictions_csv.py` and `tpu-tiles predict` both call `predict_to_csv`: the model is
reopened with `runs.TrainedRun` (the course's reload procedure) and scored with `scoring`.
"""

from __future__ import annotations

import os
from pathlib import Path

from tpu_tiles_models import export, files, kaggle, registry, scoring
from tpu_tiles_models.errors import FlagError
from tpu_tiles_models.runs import TrainedRun


def predict_to_csv(
    model_dir: str | os.PathLike,
    data_root: str | os.PathLike,
    out: str | os.PathLike,
    *,
    top_k: int = kaggle.TOP_K,
    cache_dir: str | None = None,
    models_path: str | os.PathLike | None = None,
    progress: bool = True,
) -> tuple[Path, int]:
    """Ranks every test kernel and writes `ID,TopConfigs` rows.

    Args:
      model_dir: a `model_<hash>` directory with its run file beside it.
      data_root: the folder holding `test/` (and, for upstream's runs, `train/` and `valid/`).
      out: the CSV to write.
      top_k: configs listed per kernel (at least 1).
      cache_dir: cache of loaded arrays, or None.
      models_path: the models.py or upstream checkout with the class; default ours.
      progress: show progress bars.

    Returns:
      (the CSV's path, the number of kernels in it).
    """
    if top_k < 1:
        raise FlagError(f"--top_k must be at least 1, got {top_k}")
    files.check_output_path(out, flag="--out")  # before minutes of scoring
    run = TrainedRun.open(model_dir, models_path=models_path)
    inputs = export.run_inputs(run.model_dir) + files.split_inputs(data_root)
    files.prepare_outputs(
        [files.Output(out, "--out")], inputs + registry.models_inputs(models_path)
    )
    model, dataset = run.load(data_root, cache_dir=cache_dir, progress=progress)
    scored = scoring.score_split(model, dataset.test, dataset.stats, progress=progress, desc="test")
    rows = scoring.prediction_rows(scored, top_k)
    kaggle.write_predictions_csv(out, rows)
    return Path(out), len(rows)
