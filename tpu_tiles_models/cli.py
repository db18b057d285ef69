"""`tpu-tiles`: the command line of the package. Each subcommand is a thin front end; the
process it runs in (streams, signals, exit statuses: docs/reliability.md's first section) is
`process`'s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Callable

# Before anything imports TensorFlow: its C++ start-up logging (CUDA plugin registration,
# oneDNN, TensorRT) would otherwise come before our own output. A user's setting wins.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from tpu_tiles_models import defaults, process  # noqa: E402  (after the logging setting)


def _train(a: argparse.Namespace) -> None:
    from tpu_tiles_models import train
    from tpu_tiles_models.train_args import TrainArgs

    train.train(TrainArgs.from_argv(a.extra))


def _predict(a: argparse.Namespace) -> None:
    from tpu_tiles_models import predict

    path, rows = predict.predict_to_csv(
        a.dir,
        a.data_root,
        a.out,
        top_k=a.top_k,
        keep_default=a.keep_default,
        cache_dir=a.cache_dir or None,
        models_path=a.models,
        progress=not a.no_progress,
    )
    print(f"wrote {path} ({rows} kernels)")


def _kaggle(a: argparse.Namespace) -> None:
    from tpu_tiles_models import kaggle

    counts = kaggle.merge_kaggle(a.sample, a.inputcsv, a.out)
    print(f"wrote {a.out}: {counts}")


def _install(a: argparse.Namespace) -> None:
    from tpu_tiles_models import install

    run = install.uninstall if a.uninstall else install.install
    print("\n".join(run(a.root, force=a.force)))


def _evaluate(a: argparse.Namespace) -> None:
    from tpu_tiles_models import evaluate, safe

    writes = [(a.json, "--json"), (a.png, "--png")]
    result = evaluate.evaluate_dirs(
        a.dirs,
        a.data_root,
        cache_dir=a.cache_dir or None,
        models_path=a.models,
        progress=not a.no_progress,
        outputs=[safe.Output(path, flag) for path, flag in writes if path],
    )
    written = evaluate.write_outputs(result, json_path=a.json, png_path=a.png)
    print(evaluate.format_table(result))  # after the files: `| head` loses none of them
    for path in written:
        print(f"wrote {path}")


def _bundle(a: argparse.Namespace) -> None:
    from tpu_tiles_models import bundle

    out = bundle.make_bundle(a.dir, a.out, models_path=a.models)
    print(f"wrote {out}: " + ", ".join(sorted(p.name for p in out.iterdir())))


def _check(a: argparse.Namespace) -> None:
    from tpu_tiles_models import bundle

    report = bundle.check_bundle(
        a.dir, a.data_root, cache_dir=a.cache_dir or None, progress=not a.no_progress
    )
    print(report.table())
    report.raise_for_failure()


def _ensemble(a: argparse.Namespace) -> None:
    from tpu_tiles_models import ensemble

    ensemble.build_ensemble(
        [d for d in a.dirs.split(",") if d.strip()],
        a.out_dir,
        data_root=a.data_root,
        cache_dir=a.cache_dir or None,
        run_id=a.run_id,
        overwrite=a.overwrite,
        results_csv=a.results_csv,
        progress=not a.no_progress,
    )


def _columns(a: argparse.Namespace) -> None:
    from tpu_tiles_models import data, files, registry

    how = dict(min_train_configs=a.configs, toy_data=a.toy_data, progress=not a.no_progress)
    train = data.load_dataset(
        files.expand(a.data_root), cache_dir=a.cache_dir or None, splits=("train",), **how
    )
    print(json.dumps({"tile_geometry": registry.column_map(train.stats, train.train)}))


def _models(a: argparse.Namespace) -> None:
    from tpu_tiles_models import registry

    print(registry.describe())


def _add_data_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data_root", default=defaults.data_root(), help=defaults.DATA_ROOT_HELP)
    p.add_argument("--cache_dir", default=defaults.CACHE_DIR, help=defaults.CACHE_DIR_HELP)
    p.add_argument("--no_progress", action="store_true", help="no progress bars (logs, CI)")


def _add_models_flag(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--models", help=f"models.py file or upstream checkout {what} (default: ours)")


class _Parser(argparse.ArgumentParser):
    """Errors in one line, `<prog>: error: <message>`, and exit status 2."""

    def error(self, message: str):
        text = " ".join(message.split())
        self.exit(process.EXIT_USER_ERROR, f"{self.prog}: error: {text} (see {self.prog} --help)\n")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every flag's help ends with its default, unless it says it already or is required."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            "default" in text
            or action.required
            or action.default in (None, argparse.SUPPRESS)
            or not action.option_strings
        ):
            return text
        default = "off" if action.default is False else repr(action.default)
        return f"{text} (default: {default})"


# Commands whose flags are upstream's absl flags: argparse hands them everything after the
# command name, and `TrainArgs.from_argv` parses it with absl's rules.
_ABSL_COMMANDS = ("train", "sweep")
# Commands that never load TensorFlow; every other loads it first, without its start-up notices.
_NO_TENSORFLOW = ("synth", "inspect", "kaggle", "install")


def build_parser() -> _Parser:
    """The `tpu-tiles` parser; importing it loads no TensorFlow."""
    from tpu_tiles_models import demo, sweep, synthetic
    from tpu_tiles_models.inspection import command as inspect_command

    parser = _Parser(prog="tpu-tiles", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, fn: Callable, help: str, **kw) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, formatter_class=_HelpFormatter, **kw)
        p.set_defaults(fn=fn, parser=p)  # an error in `main` names the subcommand
        return p

    p = command(
        "synth",
        lambda a: synthetic.run(synthetic.SynthArgs.from_namespace(a)),
        "generate a synthetic TpuGraphs tile:xla data set",
    )
    synthetic.add_flags(p)

    p = command(
        "inspect",
        inspect_command.run,
        "a data report of a data root, real or synthetic",
        epilog=inspect_command.EPILOG,
    )
    inspect_command.add_flags(p)

    command(
        "train",
        _train,
        "train a model; writes upstream's artifacts (--help lists the flags)",
        add_help=False,
    )

    p = command("predict", _predict, "rank the test split: predictions_model_output.csv")
    p.add_argument("--dir", required=True, help="the model_<hash> directory training wrote")
    _add_data_flags(p)
    p.add_argument("--out", default="predictions_model_output.csv", help="the CSV to write")
    p.add_argument("--top_k", type=int, default=5, help="configs listed per kernel")
    p.add_argument(
        "--keep_default",
        default="auto",
        help="keep config 0 (the compiler's default) in each kernel's top 5: auto (default) "
        "when the run's own validation chose it at the end of training, yes, or no",
    )
    _add_models_flag(p, "holding the model's class")

    p = command("kaggle", _kaggle, "merge predictions into the Kaggle submission, by ID")
    p.add_argument(
        "--inputcsv",
        default="predictions_model_output.csv",
        help="the predictions CSV (tpu-tiles predict's --out)",
    )
    p.add_argument(
        "--sample",
        default="sample_submission.csv",
        help="the competition's sample_submission.csv: every row, in its order",
    )
    p.add_argument("--out", default="predictions_kaggle.csv", help="the submission to write")

    p = command("install", _install, "copy our drop-in files into an upstream checkout")
    p.add_argument("root", help="the tpu_graphs checkout (git clone of upstream)")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace files you edited since the last install (your copy is kept in "
        ".tpu_tiles_backup/)",
    )
    p.add_argument(
        "--uninstall", action="store_true", help="restore upstream's files and remove ours"
    )

    p = command("evaluate", _evaluate, "top-k errors per benchmark on the valid split")
    p.add_argument("--dirs", required=True, help="model_<h> dirs or out_dirs, comma-separated")
    _add_data_flags(p)
    _add_models_flag(p, "holding the models' classes")
    p.add_argument("--json", default=None, help="also write the table as JSON here (default: no)")
    p.add_argument("--png", default=None, help="also draw a bar chart here (default: no)")

    p = command("bundle", _bundle, "make the course hand-in folder")
    p.add_argument("--dir", required=True, help="the model_<hash> directory to hand in")
    p.add_argument("--out", required=True, help="the hand-in folder to write (new or empty)")
    _add_models_flag(p, "to hand in")

    p = command("check", _check, "verify a hand-in folder as a grader would")
    p.add_argument("dir", help="the hand-in folder (tpu-tiles bundle's --out)")
    _add_data_flags(p)

    p = command(
        "sweep",
        lambda a: sweep.run(sweep.SweepArgs.from_namespace(a, a.extra)),
        "many trainings as one Apache Beam pipeline, resumable",
    )
    sweep.add_flags(p)

    p = command("ensemble", _ensemble, "one drop-in model from several trained runs")
    p.add_argument("--dirs", required=True, help="model_<h> dirs, comma-separated (two or more)")
    p.add_argument("--out_dir", default=defaults.OUT_DIR, help="where its artifacts go")
    p.add_argument(
        "--results_csv",
        default="",
        help="test predictions CSV ('': <out_dir>/results_<ms>.csv, as train)",
    )
    p.add_argument("--run_id", default="", help="a tag for the run; part of the hash")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a finished ensemble of the same options once this one has finished",
    )
    _add_data_flags(p)

    p = command(
        "demo",
        lambda a: demo.run(demo.DemoArgs.from_namespace(a)),
        "the whole journey on synthetic data, in a few minutes",
    )
    demo.add_flags(p)

    p = command(
        "columns",
        _columns,
        "the tile geometry's column map for a data root as upstream's preprocessing sees it: "
        "--model_kwargs_json for ResidualSAGE, upstream's trainer or ours",
    )
    p.add_argument("data_root", nargs="?", default=defaults.data_root(), help="the data root")
    p.add_argument("--configs", type=int, default=10, help="upstream's --configs (its default)")
    p.add_argument("--toy_data", action="store_true", help="upstream's --toy_data")
    p.add_argument("--cache_dir", default=defaults.CACHE_DIR, help=defaults.CACHE_DIR_HELP)
    p.add_argument("--no_progress", action="store_true", help="no progress bars (logs, CI)")

    command("models", _models, "list the model classes and the recommended one")
    return parser


def main(argv: list[str] | None = None) -> int:
    closed = process.standard_streams()  # before anything prints, argparse's --help included
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command not in _ABSL_COMMANDS:  # the subcommand's, which has the flags
        args.parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    return process.run(
        f"tpu-tiles {args.command}",
        lambda: args.fn(args),
        tensorflow=args.command not in _NO_TENSORFLOW,
        program=argv is None,
        stdout_closed=1 in closed,
    )


if __name__ == "__main__":
    sys.exit(main())
