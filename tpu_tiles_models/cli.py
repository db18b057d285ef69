"""`tpu-tiles`: the command line of the package. Each subcommand is a thin front end.

Here the promises of docs/reliability.md's first section are kept: one line and exit status 2
for a `UserError` (any other exception is our bug and keeps its traceback), 128 + the signal's
number for a stop signal (`interrupts`), 141 for a closed standard output.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import errno
import json
import os
import signal
import sys
import threading
import time
import warnings
from typing import Callable

# Before anything imports TensorFlow: its C++ start-up logging (CUDA plugin registration,
# oneDNN, TensorRT) would otherwise come before our own output. A user's setting wins.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from tpu_tiles_models import defaults, interrupts, tf_start  # noqa: E402  (after the logging setting)
from tpu_tiles_models.errors import UserError, one_line  # noqa: E402

EXIT_USER_ERROR = 2


def _train(a: argparse.Namespace) -> None:
    from tpu_tiles_models.train_args import TrainCommand

    command = TrainCommand.from_argv(a.extra)
    if command.seeds:
        from tpu_tiles_models import ensemble

        ensemble.train_seeds(command.args, command.seeds, ensemble=command.ensemble)
    else:
        from tpu_tiles_models import train

        train.train(command.args)


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
        combine=a.combine,
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

    if a.json:
        print(json.dumps(registry.describe_json(), indent=1, allow_nan=False))
    else:
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
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {text} (see {self.prog} --help)\n")


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
    from tpu_tiles_models import demo, inspection, sweep, synthetic

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
        inspection.run,
        "a data report of a data root, real or synthetic",
        epilog=inspection.EPILOG,
    )
    inspection.add_flags(p)

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
    p.add_argument("--combine", default="zscore", help="zscore, rank or minmax")
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

    p = command("models", _models, "list the model classes and the recommended one")
    p.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object instead: {"models": {name: description}, "recommended": '
        '{"model", "flags", "kwargs"}}',
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    closed = _standard_streams()  # before anything prints, argparse's --help included
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command not in _ABSL_COMMANDS:  # the subcommand's, which has the flags
        args.parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    # Run as a program (argv None), a stop signal after the work still gets its one line.
    then = _stopped_when_done(args.command) if argv is None else None
    if then:
        # The last exit handler to run: after it the interpreter puts back the default
        # handlers (death without a word), so a signal then is ignored and the status stands.
        atexit.register(_ignore_stop_signals)
    status = _run(args, _Output(sys.stdout, closed=1 in closed), then)
    if argv is None:
        _end_lingering_threads(args.command, status)
    return status


def _run(args: argparse.Namespace, stdout: _Output, then: Callable | None) -> int:
    """Runs the command; its exit status."""
    command = args.command

    def warn(message, category, filename, lineno, file=None, line=None) -> None:
        text = " ".join(str(message).split())  # one line, without the source line
        print(f"tpu-tiles {command}: warning: {text}", file=file or sys.stderr)

    try:
        with contextlib.ExitStack() as stack:  # (no parenthesized `with`: Python 3.9)
            stack.enter_context(interrupts.deferred(then=then))
            stack.enter_context(warnings.catch_warnings())
            stack.enter_context(contextlib.redirect_stdout(stdout))
            stack.enter_context(contextlib.redirect_stderr(_Output(sys.stderr)))
            warnings.showwarning = warn
            if command not in _NO_TENSORFLOW:
                tf_start.load_tensorflow()
            args.fn(args)
            stdout.flush()
            if interrupts.noted():  # after its last safe point: what it wrote is whole
                _say(f"tpu-tiles {command}: {_how()} {_WHEN_DONE}")
                return interrupts.exit_status()
    except KeyboardInterrupt:
        _say(f"tpu-tiles {command}: {_how()}; removed what this run had started")
        return interrupts.exit_status()
    except UserError as e:
        _say(f"tpu-tiles {command}: error: {' '.join(str(e).split())}")
        return EXIT_USER_ERROR
    # A user's models.py failing while it runs (a `forward` that raises, or calls sys.exit(),
    # which would end the command without a word): its fault, one line naming its line.
    except (Exception, SystemExit) as e:
        from tpu_tiles_models import registry

        where = registry.fault_site(e)
        if where is None:
            raise
        reason = registry.exit_call(e) if isinstance(e, SystemExit) else one_line(e)
        _say(f"tpu-tiles {command}: error: {where}: {reason}; fix the file")
        return EXIT_USER_ERROR
    return stdout.status(command)


def _end_lingering_threads(command: str, status: int) -> None:
    """Exits with `status` at once, after the exit handlers, when threads that are not daemons
    outlive the work by a second, naming them: the package starts none, so they are user
    code's (a models.py's), and the interpreter would wait for them forever."""
    deadline = time.monotonic() + 1.0
    left = []
    for thread in threading.enumerate():
        if thread is threading.main_thread() or thread.daemon:
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            left.append(thread.name)
    if not left:
        return
    _say(
        f"tpu-tiles {command}: warning: its work done, it stopped {len(left)} thread(s) that "
        f"this package did not start ({', '.join(left)}; a models.py's?), which would have "
        "kept it running"
    )
    atexit._run_exitfuncs()  # what the interpreter would run at exit, before it waits for them
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


# What a stop signal that came once the work was done says: nothing was removed.
_WHEN_DONE = "after it had finished; its outputs are complete"


def _how() -> str:
    return "interrupted" if interrupts.name() == "SIGINT" else f"stopped by {interrupts.name()}"


def _stopped_when_done(command: str) -> Callable[[int, object], None]:
    """The stop signals' handler once `main`'s work is done: one line, the signal's status."""

    def stop(signum: int, frame: object) -> None:
        interrupts.note(signum)
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        _say(f"tpu-tiles {command}: {_how()} {_WHEN_DONE}")
        os._exit(interrupts.exit_status())

    return stop


def _ignore_stop_signals() -> None:
    for signum in interrupts.STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def _standard_streams() -> list[int]:
    """Points each closed standard file descriptor (`>&-`) at os.devnull, with a Python stream,
    so that no file the command opens takes its number (where a print or TensorFlow's logging
    would then write); returns those it did."""
    closed = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            closed.append(fd)
    if sys.stdout is None or 1 in closed:
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115  (the process's own)
    if sys.stderr is None or 2 in closed:
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    return closed


class _Output:
    """`sys.stdout` or `sys.stderr` for one command: after a failed write (`| head`, a full
    disk, a closed stream) the rest of the output is dropped, so the command runs on and writes
    every file; a character the terminal's encoding lacks is written escaped (`\\xe9`)."""

    def __init__(self, stream, *, closed: bool = False) -> None:
        self._stream = stream
        self._closed = closed  # reopened on os.devnull: the first write fails
        self.error: OSError | None = None

    def write(self, text: str) -> int:
        if self._closed and text and self.error is None:
            self.error = OSError(errno.EBADF, "it is closed")
        if self.error is None:
            try:
                self._stream.write(text)
            except UnicodeEncodeError:
                enc = getattr(self._stream, "encoding", None) or "ascii"
                self.write(text.encode(enc, "backslashreplace").decode(enc))
            except OSError as err:
                self._failed(err)
        return len(text)

    def flush(self) -> None:
        if self.error is None:
            try:
                self._stream.flush()
            except OSError as err:
                self._failed(err)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)

    def _failed(self, err: OSError) -> None:
        self.error = err
        # What is still buffered would fail again when the interpreter exits, with a
        # traceback-like "Exception ignored" and status 120: send it nowhere instead.
        with contextlib.suppress(Exception):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def status(self, command: str) -> int:
        """The exit status once the command succeeded: 0, 141 for a reader that stopped
        reading (as SIGPIPE), or 2 with one line for any other failed write."""
        if self.error is None:
            return 0
        if self.error.errno == errno.EPIPE:
            return 128 + 13  # SIGPIPE's number on every POSIX system
        reason = self.error.strerror or type(self.error).__name__
        _say(
            f"tpu-tiles {command}: error: cannot write to standard output ({reason}); the "
            "files it writes are complete; send the output where it can be written"
        )
        return EXIT_USER_ERROR


def _say(line: str) -> None:
    """Prints to stderr; after SIGHUP the terminal may be gone, which must not hide the exit."""
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
