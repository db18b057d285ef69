"""Untrusted inputs read within a budget, refused in one line naming the file or flag (issue 58):
an npz zip bomb or a `.npy` header declaring a huge shape, features whose range float32 cannot
hold, a grid of more points than a sweep runs, and a `--grid` that is no file. Each refusal
is shown to read a bounded amount (the peak of memory, the points made), not timed."""

from __future__ import annotations

import ast
import os
import tracemalloc
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tpu_tiles_models import kernel_files
from tpu_tiles_models.errors import FlagError
from tpu_tiles_models.kernel_files import DataError
from tpu_tiles_models.sweep import grid as grids
from tpu_tiles_models.train_args import TrainArgs

FIX = "; re-download the file or delete it"


def _kernel() -> dict[str, np.ndarray]:
    """A valid train kernel of 3 nodes and 2 configs."""
    node_feat = np.arange(3 * 140, dtype=np.float32).reshape(3, 140)
    return dict(
        node_feat=node_feat,
        node_opcode=np.array([1, 2, 3]),
        edge_index=np.array([[1, 0], [2, 1]]),
        config_feat=np.ones((2, 24), np.float32),
        config_runtime=np.array([5, 7]),
        config_runtime_normalizers=np.array([5, 5]),
    )


def _read(path: Path) -> dict[str, np.ndarray]:
    return kernel_files.check_members(str(path), kernel_files.read_members(str(path)), "train")


def _npz_with(path: Path, key: str, header: dict, data) -> Path:
    """A kernel file whose member `key` is the `.npy` `header` followed by `data`'s chunks
    (written as a stream: a bomb never sits in memory)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, array in _kernel().items():
            if name == key:
                with zf.open(f"{key}.npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array_header_1_0(member, header)
                    for chunk in data:
                        member.write(chunk)
            else:
                with zf.open(f"{name}.npy", "w") as member:
                    np.lib.format.write_array(member, array)
    return path


def _header(shape: tuple[int, ...]) -> dict:
    return {"descr": "<f4", "fortran_order": False, "shape": shape}


def test_a_valid_kernel_reads_as_numpy_writes_it(tmp_path):
    path = tmp_path / "k.npz"
    np.savez_compressed(path, **_kernel())
    read = _read(path)
    for key, array in _kernel().items():
        np.testing.assert_array_equal(read[key], array)
    # The same through the streamed writer above, and a Fortran-ordered member.
    feat = _kernel()["node_feat"]
    fortran = {"descr": "<f4", "fortran_order": True, "shape": feat.shape}
    _npz_with(path, "node_feat", fortran, [feat.T.tobytes()])
    np.testing.assert_array_equal(_read(path)["node_feat"], feat)


def test_an_npz_zip_bomb_is_refused_from_its_directory_unread(tmp_path, monkeypatch):
    """Before: a 4.5 MB bomb took 4.8 GB, then a MemoryError traceback. The zip directory
    bounds what a member inflates to, so the sizes there are checked before any is read."""
    monkeypatch.setattr(kernel_files, "KERNEL_FILE_LIMIT", 10**6)
    rows = 30_000  # 16.8 MB of float32 zeros, about 16 KB packed
    mb = bytes(560 * 1000)
    path = _npz_with(tmp_path / "bomb.npz", "node_feat", _header((rows, 140)), [mb] * 30)
    assert path.stat().st_size < 100_000
    tracemalloc.start()
    try:
        with pytest.raises(DataError) as info:
            kernel_files.read_members(str(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(info.value) == (
        f"{path}: its arrays inflate to 16.8 MB, past the 1.0 MB of any real kernel{FIX}"
    )
    assert peak < 2 * 10**6, peak


def test_a_header_declaring_a_huge_shape_is_one_line(tmp_path):
    """Before: numpy allocated the declared shape first, an `_ArrayMemoryError` traceback."""
    path = _npz_with(tmp_path / "huge.npz", "node_feat", _header((10**12, 140)), [bytes(560)])
    with pytest.raises(DataError) as info:
        _read(path)
    assert str(info.value) == (
        f"{path}: node_feat declares shape (1000000000000, 140) of float32 (560.0 TB), but "
        f"its member holds 560 B{FIX}"
    )
    # Fewer bytes than the header declares is the same fault, said the same way.
    _npz_with(path, "config_feat", _header((2, 24)), [bytes(100)])
    with pytest.raises(DataError, match=r"config_feat declares shape \(2, 24\) of float32 "):
        _read(path)


@pytest.mark.parametrize("key", ["node_feat", "config_feat"])
def test_features_whose_range_overflows_float32_name_the_column(key, tmp_path):
    """Before: 3e38 and -3e38 in one column passed, scaling by their range (inf) made the
    features NaN, and training stopped with "lower --lr"."""
    arrays = _kernel()
    arrays[key][0, 5], arrays[key][1, 5] = 3e38, -3e38
    path = tmp_path / "k.npz"
    np.savez(path, **arrays)
    with pytest.raises(DataError) as info:
        _read(path)
    assert str(info.value) == (
        f"{path}: {key} column 5 holds 3e+38; past 1.7e+38 in magnitude a column's range "
        f"(max - min), which scaling divides by, overflows float32{FIX}"
    )
    arrays[key][0, 5], arrays[key][1, 5] = 1.7e38, -1.7e38  # within: its range is finite
    np.savez(path, **arrays)
    _read(path)


def test_each_member_header_is_parsed_once(tmp_path, monkeypatch):
    """Before: a header was parsed to check its shape, then again by numpy's reader, which
    took the fresh-cache prediction command from 9.8 to 11.3 CPU seconds (issue 59)."""
    path = tmp_path / "k.npz"
    np.savez(path, **_kernel())
    calls = []
    literal_eval = ast.literal_eval
    monkeypatch.setattr(ast, "literal_eval", lambda text: calls.append(text) or literal_eval(text))
    read = _read(path)
    assert len(calls) == len(_kernel())
    for key, array in _kernel().items():
        np.testing.assert_array_equal(read[key], array)


def _cell(key: str, value) -> dict[str, np.ndarray]:
    arrays = _kernel()
    arrays[key] = arrays[key].astype(type(value))
    arrays[key].flat[1] = value
    return arrays


NOT_FINITE = "has NaN or infinite values in float32, the precision models use"
NOT_RUNTIMES = "has negative, NaN or infinite values in float32, the precision models use"
BAD_NUMBERS = {  # each way a number can be bad, each caught by validation's min and max
    "nan feature": (_cell("node_feat", np.float32("nan")), f"node_feat {NOT_FINITE}"),
    "inf feature": (_cell("config_feat", np.float32("inf")), f"config_feat {NOT_FINITE}"),
    "-inf feature": (_cell("node_feat", -np.inf), f"node_feat {NOT_FINITE}"),
    "negative runtime": (_cell("config_runtime", -3), f"config_runtime {NOT_RUNTIMES}"),
    "nan normalizer": (
        _cell("config_runtime_normalizers", np.nan),
        f"config_runtime_normalizers {NOT_RUNTIMES}",
    ),
    "inf runtime": (_cell("config_runtime", np.inf), f"config_runtime {NOT_RUNTIMES}"),
    "object member": (
        {**_kernel(), "node_feat": np.array([{"by": "hand"}], dtype=object)},
        "not a readable npz file (node_feat.npy holds Python objects, not numbers)",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_NUMBERS))
def test_a_bad_number_is_one_line_naming_the_member(case, tmp_path):
    arrays, words = BAD_NUMBERS[case]
    path = tmp_path / "k.npz"
    np.savez(path, **arrays)
    with pytest.raises(DataError) as info:
        _read(path)
    assert str(info.value).startswith(f"{path}: {words}"), str(info.value)


def test_integer_features_of_any_size_are_usable(tmp_path):
    path = tmp_path / "k.npz"
    big = {"node_feat": np.full((3, 140), 2**62), "config_feat": np.full((2, 24), -(2**62))}
    np.savez(path, **{**_kernel(), **big})
    for key, array in big.items():
        np.testing.assert_array_equal(_read(path)[key], array)


def test_a_grid_too_big_is_refused_before_a_point_is_made(monkeypatch):
    """Before: 10^6 points were expanded in memory, a MemoryError after 84 s."""
    made = []

    def make_point(base, values):
        made.append(values)
        return SimpleNamespace(key=len(made))

    monkeypatch.setattr(grids, "make_point", make_point)
    values = ",".join(f"{i}e-4" for i in range(1, 101))
    (grid,) = grids.parse_grid(f"lr={values} clip_norm={values} seed=0,1,2,3,4,5,6,7,8,9")
    with pytest.raises(FlagError) as info:
        grids.expand([grid], TrainArgs(out_dir="o"))
    assert str(info.value) == (
        "--grid: 100,000 points, (lr 100 x clip_norm 100 x seed 10), past the 10,000 a sweep "
        "runs; draw some of them with --random N"
    )
    with pytest.raises(FlagError) as info:
        grids.expand([grid], TrainArgs(out_dir="o"), random_points=1001)
    assert str(info.value) == (
        "--grid: 10,010 points, (--random 1,001 x 10 seeds), past the 10,000 a sweep runs; "
        "lower --random"
    )
    assert made == []
    grids.expand([grid], TrainArgs(out_dir="o"), random_points=1000)  # at the limit
    assert len(made) == 10_000


def _fifo(tmp_path: Path) -> str:
    os.mkfifo(tmp_path / "grid.yaml")
    return str(tmp_path / "grid.yaml")


GRID_FILES = {  # what --grid names -> what the line says of it
    "fifo": (_fifo, "a named pipe (FIFO), not a grid file"),
    "device": (lambda tmp_path: "/dev/null", "a device, not a grid file"),
    "folder": (lambda tmp_path: str(tmp_path), "a folder, not a grid file"),
    "missing": (lambda tmp_path: str(tmp_path / "g.yaml"), "no such file"),
}


@pytest.mark.parametrize("case", sorted(GRID_FILES))
def test_a_grid_that_is_no_file_is_one_line(case, tmp_path):
    """Before: a FIFO or a device was a traceback (the good message of `files.open_read` not
    turned into a flag error), a folder "no such file"."""
    make, what = GRID_FILES[case]
    path = make(tmp_path)
    with pytest.raises(FlagError) as info:
        grids.parse_grid(path)
    assert str(info.value) == f"--grid {path}: {what}; pass a .yaml/.json grid or an inline spec"


def test_a_grid_file_still_reads(tmp_path):
    (tmp_path / "g.yaml").write_text("lr: [0.001, 0.002]\n")
    [grid] = grids.parse_grid(str(tmp_path / "g.yaml"))
    assert grid.axes == (grids.Axis("lr", (0.001, 0.002)),)
