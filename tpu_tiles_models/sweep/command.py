"""`tpu-tiles sweep`: expand the grid, train the missing points, write the leaderboard.

`run(SweepArgs)` is the command: the points whose whole run is there (run file, model dir,
results CSV: `export.completed_run`) are complete and skipped;
the others train in one Beam pipeline (`pipeline`); then every point's row goes into the
leaderboard (`sweep.csv`, `sweep.md`, `sweep.png`) and TensorBoard's HParams dashboard, and
with `--ensemble_top K` the K best points are ensembled (`tpu-tiles ensemble`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from tpu_tiles_models import export, files, formats, locks, registry
from tpu_tiles_models.errors import UserError, one_line
from tpu_tiles_models.sweep import hparams, leaderboard, pipeline, store
from tpu_tiles_models.sweep.grid import parse_grid
from tpu_tiles_models.sweep.leaderboard import Row
from tpu_tiles_models.sweep.options import SweepArgs
from tpu_tiles_models.sweep.points import Point, expand
from tpu_tiles_models.train_args import TrainArgs


class SweepFailed(UserError):
    """Some points failed (each recorded in the leaderboard); the message names them."""

    def __init__(self, message: str, summary: SweepSummary):
        super().__init__(message)
        self.summary = summary


@dataclasses.dataclass
class SweepSummary:
    """What a sweep did: its ranked rows and where the leaderboard went."""

    rows: list[Row]
    trained: int
    skipped: int
    paths: dict[str, str]
    ensemble: dict[str, Any] | None = None

    @property
    def failed(self) -> list[Row]:
        return [r for r in self.rows if not r.ok]


def run(args: SweepArgs) -> SweepSummary:
    """`tpu-tiles sweep`: expands the grid, trains the missing points, writes the leaderboard.

    Returns:
      The summary (when every point is ok).

    Raises:
      FlagError: a bad grid, before anything is trained.
      SweepFailed: some points failed or did not run; the leaderboard is written anyway.
      KeyboardInterrupt: Ctrl-C; running points removed what they had started.
      locks.BusyError: another sweep is running on `--out_dir` (a dry run only reads it).
    """
    if args.dry_run:
        return _run(args)
    with locks.claim(args.out_dir, flag="--out_dir", command="sweep"):
        return _run(args)


def _run(args: SweepArgs) -> SweepSummary:
    """`run`, with `--out_dir` claimed unless a dry run."""
    base, out_dir = args.base, args.out_dir
    grids = parse_grid(args.grid)
    files.check_folder(out_dir, flag="--out_dir")  # before any point trains
    points = expand(grids, base, random_points=args.random, random_seed=args.random_seed)
    sweep_dir = store.sweep_dir(out_dir)
    _check_outputs(points, out_dir, base)
    complete = {p.key for p in points if store.read_run_info(p) is not None}
    todo = [p for p in points if p.key not in complete]
    print(
        f"sweep: {len(points)} points, {len(complete)} already complete (skipped), "
        f"{len(todo)} to train; out_dir {out_dir}",
        flush=True,
    )
    if args.dry_run:
        for p in points:
            print(f"  {'done' if p.key in complete else 'todo'}  {p.key}  {p.describe()}")
        return SweepSummary([], 0, len(complete), {})
    if todo:
        pipeline.check_runner(args.runner)
    _write_plan(sweep_dir, args, points)
    error = pipeline.train_points(todo, sweep_dir, args, len(points), len(complete))
    rows = collect_rows(points, sweep_dir)
    ensemble = (
        _build_ensemble(rows, args.ensemble_top, out_dir, base) if args.ensemble_top else None
    )
    summary = _write_outputs(rows, points, out_dir, base, {p.key for p in todo}, ensemble)
    _raise_for_failures(summary, error)
    return summary


def _check_outputs(points: Sequence[Point], out_dir: str, base: TrainArgs) -> None:
    """The sweep's files and every point's artifacts against the data and --models, before
    any work (`files.prepare_outputs`)."""
    writes = [files.Output(p, "--out_dir") for p in store.leaderboard_paths(out_dir).values()]
    writes.append(files.Output(store.sweep_dir(out_dir), "--out_dir", adds_to=True))
    for point in points:
        writes += export.outputs(point.args)
    reads = files.split_inputs(base.data_root) + registry.models_inputs(base.models)
    files.prepare_outputs(writes, reads)


def main(argv: Sequence[str] | None = None) -> SweepSummary:
    """`tpu-tiles sweep` without the CLI around it: parses `argv` and runs."""
    return run(SweepArgs.from_argv(list(argv or [])))


def _write_plan(sweep_dir: str, args: SweepArgs, points: list[Point]) -> None:
    plan = dict(
        grid=args.grid,
        random=args.random,
        random_seed=args.random_seed,
        base=args.base.to_argv(),
        points=[
            dict(key=p.key, hash=p.hash, values=p.values, flags=p.args.to_argv()) for p in points
        ],
    )
    store.write_json(store.plan_path(sweep_dir), plan)


def collect_rows(points: Sequence[Point], sweep_dir: str) -> list[Row]:
    """Every point's row from its run file and recorded outcome, best first."""
    return leaderboard.rank_rows(
        [
            leaderboard.leaderboard_row(
                p, store.read_run_info(p), store.read_json(store.record_path(sweep_dir, p.key))
            )
            for p in points
        ]
    )


def _write_outputs(rows, points, out_dir, base, todo: set[str], ensemble) -> SweepSummary:
    """Writes the leaderboard (csv, md, png) and the HParams summary; prints the summary."""
    axes = leaderboard.axis_names(points)
    paths = store.leaderboard_paths(out_dir)
    flag = "--out_dir"
    files.write_bytes(paths["csv"], leaderboard.leaderboard_csv(rows, axes).encode(), flag=flag)
    markdown = leaderboard.leaderboard_markdown(rows, axes, out_dir, ensemble)
    files.write_bytes(paths["md"], markdown.encode(), flag=flag)
    files.write_bytes(paths["png"], leaderboard.leaderboard_png(rows, axes), flag=flag)
    hparams.write_hparams(base.tensorboard, rows, axes)
    paths["tensorboard"] = files.expand(base.tensorboard)
    trained = sum(1 for r in rows if r.status in ("ok", "nan") and r.point.key in todo)
    summary = SweepSummary(rows, trained, len(points) - len(todo), paths, ensemble)
    _print_summary(summary)
    return summary


def _print_summary(summary: SweepSummary) -> None:
    rows = summary.rows
    print(
        f"sweep: {len(rows)} points: {summary.trained} trained, {summary.skipped} skipped "
        f"(already complete), {len(summary.failed)} not ok"
    )
    print("wrote " + ", ".join(summary.paths[k] for k in store.LEADERBOARD))
    print(f"TensorBoard (HParams): tensorboard --logdir {summary.paths['tensorboard']}")
    best = next((r for r in rows if r.ok), None)
    if best:
        name = formats.model_dir_name(best.point.hash)
        print(f"best: score {best.score:.4f}  {best.point.describe()}  {name}")
    ens = summary.ensemble
    if ens and not ens["error"]:
        print(f"ensemble of the {len(ens['members'])} best: score {ens['score']:.4f}  {ens['dir']}")


def _raise_for_failures(summary: SweepSummary, pipeline_error: str) -> None:
    bad = summary.failed
    ensemble_error = (summary.ensemble or {}).get("error", "")
    if not bad and not pipeline_error and not ensemble_error:
        return
    if not bad and not pipeline_error:
        raise SweepFailed(f"--ensemble_top: {ensemble_error}", summary)
    named = "; ".join(
        f"{r.point.key} ({r.point.describe()}): {r.status}: {r.error}" for r in bad[:3]
    )
    more = f"; and {len(bad) - 3} more" if len(bad) > 3 else ""
    stopped = f"the pipeline failed ({pipeline_error}); " if pipeline_error else ""
    retry = (
        "; rerun the same command to retry the failed ones"
        if any(r.status in ("failed", "not run") for r in bad)
        else "; a nan point keeps its run: change its flags (e.g. a lower --lr)"
    )
    raise SweepFailed(
        f"{stopped}{len(bad)} of {len(summary.rows)} points not ok: {named}{more}; see "
        f"{summary.paths['md']}{retry}",
        summary,
    )


def _build_ensemble(rows: list[Row], k: int, out_dir: str, base: TrainArgs) -> dict[str, Any]:
    """The ensemble of the `k` best ok points in `<out_dir>/ensemble_top<k>`; its errors, or
    the one-line reason it could not be built (the leaderboard is written either way).

    The same members as last time reuse the ensemble already there; new members replace it.
    """
    best = [r for r in rows if r.ok][:k]
    target = store.ensemble_dir(out_dir, k)
    info: dict[str, Any] = dict(k=k, dir=target, members=[r.point.key for r in best], error="")
    if len(best) < 2:
        return dict(info, error=f"{len(best)} ok point(s); an ensemble needs at least 2")
    record = store.ensemble_record(target)
    previous = store.read_json(record)
    if previous and previous["members"] == info["members"] and export.whole_run(previous["dir"]):
        return previous
    print(f"sweep: building the ensemble of the {len(best)} best points", flush=True)
    from tpu_tiles_models import ensemble as ensembles  # TensorFlow, only now

    try:
        result = ensembles.build_ensemble(
            [store.model_dir_path(r.point) for r in best],
            target,
            data_root=base.data_root,
            cache_dir=base.cache_dir or None,
            progress=False,
        )
    except UserError as e:
        return dict(info, error=one_line(e))
    errors = {int(n): v for n, v in result.val_errors.items()}
    info.update(dir=str(result.model_dir), run_file=str(result.run_file), top1=errors[1])
    info.update(top5=errors[5], top10=errors[10], score=1.0 - errors[5])
    info["results_csv"] = str(result.results_csv or "")
    if previous:  # the ensemble of other members, replaced by this one
        for key in ("dir", "run_file", "results_csv"):
            if previous.get(key) and previous[key] != info[key]:
                files.remove(previous[key])
    store.write_json(record, info)
    return info
