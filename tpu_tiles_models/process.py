"""The process a command runs in: its standard streams, stop signals, threads and exit status.

docs/reliability.md's first section, kept in one place (`run`): one line and exit status 2 for
a `UserError` (any other exception is our bug and keeps its traceback), 128 + the signal's
number for a stop signal (`interrupts`: stopped at a safe point, even once the work is done),
141 for a closed standard output, and no thread of a user's code that keeps it from exiting.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import signal
import sys
import threading
import time
import warnings
from typing import Callable

from tpu_tiles_models import interrupts, tf_start
from tpu_tiles_models.errors import UserError, one_line

EXIT_USER_ERROR = 2


def run(
    command: str,
    work: Callable[[], None],
    *,
    tensorflow: bool = True,
    program: bool = False,
    stdout_closed: bool = False,
) -> int:
    """Runs `work` as `command` (`tpu-tiles train`: how its lines start) and returns its exit
    status (see the module). `tensorflow`: loads it first, without its start-up notices;
    `program`: this process is the command's own (not a caller's, as a test's), so a stop
    signal once the work is done still gets its line and its status, and threads the work
    left behind do not keep it alive; `stdout_closed`: `standard_streams` reopened it."""
    then = _stopped_when_done(command) if program else None
    if then:
        # The last exit handler to run: after it the interpreter puts back the default
        # handlers (death without a word), so a signal then is ignored and the status stands.
        atexit.register(_ignore_stop_signals)
    status = _run(command, work, _Output(sys.stdout, closed=stdout_closed), then, tensorflow)
    if program:
        _end_lingering_threads(command, status)
    return status


def _run(
    command: str, work: Callable[[], None], stdout: _Output, then: Callable | None, tf: bool
) -> int:
    """Runs `work`; its exit status."""

    def warn(message, category, filename, lineno, file=None, line=None) -> None:
        text = " ".join(str(message).split())  # one line, without the source line
        print(f"{command}: warning: {text}", file=file or sys.stderr)

    try:
        with contextlib.ExitStack() as stack:  # (no parenthesized `with`: Python 3.9)
            stack.enter_context(interrupts.deferred(then=then))
            stack.enter_context(warnings.catch_warnings())
            stack.enter_context(contextlib.redirect_stdout(stdout))
            stack.enter_context(contextlib.redirect_stderr(_Output(sys.stderr)))
            warnings.showwarning = warn
            if tf:
                tf_start.load_tensorflow()
            work()
            stdout.flush()
            if interrupts.noted():  # after its last safe point: what it wrote is whole
                _say(f"{command}: {_how()} {_WHEN_DONE}")
                return interrupts.exit_status()
    except KeyboardInterrupt:
        _say(f"{command}: {_how()}; removed what this run had started")
        return interrupts.exit_status()
    except UserError as e:
        _say(f"{command}: error: {' '.join(str(e).split())}")
        return EXIT_USER_ERROR
    # A user's models.py failing while it runs (a `forward` that raises, or calls sys.exit(),
    # which would end the command without a word): its fault, one line naming its line.
    except (Exception, SystemExit) as e:
        from tpu_tiles_models import registry

        where = registry.fault_site(e)
        if where is None:
            raise
        reason = registry.exit_call(e) if isinstance(e, SystemExit) else one_line(e)
        _say(f"{command}: error: {where}: {reason}; fix the file")
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
        f"{command}: warning: its work done, it stopped {len(left)} thread(s) that "
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
        _say(f"{command}: {_how()} {_WHEN_DONE}")
        os._exit(interrupts.exit_status())

    return stop


def _ignore_stop_signals() -> None:
    for signum in interrupts.STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def standard_streams() -> list[int]:
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
            f"{command}: error: cannot write to standard output ({reason}); the "
            "files it writes are complete; send the output where it can be written"
        )
        return EXIT_USER_ERROR


def _say(line: str) -> None:
    """Prints to stderr; after SIGHUP the terminal may be gone, which must not hide the exit."""
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr, flush=True)
