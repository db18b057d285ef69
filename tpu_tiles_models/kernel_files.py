"""The kernel files of a TpuGraphs tile:xla data root (the format: `formats`): a split's npz
files listed, each read and validated (`check_members`), and a kernel's names.

`iter_kernels` streams a split one kernel at a time (`tpu-tiles inspect`); `data.load_split`
reads a whole split in parallel. A bad file raises `DataError`, one line naming it and the fix.
Importing it imports no TensorFlow (`split_files` does when called, for upstream's file order).
"""

from __future__ import annotations

import collections
import concurrent.futures
import io
import itertools
import math
import os
import zipfile
import zlib
from typing import Any, Iterator, Sequence

import numpy as np

from tpu_tiles_models import defaults, files, kaggle
from tpu_tiles_models.errors import UserError
from tpu_tiles_models.formats import (
    CONFIG_FEAT_DIM,
    MAX_OPCODE,
    NODE_FEAT_DIM,
    REQUIRED_KEYS,
    SPLITS,
)

TOY_FILES = 100  # upstream's --toy_data keeps the first 100 files of each split
# The most a kernel file's arrays may take decompressed: real kernels take a few MB at most;
# a zip bomb (a few MB that inflate to GB) is refused from its zip directory, unread.
KERNEL_FILE_LIMIT = 256 * 10**6


class DataError(UserError, ValueError):
    """A data file or directory is unusable; the message is one line naming it and the fix."""


# -- a split's files and a kernel's names ---------------------------------------------------


def split_files(root: str | os.PathLike, split: str, *, toy_data: bool = False) -> list[str]:
    """`root/split/*.npz` (`root` may be remote) in upstream's order; with `toy_data`, the
    first `TOY_FILES`, as upstream's `--toy_data`."""
    directory = files.join(files.expand(root), split)
    if not files.isdir(directory):
        raise DataError(
            f"{directory}: split directory not found; point the data root at the folder "
            f"holding {'/, '.join(SPLITS)}/ (e.g. {defaults.HOME_DATA_ROOT})"
        )
    if not files.is_remote(directory):
        _check_names(directory)
    # Upstream's order is tf.io.gfile.glob's (unsorted, directory order); toy subsets and the
    # course's predictions depend on it, so use the very same call.
    import tensorflow as tf

    found = tf.io.gfile.glob(files.join(directory, "*.npz"))
    if not found:
        raise DataError(f"{directory}: no *.npz files; download the tile:xla npz files into it")
    found = found[:TOY_FILES] if toy_data else found
    if split == "test":  # each test kernel becomes a predictions CSV row named by its file
        for path in found:
            problem = kaggle.tile_id_problem(tile_id_of(path))
            if problem:
                raise DataError(
                    f"{path}: its tile id {problem}, so no predictions CSV can name it; "
                    "rename the file (test files keep Kaggle's tile ids)"
                )
    return found


def _check_names(directory: str) -> None:
    """Raises `DataError` for a local split folder, or a `*.npz` entry of it, that no reader
    can open: a path that is not UTF-8 (TensorFlow's paths are) or a link to nothing."""
    folder = os.fsencode(directory)
    with os.scandir(folder) as found:  # a link is known from the listing, without a stat
        entries = sorted((e.name, e.is_symlink()) for e in found if e.name.endswith(b".npz"))
    suspects = [(name, link) for name, link in entries if link or not name.isascii()]
    for name, link in [(b"", os.path.islink(folder)), *suspects]:
        path = os.path.join(folder, name) if name else folder
        shown = path.decode("utf-8", "backslashreplace")  # its bytes as \xff, not a crash
        if shown != os.fsdecode(path):
            raise DataError(f"{shown}: its path is not UTF-8, which no reader opens; rename it")
        if link and not os.path.exists(path):
            target = os.readlink(path).decode(errors="backslashreplace")
            raise DataError(
                f"{shown}: a link to {target}, which does not exist; point it at the kernel's "
                "file or remove it"
            )


def tile_id_of(path: str) -> str:
    """The tile id of a file: its name without directory and `.npz`."""
    return os.path.splitext(os.path.basename(path))[0]


def benchmark_of(tile_id: str) -> str:
    """`resnet50_train_batch_8_1a2b` -> `resnet50_train_batch_8`: the program (upstream's
    benchmark) a kernel comes from, as upstream groups them."""
    return tile_id.rsplit("_", 1)[0]


# -- one file: read, then validated -----------------------------------------------------------


def _unreadable(path: str, err: BaseException) -> DataError:
    reason = " ".join(str(err).split()) or type(err).__name__
    return DataError(f"{path}: not a readable npz file ({reason}); re-download it or delete it")


_ZIP_ERRORS = (OSError, EOFError, zipfile.BadZipFile, zlib.error, KeyError, ValueError)


def read_members(path: str) -> dict[str, bytes]:
    """The decompressed `.npy` members of `REQUIRED_KEYS` that an npz file has, if their sizes
    in its zip directory (which bound what is inflated) stay within `KERNEL_FILE_LIMIT`; any
    other member is left packed. Thread-safe: no numpy parsing here (`check_members` does it)."""
    try:
        with files.open_read(path) as f, zipfile.ZipFile(f) as zf:
            infos = {info.filename: info for info in zf.infolist()}  # a name twice: the last
            wanted = {k: infos[f"{k}.npy"] for k in REQUIRED_KEYS if f"{k}.npy" in infos}
            size = sum(info.file_size for info in wanted.values())
            if size > KERNEL_FILE_LIMIT:
                raise _fail(
                    path,
                    f"its arrays inflate to {files.format_size(size)}, past the "
                    f"{files.format_size(KERNEL_FILE_LIMIT)} of any real kernel",
                )
            return {k: zf.read(info) for k, info in wanted.items()}
    except DataError:
        raise
    except _ZIP_ERRORS as err:
        raise _unreadable(path, err) from None


_HEADERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}


def _parse_members(path: str, members: dict[str, bytes]) -> dict[str, np.ndarray]:
    """Arrays from `read_members` output, each only if its `.npy` header's shape and dtype
    take the bytes its member holds (a header may declare any shape: numpy would allocate it
    first), each header parsed once. One thread only: numpy parses .npy headers with
    `ast.literal_eval`, which CPython 3.11 can fail on when several threads run it at once
    ("AST constructor recursion depth mismatch")."""
    arrays = {}
    try:
        for key, raw in members.items():
            stream = io.BytesIO(raw)
            version = np.lib.format.read_magic(stream)
            if version not in _HEADERS:
                raise ValueError(f"{key}.npy has .npy format version {version}")
            shape, fortran_order, dtype = _HEADERS[version](stream)
            if dtype.hasobject:  # what numpy's allow_pickle=False refuses: no pickle is run
                raise ValueError(f"{key}.npy holds Python objects, not numbers")
            declared, held = math.prod(shape) * dtype.itemsize, len(raw) - stream.tell()
            if declared != held:
                raise _fail(
                    path,
                    f"{key} declares shape {shape} of {dtype} ({files.format_size(declared)}), "
                    f"but its member holds {files.format_size(held)}",
                )
            order = "F" if fortran_order else "C"  # a view of the member's bytes, no copy
            arrays[key] = np.ndarray(shape, dtype, raw, stream.tell(), order=order)
    except DataError:
        raise
    except _ZIP_ERRORS as err:
        raise _unreadable(path, err) from None
    return arrays


def _fail(path: str, what: str) -> DataError:
    return DataError(f"{path}: {what}; re-download the file or delete it")


def _check_shape(path: str, key: str, shape: tuple[int, ...], want: tuple[Any, ...]) -> None:
    ok = len(shape) == len(want) and all(w is None or s == w for s, w in zip(shape, want))
    if not ok:
        parts = ["?" if w is None else str(w) for w in want]
        pretty = f"({parts[0]},)" if len(parts) == 1 else f"({', '.join(parts)})"
        raise _fail(path, f"{key} has shape {shape}, expected {pretty}")


def runtime_ratios(runtimes: np.ndarray, normalizers: np.ndarray) -> np.ndarray:
    """runtime / normalizer as float32, the labels; 0 where the normalizer is 0 (test files)."""
    out = np.zeros(np.shape(normalizers), dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # inf or NaN: validation refuses it
        np.divide(runtimes, normalizers, out=out, where=np.asarray(normalizers) != 0)
    return _float32(out)


def _float32(values: np.ndarray) -> np.ndarray:
    """`values` in float32, the precision models use: beyond its range inf, below it 0."""
    with np.errstate(over="ignore"):  # the inf is the answer, for validation to refuse
        return np.asarray(values).astype(np.float32)


def _as_models_see(values: np.ndarray) -> np.ndarray:
    """What validation checks of `values`: float32 and integers as they are (every int64 is
    finite in float32 and keeps its sign there), other floats in float32 (`_float32`)."""
    return values if values.dtype.kind in "iu" or values.dtype == np.float32 else _float32(values)


_IN_FLOAT32 = " in float32, the precision models use"
_SCALABLE = float(np.finfo(np.float32).max) / 2


def validate_arrays(path: str, arrays: dict[str, np.ndarray], *, split: str) -> None:
    """`DataError` unless `arrays` is a usable kernel: keys, dtypes, shapes and their
    agreement, opcode and edge ranges, finite features within half float32's range (so that
    scaling by a column's range cannot overflow), at least one config, and runtimes and
    their ratios (> 0 on train and valid, >= 0 on test), the numbers in float32 as models see
    them. (A train kernel with a single config is valid; `data.load_split` leaves it out.)"""
    missing = [key for key in REQUIRED_KEYS if key not in arrays]
    if missing:
        raise _fail(path, f"missing key(s) {', '.join(missing)}")
    integers = ("node_opcode", "edge_index")
    for key in [*integers, *(k for k in REQUIRED_KEYS if k not in integers)]:
        integer = key in integers
        if arrays[key].dtype.kind not in ("iu" if integer else "iuf"):
            want = "integer" if integer else "numeric"
            raise _fail(path, f"{key} has dtype {arrays[key].dtype}, expected {want}")

    n = arrays["node_feat"].shape[0] if arrays["node_feat"].ndim else -1
    c = arrays["config_feat"].shape[0] if arrays["config_feat"].ndim else -1
    _check_shape(path, "node_feat", arrays["node_feat"].shape, (None, NODE_FEAT_DIM))
    _check_shape(path, "node_opcode", arrays["node_opcode"].shape, (n,))
    edges = arrays["edge_index"]
    if edges.size or edges.ndim != 1:  # an empty edge list may be stored as shape (0,)
        _check_shape(path, "edge_index", edges.shape, (None, 2))
    _check_shape(path, "config_feat", arrays["config_feat"].shape, (None, CONFIG_FEAT_DIM))
    _check_shape(path, "config_runtime", arrays["config_runtime"].shape, (c,))
    _check_shape(
        path, "config_runtime_normalizers", arrays["config_runtime_normalizers"].shape, (c,)
    )

    if n < 1:
        raise _fail(path, "has no nodes")
    ops = arrays["node_opcode"]
    if ops.min() < 0 or ops.max() > MAX_OPCODE:
        bad = ops.min() if ops.min() < 0 else ops.max()
        raise _fail(
            path,
            f"node_opcode {bad} is outside 0..{MAX_OPCODE}, the HLO opcode ids models embed "
            "(TpuGraphs' run 0..120)",
        )
    if edges.size and (edges.min() < 0 or edges.max() >= n):
        raise _fail(
            path,
            f"edge_index refers to node {edges.min() if edges.min() < 0 else edges.max()}"
            f" but the kernel has nodes 0..{n - 1}",
        )
    # Numbers are checked as float32, the precision they are used in: a float64 beyond its
    # range is inf there, and a tiny runtime 0 (the labels are runtime / normalizer).
    # Scaling divides by a column's range, max - min over the train split: within half
    # float32's largest number every range and value less min is finite. A min and a max (NaN
    # if a value is) clear an array; only a failing one is searched for why.
    for key in ("node_feat", "config_feat"):
        values = _as_models_see(arrays[key])
        if values.dtype.kind in "iu" or not values.size:  # integers: finite, far within
            continue
        if -_SCALABLE <= values.min() and values.max() <= _SCALABLE:
            continue
        if not np.isfinite(values).all():
            raise _fail(path, f"{key} has NaN or infinite values{_IN_FLOAT32}")
        row, column = np.argwhere(np.abs(values) > _SCALABLE)[0]
        raise _fail(
            path,
            f"{key} column {column} holds {values[row, column]:.4g}; past "
            f"{_SCALABLE:.2g} in magnitude a column's range (max - min), which scaling "
            "divides by, overflows float32",
        )

    if c < 1:
        raise _fail(path, "has no configs")
    keys = ("config_runtime", "config_runtime_normalizers")
    runtimes = {k: _as_models_see(arrays[k]) for k in keys}
    # Two positive int64s' ratio lies within float32's range (TpuGraphs' runtimes are int64):
    # only a float runtime or normalizer can make the label inf or 0 alone.
    if any(arrays[k].dtype.kind not in "iu" for k in keys):
        ratios = runtime_ratios(arrays["config_runtime"], arrays["config_runtime_normalizers"])
        runtimes["config_runtime / config_runtime_normalizers"] = ratios
    for key, values in runtimes.items():
        lowest = values.min()  # NaN if any value is; an inf is the max
        if not (lowest >= 0 and values.max() < np.inf):
            raise _fail(path, f"{key} has negative, NaN or infinite values{_IN_FLOAT32}")
        if split != "test" and lowest <= 0:
            raise _fail(
                path, f"{key} has zeros{_IN_FLOAT32}; only the test split may lack runtimes"
            )


def check_members(path: str, members: dict[str, bytes], split: str) -> dict[str, np.ndarray]:
    """The `REQUIRED_KEYS` arrays of `read_members`' output, parsed (in one thread only, see
    `_parse_members`) and validated."""
    arrays = _parse_members(path, members)
    validate_arrays(path, arrays, split=split)
    return {key: arrays[key] for key in REQUIRED_KEYS}


# -- a split streamed -------------------------------------------------------------------------


def iter_kernels(
    paths: Sequence[str], split: str, *, skip_bad: bool = False, read_ahead: int = 8
) -> Iterator[tuple[str, dict[str, np.ndarray] | DataError]]:
    """`(path, arrays)` of `paths`' kernels, validated, one at a time and in order: threads
    read at most `read_ahead` files ahead, so memory holds that many kernels, not the split. A
    bad file raises `DataError`, or with `skip_bad` is yielded as `(path, DataError)`."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(4, read_ahead))
    queue = iter(paths)
    pending = collections.deque(
        (p, pool.submit(read_members, p)) for p in itertools.islice(queue, read_ahead)
    )
    try:
        while pending:
            path, future = pending.popleft()
            for following in itertools.islice(queue, 1):
                pending.append((following, pool.submit(read_members, following)))
            try:
                arrays = check_members(path, future.result(), split)
            except DataError as err:
                if not skip_bad:
                    raise
                yield path, err
                continue
            yield path, arrays
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
