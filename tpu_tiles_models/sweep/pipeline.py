"""The sweep's Apache Beam pipeline: `Create | Reshuffle | Map(train_element)` on any runner,
each point trained in a fresh child process of its worker (`child_main`), so that a crash or an
out-of-memory kill is the point's failure only; its runner and options; Ctrl-C through the
file `sweep/STOP`; the sweep's records (each point's outcome, the ensemble's), where they go and
how they are read back.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Protocol, Sequence

from tpu_tiles_models import export, files, formats, interrupts, pipelines, run_file, safe
from tpu_tiles_models.errors import FlagError, one_line
from tpu_tiles_models.sweep.grid import Point
from tpu_tiles_models.train_args import TrainArgs

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"  # not among Beam's short names
# Set in a worker once a point was interrupted: it starts no other. Workers elsewhere see
# the driver's Ctrl-C through the file `sweep/STOP`.
STOPPED = threading.Event()
# A point's child process: trains the TrainArgs in file argv[1], writes its outcome to argv[2].
CHILD = (
    "import sys; from tpu_tiles_models.sweep.pipeline import child_main; "
    "sys.exit(child_main(*sys.argv[1:]))"
)
# A child's exit status when a stop signal (Ctrl-C, SIGTERM, SIGHUP) stopped it cleanly.
INTERRUPTED_STATUSES = frozenset(128 + int(s) for s in interrupts.STOP_SIGNALS)
DASK_EXTRA = "install it with: pip install 'tpu-tiles-models[dask]'"


class Flags(Protocol):
    """What the pipeline reads of the command's options (`sweep.SweepArgs`, or its flags)."""

    runner: str
    num_workers: int | None
    isolation: str
    beam_argv: Sequence[str]


# -- the records ----------------------------------------------------------------------------------


def record_path(sweep_dir: str, key: str) -> str:
    return files.join(sweep_dir, "points", f"{key}.json")


# What the sweep reads of its records: the ensemble's (`sweep_ensemble.json`) and a point's
# outcome (`record_path`). Other keys are kept for people to read.
_ENSEMBLE_FIELDS: formats.Fields = dict(
    members=(list,), dir=(str,), error=(str,), run_file=(str,), results_csv=(str,)
) | {k: formats.NUMBER for k in ("score", "top1", "top5", "top10")}
# The ensemble record's files, named inside its folder ("" for none): a copied sweep's record
# names its own copies, and a name that leaves the folder is refused (`files.within`).
ENSEMBLE_FILES = ("dir", "run_file", "results_csv")
_POINT_FIELDS: formats.Fields = dict(
    status=(str,), error=(str,), wall_s=(*formats.NUMBER, type(None))
)


def read_record(path: str) -> dict | None:
    """The record's JSON, an ensemble's files by their paths; None if it does not exist or is
    not whole."""
    try:
        value = json.loads(files.read_bytes(path))
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, ValueError):
        return None
    ensemble = files.basename(path) == "sweep_ensemble.json"
    fix = "it is the sweep's bookkeeping: delete it and rerun the sweep"
    value = formats.checked(path, value, _ENSEMBLE_FIELDS if ensemble else _POINT_FIELDS, fix)
    folder = os.path.dirname(path)
    for key in ENSEMBLE_FILES if ensemble else ():
        if value[key]:
            value[key] = files.within(folder, value[key], where=f"{path}: {key!r}", fix=fix)
    return value


def write_record(path: str, value: Any) -> None:
    text = json.dumps(value, indent=1, allow_nan=False)
    safe.write_bytes(path, text.encode(), flag="--out_dir")


# -- the runner ---------------------------------------------------------------------------------


def _runner(name: str) -> str:
    return DASK_RUNNER if name.lower().removesuffix("runner") == "dask" else name


def pipeline_options(a: Flags, beam_argv: Sequence[str]):
    """Beam's options: the user's, the runner, and our defaults: on the DirectRunner
    multi-processing with `--num_workers` processes, quiet workers; on Dask one point a task
    (Beam's default puts 128 elements in a task, so one worker would train them all)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    given = {t.lstrip("-").split("=")[0] for t in beam_argv if t.startswith("--")}
    runner = _runner(a.runner)
    extra: dict[str, Any] = {"runner": runner}
    if runner.lower().removesuffix("runner") == "direct":
        defaults = dict(
            direct_running_mode="multi_processing",
            direct_num_workers=a.num_workers or pipelines.cores(),
            default_sdk_harness_log_level="ERROR",
        )
        extra.update({k: v for k, v in defaults.items() if k not in given})
    elif a.num_workers and "num_workers" not in given:
        extra["num_workers"] = a.num_workers
    if runner == DASK_RUNNER and not given & {"dask_npartitions", "dask_partition_size"}:
        extra["partition_size"] = 1  # DaskOptions' dest for --dask_partition_size
    return PipelineOptions(list(beam_argv), **extra)


def check_runner(name: str) -> None:
    """Fails, in one line, unless Beam has a runner of this name (its extras installed)."""
    try:
        with pipelines.quiet_beam():
            from apache_beam.runners.runner import create_runner

            create_runner(_runner(name))
    except ImportError as e:
        hint = f"; {DASK_EXTRA}" if _runner(name) == DASK_RUNNER else ""
        raise FlagError(f"--runner {name}: {one_line(e)}{hint}") from None
    except (ValueError, AttributeError):
        raise FlagError(
            f"--runner {name}: not a Beam runner; use DirectRunner, DaskRunner, DataflowRunner, "
            "FlinkRunner, SparkRunner or PortableRunner"
        ) from None


# -- the pipeline and its step -----------------------------------------------------------------


def train_points(todo: Sequence[Point], sweep_dir: str, args: Flags, total: int) -> str:
    """Runs the pipeline over `todo`, printing a line per finished point; returns the
    pipeline's error ('' if it finished)."""
    options = pipeline_options(args, args.beam_argv)
    for p in todo:  # outcomes of earlier attempts: these points are tried again
        files.remove(record_path(sweep_dir, p.key))
    STOPPED.clear()
    stop = files.join(sweep_dir, "STOP")
    files.remove(stop)
    elements = [json.dumps(dict(key=p.key, args=p.args.to_dict())) for p in todo]

    def pipeline() -> None:
        with pipelines.quiet_beam():
            import apache_beam as beam

            with beam.Pipeline(options=options) as p:
                # Reshuffle: a distributed runner would fuse every point onto one worker.
                spread = p | "Points" >> beam.Create(elements) | "Spread" >> beam.Reshuffle()
                train = beam.Map(train_element, sweep_dir=sweep_dir, isolation=args.isolation)
                _ = spread | "Train" >> train

    def on_ctrl_c(previous) -> None:  # running points get it too (children, or `previous`)
        safe.write_bytes(stop, b"")
        what = "Ctrl-C" if not interrupts.noted() else interrupts.name()
        print(f"sweep: {what}: no new point starts; running points stop at a safe point")
        signal.signal(signal.SIGINT, previous)  # a second Ctrl-C is handled as usual
        if not interrupts.noted() and callable(previous):
            if previous is not signal.default_int_handler:
                previous(signal.SIGINT, None)

    done = threading.Event()
    progress = threading.Thread(target=_progress, args=(todo, sweep_dir, total, done))
    error, pressed = "", False
    progress.start()
    try:
        pressed = pipelines.run_shielded(pipeline, on_ctrl_c)[1]
    except Exception as e:  # a failed job: record what is missing, keep what finished
        error = one_line(e)
    finally:
        done.set()
        progress.join()
        files.remove(stop)
    if pressed or STOPPED.is_set():
        raise KeyboardInterrupt
    return error


def _progress(todo: Sequence[Point], sweep_dir: str, total: int, done: threading.Event) -> None:
    """A line per finished point (from its outcome record) until `done`."""
    points, seen, failed = {p.key: p for p in todo}, set(), 0
    interval = 15.0 if files.is_remote(sweep_dir) else 2.0
    finished = False
    while not finished:
        finished = done.wait(interval)
        for path in sorted(files.glob(record_path(sweep_dir, "*"))):
            key = os.path.basename(path)[: -len(".json")]
            record = read_record(path) if key in points and key not in seen else None
            if record is None:
                continue
            seen.add(key)
            is_failed = record["status"] == "failed"
            failed += is_failed
            what = record["error"] if is_failed else f"{record.get('wall_s', 0):.0f} s"
            print(
                f"sweep: [{total - len(points) + len(seen)}/{total}] {record['status']:<7} "
                f"{points[key].describe()}  {what}  ({failed} failed)",
                flush=True,
            )


def train_element(element: str, sweep_dir: str, isolation: str) -> dict:
    """The pipeline's step, on a worker: trains one point (JSON `{"key", "args"}`) unless it
    is complete meanwhile, and records its outcome (unless interrupted)."""
    point = json.loads(element)
    args, key = TrainArgs.from_dict(point["args"]), point["key"]
    record = dict(key=key, hash=args.hash(), host=socket.gethostname(), pid=os.getpid())
    if STOPPED.is_set() or files.exists(files.join(sweep_dir, "STOP")):
        return dict(record, status="interrupted", error="not started: the sweep was interrupted")
    export.recover(args.out_dir)  # a killed attempt at this or another point
    if run_file.completed_run(args.out_dir, record["hash"]) is not None:
        record.update(status="skipped", error="")  # finished meanwhile (another sweep)
    else:
        export.remove_unfinished(args)
        start = time.time()
        log = files.join(sweep_dir, "logs", f"{key}.log")
        here = isolation != "process"
        outcome = _train_here(args) if here else _train_in_child(args, log)
        record.update(outcome, wall_s=round(time.time() - start, 2), finished=time.time())
        if outcome["status"] == "interrupted":
            STOPPED.set()
            return record
    write_record(record_path(sweep_dir, key), record)
    return record


def _train_here(args: TrainArgs) -> dict:
    """Trains in this process; any exception (not Ctrl-C) is a failed outcome."""
    from tpu_tiles_models import train

    try:
        train.train(args)
    except KeyboardInterrupt:
        return dict(status="interrupted", error="interrupted")
    except Exception as e:  # failures are data: the sweep goes on with the other points
        return dict(status="failed", error=one_line(e), traceback=traceback.format_exc())
    return dict(status="ok", error="")


def _train_in_child(args: TrainArgs, log_path: str) -> dict:
    """Trains in a fresh Python process whose output goes to `log_path`, and reads its
    outcome. It shares this process group, so a terminal's Ctrl-C reaches it (the worker
    ignores it)."""
    with tempfile.TemporaryDirectory(prefix="tpu_tiles_point_") as tmp:
        spec, outcome_path = Path(tmp, "args.json"), Path(tmp, "outcome.json")
        spec.write_text(json.dumps(args.to_dict()))
        remote = files.is_remote(log_path)
        local_log = Path(tmp, "train.log") if remote else Path(files.expand(log_path))
        local_log.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        with open(local_log, "wb") as log:
            command = [sys.executable, "-c", CHILD, str(spec), str(outcome_path)]
            proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
            while True:
                try:
                    code = proc.wait()
                    break
                except KeyboardInterrupt:  # the child got it too and is cleaning up
                    STOPPED.set()
        if remote:
            safe.write_bytes(log_path, local_log.read_bytes())
        outcome = read_record(str(outcome_path))
    if code in INTERRUPTED_STATUSES:
        return dict(status="interrupted", error="interrupted")
    if outcome is not None:
        return outcome
    why = f"exited with status {code}"
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        why = f"was killed by {name}" + (" (out of memory?)" if -code == signal.SIGKILL else "")
    return dict(status="failed", error=f"the training process {why}; see {log_path}")


def child_main(spec: str, outcome_path: str) -> int:
    """A point's child process (`CHILD`)."""
    args = TrainArgs.from_dict(json.loads(Path(spec).read_text()))
    with interrupts.deferred():  # SIGINT arrives ignored (see run_shielded): handle it here
        # A Ctrl-C to this child when its worker dies (a SIGTERM to the whole process group
        # kills the workers; their children must not train on unwatched). Linux only.
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            if ctypes.CDLL(None).prctl(1, int(signal.SIGINT)) == 0 and os.getppid() == 1:
                interrupts.note(signal.SIGINT)  # 1: PR_SET_PDEATHSIG; the worker died before it
        outcome = _train_here(args)
    if outcome["status"] == "interrupted":
        print(f"{interrupts.name()}: removed what this point had started", file=sys.stderr)
        return interrupts.exit_status()
    if outcome.get("traceback"):
        print(outcome["traceback"], file=sys.stderr)
    Path(outcome_path).write_text(json.dumps(outcome))
    return 0 if outcome["status"] == "ok" else 1
