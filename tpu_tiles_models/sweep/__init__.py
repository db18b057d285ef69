"""`tpu-tiles sweep`: a grid of training runs as one Apache Beam pipeline, resumable
(docs/sweeps.md): its options and the command; the pipeline and the records are `pipeline`'s.
Its bookkeeping in `--out_dir`: sweep/plan.json (the points), sweep/points/<key>.json (each
outcome), sweep/logs/<key>.log (each output), ensemble_top<k>/sweep_ensemble.json (which
names its files inside its own folder, `pipeline.ENSEMBLE_FILES`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from typing import Any, Sequence

from tpu_tiles_models import (
    export,
    files,
    formats,
    locks,
    pipelines,
    registry,
    run_file,
    safe,
)
from tpu_tiles_models.errors import FlagError, UserError, one_line
from tpu_tiles_models.sweep import leaderboard, pipeline
from tpu_tiles_models.sweep.grid import expand, parse_grid
from tpu_tiles_models.sweep.leaderboard import Row
from tpu_tiles_models.train_args import BOOLEAN_FLAGS, TrainArgs, flag_named

ISOLATIONS = ("process", "none")


@dataclasses.dataclass(frozen=True)
class SweepArgs:
    """The sweep's options (see `add_flags`); `base` holds the train flags of every point."""

    grid: str  # a YAML/JSON file or an inline spec (see `grid`)
    base: TrainArgs  # out_dir is the sweep's; tensorboard defaults to <out_dir>/tensorboard
    beam_argv: tuple[str, ...] = ()  # Beam pipeline options, passed on as given
    random: int = 0  # draw this many points per grid (0: the product of the axes)
    random_seed: int = 0
    runner: str = "DirectRunner"
    num_workers: int | None = None  # DirectRunner: processes (None: the cores)
    isolation: str = "process"  # train each point in a child process, or in the worker
    ensemble_top: int = 0  # then ensemble the K best points (0: none)
    dry_run: bool = False

    def __post_init__(self) -> None:
        for flag, low in (("random", 0), ("num_workers", 1), ("ensemble_top", 0)):
            value = getattr(self, flag)
            if value is not None and value < low:
                raise FlagError(f"--{flag} must be at least {low}, got {value}")

    @property
    def out_dir(self) -> str:
        return files.expand(self.base.out_dir)

    @classmethod
    def from_namespace(cls, a: argparse.Namespace, extra: Sequence[str]) -> SweepArgs:
        """From `add_flags`' flags and the rest of the line (train flags, Beam options)."""
        train_argv, beam_argv = split_argv(list(extra))
        fields = [f.name for f in dataclasses.fields(cls) if f.name not in ("base", "beam_argv")]
        base = base_args(train_argv, a.out_dir)
        return cls(base=base, beam_argv=tuple(beam_argv), **{f: getattr(a, f) for f in fields})


def add_flags(p: argparse.ArgumentParser) -> None:
    """The sweep's own flags; every other flag is a `tpu-tiles train` flag or a Beam option."""
    grid_help = "YAML/JSON file, or inline 'model=A,B lr=1e-3,2e-3 seed=0,1'"
    p.add_argument("--grid", required=True, help=grid_help)
    p.add_argument("--out_dir", required=True, help="every point's artifacts and the leaderboard")
    p.add_argument("--random", type=int, default=0, metavar="N", help="draw N points per grid")
    p.add_argument("--random_seed", type=int, default=0, help="seed of the --random draws")
    p.add_argument(
        "--runner",
        default=SweepArgs.runner,
        help="Beam runner: DirectRunner, DaskRunner, DataflowRunner, FlinkRunner, SparkRunner",
    )
    p.add_argument(
        "--num_workers",
        type=int,
        help="DirectRunner: worker processes (default: cores); others: Beam's --num_workers",
    )
    p.add_argument(
        "--isolation",
        choices=ISOLATIONS,
        default=SweepArgs.isolation,
        help="train each point in a fresh child process (default) or in the worker",
    )
    p.add_argument("--ensemble_top", type=int, default=0, metavar="K", help="then ensemble K best")
    p.add_argument("--dry_run", action="store_true", help="list the points and exit")
    p.epilog = (
        "Other flags: any `tpu-tiles train` flag (the base of every point) and any Apache "
        "Beam pipeline option (--dask_client_address, --project, --flink_master, ...)."
    )


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """The extra arguments as (`tpu-tiles train` flags, Beam pipeline options)."""
    train_argv: list[str] = []
    beam_argv: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("-") or token in ("-", "--"):
            raise FlagError(f"unexpected argument {token!r}; flags look like --epochs=10")
        name = token.lstrip("-").split("=", 1)[0]
        can_take = "=" not in token and i + 1 < len(argv)
        flag = flag_named(name)
        if flag is not None:  # absl: a boolean flag never takes the next token
            take = can_take and flag == name and flag not in BOOLEAN_FLAGS
            train_argv += argv[i : i + 1 + take]
        else:
            take = can_take and not argv[i + 1].startswith("--")
            beam_argv += argv[i : i + 1 + take]
        i += 1 + take
    if beam_argv:
        _check_beam_argv(beam_argv)
    return train_argv, beam_argv


def _check_beam_argv(beam_argv: list[str]) -> None:
    """Every Beam option known and valid, by the parser Beam itself builds."""
    with pipelines.quiet_beam():
        from apache_beam.options import pipeline_options as po

        with contextlib.suppress(ImportError):  # DaskRunner's options, with Dask installed
            import apache_beam.runners.dask.dask_runner  # noqa: F401
    parser = po._BeamArgumentParser(allow_abbrev=False)
    for cls in {str(c): c for c in reversed(po.PipelineOptions.__subclasses__())}.values():
        cls._add_argparse_args(parser)

    def error(message: str) -> None:  # one line, not argparse's usage of 177 options
        raise FlagError(f"Beam pipeline option: {message}")

    parser.error = error
    with pipelines.quiet_beam():
        _, unknown = parser.parse_known_args(beam_argv)
    flags = [t.split("=")[0] for t in unknown if t.startswith("-")]
    if flags and flags[0].startswith("--dask_"):
        raise FlagError(f"{flags[0]} needs Dask; {pipeline.DASK_EXTRA}")
    if flags:
        raise FlagError(
            f"unknown flag {flags[0]}: neither a `tpu-tiles train` flag "
            "(tpu-tiles train --help) nor an Apache Beam pipeline option"
        )


def base_args(train_argv: list[str], out_dir: str) -> TrainArgs:
    """The train flags every point starts from, with the sweep's out_dir and TensorBoard."""
    if any(t.lstrip("-").split("=")[0] == "results_csv" for t in train_argv):
        raise FlagError("--results_csv is named per point by the sweep; remove it")
    # One spelling (`SW`, `./SW/`, absolute, a link): it is in every point's hash, which
    # resume looks the finished points up by.
    out_dir = files.canonical(out_dir, what="--out_dir")
    base = TrainArgs.from_argv(train_argv, prog="tpu-tiles sweep")
    base = base.replace(out_dir=out_dir, no_progress=True)
    if not base.tensorboard:
        base = base.replace(tensorboard=files.join(files.expand(out_dir), "tensorboard"))
    # Paths may be remote (gs://), not --models: a Python file every point imports.
    files.require_local(base.models, flag="--models")
    return base


# -- the command ------------------------------------------------------------------------------


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
    """Expands the grid, trains the missing points, writes the leaderboard. A dry run only
    reads.

    Raises:
      FlagError: a bad grid or option, or an `--out_dir` that clashes with an input.
      SweepFailed: some points failed or did not run (after the leaderboard is written).
    """
    if args.dry_run:
        return _run(args)
    with locks.claim(args.out_dir, flag="--out_dir", command="sweep"):
        return _run(args)


def _run(args: SweepArgs) -> SweepSummary:
    base, out_dir, sweep_dir = args.base, args.out_dir, files.join(args.out_dir, "sweep")
    grids = parse_grid(args.grid)
    points = expand(grids, base, random_points=args.random, random_seed=args.random_seed)
    writes = [w for p in points for w in export.outputs(p.args)]  # --out_dir itself first
    writes += [
        safe.Output(files.join(out_dir, f"sweep.{e}"), "--out_dir") for e in leaderboard.FILES
    ]
    writes.append(safe.Output(sweep_dir, "--out_dir", folder=True, adds_to=True))
    reads = safe.split_inputs(base.data_root) + registry.models_inputs(base.models)
    safe.claim(writes, reads)  # before any work
    todo = [p for p in points if run_file.completed_run(out_dir, p.hash) is None]
    todo_keys = {p.key for p in todo}
    print(
        f"sweep: {len(points)} points, {len(points) - len(todo)} already complete (skipped), "
        f"{len(todo)} to train; out_dir {out_dir}",
        flush=True,
    )
    if args.dry_run:
        for p in points:
            print(f"  {'todo' if p.key in todo_keys else 'done'}  {p.key}  {p.describe()}")
        return SweepSummary([], 0, len(points) - len(todo), {})
    if todo:
        pipeline.check_runner(args.runner)
    plan = dict(grid=args.grid, random=args.random, random_seed=args.random_seed)
    plan.update(base=base.to_argv())
    plan["points"] = [
        dict(key=p.key, hash=p.hash, values=p.values, flags=p.args.to_argv()) for p in points
    ]
    pipeline.write_record(files.join(sweep_dir, "plan.json"), plan)
    error = pipeline.train_points(todo, sweep_dir, args, len(points)) if todo else ""
    records = [pipeline.read_record(pipeline.record_path(sweep_dir, p.key)) for p in points]
    infos = [run_file.completed_run(out_dir, p.hash) for p in points]
    rows = leaderboard.rank_rows(list(map(leaderboard.leaderboard_row, points, infos, records)))
    ensemble = _ensemble(rows, args.ensemble_top, out_dir, base) if args.ensemble_top else None
    paths = leaderboard.write(rows, out_dir, base.tensorboard, ensemble)
    trained = sum(r.status in ("ok", "nan") and r.point.key in todo_keys for r in rows)
    summary = SweepSummary(rows, trained, len(points) - len(todo), paths, ensemble)
    _report(summary, error)
    return summary


def _report(summary: SweepSummary, pipeline_error: str) -> None:
    """Prints the summary; raises SweepFailed naming what was not ok."""
    rows, ens = summary.rows, summary.ensemble or {}
    print(
        f"sweep: {len(rows)} points: {summary.trained} trained, {summary.skipped} skipped "
        f"(already complete), {len(summary.failed)} not ok"
    )
    print("wrote " + ", ".join(summary.paths[k] for k in leaderboard.FILES))
    print(f"TensorBoard (HParams): tensorboard --logdir {summary.paths['tensorboard']}")
    best = next((r for r in rows if r.ok), None)
    if best:
        name = formats.model_dir_name(best.point.hash)
        print(f"best: score {best.score:.4f}  {best.point.describe()}  {name}")
    if ens and not ens["error"]:
        print(f"ensemble of the {len(ens['members'])} best: score {ens['score']:.4f}  {ens['dir']}")
    bad = summary.failed
    if not bad and not pipeline_error:
        if ens.get("error"):
            raise SweepFailed(f"--ensemble_top: {ens['error']}", summary)
        return
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
        f"{stopped}{len(bad)} of {len(rows)} points not ok: {named}{more}; see "
        f"{summary.paths['md']}{retry}",
        summary,
    )


def _ensemble(rows: list[Row], k: int, out_dir: str, base: TrainArgs) -> dict[str, Any]:
    """The ensemble of the `k` best ok points in `<out_dir>/ensemble_top<k>` (the one there
    if its members are the same), or the one-line reason it could not be built."""
    best = [r for r in rows if r.ok][:k]
    target = files.join(out_dir, f"ensemble_top{k}")
    info: dict[str, Any] = dict(k=k, dir=target, members=[r.point.key for r in best], error="")
    if len(best) < 2:
        return dict(info, error=f"{len(best)} ok point(s); an ensemble needs at least 2")
    record = files.join(target, "sweep_ensemble.json")
    previous = pipeline.read_record(record)
    if previous and previous["members"] == info["members"] and run_file.whole_run(previous["dir"]):
        return previous
    print(f"sweep: building the ensemble of the {len(best)} best points", flush=True)
    from tpu_tiles_models import ensemble as ensembles  # TensorFlow, only now

    try:
        dirs = [run_file.model_dir_path(out_dir, r.point.hash) for r in best]
        result = ensembles.build_ensemble(
            dirs, target, data_root=base.data_root, cache_dir=base.cache_dir or None, progress=False
        )
    except UserError as e:
        return dict(info, error=one_line(e))
    errors = {int(n): v for n, v in result.val_errors.items()}
    info.update(dir=str(result.model_dir), run_file=str(result.run_file), top1=errors[1])
    info.update(top5=errors[5], top10=errors[10], score=1.0 - errors[5])
    info["results_csv"] = str(result.results_csv or "")
    for key in pipeline.ENSEMBLE_FILES:  # the ensemble of other members, replaced
        if previous and previous.get(key) and previous[key] != info[key]:
            files.remove(previous[key])
    # Its files by name: `target` (build_ensemble's out_dir) holds them all.
    pipeline.write_record(
        record, dict(info, **{k: files.basename(info[k]) for k in pipeline.ENSEMBLE_FILES})
    )
    return info


# -- its records ------------------------------------------------------------------------------
