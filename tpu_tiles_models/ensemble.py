"""`tpu-tiles ensemble`: several trained runs as one drop-in model, with upstream's artifacts.

The members are reopened with `runs.TrainedRun`, put into models.py's `Ensemble` (whose
variables are the members' in member order) and their weights copied in. It is then validated,
ranks the test split and is written like a freshly trained model (`model=Ensemble`, the members
in `model_kwargs_json`), so the course's prediction script reloads it like any other.
"""

from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np
import tensorflow as tf

from tpu_tiles_models import data, export, registry, run_file, safe, scoring
from tpu_tiles_models.errors import UserError
from tpu_tiles_models.runs import TrainedRun
from tpu_tiles_models.train_args import TrainArgs


class EnsembleError(UserError, ValueError):
    """Runs that cannot form one ensemble; one line naming the run and the fix."""


def _same_data(runs: list[TrainedRun], data_root: str, cache_dir: str | None) -> data.Dataset:
    """The valid and test splits under the statistics every member was trained with."""
    first = runs[0]
    for run in runs:
        if run.stats is None:
            raise EnsembleError(
                f"{run.model_dir}: its run file stores no feature statistics (trained by "
                "upstream's tiles_train.py?); ensemble runs of tpu-tiles train"
            )
        if not run.stats.same_features(first.stats):
            raise EnsembleError(
                f"{run.model_dir} was trained on other data than {first.model_dir} (its feature "
                "statistics differ); ensemble only runs trained on the same --data_root"
            )
    root = os.path.expanduser(data_root)
    return data.load_dataset(
        root, splits=("valid", "test"), stats=first.stats, cache_dir=cache_dir, progress=False
    )


def members_of(runs: Sequence[TrainedRun]) -> list[dict]:
    """`Ensemble`'s `members` kwarg: each run's model name and the keywords it was built with
    (`TrainedRun.model_kwargs`: class defaults included, so that a grader's copy of models.py
    rebuilds each member as it was trained, whatever its defaults are by then)."""
    return [{"model": r.args["model"], "kwargs": r.model_kwargs} for r in runs]


def _check_members(runs: Sequence[TrainedRun]) -> None:
    """`EnsembleError` unless these are two or more different runs, none an ensemble itself."""
    seen: dict[str, TrainedRun] = {}
    for run in runs:
        if run.args["model"] == "Ensemble":
            members = ", ".join(run.extras.get("members") or []) or "the runs it was made of"
            raise EnsembleError(
                f"{run.model_dir} is itself an ensemble; pass its members instead ({members})"
            )
        if str(run.model_dir) in seen:
            raise EnsembleError(
                f"--dirs names {run.model_dir} twice; an ensemble needs different runs"
            )
        seen[str(run.model_dir)] = run
    if len(seen) < 2:
        raise EnsembleError(
            f"--dirs names one run ({runs[0].model_dir}); an ensemble needs at least two, "
            "e.g. --dirs model_<h1>,model_<h2>"
        )


def _assemble(runs: list[TrainedRun], args: TrainArgs, ds: data.Dataset) -> tf.keras.Model:
    """Builds the Ensemble, creates its variables, copies each member's saved weights in."""
    model = registry.build_model(
        "Ensemble",
        args.configs,
        ds.num_ops,
        args.model_kwargs_json,
        runs[0].module,
        source="the members' model_kwargs_json",
    )
    # Keras saves only a model that was called like a training batch: one kernel with
    # `configs` sampled configs (the largest valid kernel, so that it has enough).
    largest = int(ds.valid.config_counts().argmax())
    if ds.valid.num_configs(largest) < args.configs:
        raise EnsembleError(f"no valid kernel has {args.configs} configs (--configs of the runs)")
    rng = np.random.default_rng(0)
    model(data.kernel_graph(ds.valid, largest, ds.stats, num_configs=args.configs, rng=rng))
    graph = data.kernel_graph(ds.valid, largest, ds.stats)
    for member, run in zip(model.members, runs):
        run.copy_into(member)
        # A member that scores NaN would vanish in a `rank` combination and spoil the others
        # in a `zscore` one; one kernel shows it (NaN weights or statistics spoil every one).
        scores = np.asarray(scoring.own_scores(member)(graph, ds.valid.num_configs(largest)))[0]
        scoring.check_finite(scores, ds.valid.tile_ids[largest], who=str(run.model_dir))
    return model


def build_ensemble(
    model_dirs: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    *,
    data_root: str | os.PathLike,
    cache_dir: str | None = None,
    run_id: str = "",
    overwrite: bool = False,
    results_csv: str = "",
    progress: bool = True,
) -> export.TrainResult:
    """Writes the ensemble of `model_dirs` (runs trained on the same data) into `out_dir`, as
    `tpu-tiles ensemble`'s flags say; returns its artifacts and errors. Members' scores are
    combined by z-score (models.py's other `COMBINE_METHODS` are for ensembles that recorded
    them: no results file favours them).

    Raises:
      EnsembleError: fewer than two different runs of ours on the same data.
      ExportError: a member that cannot be read, or (`RunExistsError`) a finished ensemble.
    """
    if not model_dirs:
        raise EnsembleError("no runs given; pass --dirs model_<h1>,model_<h2>[,...]")
    runs = [TrainedRun.open(d) for d in model_dirs]
    _check_members(runs)
    kwargs = {"members": members_of(runs), "combine": "zscore"}
    args = (
        runs[0]
        .train_args.replace(
            model="Ensemble",
            model_kwargs_json=json.dumps(kwargs, sort_keys=True),
            out_dir=os.fspath(out_dir),
            results_csv=results_csv,
            run_id=run_id,
            overwrite=overwrite,
            data_root=os.fspath(data_root),
            cache_dir=cache_dir or "",
            tensorboard="",
            no_progress=not progress,
        )
        .resolved()
    )
    inputs = safe.split_inputs(data_root, ("valid", "test"))
    for run in runs:
        inputs += run_file.run_inputs(run.model_dir, "--dirs")
    with export.writing_into(args, inputs) as artifacts:
        ds = _same_data(runs, os.fspath(data_root), cache_dir)
        model = _assemble(runs, args, ds)
        export.check_space(artifacts, model)
        member_errors = {str(r.model_dir): r.val_errors for r in runs}
        final = scoring.final_scores(
            model,
            ds,
            test_mode=args.test_mode,
            scorer=scoring.KernelScorer(model),
            progress=not args.no_progress,
        )
        return export.finish(
            args,
            model,
            ds.stats,
            final=final,
            artifacts=artifacts,
            curve=dict(epoch=[], train_loss=[], train_opa=[], val_loss=[], val_opa=[]),
            extras={
                "members": member_errors,
                run_file.MODEL_KWARGS_KEY: registry.resolved_kwargs(
                    "Ensemble", registry.parse_model_kwargs(args.model_kwargs_json), runs[0].module
                ),
            },
        )
