"""One writer at a time: an exclusive lock on an output a command fills (`claim`).

Two commands writing one place at once would both "succeed" and leave a mix, so each takes
an `flock` on a hidden `.<name>.lock` beside its output (or `.tpu-tiles.lock` inside a folder
whose parent cannot be written) until it has finished; the second fails at once, naming the
first. The kernel releases an flock however its process ends. `fcntl` only (not on Windows).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
from pathlib import Path
from typing import Iterator

from tpu_tiles_models import files
from tpu_tiles_models.errors import UserError

try:
    import fcntl
except ImportError:  # pragma: no cover  (Windows)
    fcntl = None

INSIDE = ".tpu-tiles.lock"
_TRIES = 100  # attempts at a lock file its last holder removes between our open and lock


class BusyError(UserError):
    """Another process is writing the same output; one line naming it."""


def lock_path(path: str | os.PathLike) -> Path:
    """`.<name>.lock` beside `path`'s one spelling (`files.canonical`: `./out/`, absolute or
    through a link), whose flock claims `path`."""
    path = Path(files.canonical(path))
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def claim(path: str | os.PathLike, *, flag: str, command: str) -> Iterator[None]:
    """Holds an exclusive lock on output `path` (a file, or a folder the command fills),
    chosen by `flag`, for the block; `command` is named to the one refused (BusyError). The
    lock file's missing parent folders are made, and removed at the end if still empty. A
    remote path is not locked: a bucket has no locks.
    """
    if fcntl is None or files.is_remote(path):
        yield
        return
    target = Path(files.canonical(path, what=flag))
    lock = lock_path(target)
    where = f"{flag} {files.expand(path)}"
    made = files.make_dirs(lock.parent, flag=flag, where=where)
    try:
        try:
            fd = _lock(lock, where, flag, command)
        except files.WriteError as err:
            # A folder one can write in a folder one cannot (a mount point, /kaggle/working):
            # the lock goes inside it. Every writer meets the same refusal, so all agree.
            if not (target.is_dir() and _refused(err.__cause__)):
                raise
            lock = target / INSIDE
            fd = _lock(lock, where, flag, command)
    except BaseException:
        files.remove_made_dirs(made, lock.parent)
        raise
    try:
        yield
    finally:
        # Unlinked before unlocked: whoever opened this file meanwhile finds it gone once
        # they hold its lock, and tries again with a new one (`_lock`).
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)
        files.remove_made_dirs(made, lock.parent)


def _refused(err: BaseException | None) -> bool:
    """Whether `err` says the folder cannot be written (not that the disk is full)."""
    return isinstance(err, OSError) and err.errno in (errno.EACCES, errno.EPERM, errno.EROFS)


def _lock(lock: Path, where: str, flag: str, command: str) -> int:
    """An open descriptor of `lock` holding its flock, with this process named in it."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    for _ in range(_TRIES):
        try:
            fd = os.open(lock, flags, 0o666)
        except OSError as err:  # read-only, permissions: what writing there would meet
            raise files.cannot_write(where, err, flag=flag) from err
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            holder = _holder(fd)
            os.close(fd)
            if err.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                raise
            raise BusyError(
                f"{where} is being written by {holder}; wait for it to end, or pass another {flag}"
            ) from None
        if not _still_there(fd, lock):
            os.close(fd)  # its last holder removed it between our open and our lock
            continue
        text = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": command})
        with contextlib.suppress(OSError):  # a full disk: held all the same, only unnamed
            os.ftruncate(fd, 0)
            os.pwrite(fd, text.encode(), 0)
        return fd
    raise BusyError(f"{where}: its lock file {lock} keeps being replaced; try again")


def _still_there(fd: int, lock: Path) -> bool:
    """Whether `lock` still names the file open as `fd`."""
    try:
        now = os.stat(lock)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)


def _holder(fd: int) -> str:
    """Who holds the lock of `fd`, as its holder wrote it: `tpu-tiles synth (pid 123)`."""
    try:
        info = json.loads(os.pread(fd, 4096, 0))
        pid, host, command = int(info["pid"]), str(info["host"]), str(info["command"])
    except (OSError, ValueError, KeyError, TypeError):  # still being written, or not ours
        return "another process"
    here = "" if host == socket.gethostname() else f" on {host}"
    return f"tpu-tiles {command} (pid {pid}{here})"
