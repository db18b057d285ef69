"""Ctrl-C that stops long work at a safe point, so the run can clean up after itself.

A KeyboardInterrupt raised inside TensorFlow (while tracing, or in a C++ op) can surface as
an unrelated error, or be swallowed by a library. The command line therefore catches the
first Ctrl-C itself, and long loops (training steps, scoring, saving) call `check()` between
steps: the run then stops within one step, removes what it started and exits 130. A second
Ctrl-C stops at once.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

_pressed = threading.Event()


def _on_sigint(signum, frame) -> None:
    if _pressed.is_set():
        raise KeyboardInterrupt
    _pressed.set()


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Within the block, Ctrl-C is noted and raised at the next `check()` (main thread)."""
    _pressed.clear()
    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _pressed.clear()


def check() -> None:
    """Raises KeyboardInterrupt if Ctrl-C was pressed inside `deferred()`."""
    if _pressed.is_set():
        _pressed.clear()
        raise KeyboardInterrupt
