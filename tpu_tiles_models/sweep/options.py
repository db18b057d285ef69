"""`SweepArgs`: every option of `tpu-tiles sweep`, parsed and checked once by the command line.

The sweep's own flags are argparse's (`add_flags`). Every other flag on the line is either a
`tpu-tiles train` flag, the base of every point (absl syntax, parsed by `TrainArgs.from_argv`),
or an Apache Beam pipeline option passed on to the runner (`split_argv` tells them apart).
This module imports no TensorFlow (Beam's parser only when Beam options are given).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Sequence

from tpu_tiles_models import files, pipelines
from tpu_tiles_models.errors import FlagError
from tpu_tiles_models.sweep import store
from tpu_tiles_models.train_args import BOOLEAN_FLAGS, TrainArgs, flag_named

ISOLATIONS = ("process", "none")


@dataclasses.dataclass(frozen=True)
class SweepArgs:
    """The sweep's options; `base` holds the train flags every point starts from.

    Build it with `from_argv` or `from_namespace` (the command line), or in code; invalid
    counts raise `FlagError` naming the flag. Its defaults are the flags' (`add_flags`).
    """

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
        if self.isolation not in ISOLATIONS:
            raise FlagError(f"--isolation must be one of {', '.join(ISOLATIONS)}")

    @property
    def out_dir(self) -> str:
        """Where every point's artifacts and the leaderboard go (`~` expanded)."""
        return files.expand(self.base.out_dir)

    @classmethod
    def from_namespace(cls, a: argparse.Namespace, extra: Sequence[str]) -> SweepArgs:
        """From the flags of `add_flags` and the rest of the line (train flags, Beam options).

        Raises:
          FlagError: a bad count, a stray argument, a flag that is neither a train flag nor a
            Beam option, or a train flag the sweep sets itself.
        """
        train_argv, beam_argv = split_argv(list(extra))
        return cls(
            grid=a.grid,
            base=base_args(train_argv, a.out_dir),
            beam_argv=tuple(beam_argv),
            random=a.random,
            random_seed=a.random_seed,
            runner=a.runner,
            num_workers=a.num_workers,
            isolation=a.isolation,
            ensemble_top=a.ensemble_top,
            dry_run=a.dry_run,
        )

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> SweepArgs:
        """Parses a `tpu-tiles sweep` command line (without the program and command names)."""
        parser = argparse.ArgumentParser(prog="tpu-tiles sweep")
        add_flags(parser)
        a, extra = parser.parse_known_args(argv)
        return cls.from_namespace(a, extra)


def add_flags(p: argparse.ArgumentParser) -> None:
    """The sweep's own flags; every other flag is a `tpu-tiles train` flag or a Beam option."""
    p.add_argument(
        "--grid", required=True, help="YAML/JSON file, or inline 'model=A,B lr=1e-3,2e-3 seed=0,1'"
    )
    p.add_argument("--out_dir", required=True, help="every point's artifacts and the leaderboard")
    p.add_argument(
        "--random",
        type=int,
        default=SweepArgs.random,
        metavar="N",
        help="draw N points per grid from its lists and ranges",
    )
    p.add_argument(
        "--random_seed", type=int, default=SweepArgs.random_seed, help="seed of the --random draws"
    )
    p.add_argument(
        "--runner",
        default=SweepArgs.runner,
        help="Beam runner: DirectRunner, DataflowRunner, FlinkRunner, SparkRunner",
    )
    p.add_argument(
        "--num_workers",
        type=int,
        default=SweepArgs.num_workers,
        help="DirectRunner: parallel worker processes (default: cores); others: "
        "passed on as Beam's --num_workers",
    )
    p.add_argument(
        "--isolation",
        choices=ISOLATIONS,
        default=SweepArgs.isolation,
        help="train each point in a fresh child process (default) or in the worker",
    )
    p.add_argument(
        "--ensemble_top",
        type=int,
        default=SweepArgs.ensemble_top,
        metavar="K",
        help="when done, build the ensemble of the K best points",
    )
    p.add_argument("--dry_run", action="store_true", help="list the points and exit")
    p.epilog = (
        "Other flags: any `tpu-tiles train` flag (the base of every point; see tpu-tiles "
        "train --help) and any Apache Beam pipeline option (--project, --region, "
        "--temp_location, --flink_master, --direct_running_mode, ...)."
    )


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Splits the extra arguments into `tpu-tiles train` flags and Beam pipeline options.

    Raises:
      FlagError: a stray positional argument, or a flag that is neither.
    """
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
    _check_beam_argv(beam_argv)
    return train_argv, beam_argv


def base_args(train_argv: list[str], out_dir: str) -> TrainArgs:
    """The train flags every point starts from, with the sweep's out_dir and TensorBoard."""
    if any(t.lstrip("-").split("=")[0] == "results_csv" for t in train_argv):
        raise FlagError("--results_csv is named per point by the sweep; remove it")
    # One spelling (`SW`, `./SW/`, absolute, a link): it is in every point's hash, which
    # resume looks the finished points up by.
    out_dir = files.canonical(out_dir, what="--out_dir")
    base = TrainArgs.from_argv(train_argv, prog="tpu-tiles sweep").replace(
        out_dir=out_dir, no_progress=True
    )
    if not base.tensorboard:
        base = base.replace(tensorboard=files.join(files.expand(out_dir), store.TENSORBOARD_DIR))
    # Paths may be remote (gs://): the trainer goes through tf.io.gfile. Not --models, a
    # Python file imported by every point, and the trainer checks it only once data is read.
    files.require_local(base.models, flag="--models")
    return base


def _beam_parser():
    """An argparse parser of every Beam pipeline option (as Beam itself builds it)."""
    from apache_beam.options import pipeline_options as po

    parser = po._BeamArgumentParser(allow_abbrev=False)
    classes = {str(c): c for c in reversed(po.PipelineOptions.__subclasses__())}
    for cls in classes.values():
        cls._add_argparse_args(parser)

    def error(message: str) -> None:  # one line, not argparse's usage of 177 options
        raise FlagError(f"Beam pipeline option: {message}")

    parser.error = error
    return parser


def _check_beam_argv(beam_argv: list[str]) -> None:
    if not beam_argv:
        return
    with pipelines.quiet_beam():
        _, unknown = _beam_parser().parse_known_args(beam_argv)
    flags = [t for t in unknown if t.startswith("-")]
    if flags:
        raise FlagError(
            f"unknown flag {flags[0].split('=')[0]}: neither a `tpu-tiles train` flag "
            "(tpu-tiles train --help) nor an Apache Beam pipeline option"
        )
