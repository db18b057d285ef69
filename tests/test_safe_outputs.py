"""Outputs that are not plain files (named pipes, devices, links, `-`, an empty flag), inputs
against outputs by identity (hard links, bind mounts), one line for a failed put-in-place,
and `safe` as the one place that renames files into place (issue 58: 3, 5, 12, 15; issue 59)."""

from __future__ import annotations

import ast
import errno
import os
import stat
import subprocess
import threading
from pathlib import Path

import pytest
from conftest import REPO, as_dead, tiny_cli

from tpu_tiles_models import cli, safe


def _one_line(argv: list[str], capsys) -> str:
    code = cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    return err


def _reader(fifo: Path) -> tuple[threading.Thread, list[bytes]]:
    """A thread that reads `fifo` to its end (a writer blocks until a reader opens it)."""
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as f:
            got.append(f.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, got


def _small_kaggle_inputs(folder: Path) -> tuple[Path, Path]:
    sample = folder / "sample.csv"
    sample.write_text("ID,TopConfigs\ntile:xla:a,0;1;2;3;4\nlayout:xla:x,0;1\n")
    predictions = folder / "p.csv"
    predictions.write_text("ID,TopConfigs\ntile:xla:a,4;3;2;1;0\n")
    return sample, predictions


# -- 3: a named pipe, a device, a link, `-` ------------------------------------------------


def test_predict_onto_a_named_pipe_writes_through_it(mlp_run, short_test_root, tmp_path, capsys):
    """Before, the pipe was replaced by a regular file (the stage-and-rename) and the reader
    got nothing."""
    fifo = tmp_path / "p.csv"
    os.mkfifo(fifo)
    thread, got = _reader(fifo)
    argv = ["predict", "--dir", str(mlp_run.model_dir), "--data_root", str(short_test_root)]
    assert cli.main([*argv, "--out", str(fifo), "--no_progress"]) == 0
    thread.join(10)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    lines = got[0].decode().splitlines()
    kernels = len(list((short_test_root / "test").glob("*.npz")))
    assert lines[0] == "ID,TopConfigs" and len(lines) == 1 + kernels
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.csv"]


def test_kaggle_onto_a_device_writes_through_it(tmp_path, capsys):
    """`kaggle --out /dev/null` as root made the system's /dev/null a 386-byte file; here a
    node of the same device in a temporary folder."""
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError:
        pytest.skip("making a device node needs root")
    sample, predictions = _small_kaggle_inputs(tmp_path)
    argv = ["kaggle", "--sample", str(sample), "--inputcsv", str(predictions)]
    assert cli.main([*argv, "--out", str(node)]) == 0
    assert stat.S_ISCHR(os.lstat(node).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null", "p.csv", "sample.csv"]


def test_a_full_device_is_one_line(tmp_path, capsys):
    """`--out /dev/full`: written through, and its ENOSPC is the usual one line."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    sample, predictions = _small_kaggle_inputs(tmp_path)
    argv = ["kaggle", "--sample", str(sample), "--inputcsv", str(predictions)]
    err = _one_line([*argv, "--out", "/dev/full"], capsys)
    assert err.startswith("tpu-tiles kaggle: error: cannot write --out /dev/full (No space left")
    assert stat.S_ISCHR(os.lstat("/dev/full").st_mode)


def test_a_folder_output_that_is_a_named_pipe_is_refused(short_test_root, tmp_path, capsys):
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    err = _one_line(tiny_cli(short_test_root, fifo), capsys)
    assert err == (
        f"tpu-tiles train: error: --out_dir {fifo} is a named pipe (FIFO), not a folder; "
        "pass another --out_dir"
    )
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_dash_is_refused_not_written_as_a_file(tmp_path, monkeypatch, capsys):
    """`-` is no file name: before, `kaggle --out -` wrote a file called `-`."""
    monkeypatch.chdir(tmp_path)
    sample, predictions = _small_kaggle_inputs(tmp_path)
    argv = ["kaggle", "--sample", str(sample), "--inputcsv", str(predictions), "--out", "-"]
    err = _one_line(argv, capsys)
    assert err == (
        "tpu-tiles kaggle: error: --out -: standard output is not written to (the command's "
        "own lines go there); pass a file path, or a named pipe to stream it"
    )
    assert not (tmp_path / "-").exists()


def test_a_process_stream_that_is_a_file_is_written_through(tmp_path):
    """`--out /dev/stdout` with standard output redirected to a file: a regular file, but
    named in /dev or /proc; before, staging beside it (in /proc/self/fd) failed, and as root
    `/dev/stdout` itself would have been replaced by a file."""
    with open(tmp_path / "log", "w+b") as log:
        safe.write_bytes(f"/dev/fd/{log.fileno()}", b"ID,TopConfigs\n", flag="--out")
    assert (tmp_path / "log").read_bytes() == b"ID,TopConfigs\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log"]


# -- 15: an empty flag ----------------------------------------------------------------------


def test_an_empty_output_flag_says_so(mlp_run, short_test_root, capsys):
    argv = ["predict", "--dir", str(mlp_run.model_dir), "--data_root", str(short_test_root)]
    err = _one_line([*argv, "--out", ""], capsys)
    assert err == "tpu-tiles predict: error: --out is empty; pass the path of the file to write"


# -- 5: inputs against outputs by identity ---------------------------------------------------


def test_an_output_hard_linked_to_an_input_is_refused(tmp_path, capsys):
    sample, predictions = _small_kaggle_inputs(tmp_path)
    os.link(sample, tmp_path / "alias.csv")
    argv = ["kaggle", "--sample", str(sample), "--inputcsv", str(predictions)]
    err = _one_line([*argv, "--out", str(tmp_path / "alias.csv")], capsys)
    assert "is the --sample file" in err
    assert (tmp_path / "alias.csv").read_text() == sample.read_text()


@pytest.mark.slow
def test_an_output_in_a_bind_mounted_input_folder_is_refused(
    mlp_run, short_test_root, tmp_path, capsys
):
    """`mount --bind D Dalias; predict --data_root D --out Dalias/test/<tile>.npz` replaced a
    test kernel with a CSV: "inside an input folder" compared realpath strings."""
    alias = tmp_path / "alias"
    alias.mkdir()
    if os.geteuid() != 0:
        pytest.skip("a bind mount needs root")
    try:
        subprocess.run(["mount", "--bind", str(short_test_root), str(alias)], check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("mount --bind is not allowed here")
    try:
        kernel = sorted((alias / "test").glob("*.npz"))[0]
        before = kernel.read_bytes()
        argv = ["predict", "--dir", str(mlp_run.model_dir), "--data_root", str(short_test_root)]
        err = _one_line([*argv, "--out", str(kernel)], capsys)
        assert "--data_root's test split" in err
        out = alias / "test" / "new.csv"  # a new file in the folder, through the alias
        err = _one_line([*argv, "--out", str(out)], capsys)
        assert "is in the --data_root's test split" in err
        assert kernel.read_bytes() == before and not out.exists()
    finally:
        subprocess.run(["umount", str(alias)], check=False)


# -- 12: a failed rename while train puts its outputs in place --------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("code", [errno.EIO, errno.EROFS])
def test_a_failed_rename_of_trains_commit_is_one_line(
    code, short_test_root, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "out"
    real = os.rename

    def rename(src, dst):
        if Path(dst).name.startswith("model_"):
            raise OSError(code, os.strerror(code), str(src), str(dst))
        real(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    err = _one_line(tiny_cli(short_test_root, out), capsys)
    assert err.startswith(f"tpu-tiles train: error: cannot write --out_dir {out}/model_"), err
    assert f"({os.strerror(code)})" in err
    assert not out.exists()  # undone, and the folder it made removed


# -- `.old` copies a killed commit left ------------------------------------------------------


def test_an_old_copy_whose_place_is_empty_is_put_back(tmp_path):
    """A commit killed between moving a file aside and putting its new one in: the `.old`
    copy is the only one, and the next command into the folder puts it back."""
    place = tmp_path / "res.csv"
    old = safe.hidden_path(place, "old")
    old.write_text("earlier\n")
    old = as_dead(old)
    safe.remove_leftovers(tmp_path)
    assert place.read_text() == "earlier\n" and not old.exists()


# -- issue 59: one way to put files in place ---------------------------------------------------


def test_only_safe_and_files_rename_into_place():
    """Every writer stages through `safe`; only it (and `files` for remote stores) renames."""
    renames = []
    for path in sorted((REPO / "tpu_tiles_models").rglob("*.py")):
        if path.name in ("safe.py", "files.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            name, owner = node.func.attr, node.func.value
            is_os = isinstance(owner, ast.Name) and owner.id == "os"
            if name == "rename" or (name in ("replace", "renames") and is_os):
                renames.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert renames == []
