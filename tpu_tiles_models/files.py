"""Files, local or remote, and writing them so that nobody sees half of one.

Everything the package writes goes through `atomic_path`: a temp name beside the target, then
a rename. A path with a scheme (`gs://bucket/x`, `ram://x`: `is_remote`) is read and written
through `tf.io.gfile` by the helpers below (`open_read`, `read_bytes`, `size_and_mtime`, `glob`,
`copy_tree`, `remove`, ...); a local path takes the plain `os` route, unchanged. This module
imports only the standard library and `errors` (TensorFlow only for a remote path), so the
TensorFlow-free modules (`kaggle`, `install`) use it too. (`create_kaggle_csv.py` keeps a
small copy of its own: it must run where this package is not installed.)

Hidden temporaries carry their owner, `.<name>.<host>-<pid>-<random>.tmp` (`hidden_path`), so
that what a killed process left (`kill -9`, a power cut) is told apart from what a running one
is writing: `remove_leftovers` removes only the former. And before any work, every command
checks what it will write against what it reads (`prepare_outputs`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import os
import re
import secrets
import shutil
import socket
import stat
import tempfile
from pathlib import Path
from typing import IO, Iterable, Iterator, Sequence

from tpu_tiles_models import formats, interrupts
from tpu_tiles_models.errors import FlagError, UserError

try:
    import resource
except ImportError:  # pragma: no cover  (Windows: no file size limit to name)
    resource = None

# Write failures the user fixes by freeing space (or choosing another place).
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
# Write failures that are about the place, whatever the file: full, read-only, name too long.
_STORAGE_ERRNOS = _FULL_ERRNOS | {errno.EROFS, errno.ENAMETOOLONG}
# A file name's longest length when the file system does not say (Linux, macOS, Windows).
_NAME_MAX = 255
# Free space an output file needs at least, checked before the work (`check_output_path`):
# our CSVs, JSON reports and charts are a few KB to a few hundred KB.
MIN_FREE_BYTES = 1_000_000
# Attempts at a free temp name before giving up (each name has 32 random bits).
_TEMP_TRIES = 100
# `gs://`, `ram://`, `s3://`, ...: a file system of tf.io.gfile, not a local path.
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# This machine in a hidden temporary's owner tag: a process id means something only here.
_HOST = hashlib.md5(socket.gethostname().encode()).hexdigest()[:6]
# `.<name>.<host>-<pid>-<random>.<kind>`: a temporary ("tmp") or a replaced copy ("old").
_HIDDEN = re.compile(
    r"^\.(?P<name>.+)\.(?P<tag>(?P<host>[0-9a-f]{6})-(?P<pid>\d+)-[0-9a-f]{8})\.(?P<kind>tmp|old)$"
)


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
    choose a format by extension need it explicitly. A remote `path` gets a local temp file,
    copied there when the block succeeds (see `put_file`).

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
    if is_remote(path):
        with _remote_atomic(os.fspath(path), flag) as tmp:
            yield tmp
        return
    path = Path(path)
    where = _where(place_of(path), flag)
    _check_file_target(path, where, flag)
    made = make_dirs(path.parent, flag=flag, where=where)
    try:
        tmp = _create_temp(path, where, flag, mode)
    except BaseException:
        remove_made_dirs(made, path.parent)
        raise
    try:
        yield tmp
        # The last safe point before the file is in place: a stop signal that arrived while
        # it was written (a chart drawn, a report dumped) stops here, not after the rename.
        interrupts.check()
        if path.is_file():  # `open(path, "w")` keeps an existing file's permissions.
            os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        remove_made_dirs(made, path.parent)
        if isinstance(err, OSError) and not isinstance(err, UserError) and _about(err, tmp):
            raise WriteError(_cannot_write(where, err, flag)) from err
        raise


@contextlib.contextmanager
def atomic_paths(
    targets: Sequence[tuple[str | os.PathLike, str | None]],
) -> Iterator[list[Path]]:
    """`atomic_path` for several outputs that stand together (a report and its chart): yields
    a temp file for each `(path, flag)`; all are put in place when the block succeeds, none
    if it fails or a stop signal arrived while they were written (the last commit checks it
    first, and its failure undoes the others)."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(atomic_path(path, flag=flag)) for path, flag in targets]


def check_output_path(
    path: str | os.PathLike, *, flag: str | None = None, need_bytes: int = MIN_FREE_BYTES
) -> Path | str:
    """Fails early, creating nothing, if `atomic_path(path)` could not write there.

    Every command that works a while before writing a file (`predict --out`, `evaluate`'s and
    `inspect`'s `--json` and `--png`) calls it first. Checks what `atomic_path` would fail
    on, without writing `path`: a folder at `path`, a file among its parents, a name too long
    for its file system, a folder that cannot be created or written (read-only,
    permissions), and a disk with less than `need_bytes` free (see `check_folder`).

    Args:
      path: the file that will be written.
      flag: the command-line flag that chose `path`, named in the message.
      need_bytes: the free space it needs; by default `MIN_FREE_BYTES`, what any of our
        files takes (0 where a larger check of the same disk comes later, as `train`'s).

    Returns:
      `path` as a `Path`, or as a string when remote.

    Raises:
      WriteError: one line naming `path` (and `flag`) and the fix.
    """
    if is_remote(path):
        url = os.fspath(path)
        if isdir(url):
            raise WriteError(f"{_where(url, flag)} is a folder; pass the path of a file to write")
        return url
    path = Path(path)
    where = _where(place_of(path), flag)
    _check_file_target(path, where, flag)
    check_folder(path.parent, flag=flag, where=where, need_bytes=need_bytes)
    return path


def check_folder(
    path: str | os.PathLike,
    *,
    flag: str | None = None,
    need_bytes: int = 0,
    where: str | None = None,
) -> None:
    """Fails early, creating nothing, unless `path` is a folder (or can be made one) that this
    process can write, with `need_bytes` free on its disk.

    It creates and removes a hidden probe file in `path`, or in its nearest existing parent
    when `path` is still to be made: permission bits alone do not tell (root ignores them, a
    read-only mount or a full quota shows only on writing). A remote `path` is checked only
    for being a file.

    Args:
      path: the folder that will be written into (or created).
      flag: the command-line flag that chose it, named in the message.
      need_bytes: bytes that will be written there, checked against the free space.
      where: how to name it in a message (default `<flag> <path>`).

    Raises:
      WriteError: it is a file, a parent is a file, a name is too long, it cannot be
        created or written, or its disk has less than `need_bytes` free.
    """
    where = where or _where(path, flag)
    if is_remote(path):
        if isfile(path):
            raise WriteError(f"{where} is a file; pass a folder")
        return
    path = Path(path)
    base = _nearest_folder(path, where, flag, target=True)
    _check_names(path, base, where, flag)
    _probe(base, where, flag)
    free = shutil.disk_usage(base).free
    if free < need_bytes:
        raise WriteError(
            f"cannot write {where}: about {format_size(need_bytes)} needed, {format_size(free)} "
            f"free on its disk; free some space or pass {_other(flag)}"
        )


def make_dirs(
    path: str | os.PathLike, *, flag: str | None = None, where: str | None = None
) -> Path | None:
    """Creates folder `path` and its missing parents, like `mkdir -p`.

    Returns:
      The topmost folder it created (None if `path` existed): `remove_made_dirs` takes it,
      so that a failed command leaves no empty folders behind.

    Raises:
      WriteError: a parent is a file, or a folder cannot be created.
    """
    path = Path(path)
    missing = []
    base = _nearest_folder(path, where or _where(path, flag), flag)
    for folder in (path, *path.parents):
        if folder == base:
            break
        missing.append(folder)
    made = None
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            if not folder.is_dir():
                where = where or _where(path, flag)
                raise WriteError(
                    f"{where}: {folder} is a file, not a folder; pass {_other(flag)}"
                ) from None
            continue
        except OSError as err:
            remove_made_dirs(made, folder.parent)
            raise WriteError(
                f"cannot create the folder {folder} for {where or _where(path, flag)} "
                f"({err.strerror}); {_fix(err, flag)}"
            ) from err
        made = made or folder
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


def format_size(n: float) -> str:
    """Bytes for a message: `950 B`, `12.3 MB`, `1.4 GB`."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _where(path: str | os.PathLike, flag: str | None) -> str:
    return f"{flag} {os.fspath(path)}" if flag else os.fspath(path)


def place_of(path: Path) -> Path:
    """The path a message names: a hidden temporary (`hidden_path`, a staged artifact) by the
    place it is for; any other path as it is."""
    m = _HIDDEN.match(path.name)
    return path.with_name(m["name"]) if m else path


def _other(flag: str | None) -> str:
    return f"another {flag}" if flag else "another path"


def _check_file_target(path: Path, where: str, flag: str | None) -> None:
    """A folder at `path`, a file among its parents, or a name too long: one line each."""
    _check_place(path, where, flag)
    if path.is_dir():
        raise WriteError(f"{where} is a folder; pass the path of a file to write")


def _check_place(path: Path, where: str, flag: str | None) -> Path:
    """A file among `path`'s parents, or a name too long for its file system once written
    under a hidden temporary name first (`hidden_path`); returns its nearest existing folder."""
    base = _nearest_folder(path.parent, where, flag)
    _check_names(path, base, where, flag, temp_extra=len(hidden_path(path).name) - len(path.name))
    return base


def _nearest_folder(path: Path, where: str, flag: str | None, *, target: bool = False) -> Path:
    """`path` or its nearest existing parent; a file there is an error (`target`: `path` is
    the folder the user named, not the parent of a file)."""
    for folder in (path, *path.parents):
        try:
            mode = folder.stat().st_mode
        except OSError:  # missing, under a file, or a name too long: look further up
            continue
        if stat.S_ISDIR(mode):
            return folder
        if target and folder == path:
            raise WriteError(f"{where} is a file; pass a folder")
        raise WriteError(f"{where}: {folder} is a file, not a folder; pass {_other(flag)}")
    return Path.cwd()


def _check_names(
    path: Path, base: Path, where: str, flag: str | None, *, temp_extra: int = 0
) -> None:
    """Every name in `path` fits the file system of `base` (the last one with a temp name's
    extra characters, for a file written under a temp name first)."""
    try:
        limit = os.pathconf(base, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # not every system says
        limit = _NAME_MAX
    names = path.parts
    for i, name in enumerate(names):
        extra = temp_extra if i == len(names) - 1 else 0
        size = len(os.fsencode(name))
        if size + extra > limit:
            short = name if len(name) <= 24 else name[:20] + "..."
            allowed = limit - extra
            raise WriteError(
                f"cannot write {where}: the name {short!r} is {size} bytes long, more than the "
                f"{allowed} its file system allows; pass {_other(flag)} with shorter names"
            )


def _probe(folder: Path, where: str, flag: str | None) -> None:
    """Creates and removes a hidden file in `folder`; one line if it cannot be written."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    probe = hidden_path(folder / "tpu-tiles-probe")  # if killed here: a leftover, removable
    try:
        os.close(os.open(probe, flags, 0o600))
    except FileExistsError:  # 32 random bits taken: someone else's probe; they can write
        return
    except OSError as err:
        raise WriteError(_cannot_write(where, err, flag)) from err
    os.unlink(probe)


def _create_temp(path: Path, where: str, flag: str | None, mode: int) -> Path:
    """Creates a hidden temporary (`hidden_path`) beside `path`, `mode & ~umask` as `open`."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(_TEMP_TRIES):
        tmp = hidden_path(path)
        try:
            # The kernel applies the umask (and a default ACL) to `mode`, as for any new file.
            os.close(os.open(tmp, flags, mode))
        except FileExistsError:
            continue
        except OSError as err:
            raise WriteError(_cannot_write(where, err, flag)) from err
        return tmp
    raise WriteError(f"cannot write {where}: no free temporary name in {path.parent}")


def cannot_write(where: str, err: OSError, *, flag: str | None = None) -> WriteError:
    """The one-line error for a failed write of `where` (`<flag> <path>`): the reason and the
    fix for it, as every writer here says it."""
    return WriteError(_cannot_write(where, err, flag))


def _about(err: OSError, tmp: Path) -> bool:
    """Whether `err` is a failure to write `tmp` (or a full or read-only disk)."""
    names = {str(n) for n in (err.filename, err.filename2) if n is not None}
    return str(tmp) in names or err.errno in _STORAGE_ERRNOS


def _cannot_write(where: str, err: OSError, flag: str | None = None) -> str:
    """'cannot write --out x.csv (No space left on device); free some space or pass another
    --out'."""
    return f"cannot write {where} ({err.strerror or type(err).__name__}); {_fix(err, flag)}"


def _fix(err: OSError, flag: str | None) -> str:
    """What the user does about a failed write: it depends on why it failed."""
    if err.errno in _FULL_ERRNOS:
        return room_fix(flag, err)
    if err.errno == errno.EROFS:
        return f"pass {_other(flag)} on a disk you can write"
    if err.errno == errno.ENAMETOOLONG:
        return f"pass {_other(flag)} with shorter names"
    return f"pass {_other(flag)} in a folder you can write"


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
                f"raise that limit, or pass {_other(flag)}"
            )
        return f"the file is larger than its file system takes; pass {_other(flag)}"
    return f"free some space or pass {_other(flag)}"


def copy_file(src: str | os.PathLike, dst: str | os.PathLike, *, flag: str | None = None) -> None:
    """Copies `src` over `dst` through a temp file beside it, as `cp` would.

    A new `dst` gets src's permission bits less the umask (an executable stays executable, a
    group-shared folder stays readable to the group); an existing one keeps its own.
    """
    src = Path(src)
    with atomic_path(dst, flag=flag, mode=stat.S_IMODE(src.stat().st_mode) & 0o777) as tmp:
        shutil.copyfile(src, tmp)


# -- hidden temporaries and what killed processes left -----------------------------------------


def new_tag() -> str:
    """`<host>-<pid>-<random>`: names this process's hidden temporaries (`hidden_path`)."""
    return f"{_HOST}-{os.getpid()}-{secrets.token_hex(4)}"


def hidden_path(path: str | os.PathLike, kind: str = "tmp", *, tag: str | None = None) -> Path:
    """`.<name>.<tag>.<kind>` beside `path`: a temporary (`kind="tmp"`) or a copy being
    replaced (`"old"`), owned by this process. Writers that stage several files at once give
    them one `tag` (`new_tag()`), so that a later run can finish or undo them together."""
    path = Path(path)
    return path.with_name(f".{path.name}.{tag or new_tag()}.{kind}")


@dataclasses.dataclass(frozen=True)
class Leftover:
    """A hidden temporary or old copy (`hidden_path`) whose owner process is gone."""

    path: Path
    name: str  # the name it was written for
    tag: str
    kind: str  # "tmp" or "old"


def _owner_gone(host: str, pid: int) -> bool:
    """Whether the process that made a hidden file is gone. One of another machine (a shared
    folder) cannot be asked: it counts as running, and its files are left alone."""
    if host != _HOST:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: another user's process, running
        return False
    return False


def leftovers(folder: str | os.PathLike, names: Iterable[str] | None = None) -> list[Leftover]:
    """The hidden temporaries and old copies in `folder` (of `names` only, if given) whose
    owner process is gone, in name order. A remote or missing folder has none (a bucket has
    no processes to ask)."""
    if is_remote(folder) or not os.path.isdir(folder):
        return []
    wanted = None if names is None else set(names)
    found = []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        m = _HIDDEN.match(entry.name)
        if m is None or (wanted is not None and m["name"] not in wanted):
            continue
        if _owner_gone(m["host"], int(m["pid"])):
            found.append(Leftover(Path(entry.path), m["name"], m["tag"], m["kind"]))
    return found


def remove_leftovers(folder: str | os.PathLike, names: Iterable[str] | None = None) -> list[Path]:
    """Removes what killed processes left in `folder` (see `leftovers`); returns their paths."""
    gone = [found.path for found in leftovers(folder, names)]
    for path in gone:
        remove(path)
    return gone


# -- outputs against inputs -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Input:
    """A file or folder a command reads, and what named it."""

    path: str | os.PathLike
    what: str  # "--sample file", "--data_root's train split", "run file of --dir"
    folder: bool = False  # a folder it reads whole: nothing may be written into it


@dataclasses.dataclass(frozen=True)
class Output:
    """A file or folder a command writes, and the flag that chose it (the fix names it)."""

    path: str | os.PathLike
    flag: str
    example: str = ""  # another value to suggest, e.g. "predictions_kaggle.csv"
    # One of a training run's own artifacts (`model_<h>/`, `run_<h>.jsonz`): whether an old
    # one may be replaced is the run's decision (`export`), not this check's.
    artifact: bool = False
    # A folder the command only adds its own files to (a cache), never replaces: an input in
    # it is safe.
    adds_to: bool = False
    # A place whose writing only saves time (a cache): one that cannot be written is not
    # refused here; its writer warns and the command goes on.
    best_effort: bool = False
    # The hash of the training run writing it: that run's own curve and results CSV (named
    # by its run file) are its to replace on a rerun (`export`), another run's never.
    run: str = ""


class OutputError(FlagError):
    """An output would overwrite an input, another output or a finished run's artifact."""


def split_inputs(
    data_root: str | os.PathLike,
    splits: Sequence[str] = formats.SPLITS,
    *,
    flag: str = "--data_root",
) -> list[Input]:
    """The split folders of a data root (every npz in them is read), as inputs; `flag` is
    what named the root."""
    root = expand(data_root)
    return [Input(join(root, split), f"{flag}'s {split} split", True) for split in splits]


def _inside(path: str, folder: str) -> bool:
    if is_remote(path) != is_remote(folder):
        return False
    if is_remote(path):
        return path.startswith(folder + "/")
    return path != folder and os.path.commonpath([path, folder]) == folder


def _same(a: str, b: str) -> bool:
    """Whether canonical paths `a` and `b` are one file: one path, or hard links."""
    if a == b:
        return True
    try:  # hard links
        return not is_remote(a) and not is_remote(b) and os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return False


def _finished_run_part(path: str, own: str = "") -> str | None:
    """What finished training run `path` (local, resolved) belongs to, if any: a run file, a
    file or folder in a SavedModel folder, the training curve of a run beside it, or a file
    that a run file beside it names (its `results_<ms>.csv`); those of run `own` (the run
    writing it) excepted."""
    name, folder = os.path.basename(path), os.path.dirname(path)
    if formats.run_file_hash(name) is not None and os.path.isfile(path):
        return "a run file"
    for parent in Path(path).parents:
        if (parent / formats.SAVED_MODEL_FILE).is_file():
            return f"inside the model directory {parent}"
    h = formats.curve_hash(name)
    if h not in (None, own) and os.path.isfile(os.path.join(folder, formats.run_file_name(h))):
        return f"the training curve of {formats.run_file_name(h)}, part"
    if os.path.isfile(path):  # a file not there yet replaces nothing
        for run_file in sorted(Path(folder).glob(formats.RUN_FILE_GLOB)):
            if run_file.name != formats.run_file_name(own) and _names_file(run_file, path):
                return f"the results CSV that {run_file.name} names, part"
    return None


def _names_file(run_file: Path, path: str) -> bool:
    """Whether `run_file` names the existing file `path` (resolved) as its results CSV: at that
    path, or (a run folder copied from elsewhere) by that name in the run file's folder."""
    try:
        named = formats.named_results_csv(run_file.read_bytes())
    except OSError:  # unreadable: it names nothing we can tell
        return False
    if not named or is_remote(named):
        return False
    if os.path.basename(named) == os.path.basename(path):
        return True
    return canonical(named) == path


def prepare_outputs(outputs: Sequence[Output], inputs: Sequence[Input] = ()) -> None:
    """What every command calls before any work: refuses an output that is one of the inputs
    or lies in an input folder, one whose folder holds an input, two outputs at one path, and
    an output over a finished run's run file, into its model directory, over the results CSV
    its run file names or over its training curve (the one rule by which no command replaces
    another's finished artifact; a training run's own are `export`'s to replace), and a place
    that cannot be written (a file among its parents, a name too long, a read-only or unwritable
    folder: tried with a probe file; not for a `best_effort` output); then removes what killed
    processes left while writing these outputs (`remove_leftovers`).

    Args:
      outputs: every path the command will write (files, or folders it fills).
      inputs: every path it reads (files, or folders whose whole content it reads).

    Raises:
      OutputError: the first clash, in one line naming both paths and the flag to change.
      WriteError: a place that cannot be written, naming it, its flag and the fix.
    """
    _check_outputs(outputs, inputs)
    for out in outputs:
        place = expand(out.path)
        if not is_remote(place) and not out.best_effort:
            _check_writable(Path(place), out.flag)
            remove_leftovers(Path(place).parent, [basename(place)])


def _check_writable(path: Path, flag: str) -> None:
    """What writing `path` (a file, or a folder filled) would fail on, found now; creates
    nothing."""
    where = _where(place_of(path), flag)
    _probe(_check_place(path, where, flag), where, flag)


def _check_outputs(outputs: Sequence[Output], inputs: Sequence[Input]) -> None:
    seen: dict[str, Output] = {}
    for out in outputs:
        where, fix = f"{out.flag} {expand(out.path)}", f"pass another {out.flag}"
        if out.example:
            fix += f" (e.g. {out.example})"
        target = canonical(out.path, what=out.flag)
        for read in inputs:
            source = canonical(read.path, what=read.what)
            if _same(target, source):
                raise OutputError(
                    f"{where} is the {read.what} {expand(read.path)}; writing it would destroy "
                    f"that input, so {fix}"
                )
            if read.folder and _inside(target, source):
                raise OutputError(
                    f"{where} is in the {read.what} {expand(read.path)}; writing there would "
                    f"change what this command reads, so {fix}"
                )
            if _inside(source, target) and not out.adds_to:
                raise OutputError(
                    f"{where} holds the {read.what} {expand(read.path)}; writing it would "
                    f"destroy that input, so {fix}"
                )
        if target in seen and seen[target] != out and not (out.adds_to and seen[target].adds_to):
            raise OutputError(
                f"{where} is also {seen[target].flag}; one file cannot be both, so {fix}"
            )
        seen[target] = out
        part = None if out.artifact or is_remote(target) else _finished_run_part(target, out.run)
        if part:
            raise OutputError(
                f"{where} is {part} of a finished training run; writing it would break that "
                f"run, so {fix}"
            )


# -- the one identity of a path ------------------------------------------------------------


def canonical(path: str | os.PathLike, *, what: str = "") -> str:
    """The one spelling of a place that every lock, cache key, resume key and "is this the
    same file" test uses: `~` expanded, made absolute, every link resolved (a leaf not there
    yet keeps its name under its folder's resolved path), so `SW`, `./SW/`, `/abs/SW` and a
    link to SW are one place; a URL only loses its trailing `/`. `what` (a flag, "the
    hand-in folder") names the path in a message.

    Raises:
      FlagError: `path` is, or passes through, a link that leads back to itself; or its full
        path is longer than the system allows (a deep working folder and a relative path).
    """
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
    """For a path that must be local (a Python file to import), a one-line error if remote.

    Raises:
      FlagError: `path` is a URL.
    """
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
    if not is_remote(path):
        return Path(path).with_name(name)
    return join(_parent(os.fspath(path)), name)


def exists(path: str | os.PathLike) -> bool:
    if is_remote(path):
        return _gfile().exists(os.fspath(path))
    return os.path.exists(path)


def isdir(path: str | os.PathLike) -> bool:
    if is_remote(path):
        return _gfile().isdir(os.fspath(path))
    return os.path.isdir(path)


def isfile(path: str | os.PathLike) -> bool:
    if is_remote(path):
        return exists(path) and not isdir(path)
    return os.path.isfile(path)


def glob(pattern: str) -> list[str]:
    """Paths matching `pattern` (wildcards in the last name only when local)."""
    if is_remote(pattern):
        return _gfile().glob(pattern)
    return [str(p) for p in Path(pattern).parent.glob(os.path.basename(pattern))]


def size_and_mtime(path: str | os.PathLike) -> tuple[int, int]:
    """(size in bytes, modification time in ns) of a file.

    Raises:
      OSError: it cannot be read (FileNotFoundError when missing).
    """
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

    Raises:
      OSError: it cannot be opened or read (FileNotFoundError when missing); a local path
        that is a named pipe, socket or device, with what it is as its reason (opening a
        named pipe would wait for a writer forever).
    """
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


def write_bytes(path: str | os.PathLike, data: bytes, *, flag: str | None = None) -> None:
    """Writes `data` to `path` through `atomic_path`."""
    with atomic_path(path, flag=flag) as tmp:
        tmp.write_bytes(data)


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
    `url` never holds half a file (a bucket's rename is a server-side copy).

    Raises:
      WriteError: it cannot be written; the message names `url` (and `flag`).
    """
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
            raise WriteError(_cannot_write(f"{flag} {url}" if flag else url, err, flag)) from err
        raise


def copy_tree(src: str | os.PathLike, dst: str | os.PathLike, *, flag: str | None = None) -> None:
    """Copies folder `src` into `dst` (created; existing files overwritten); either side may be
    remote. Not atomic: publish a marker file after it (as the run file marks a run).

    Raises:
      WriteError: `dst` cannot be written; OSError: `src` cannot be read.
    """
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
        raise WriteError(_cannot_write(f"{flag} {dst}" if flag else dst, err, flag)) from err


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


@contextlib.contextmanager
def _remote_atomic(url: str, flag: str | None) -> Iterator[Path]:
    """`atomic_path` for a URL: a local temp file, `put_file` to `url` if the block succeeds."""
    check_output_path(url, flag=flag)
    fd, name = tempfile.mkstemp(prefix="tpu_tiles_", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        put_file(tmp, url, flag=flag)
    finally:
        tmp.unlink(missing_ok=True)


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
