"""The Beam pipeline of a sweep: `Create(points) | Reshuffle | Map(train a point)`.

It runs on any Beam runner. The default is the DirectRunner in multi-processing mode with
`--num_workers` processes; every point trains on a worker (see `worker`), whose outcome file
the driver polls to print progress. Ctrl-C (or SIGTERM, SIGHUP) stops the sweep cleanly: no
worker starts another point, running points stop at a safe point and remove what they had
started.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from typing import Any, Callable, Sequence

from tpu_tiles_models import files, interrupts, pipelines
from tpu_tiles_models.errors import FlagError, one_line
from tpu_tiles_models.sweep import store, worker
from tpu_tiles_models.sweep.options import SweepArgs
from tpu_tiles_models.sweep.points import Point


def pipeline_options(a: SweepArgs, beam_argv: Sequence[str]):
    """Beam options: the user's pass-through options, the runner, and our DirectRunner
    defaults (multi-processing, `--num_workers` processes, quiet workers)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    given = {t.lstrip("-").split("=")[0] for t in beam_argv if t.startswith("--")}
    extra: dict[str, Any] = {"runner": a.runner}
    if _is_direct(a.runner):
        defaults = dict(
            direct_running_mode="multi_processing",
            direct_num_workers=a.num_workers or pipelines.cores(),
            default_sdk_harness_log_level="ERROR",
        )
        extra.update({k: v for k, v in defaults.items() if k not in given})
    elif a.num_workers and "num_workers" not in given:
        extra["num_workers"] = a.num_workers
    return PipelineOptions(list(beam_argv), **extra)


def _is_direct(runner: str) -> bool:
    return runner.lower().removesuffix("runner") == "direct"


def check_runner(name: str) -> None:
    """Fails, in one line, unless Beam has a runner of this name (its extras installed)."""
    try:
        with pipelines.quiet_beam():
            from apache_beam.runners.runner import create_runner

            create_runner(name)
    except ImportError as e:
        raise FlagError(f"--runner {name}: {one_line(e)}") from None
    except (ValueError, AttributeError):
        raise FlagError(
            f"--runner {name}: not a Beam runner; use DirectRunner, DataflowRunner, "
            "FlinkRunner, SparkRunner or PortableRunner"
        ) from None


def run_pipeline(points: Sequence[Point], sweep_dir: str, options, isolation: str) -> None:
    """`Create(points) | Reshuffle | Map(train_element)`; returns when every point is done.

    The Reshuffle keeps a distributed runner from fusing all points onto one worker.
    """
    with pipelines.quiet_beam():
        import apache_beam as beam

        elements = [json.dumps(dict(key=p.key, args=p.args.to_dict())) for p in points]
        with beam.Pipeline(options=options) as pipeline:
            _ = (
                pipeline
                | "Points" >> beam.Create(elements)
                | "Spread" >> beam.Reshuffle()
                | "Train"
                >> beam.Map(worker.train_element, sweep_dir=sweep_dir, isolation=isolation)
            )


class _Progress:
    """Prints a line per finished point (read from the outcome records) while the sweep runs."""

    def __init__(self, todo: Sequence[Point], sweep_dir: str, total: int, done: int):
        self.todo = {p.key: p for p in todo}
        self.sweep_dir, self.total, self.done, self.failed = sweep_dir, total, done, 0
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.interval = 15.0 if files.is_remote(sweep_dir) else 2.0

    def __enter__(self) -> _Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def poll(self) -> None:
        for path in sorted(files.glob(store.record_path(self.sweep_dir, "*"))):
            key = os.path.basename(path)[: -len(".json")]
            if key in self.seen or key not in self.todo:
                continue
            record = store.read_json(path)
            if record is None:
                continue
            self.seen.add(key)
            self.done += 1
            self.failed += record["status"] == "failed"
            what = (
                f"{record.get('wall_s', 0):.0f} s"
                if record["status"] != "failed"
                else record["error"]
            )
            print(
                f"sweep: [{self.done}/{self.total}] {record['status']:<7} "
                f"{self.todo[key].describe()}  {what}  ({self.failed} failed)",
                flush=True,
            )


def train_points(
    todo: Sequence[Point], sweep_dir: str, args: SweepArgs, total: int, done: int
) -> str:
    """Runs the pipeline over `todo`, printing a line per finished point; returns the
    pipeline's error ('' if it finished).

    Raises:
      KeyboardInterrupt: Ctrl-C; running points removed what they had started.
    """
    if not todo:
        return ""
    options = pipeline_options(args, args.beam_argv)
    for p in todo:  # outcomes of earlier attempts: these points are tried again
        files.remove(store.record_path(sweep_dir, p.key))
    worker.STOPPED.clear()
    stop = store.stop_marker(sweep_dir)
    files.remove(stop)
    error, pressed = "", False
    try:
        with _Progress(todo, sweep_dir, total, done):
            pressed = _run_shielded(
                lambda: run_pipeline(todo, sweep_dir, options, args.isolation), stop
            )
    except Exception as e:  # a failed job: record what is missing, keep what finished
        error = one_line(e)
    finally:
        files.remove(stop)
    if pressed or worker.STOPPED.is_set():
        raise KeyboardInterrupt
    return error


def _run_shielded(fn: Callable[[], None], stop_marker: str) -> bool:
    """Runs `fn` (the pipeline) so that Ctrl-C stops the sweep cleanly (see
    `pipelines.run_shielded`); returns whether Ctrl-C was pressed.

    Ctrl-C reaches the points' child processes, which stop at a safe point and remove what
    they had started. The first one writes `stop_marker`, so no worker starts another point,
    and is passed to the previous handler (a point training in this process stops too); a
    second one stops waiting at once.
    """

    def on_ctrl_c(previous) -> None:
        files.write_bytes(stop_marker, b"")
        what = "Ctrl-C" if not interrupts.noted() else interrupts.name()
        print(f"sweep: {what}: no new point starts; running points stop at a safe point")
        signal.signal(signal.SIGINT, previous)  # a second Ctrl-C is handled as usual
        if interrupts.noted():  # SIGTERM or SIGHUP, noted already (see run_shielded)
            return
        if callable(previous) and previous is not signal.default_int_handler:
            previous(signal.SIGINT, None)

    return pipelines.run_shielded(fn, on_ctrl_c)[1]
