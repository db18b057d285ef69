"""Writing files so that nobody sees half of one: a temp name beside the target, then a rename.

Everything the package writes goes through `atomic_path`. This module imports only the
standard library and `errors`, so the TensorFlow-free modules (`kaggle`, `install`) use it
too. (`create_kaggle_csv.py` keeps a small copy of its own: it must run where this package
is not installed.)
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from pathlib import Path
from typing import Iterator

from tpu_tiles_models.errors import UserError

# Write failures the user fixes by freeing space or choosing another place.
_STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})
# Attempts at a free temp name before giving up (each name has 32 random bits).
_TEMP_TRIES = 100


class WriteError(UserError, OSError):
    """An output file cannot be written; one line naming it (and its flag) and the fix."""


@contextlib.contextmanager
def atomic_path(
    path: str | os.PathLike, *, flag: str | None = None, mode: int = 0o666
) -> Iterator[Path]:
    """Yields an empty hidden temp file beside `path`; renames it onto `path` if the block succeeds.

    The file gets the permissions a plain `open(path, "w")` would give it: a new file
    `mode & ~umask` (not mkstemp's 0600, which hides artifacts in a group-shared folder from
    the group), an existing one keeps its own. Missing parent folders are created. On any
    exception (Ctrl-C included) the temp file is removed and `path` keeps its old content.
    The temp name ends in `.tmp`, so globs such as `*.npz` never pick it up; writers that
    choose a format by extension need it explicitly.

    Args:
      path: the file to write.
      flag: the command-line flag that chose `path` (e.g. "--out"), named in error messages.
      mode: permission bits of a new file before the umask: 0o666 as `open` uses, or a
        source file's bits when copying (an executable stays executable).

    Yields:
      The temp file's path, to be written (by name or by opening it) inside the block.

    Raises:
      WriteError: `path` is a folder, one of its parents is a file, or the folder cannot be
        created or written (permissions, disk full, read-only); the message never shows the
        temp name. Other exceptions from the block pass through unchanged.
    """
    path = Path(path)
    where = f"{flag} {path}" if flag else str(path)
    _check_target(path, where, flag)
    tmp = _create_temp(path, where, flag, mode)
    try:
        yield tmp
        if path.is_file():  # `open(path, "w")` keeps an existing file's permissions.
            os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if isinstance(err, OSError) and not isinstance(err, UserError) and _about(err, tmp):
            raise WriteError(_cannot_write(where, err, flag)) from err
        raise


def check_output_path(path: str | os.PathLike, *, flag: str | None = None) -> Path:
    """Fails early, creating nothing, if `atomic_path(path)` could not write there.

    For commands that work a long time before writing (`predict`): call it first.

    Args:
      path: the file that will be written.
      flag: the command-line flag that chose `path`, named in the message.

    Returns:
      `path` as a `Path`.

    Raises:
      WriteError: `path` is a folder, or one of its parents is a file.
    """
    path = Path(path)
    where = f"{flag} {path}" if flag else str(path)
    if path.is_dir():
        raise WriteError(f"{where} is a folder; pass the path of a file to write")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                other = f"another {flag}" if flag else "another path"
                raise WriteError(f"{where}: {parent} is a file, not a folder; pass {other}")
            break
    return path


def _check_target(path: Path, where: str, flag: str | None) -> None:
    """`check_output_path`, then creates the missing parent folders."""
    check_output_path(path, flag=flag)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        other = f"another {flag}" if flag else "another path"
        raise WriteError(
            f"cannot create the folder {path.parent} for {where} ({err.strerror}); "
            f"pass {other} in a folder you can write"
        ) from err


def _create_temp(path: Path, where: str, flag: str | None, mode: int) -> Path:
    """Creates `.<name>.<random>.tmp` beside `path` with `mode & ~umask`, like `open` does."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(_TEMP_TRIES):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            # The kernel applies the umask (and a default ACL) to `mode`, as for any new file.
            os.close(os.open(tmp, flags, mode))
        except FileExistsError:
            continue
        except OSError as err:
            raise WriteError(_cannot_write(where, err, flag)) from err
        return tmp
    raise WriteError(f"cannot write {where}: no free temporary name in {path.parent}")


def _about(err: OSError, tmp: Path) -> bool:
    """Whether `err` is a failure to write `tmp` (or a full or read-only disk)."""
    names = {str(n) for n in (err.filename, err.filename2) if n is not None}
    return str(tmp) in names or err.errno in _STORAGE_ERRNOS


def _cannot_write(where: str, err: OSError, flag: str | None = None) -> str:
    """'cannot write --out x.csv (No space left on device); free space or pass another --out'."""
    reason = err.strerror or type(err).__name__
    other = f"another {flag}" if flag else "another path"
    if err.errno in _STORAGE_ERRNOS:
        return f"cannot write {where} ({reason}); free some space or pass {other}"
    return f"cannot write {where} ({reason}); pass {other} in a folder you can write"


def copy_file(src: str | os.PathLike, dst: str | os.PathLike, *, flag: str | None = None) -> None:
    """Copies `src` over `dst` through a temp file beside it, as `cp` would.

    A new `dst` gets src's permission bits less the umask (an executable stays executable, a
    group-shared folder stays readable to the group); an existing one keeps its own.
    """
    src = Path(src)
    with atomic_path(dst, flag=flag, mode=stat.S_IMODE(src.stat().st_mode) & 0o777) as tmp:
        shutil.copyfile(src, tmp)
