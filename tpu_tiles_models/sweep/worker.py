"""One point on a Beam worker: train it (in a fresh child process, or here) and record how.

`train_element` is the pipeline's step. A point that is complete meanwhile (its whole run:
`export.completed_run`) is skipped; otherwise what an earlier attempt left (a run file without
its model, a killed run's hidden files) is removed and the point trains: with
`--isolation process` in a child (`child_main`, through `python -m tpu_tiles_models.sweep.child`),
so that a crash or an out-of-memory kill is this point's failure, not the worker's. The outcome
(`ok`, `failed` with its error, or `interrupted`) goes to `sweep/points/<key>.json`.
"""

from __future__ import annotations

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
from typing import Sequence

from tpu_tiles_models import export, files, interrupts
from tpu_tiles_models.errors import one_line
from tpu_tiles_models.sweep import store
from tpu_tiles_models.train_args import TrainArgs

# Set in a worker once a point was interrupted: the worker starts no further point. Workers
# of other processes or machines see the driver's Ctrl-C through the marker `sweep/STOP`.
STOPPED = threading.Event()
CHILD_MODULE = "tpu_tiles_models.sweep.child"
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
# A child's exit status when a stop signal (Ctrl-C, SIGTERM, SIGHUP) stopped it cleanly.
INTERRUPTED_STATUSES = frozenset(128 + int(s) for s in interrupts.STOP_SIGNALS)


def train_element(element: str, sweep_dir: str, isolation: str) -> dict:
    """The Beam step: trains one point (a JSON element) and records its outcome.

    Args:
      element: `{"key": ..., "args": TrainArgs.to_dict()}` as JSON.
      sweep_dir: `<out_dir>/sweep`, where the outcome `points/<key>.json` goes.
      isolation: "process" (a fresh child process) or "none" (this worker's process).

    Returns:
      The outcome record (also written, unless the point was interrupted).
    """
    point = json.loads(element)
    args = TrainArgs.from_dict(point["args"])
    record = _train_point(args, point["key"], sweep_dir, isolation)
    if record["status"] != "interrupted":
        store.write_json(store.record_path(sweep_dir, point["key"]), record)
    _count(record["status"])
    return record


def _train_point(args: TrainArgs, key: str, sweep_dir: str, isolation: str) -> dict:
    h = args.hash()
    record = dict(key=key, hash=h, host=socket.gethostname(), pid=os.getpid())
    if STOPPED.is_set() or files.exists(store.stop_marker(sweep_dir)):
        return dict(record, status="interrupted", error="not started: the sweep was interrupted")
    export.recover(args.out_dir)  # a killed attempt at this or another point
    if export.completed_run(args.out_dir, h) is not None:
        return dict(record, status="skipped", error="")  # finished meanwhile (another sweep)
    export.remove_unfinished(args)  # what an earlier attempt left: trained again from nothing
    start = time.time()
    if isolation == "process":
        outcome = _train_in_child(args, store.log_path(sweep_dir, key))
    else:
        outcome = _train_here(args)
    if outcome["status"] == "interrupted":
        STOPPED.set()
    return dict(record, **outcome, wall_s=round(time.time() - start, 2), finished=time.time())


def _train_here(args: TrainArgs) -> dict:
    """Trains in this process; any exception (not Ctrl-C) becomes a failed outcome."""
    from tpu_tiles_models import train

    try:
        train.train(args)
    except KeyboardInterrupt:
        return dict(status="interrupted", error="interrupted")
    except Exception as e:  # failures are data: the sweep goes on with the other points
        return dict(status="failed", error=one_line(e), traceback=traceback.format_exc())
    return dict(status="ok", error="")


def _train_in_child(args: TrainArgs, log_path: str) -> dict:
    """Trains in a fresh Python process whose output goes to `log_path`.

    The child shares this process group, so a terminal's Ctrl-C reaches it (the worker itself
    ignores it, see `_run_shielded`): it stops at its next safe point, removes what it had
    started and exits 130.
    """
    with tempfile.TemporaryDirectory(prefix="tpu_tiles_point_") as tmp:
        spec, outcome_path = Path(tmp, "args.json"), Path(tmp, "outcome.json")
        spec.write_text(json.dumps(args.to_dict()))
        remote_log = files.is_remote(log_path)
        local_log = Path(tmp, "train.log") if remote_log else Path(files.expand(log_path))
        local_log.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        with open(local_log, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", CHILD_MODULE, str(spec), str(outcome_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
            code = _wait(proc)
        if remote_log:
            files.write_bytes(log_path, local_log.read_bytes())
        outcome = store.read_json(str(outcome_path))
    if code in INTERRUPTED_STATUSES:
        return dict(status="interrupted", error="interrupted")
    if outcome is not None:
        return outcome
    return dict(status="failed", error=f"{_death(code)}; see {log_path}")


def _wait(proc: subprocess.Popen) -> int:
    """Waits for the child, also through a KeyboardInterrupt in this process (where a Ctrl-C
    is not shielded, see `_run_shielded`): the child got it too and is cleaning up."""
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            STOPPED.set()


def _death(code: int) -> str:
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"the training process was killed by {name}{hint}"
    return f"the training process exited with status {code}"


def child_main(argv: Sequence[str]) -> int:
    """A point's child process (`python -m tpu_tiles_models.sweep.child SPEC OUTCOME`): trains
    the `TrainArgs` in the JSON file SPEC, writes the outcome JSON to OUTCOME."""
    spec, outcome_path = argv
    args = TrainArgs.from_dict(json.loads(Path(spec).read_text()))
    with interrupts.deferred():  # SIGINT arrives ignored (see _run_shielded): handle it here
        _stop_with_parent()
        outcome = _train_here(args)
    if outcome["status"] == "interrupted":
        print(f"{interrupts.name()}: removed what this point had started", file=sys.stderr)
        return interrupts.exit_status()
    if outcome.get("traceback"):
        print(outcome["traceback"], file=sys.stderr)
    Path(outcome_path).write_text(json.dumps(outcome))
    return 0 if outcome["status"] == "ok" else 1


def _stop_with_parent() -> None:
    """Has this child stop (a Ctrl-C) when the Beam worker that started it dies: a SIGTERM to
    the whole process group (`timeout`, a scheduler) kills the workers, and their children
    must not go on training unwatched. Linux only (`prctl`); elsewhere nothing."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGINT)) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the worker died before prctl
        interrupts.note(signal.SIGINT)


def _count(status: str) -> None:
    """A Beam counter per outcome (visible in the Dataflow/Flink UIs)."""
    from apache_beam.metrics import Metrics

    Metrics.counter("tpu_tiles_sweep", f"points_{status}").inc()
