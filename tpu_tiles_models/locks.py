"""One writer at a time: an exclusive lock on an output a command fills (`claim`).

Two commands writing one place at once would both "succeed" and leave a mix (two `synth`s
into one folder, two `bundle`s into one hand-in, two `inspect --json` of one file, two sweeps
on one `--out_dir`). Each of those claims its output before checking it and holds the claim
until it has finished writing; the second one fails at once, in one line naming the first.

The lock is an `flock` on a hidden file `.<name>.lock` beside the output (a folder output in a
folder that cannot be written, such as a mount point, gets `.tpu-tiles.lock` inside it, as
every writer there does alike). The kernel releases
an flock when its process ends, however it ends, so the file that a killed process (`kill -9`)
left never blocks the next command: it is taken over. Standard library only (`fcntl`, POSIX;
where there is none, as on Windows, outputs are not locked), so TensorFlow-free commands use
it too.
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

# The lock file inside a folder output whose own folder cannot be written.
INSIDE = ".tpu-tiles.lock"
# Attempts at locking a lock file that its last holder removes between our open and lock.
_TRIES = 100


class BusyError(UserError):
    """Another process is writing the same output; one line naming it."""


def lock_path(path: str | os.PathLike) -> Path:
    """`.<name>.lock` beside `path`'s one spelling (`files.canonical`): the file whose flock
    claims `path`, however it is spelled (`./out/`, absolute, or through a link)."""
    path = Path(files.canonical(path))
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def claim(path: str | os.PathLike, *, flag: str, command: str) -> Iterator[None]:
    """Holds an exclusive lock on output `path` (a file, or a folder the command fills) for
    the block; the lock file's missing parent folders are created, and removed at the end if
    nothing else was put in them. A remote path is not locked: a bucket has no locks.

    Args:
      path: the output to claim.
      flag: the flag that chose it ("OUT", "--out", "--json"), named in the message.
      command: the command claiming it ("synth"), named to the one refused.

    Raises:
      BusyError: another process holds it.
      files.WriteError: the lock file cannot be made (read-only disk, permissions).
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
