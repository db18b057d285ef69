"""Apache Beam plumbing that `tpu-tiles sweep` and `tpu-tiles synth` share: how many cores,
Beam's logging kept to errors, and running a pipeline so that Ctrl-C, SIGTERM and SIGHUP stop
it cleanly."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, Callable, TypeVar

from tpu_tiles_models import interrupts, tf_start

T = TypeVar("T")
Handler = Any  # what signal.signal returns: a callable, SIG_IGN, SIG_DFL or None

# A child that exits on the first SIGINT (it inherits SIGINT ignored, so it sets a handler).
_SENTINEL = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGINT, lambda *_: sys.exit(130))\n"
    "while True:\n    time.sleep(3600)"
)

# Seconds a pipeline is waited for after SIGTERM or SIGHUP, for its points to clean up.
STOP_GRACE_S = 60.0


def cores() -> int:
    """CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@contextlib.contextmanager
def quiet_beam() -> Iterator[None]:
    """Beam logs warnings on import (missing GCP clients) and per worker; keep errors only."""
    beam_logger = logging.getLogger("apache_beam")
    level, disabled = beam_logger.level, logging.root.manager.disable
    beam_logger.setLevel(logging.ERROR)
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(disabled)
        beam_logger.setLevel(level)


def _descendants(pid: int) -> list[int]:
    """The running processes below `pid`, children first (from Linux's /proc)."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                    state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            if state != "Z":  # a zombie has exited; only its parent's wait is left
                children.setdefault(int(ppid), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(0), [])
        found += kids
        todo += kids
    return found


# What Beam's local workers log as they start, before they read the pipeline's log level.
_WORKER_NOISE = re.compile(rb"^(INFO:|WARNING:root:apitools not found)")


def quiet_workers() -> contextlib.AbstractContextManager:
    """Worker processes started within the block inherit a stderr that drops their start-up
    lines (`_WORKER_NOISE`) and passes every other line to this process's stderr (the filter
    ends once the last worker has exited)."""
    return tf_start.filtered_stderr(_WORKER_NOISE.match)


@quiet_workers()  # a fresh one for each call
def run_shielded(
    run: Callable[[], T], on_ctrl_c: Callable[[Handler], None]
) -> tuple[T | None, bool]:
    """Runs `run` (a Beam pipeline) in a thread with SIGINT ignored; returns `(its value or
    None, whether Ctrl-C was pressed)`, and raises what `run` raised unless Ctrl-C was pressed.

    Beam's local workers keep only *ignored* signals (`/bin/sh`), so Ctrl-C must not kill them:
    a sentinel child notices it, and the first calls `on_ctrl_c(previous_handler)`. SIGTERM and
    SIGHUP are noted (`interrupts`) and passed on as Ctrl-C to every process below; a second
    stops waiting. Sent to the whole group, they kill the workers, which Beam may wait for
    forever: `run` is then waited for while processes below are left, at most `STOP_GRACE_S`.
    """
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        return run(), False
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = run()
        except BaseException as e:  # handed to the waiting thread
            outcome["error"] = e

    thread = threading.Thread(target=target, name="beam-pipeline", daemon=True)
    sentinel = subprocess.Popen([sys.executable, "-c", _SENTINEL], stdin=subprocess.DEVNULL)
    pressed, deadline, me = False, float("inf"), os.getpid()
    stopped: list[float] = []  # when SIGTERM or SIGHUP came to this process

    def on_stop_signal(signum, frame) -> None:
        if stopped and time.monotonic() - stopped[0] > interrupts.SAME_STOP_S:
            raise KeyboardInterrupt  # a second one: stop waiting at once
        if stopped:
            return
        stopped.append(time.monotonic())
        interrupts.note(signum)
        for pid in _descendants(os.getpid()) or [sentinel.pid]:  # Ctrl-C, as a terminal sends it
            with contextlib.suppress(OSError):  # gone meanwhile
                os.kill(pid, signal.SIGINT)

    others = {
        s: signal.signal(s, on_stop_signal) for s in interrupts.STOP_SIGNALS if s != signal.SIGINT
    }
    try:
        thread.start()
        while thread.is_alive() or (stopped and not pressed):
            thread.join(0.2)
            if not pressed and (stopped or sentinel.poll() is not None):
                pressed = True
                on_ctrl_c(previous)
                deadline = time.monotonic() + STOP_GRACE_S
            if stopped and pressed and (time.monotonic() > deadline or not _descendants(me)):
                break  # Beam would wait for the workers the signal killed
    finally:
        signal.signal(signal.SIGINT, previous)
        for s, handler in others.items():
            signal.signal(s, handler)
        sentinel.kill()
        sentinel.wait()
    if "error" in outcome and not pressed:
        raise outcome["error"]
    return outcome.get("value"), pressed
