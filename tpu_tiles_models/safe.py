"""Outputs written safely: claimed before any work, written under hidden names, put in place.

A command names what it writes (`Output`) and reads (`Input`) and calls `claim` before any
work. Each output is then written under a hidden name beside its place (`Stage`; one file:
`atomic_path`), and all are renamed into place at the end, the last one last (a run file,
which marks the others whole); a failure or a stop signal removes what was written and the
folders made for it. A hidden name carries its owner, `.<name>.<host>-<pid>-<random>.tmp`, so
that what a killed process left is told apart from what a running one writes. The promises
this keeps: docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import re
import secrets
import shutil
import socket
import stat
import tempfile
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple, Sequence

from tpu_tiles_models import files, formats, interrupts
from tpu_tiles_models.errors import FlagError, UserError
from tpu_tiles_models.files import WriteError

# Free space a file output needs at least: our CSVs, reports and charts take up to a few 100 KB.
MIN_FREE_BYTES = 1_000_000
# This machine in a hidden file's owner tag: a process id means something only here.
_HOST = hashlib.md5(socket.gethostname().encode()).hexdigest()[:6]
# `.<name>.<host>-<pid>-<random>.<kind>`: a temporary ("tmp") or a replaced output ("old").
_HIDDEN = re.compile(
    r"^\.(?P<name>.+)\.(?P<tag>(?P<host>[0-9a-f]{6})-(?P<pid>\d+)-[0-9a-f]{8})\.(?P<kind>tmp|old)$"
)


def new_tag() -> str:
    """`<host>-<pid>-<random>`: names one writer's hidden files."""
    return f"{_HOST}-{os.getpid()}-{secrets.token_hex(4)}"


def hidden_path(path: str | os.PathLike, kind: str = "tmp", *, tag: str | None = None) -> Path:
    """`.<name>.<tag>.<kind>` beside `path`, owned by this process."""
    path = Path(path)
    return path.with_name(f".{path.name}.{tag or new_tag()}.{kind}")


def place_of(path: Path) -> Path:
    """The path a message names: a hidden file by the place it is for."""
    m = _HIDDEN.match(path.name)
    return path.with_name(m["name"]) if m else path


class Leftover(NamedTuple):
    """A hidden file whose owner process is gone, the name it was written for, its tag and
    its kind ("tmp" or "old")."""

    path: Path
    name: str
    tag: str
    kind: str


def leftovers(folder: str | os.PathLike, names: Iterable[str] | None = None) -> list[Leftover]:
    """The hidden files in local `folder` (of `names` only, if given) whose owner process is
    gone, in name order. One of another machine (a shared folder) cannot be asked: it stays."""
    if files.is_remote(folder) or not os.path.isdir(folder):
        return []
    found = []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        m = _HIDDEN.match(entry.name)
        if m and (names is None or m["name"] in names) and m["host"] == _HOST:
            try:
                os.kill(int(m["pid"]), 0)
            except ProcessLookupError:
                found.append(Leftover(Path(entry.path), m["name"], m["tag"], m["kind"]))
            except OSError:  # PermissionError: another user's process, running
                pass
    return found


def remove_leftovers(folder: str | os.PathLike, names: Iterable[str] | None = None) -> list[Path]:
    """Removes what killed processes left in `folder` (`leftovers`); returns their paths. An
    `.old` copy whose place is empty (a commit killed between moving it aside and putting the
    new one in) is the only one: it is put back, not removed."""
    gone = []
    for found in leftovers(folder, names):
        place = found.path.with_name(found.name)
        if found.kind == "old" and not os.path.lexists(place):
            os.rename(found.path, place)
            continue
        files.remove(found.path)
        gone.append(found.path)
    return gone


# -- the claim ---------------------------------------------------------------------------------


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
    folder: bool = False  # a folder it fills or puts in place (else a file)
    need_bytes: int | None = None  # free space it needs; default MIN_FREE_BYTES for a file
    artifact: bool = False  # a run's own: whether an old one is replaced is `export`'s call
    adds_to: bool = False  # a folder it only adds its own files to: an input in it is safe
    best_effort: bool = False  # a cache: one that cannot be written is its writer's warning
    run: str = ""  # the hash of the run writing it: its own curve and CSV are its to replace


class OutputError(FlagError):
    """An output would overwrite an input, another output or a finished run's artifact."""


def split_inputs(
    data_root: str | os.PathLike,
    splits: Sequence[str] = formats.SPLITS,
    *,
    flag: str = "--data_root",
) -> list[Input]:
    """The split folders of a data root (every npz in them is read), as inputs."""
    root = files.expand(data_root)
    return [Input(files.join(root, s), f"{flag}'s {s} split", True) for s in splits]


def claim(outputs: Sequence[Output], inputs: Sequence[Input] = ()) -> None:
    """What every command calls before any work; the first fault is one line naming the flag
    and the fix. In this order: an output that is an input, lies in an input folder or holds
    one, two outputs at one path, and one over a finished run's run file, model directory,
    training curve or the results CSV its run file names (OutputError); then each output's
    place (a folder where a file goes or the reverse, a file among its parents, a name too
    long, a folder a probe file cannot be written to, too little free space; WriteError).
    Then removes what killed processes left beside each output (and in a folder output).
    A named pipe or a device is written through where it is (`Stage.path`), never replaced:
    nothing to try there; as a folder output it is refused, as are an empty flag and `-`."""
    for out in outputs:
        what = "folder" if out.folder else "file"
        if not os.fspath(out.path):
            raise FlagError(f"{out.flag} is empty; pass the path of the {what} to write")
        if os.fspath(out.path) == "-":
            raise FlagError(
                f"{out.flag} -: standard output is not written to (the command's own lines go "
                "there); pass a file path, or a named pipe to stream it"
            )
    _check_clashes(outputs, inputs)
    probed: set[Path] = set()
    for out in outputs:
        path, flag = files.expand(out.path), out.flag
        where, kind = files.named(path, flag), _stream(path)
        if kind and out.folder:
            raise WriteError(f"{where} is {kind}, not a folder; pass {files.another(flag)}")
        if kind:
            continue
        base = None if out.best_effort else _target(path, where, flag, folder=out.folder)
        if base is not None and base not in probed:  # permission bits do not tell: try it
            probe = hidden_path(base / "tpu-tiles-probe")  # if killed here: removable
            try:
                os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                os.unlink(probe)
            except OSError as err:
                raise files.cannot_write(where, err, flag=flag) from err
            probed.add(base)
        need = MIN_FREE_BYTES if out.need_bytes is None and not out.folder else out.need_bytes or 0
        free = shutil.disk_usage(base).free if base is not None else need
        if free < need:
            raise WriteError(
                f"cannot write {where}: about {files.format_size(need)} needed, "
                f"{files.format_size(free)} free on its disk; free some space or pass "
                f"{files.another(flag)}"
            )
    for out in outputs:
        place = files.expand(out.path)
        if not files.is_remote(place) and not out.best_effort:
            remove_leftovers(Path(place).parent, [files.basename(place)])
            if out.folder:
                remove_leftovers(place)


def _target(
    path: str | os.PathLike, where: str, flag: str | None, *, folder: bool | None
) -> Path | None:
    """A folder where a file goes or the reverse (`folder` None: either), a file among its
    parents, or a name too long for its file system (with the extra characters of a hidden name,
    unless a folder filled in place): a WriteError. Returns a local `path`'s nearest folder."""
    if folder is False and files.isdir(path):
        raise WriteError(f"{where} is a folder; pass the path of a file to write")
    if files.is_remote(path):
        return None
    path = Path(path)
    base = files.nearest_folder(path if folder else path.parent, where, flag, target=bool(folder))
    try:
        limit = os.pathconf(base, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # not every system says
        limit = 255
    extra = 0 if folder else len(hidden_path(path).name) - len(path.name)
    for i, name in enumerate(path.parts):
        size = len(os.fsencode(name))
        allowed = limit - (extra if i == len(path.parts) - 1 else 0)
        if size > allowed:
            short = name if len(name) <= 24 else name[:20] + "..."
            raise WriteError(
                f"cannot write {where}: the name {short!r} is {size} bytes long, more than the "
                f"{allowed} its file system allows; pass {files.another(flag)} with shorter names"
            )
    return base


def _check_clashes(outputs: Sequence[Output], inputs: Sequence[Input]) -> None:
    targets = [files.canonical(out.path, what=out.flag) for out in outputs]  # named first
    reads = [(read, _identities(files.canonical(read.path, what=read.what))) for read in inputs]
    seen: dict[tuple, Output] = {}
    for out, target in zip(outputs, targets):
        where, fix = f"{out.flag} {files.expand(out.path)}", f"pass another {out.flag}"
        if out.example:
            fix += f" (e.g. {out.example})"
        me, *above = _identities(target)
        for read, (source, *holding) in reads:
            named = files.expand(read.path)
            if me == source:
                why = f"is the {read.what} {named}; writing it would destroy that input"
            elif read.folder and source in above:
                why = f"is in the {read.what} {named}; writing there would change what this "
                why += "command reads"
            elif me in holding and not out.adds_to:
                why = f"holds the {read.what} {named}; writing it would destroy that input"
            else:
                continue
            raise OutputError(f"{where} {why}, so {fix}")
        if me in seen and seen[me] != out and not (out.adds_to and seen[me].adds_to):
            raise OutputError(f"{where} is also {seen[me].flag}; one file cannot be both, so {fix}")
        seen[me] = out
        part = None if out.artifact or files.is_remote(target) else _run_part(target, out.run)
        if part:
            raise OutputError(
                f"{where} is {part} of a finished training run; writing it would break that "
                f"run, so {fix}"
            )


def _identities(path: str) -> list[tuple]:
    """What canonical `path` and each folder above it are, nearest first, told apart by
    identity rather than spelling (a hard link, a bind mount): the device and inode of what
    exists, with the names below the nearest existing folder of what does not yet. A URL's
    are its spellings."""
    if files.is_remote(path):
        parts = path.split("/")
        return [("/".join(parts[:i]),) for i in range(len(parts), 2, -1)]
    chain, ids = [Path(path), *Path(path).parents], []
    base: tuple = ()
    for place in reversed(chain):  # from the root down: a missing folder holds nothing
        try:
            st = os.stat(place)
            base = (st.st_dev, st.st_ino)
        except OSError:
            base = (*(base or (os.fspath(place.parent),)), place.name)
        ids.append(base)
    return ids[::-1]


def _stream(path: str | os.PathLike) -> str:
    """What a local `path` that is written through rather than replaced is ("a named pipe
    (FIFO)", "a device", "a socket", or "a process's stream": a file named in /dev or /proc,
    such as /dev/stdout into a file): '' for a regular file, a folder, nothing or a URL."""
    kind = "" if files.is_remote(path) else files.not_a_file(path)
    if kind == "" and not files.is_remote(path):
        folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
        return "a process's stream" if folder == "/dev" or folder.startswith("/proc/") else ""
    return "" if kind in ("not found", "a folder") or kind.startswith("unreadable") else kind


def _run_part(path: str, own: str = "") -> str | None:
    """What finished run local `path` belongs to, if any: a run file, a model directory, the
    training curve of a run beside it, or the results CSV a run file beside it names (at that
    path, or by that name: a run folder copied from elsewhere); those of run `own` excepted."""
    name, folder = os.path.basename(path), os.path.dirname(path)
    if formats.run_file_hash(name) is not None and os.path.isfile(path):
        return "a run file"
    for parent in Path(path).parents:  # (os.path.isfile: a name too long is no model dir)
        if os.path.isfile(parent / formats.SAVED_MODEL_FILE):
            return f"inside the model directory {parent}"
    h = formats.curve_hash(name)
    if h not in (None, own) and os.path.isfile(os.path.join(folder, formats.run_file_name(h))):
        return f"the training curve of {formats.run_file_name(h)}, part"
    if not os.path.isfile(path):  # a file not there yet replaces nothing
        return None
    for run_file in sorted(Path(folder).glob(formats.RUN_FILE_GLOB)):
        csv = ""
        with contextlib.suppress(OSError):  # unreadable: it names nothing we can tell
            csv = formats.named_results_csv(run_file.read_bytes()) or ""
        if run_file.name != formats.run_file_name(own) and csv and not files.is_remote(csv):
            if os.path.basename(csv) == name or files.canonical(csv) == path:
                return f"the results CSV that {run_file.name} names, part"
    return None


# -- writing -------------------------------------------------------------------------------------


class Stage:
    """Outputs written under hidden names beside their places (one tag for all; a remote one
    in a local folder), put in place together by `commit`, removed by `discard`. As a context
    manager: committed when the block succeeds, discarded if it fails or a stop signal came
    meanwhile; a write or a rename that fails is a WriteError naming the output and its flag,
    never the hidden name."""

    def __init__(self) -> None:
        self.tag = new_tag()
        self.moves: list[tuple[Path, Path | str]] = []  # (where written, its place)
        self.made: list[tuple[Path, Path]] = []  # (topmost folder made, the folder made)
        self._local: Path | None = None
        self._named: dict[str, tuple[str, str | None]] = {}  # path -> (place named, flag)

    def __enter__(self) -> Stage:
        return self

    def __exit__(self, kind: type | None, err: BaseException | None, tb: object) -> None:
        try:
            if kind is None:
                self.commit()
            elif isinstance(err, OSError) and not isinstance(err, UserError):
                self._one_line(err)
        finally:
            self.discard()

    def make_dirs(self, folder: str | os.PathLike, *, flag: str | None, where: str = "") -> None:
        """`files.make_dirs`; `discard` removes what it made, if still empty."""
        made = files.make_dirs(folder, flag=flag, where=where or None)
        if made:
            self.made.append((made, Path(folder)))

    def path(
        self, place: str | os.PathLike, *, flag: str | None = None, mode: int | None = None
    ) -> Path:
        """Where to write `place`. With `mode`, an empty file made as `open` makes one
        (`mode & ~umask`); without, the writer makes it (a SavedModel's folder, say). A named
        pipe or a device is written through, as itself (`_stream`)."""
        remote = files.is_remote(place)
        where = files.named(place if remote else place_of(Path(place)), flag)
        if _stream(place):  # (`claim` refused it as a folder)
            self._named[os.fspath(place)] = (where, flag)
            return Path(place)
        _target(place, where, flag, folder=None if mode is None else False)
        if remote:
            self._local = self._local or Path(tempfile.mkdtemp(prefix="tpu_tiles_"))
            tmp = self._local / str(len(self.moves)) / files.basename(place)
            tmp.parent.mkdir()
        else:
            self.make_dirs(Path(place).parent, flag=flag, where=where)
            tmp = hidden_path(place, tag=self.tag)
        self._named[os.fspath(tmp)] = self._named[os.fspath(place)] = (where, flag)
        if mode is not None:
            try:  # the kernel applies the umask (and a default ACL) to `mode`
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))
            except OSError as err:
                raise files.cannot_write(where, err, flag=flag) from err
        self.moves.append((tmp, place))
        return tmp

    def commit(self) -> None:
        """Puts every output in place (`put_in_place`), in the order staged; a stop signal that
        came while they were written stops here, with nothing in place."""
        interrupts.check()
        try:
            with interrupts.critical():
                put_in_place(self.moves)
        except OSError as err:
            self._one_line(err)
            raise
        self.moves, self.made = [], []
        self.discard()

    def _one_line(self, err: OSError) -> None:
        """Raises `err` as a WriteError naming the output it is about (what was written, in
        it, its place or the copy moved aside), or the first output if it is about the place
        (a full or read-only disk); returns if neither."""
        for name in (err.filename, err.filename2):
            for path in () if name is None else (Path(name), *Path(name).parents):
                found = self._named.get(os.fspath(path)) or self._named.get(
                    os.fspath(place_of(path))
                )
                if found:
                    raise files.cannot_write(found[0], err, flag=found[1]) from err
        if err.errno in files.STORAGE_ERRNOS and self._named:
            where, flag = next(iter(self._named.values()))
            raise files.cannot_write(where, err, flag=flag) from err

    def discard(self) -> None:
        """Removes what was written (nothing once committed) and the folders made for it."""
        for tmp, _ in self.moves:
            files.remove(tmp)
        for made, folder in reversed(self.made):
            files.remove_made_dirs(made, folder)
        if self._local is not None:
            shutil.rmtree(self._local, ignore_errors=True)
        self.moves, self.made, self._local = [], [], None


def put_in_place(moves: Sequence[tuple[Path, Path | str]]) -> None:
    """Puts each written path in place, in order. A local one is renamed, the last with
    `os.replace` (a reader never finds it missing), the others after moving what is there aside
    (`.<name>.<tag>.old`, removed at the end: a folder cannot be renamed over); a remote one is
    copied. If one fails, those done are undone (a remote one removed). A written path that is
    gone was put in place already (the rest of a killed commit)."""
    done: list[tuple[Path, Path | str, Path | None]] = []
    try:
        for i, (tmp, place) in enumerate(moves):
            if not os.path.lexists(tmp):
                continue
            if files.is_remote(place):
                if tmp.is_dir():
                    files.remove(place)
                    done.append((tmp, place, None))  # a half copy goes too
                    files.copy_tree(tmp, place)
                else:
                    files.put_file(tmp, place)  # whole, or the old file as it was
                    done.append((tmp, place, None))
                continue
            place = Path(place)
            # As `open(place, "w")`: its own mode; never a staged link's (chmod follows it).
            if place.is_file() and tmp.is_file() and not tmp.is_symlink():
                os.chmod(tmp, stat.S_IMODE(place.stat().st_mode))
            if i == len(moves) - 1:
                os.replace(tmp, place)
                break
            old = hidden_path(place, "old") if os.path.lexists(place) else None
            if old:
                os.rename(place, old)
            done.append((tmp, place, old))
            os.rename(tmp, place)
    except BaseException:
        for tmp, place, old in reversed(done):
            with contextlib.suppress(OSError):  # as much as can be undone
                if files.is_remote(place):
                    files.remove(place)
                elif not os.path.lexists(tmp) and os.path.lexists(place):
                    os.rename(place, tmp)
                if old is not None:
                    os.rename(old, place)
        raise
    for _, _, old in done:
        if old is not None:
            files.remove(old)


@contextlib.contextmanager
def atomic_paths(
    targets: Sequence[tuple[str | os.PathLike, str | None]], *, mode: int = 0o666
) -> Iterator[list[Path]]:
    """Yields an empty hidden file beside each `(path, flag)`; puts them all in place when the
    block succeeds, none if it fails or a stop signal came meanwhile (a `Stage`)."""
    with Stage() as stage:
        yield [stage.path(path, flag=flag, mode=mode) for path, flag in targets]


@contextlib.contextmanager
def atomic_path(
    path: str | os.PathLike, *, flag: str | None = None, mode: int = 0o666
) -> Iterator[Path]:
    """`atomic_paths` for one file. Its hidden name ends in `.tmp`, so globs such as `*.npz`
    never pick it up: writers that choose a format by extension need it explicitly."""
    with atomic_paths([(path, flag)], mode=mode) as (tmp,):
        yield tmp


def write_bytes(path: str | os.PathLike, data: bytes, *, flag: str | None = None) -> None:
    with atomic_path(path, flag=flag) as tmp:
        tmp.write_bytes(data)
