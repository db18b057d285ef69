"""`tpu-tiles sweep`: many training runs as one Apache Beam pipeline; resumable; a leaderboard.

A sweep is a set of *points*; each point is one `train.train(args)` whose `TrainArgs` are the
base flags (every `tpu-tiles train` flag on the command line) with the point's values on top,
and a `results_csv` named after the point (`<out_dir>/results_<key>.csv`). Upstream's hash
covers `results_csv`, so every point has a stable hash: its artifacts are exactly those of
`tpu-tiles train <the point's flags>`, and a point whose run file exists is complete.

Grids (`--grid`): a YAML or JSON file (any `--grid` without "="), or an inline spec of
space-separated axes:

    model=ResidualSAGE,EarlyJoinSAGE lr=1e-3,2e-3 seed=0,1,2
    losses='ListMLELoss:1,MSE:0.02','FastFirstListMLE:1,MSE:0.02' kwargs.hidden_dim=32,64

An axis is `name=v1,v2,...` where `name` is a training flag (ours or upstream's name) or
`kwargs.<key>`, one key inside `--model_kwargs_json`. Values are split at commas outside
quotes and brackets, so JSON needs no quoting; a value with a comma or a space is quoted
('...'). Without `--random` the points are the product of the axes (first axis slowest). A
numeric axis may instead be a range, sampled by `--random N`:

    uniform(a,b)  loguniform(a,b)  int(a,b)  logint(a,b)    (bounds inclusive)

`--random N` draws N points per grid (floats rounded to 4 significant digits), seeded by
`--random_seed`, so rerunning the same command gives the same points; a `seed` list is crossed
with the draws (N x seeds points) so that every draw has its mean and std over seeds; equal
draws collapse into one point. A file holds one mapping `{axis: value | [values] | "range"}`
or a list of them (a union of grids).

Execution: a Beam pipeline, `Create(points) | Reshuffle | Map(train point)`, on any runner.
The default is the DirectRunner in multi-processing mode with `--num_workers` processes;
each point trains in a fresh child process of its worker (`--isolation process`), so a crash
or an out-of-memory kill is recorded as that point's failure. Data, output and TensorBoard
paths may be remote (`gs://...`): the points and the sweep's own files go through
`tpu_tiles_models.files`, hence tf.io.gfile. Layout under `--out_dir`:

    model_<h>/ run_<h>.jsonz results_<key>.csv train_curve_<h>.png   (each point, as train)
    sweep.csv sweep.md sweep.png                                      (leaderboard)
    sweep/plan.json sweep/points/<key>.json sweep/logs/<key>.log      (plan, outcomes, logs)
    tensorboard/run_<h>/ (per-epoch scalars and the point's hparams; default --tensorboard)

Modules, in the order a point passes through them: `options` (`SweepArgs`, built once by the
command line), `grid` and `values` (the `--grid` syntax), `points` (a grid's points and their
keys), `command` (`run`: what to train, then the leaderboard), `pipeline` (the Beam pipeline),
`worker` (one point on a worker; `child` is its child process), `store` (the sweep's own files),
`leaderboard` and `hparams` (the results as CSV, Markdown, a chart and TensorBoard HParams).
"""

from __future__ import annotations

from tpu_tiles_models.sweep.command import SweepFailed, SweepSummary, collect_rows, main, run
from tpu_tiles_models.sweep.grid import (
    Axis,
    Grid,
    Range,
    format_grid,
    load_grid_file,
    parse_grid,
    parse_inline,
)
from tpu_tiles_models.sweep.leaderboard import Row, leaderboard_row
from tpu_tiles_models.sweep.options import SweepArgs, add_flags, split_argv
from tpu_tiles_models.sweep.pipeline import pipeline_options
from tpu_tiles_models.sweep.points import Point, expand, make_point, point_key
from tpu_tiles_models.sweep.store import model_dir_path, read_run_info, run_file_path

__all__ = [
    "Axis",
    "Grid",
    "Point",
    "Range",
    "Row",
    "SweepArgs",
    "SweepFailed",
    "SweepSummary",
    "add_flags",
    "collect_rows",
    "expand",
    "format_grid",
    "leaderboard_row",
    "load_grid_file",
    "main",
    "make_point",
    "model_dir_path",
    "parse_grid",
    "parse_inline",
    "pipeline_options",
    "point_key",
    "read_run_info",
    "run",
    "run_file_path",
    "split_argv",
]
