"""Ctrl-C, SIGTERM and SIGHUP that stop long work at a safe point, so the run cleans up.

A KeyboardInterrupt raised inside TensorFlow can surface as an unrelated error, or be
swallowed by a library, so the command line catches the first stop signal itself, and long
loops call `check()` between steps: the run stops within one step, removes what it started and
exits 128 + the signal's number (`exit_status`). A second signal (more than `SAME_STOP_S` after
the first) stops at once, except inside `critical()` (the renames that put a run in place).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from typing import Any, Callable, Iterator

# The signals that stop a command; SIGHUP does not exist on Windows.
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)

_pressed = threading.Event()
_received: list[int] = []  # the first stop signal of the current `deferred()` block
_critical = threading.Event()
_first = [0.0]  # when the first stop signal arrived (time.monotonic)
# Signals this close after the first are the same stop, not a second one: a SIGTERM to a
# process group comes with the Ctrl-C a sweep passes on to its points, and with the one a
# point gets when its Beam worker dies.
SAME_STOP_S = 2.0


def note(signum: int) -> None:
    """Records stop signal `signum` as if it had arrived: the next `check()` raises."""
    if not _pressed.is_set():
        _received[:] = [signum]
        _first[:] = [time.monotonic()]
    _pressed.set()


def noted() -> bool:
    """Whether a stop signal was noted and not yet raised by `check()`."""
    return _pressed.is_set()


def _on_signal(signum, frame) -> None:
    again = _pressed.is_set() and time.monotonic() - _first[0] > SAME_STOP_S
    if again and not _critical.is_set():
        raise KeyboardInterrupt
    note(signum)


@contextlib.contextmanager
def deferred(*, then: Callable[[int, Any], None] | None = None) -> Iterator[None]:
    """Within the block, a stop signal is noted and raised at the next `check()` (main
    thread only, where Python runs signal handlers). When it ends the signals get `then`
    (default: their handlers before), so that no moment is left in which a signal kills the
    process without a word (`process.run`'s, once its work is done)."""
    _pressed.clear()
    _received.clear()
    previous = {s: signal.signal(s, _on_signal) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, then or handler)
        _pressed.clear()


def check() -> None:
    """Raises KeyboardInterrupt if a stop signal arrived inside `deferred()`."""
    if _pressed.is_set() and not _critical.is_set():
        _pressed.clear()
        raise KeyboardInterrupt


@contextlib.contextmanager
def critical() -> Iterator[None]:
    """Within the block even a second signal is only noted: the block (a few renames) runs
    to its end, and the next `check()` after it stops the run."""
    _critical.set()
    try:
        yield
    finally:
        _critical.clear()


def _last() -> int:
    """The stop signal that interrupted the last `deferred()` block (SIGINT if none was
    noted: a KeyboardInterrupt from elsewhere)."""
    return _received[0] if _received else signal.SIGINT


def exit_status() -> int:
    """The shell's status for death by that signal: 130 for SIGINT, 143 SIGTERM, 129 SIGHUP."""
    return 128 + int(_last())


def name() -> str:
    """`SIGTERM`: the name of that signal."""
    return signal.Signals(_last()).name
