"""Paths, local or remote, and reading, copying and removing the files at them.

A path with a scheme (`gs://bucket/x`, `ram://x`: `is_remote`) goes through `tf.io.gfile`; a
local path takes the plain `os` route. This module imports only the standard library and
`errors` (TensorFlow only for a remote path), so the TensorFlow-free modules (`kaggle`,
`install`) use it too. How outputs are written safely is `safe`'s.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import stat
from pathlib import Path
from typing import IO, Iterator

from tpu_tiles_models.errors import FlagError, UserError

try:
    import resource
except ImportError:  # pragma: no cover  (Windows: no file size limit to name)
    resource = None

# Write failures the user fixes by freeing space (or choosing another place).
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
# Write failures that are about the place, whatever the file: full, read-only, name too long.
STORAGE_ERRNOS = _FULL_ERRNOS | {errno.EROFS, errno.ENAMETOOLONG}
# `gs://`, `ram://`, `s3://`, ...: a file system of tf.io.gfile, not a local path.
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class WriteError(UserError, OSError):
    """An output file cannot be written; one line naming it (and its flag) and the fix."""


def named(path: str | os.PathLike, flag: str | None) -> str:
    """How a message names an output: `<flag> <path>`, or the path alone."""
    return f"{flag} {os.fspath(path)}" if flag else os.fspath(path)


def another(flag: str | None) -> str:
    return f"another {flag}" if flag else "another path"


def cannot_write(place: str, err: OSError, *, flag: str | None = None) -> WriteError:
    """'cannot write --out x.csv (No space left on device); free some space or pass another
    --out': the reason, and the fix for that reason."""
    return WriteError(
        f"cannot write {place} ({err.strerror or type(err).__name__}); {_fix(err, flag)}"
    )


def _fix(err: OSError, flag: str | None) -> str:
    """What the user does about a failed write: it depends on why it failed."""
    if err.errno in _FULL_ERRNOS:
        return room_fix(flag, err)
    if err.errno == errno.EROFS:
        return f"pass {another(flag)} on a disk you can write"
    if err.errno == errno.ENAMETOOLONG:
        return f"pass {another(flag)} with shorter names"
    return f"pass {another(flag)} in a folder you can write"


def room_fix(flag: str | None, err: OSError | None = None) -> str:
    """What the user does about a write that found no room. `err`'s errno tells a file larger
    than may be written (EFBIG) from a full disk or quota; without one (TensorFlow's errors
    carry none) a file size limit that is set (`ulimit -f`) is the likelier cause."""
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0] if resource else None
    limited = limit is not None and limit != resource.RLIM_INFINITY
    if (err.errno == errno.EFBIG) if err is not None else limited:
        if limited:
            return (
                f"this process may write files of at most {format_size(limit)} (ulimit -f); "
                f"raise that limit, or pass {another(flag)}"
            )
        return f"the file is larger than its file system takes; pass {another(flag)}"
    return f"free some space or pass {another(flag)}"


def format_size(n: float) -> str:
    """Bytes for a message: `950 B`, `12.3 MB`, `1.4 GB`."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


# -- local folders ----------------------------------------------------------------------------


def nearest_folder(path: Path, where: str, flag: str | None, *, target: bool = False) -> Path:
    """`path` or its nearest existing parent; a file there is a WriteError (`target`: `path`
    is the folder the user named, not the parent of a file)."""
    for folder in (path, *path.parents):
        try:
            mode = folder.stat().st_mode
        except OSError:  # missing, under a file, or a name too long: look further up
            continue
        if stat.S_ISDIR(mode):
            return folder
        if target and folder == path:
            raise WriteError(f"{where} is a file; pass a folder")
        raise WriteError(f"{where}: {folder} is a file, not a folder; pass {another(flag)}")
    return Path.cwd()


def make_dirs(
    path: str | os.PathLike, *, flag: str | None = None, where: str | None = None
) -> Path | None:
    """`mkdir -p path`; returns the topmost folder it made (None if `path` existed), for
    `remove_made_dirs`. A parent that is a file, or a folder it cannot make, is a WriteError
    naming `where` (default `<flag> <path>`)."""
    path = Path(path)
    where = where or named(path, flag)
    base = nearest_folder(path, where, flag)
    made = next((f for f in (path, *path.parents) if f.parent == base and f != base), None)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        remove_made_dirs(made, path)
        raise WriteError(
            f"cannot create the folder {err.filename} for {where} ({err.strerror}); "
            f"{_fix(err, flag)}"
        ) from err
    return made


def remove_made_dirs(made: Path | None, leaf: str | os.PathLike) -> None:
    """Removes `leaf` and its parents up to `made` (from `make_dirs`) while they are empty."""
    if made is None:
        return
    for folder in (Path(leaf), *Path(leaf).parents):
        try:
            folder.rmdir()
        except OSError:  # not empty (or gone): what is left there is not ours to remove
            return
        if folder == made:
            return


# -- a path read from a file ----------------------------------------------------------------


class OutsideError(UserError, ValueError):
    """A path read from a file (a manifest, a record) leaves the folder that owns it."""


def within(folder: str | os.PathLike, name: str, *, where: str, fix: str) -> str:
    """`folder/name`, for a `name` read from a file that names its files relative to
    `folder`, the one folder it may act in: so a copied or moved folder never reaches back
    into the original. A name that is absolute, climbs with `..`, names `folder` itself or
    leads out through a symbolic link among its folders is an OutsideError, `<where> <name>
    <why>; <fix>`. The last name is not resolved: a link there is what the caller replaces or
    removes, never its target."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if os.path.isabs(name) or is_remote(name):
        why = f"is an absolute path, not a name in {os.fspath(folder)}"
    elif ".." in parts:
        why = f"climbs out of {os.fspath(folder)} with '..'"
    elif "\0" in name:
        why = "holds a NUL character"
    elif not parts:
        why = f"names {os.fspath(folder)} itself, not a file in it"
    else:
        link = None if is_remote(folder) else _link_out(Path(folder), parts[:-1])
        if link is None:
            return join(folder, *parts)
        why = f"leads out of {os.fspath(folder)} through the symbolic link {link}"
    raise OutsideError(f"{where} {name!r} {why}; {fix}")


def _link_out(folder: Path, names: list[str]) -> Path | None:
    """The first of the nested folders `folder/names[0]/names[1]/...` that resolves outside
    `folder` (a link), if any."""
    real, here = os.path.realpath(folder), folder
    for name in names:
        here = here / name
        inner = os.path.realpath(here)
        if os.path.commonpath([inner, real]) != real:
            return here
    return None


# -- the one identity of a path ------------------------------------------------------------


def canonical(path: str | os.PathLike, *, what: str = "") -> str:
    """The one spelling of a place that every lock, cache key, resume key and "is this the
    same file" test uses: `~` expanded, made absolute, every link resolved (a leaf not there
    yet keeps its name under its folder's resolved path), so `SW`, `./SW/`, `/abs/SW` and a
    link to SW are one place; a URL only loses its trailing `/`. A link loop or a path longer
    than the system allows is a FlagError naming `what` (a flag, "the hand-in folder")."""
    path = expand(path)
    if is_remote(path):
        return path.rstrip("/")
    named = f"{what} {path}" if what else path
    try:
        real = os.path.realpath(path)
    except OSError as err:  # a relative path, and the working folder was removed
        raise FlagError(
            f"{named}: the working folder is gone ({err.strerror}); cd to a folder that exists"
        ) from None
    try:  # realpath leaves a loop in place; stat says ELOOP
        os.stat(real)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise FlagError(
                f"{named}: a symbolic link that leads back to itself (a loop); point it at a "
                "real file or folder, or pass that"
            ) from None
    try:
        limit = os.pathconf("/", "PC_PATH_MAX")
    except (OSError, ValueError, AttributeError):  # not every system says
        limit = 4096
    if len(os.fsencode(real)) >= limit:
        raise FlagError(
            f"{named}: its full path is {len(os.fsencode(real))} bytes long, more than the "
            f"{limit - 1} this system allows; work in a folder with a shorter path"
        )
    return real


# -- local or remote (tf.io.gfile) --------------------------------------------------------


def is_remote(path: str | os.PathLike) -> bool:
    """Whether `path` is a URL (`gs://bucket/x`, `ram://x`) served by tf.io.gfile."""
    return bool(_SCHEME.match(os.fspath(path)))


def require_local(path: str | os.PathLike, *, flag: str) -> None:
    """For a path that must be local (a Python file to import): a FlagError if remote."""
    if path and is_remote(path):
        raise FlagError(
            f"{flag} {os.fspath(path)}: must be a local path; copy it to a local folder (on "
            "every worker, for a sweep on a cluster)"
        )


def expand(path: str | os.PathLike) -> str:
    """A local path with `~` expanded, or a URL unchanged."""
    path = os.fspath(path)
    return path if is_remote(path) else os.path.expanduser(path)


def join(base: str | os.PathLike, *names: str) -> str:
    """`os.path.join` for local paths; `/`-joined for URLs."""
    base = os.fspath(base)
    if not is_remote(base):
        return os.path.join(base, *names)
    head = base.rstrip("/")
    return "/".join([head + "/" if head.endswith(":") else head, *names])  # ram:// + x


def basename(path: str | os.PathLike) -> str:
    """The last name of `path` (a trailing `/` of a URL ignored)."""
    return os.path.basename(os.fspath(path).rstrip("/"))


def with_name(path: str | os.PathLike, name: str) -> Path | str:
    """`path` with its last name replaced: a `Path`, or a string for a URL."""
    return join(_parent(os.fspath(path)), name) if is_remote(path) else Path(path).with_name(name)


def exists(path: str | os.PathLike) -> bool:
    return _gfile().exists(os.fspath(path)) if is_remote(path) else os.path.exists(path)


def isdir(path: str | os.PathLike) -> bool:
    return _gfile().isdir(os.fspath(path)) if is_remote(path) else os.path.isdir(path)


def isfile(path: str | os.PathLike) -> bool:
    return (exists(path) and not isdir(path)) if is_remote(path) else os.path.isfile(path)


def glob(pattern: str) -> list[str]:
    """Paths matching `pattern` (wildcards in the last name only when local)."""
    if is_remote(pattern):
        return _gfile().glob(pattern)
    return [str(p) for p in Path(pattern).parent.glob(os.path.basename(pattern))]


def size_and_mtime(path: str | os.PathLike) -> tuple[int, int]:
    """(size in bytes, modification time in ns) of a file; OSError if it cannot be read."""
    if not is_remote(path):
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns
    with _os_errors(os.fspath(path)):
        st = _gfile().stat(os.fspath(path))
    return st.length, st.mtime_nsec


# What stands at a path in place of a regular file or a folder, by its type (`not_a_file`).
_SPECIAL = {
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
}


def not_a_file(path: str | os.PathLike) -> str:
    """'' when local `path` is a regular file (or a link to one); else what is there instead,
    for a message: "not found" (nothing, or a link to nothing), "a folder", "a named pipe
    (FIFO)", "a socket", "a device", or "unreadable (<reason>)". Every input is told apart so:
    "not found" for a FIFO sends the user looking for a file that is there."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "not found"
    except OSError as err:
        return f"unreadable ({err.strerror})"
    if stat.S_ISREG(mode):
        return ""
    return "a folder" if stat.S_ISDIR(mode) else _SPECIAL.get(stat.S_IFMT(mode), "a special file")


@contextlib.contextmanager
def open_read(path: str | os.PathLike) -> Iterator[IO[bytes]]:
    """The file opened for binary reading (seekable): `open` locally, a GFile when remote.
    OSError if it cannot be read; a named pipe, socket or device too, with what it is as its
    reason (opening a named pipe would wait for a writer forever)."""
    if not is_remote(path):
        kind = not_a_file(path)
        if kind in (*_SPECIAL.values(), "a special file"):
            raise OSError(errno.EINVAL, f"{kind}, not a file", os.fspath(path))
        with open(path, "rb") as f:
            yield f
        return
    url = os.fspath(path)
    with _os_errors(url), _gfile().GFile(url, "rb") as f:  # a missing file fails at the read
        yield f


def read_bytes(path: str | os.PathLike) -> bytes:
    """The whole file. Raises OSError (FileNotFoundError when missing)."""
    with open_read(path) as f:
        return f.read()


def remove(path: str | os.PathLike) -> None:
    """Removes a file or a folder tree; nothing if it does not exist."""
    if is_remote(path):
        url = os.fspath(path)
        with _os_errors(url):
            gfile = _gfile()
            if gfile.isdir(url):
                gfile.rmtree(url)
            elif gfile.exists(url):
                gfile.remove(url)
        return
    local = Path(path)
    if local.is_dir() and not local.is_symlink():
        shutil.rmtree(local, ignore_errors=True)
    else:
        local.unlink(missing_ok=True)


def put_file(src: str | os.PathLike, url: str, *, flag: str | None = None) -> None:
    """Copies local file `src` to remote `url` under a hidden temp name, then renames it, so
    `url` never holds half a file (a bucket's rename is a server-side copy); a WriteError
    naming `url` (and `flag`) if it cannot."""
    gfile = _gfile()
    parent = _parent(url)
    part = join(parent, f".{basename(url)}.{secrets.token_hex(4)}.tmp")
    try:
        with _os_errors(url):
            gfile.makedirs(parent)
            gfile.copy(os.fspath(src), part, overwrite=True)
            gfile.rename(part, url, overwrite=True)
    except BaseException as err:
        with contextlib.suppress(Exception):
            remove(part)
        if isinstance(err, OSError):
            raise cannot_write(named(url, flag), err, flag=flag) from err
        raise


def copy_tree(src: str | os.PathLike, dst: str | os.PathLike, *, flag: str | None = None) -> None:
    """Copies folder `src` into `dst` (created; existing files overwritten); either side may be
    remote. Not atomic: publish a marker file after it (as the run file marks a run). A
    WriteError if `dst` cannot be written, an OSError if `src` cannot be read."""
    if not is_remote(src) and not is_remote(dst):
        _copy_local_tree(Path(src), Path(dst))
        return
    gfile, src, dst = _gfile(), os.fspath(src).rstrip("/"), os.fspath(dst).rstrip("/")
    with _os_errors(src):
        tree = list(gfile.walk(src))
    try:
        with _os_errors(dst):
            for top, _, names in tree:
                rel = top[len(src) :].strip("/")
                target = join(dst, *rel.split("/")) if rel else dst
                gfile.makedirs(target)
                for name in names:
                    gfile.copy(join(top, name), join(target, name), overwrite=True)
    except OSError as err:
        raise cannot_write(named(dst, flag), err, flag=flag) from err


def _copy_local_tree(src: Path, dst: Path) -> None:
    """`cp -r src dst` (no `-p`): new files and folders get src's permission bits less the
    umask, as the kernel applies it to any new file; existing ones keep theirs."""
    for top, _, names in os.walk(src):
        here = Path(top)
        target = dst / here.relative_to(src)
        target.mkdir(mode=stat.S_IMODE(here.stat().st_mode) | 0o700, exist_ok=True)
        for name in names:
            mode = stat.S_IMODE((here / name).stat().st_mode) & 0o777
            fd = os.open(target / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            with open(here / name, "rb") as source, os.fdopen(fd, "wb") as copy:
                shutil.copyfileobj(source, copy)


def _parent(url: str) -> str:
    """The folder of a URL: `gs://b/x/y` -> `gs://b/x`, `ram://y` -> `ram://`."""
    head = url.rstrip("/").rpartition("/")[0]
    return head + "/" if head.endswith(":/") else head


def _gfile():
    import tensorflow as tf  # only for remote paths: kaggle and install stay TensorFlow-free

    return tf.io.gfile


@contextlib.contextmanager
def _os_errors(path: str) -> Iterator[None]:
    """tf.io.gfile's `tf.errors.*` as the OSError a local call would raise, in one line."""
    import tensorflow as tf

    try:
        yield
    except tf.errors.OpError as err:
        reason = " ".join((err.message or "").split()) or type(err).__name__
        if isinstance(err, tf.errors.NotFoundError):  # as a local one says it
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path) from None
        if isinstance(err, tf.errors.PermissionDeniedError):
            raise PermissionError(errno.EACCES, reason, path) from None
        raise OSError(errno.EIO, reason, path) from None
