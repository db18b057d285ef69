"""files.atomic_path: all or nothing, the umask's permissions, one-line errors naming the flag."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from conftest import file_mode

from tpu_tiles_models import files
from tpu_tiles_models.errors import UserError


def _write(path: Path, text: str, **kwargs) -> None:
    with files.atomic_path(path, **kwargs) as tmp:
        tmp.write_text(text, encoding="utf-8")


def test_writes_through_a_hidden_temp_beside_the_target(tmp_path):
    target = tmp_path / "new" / "sub" / "a.json"
    with files.atomic_path(target) as tmp:
        assert tmp.parent == target.parent and tmp.name.startswith(".a.json.")
        assert tmp.suffix == ".tmp" and tmp.read_bytes() == b""
        assert not target.exists()
        tmp.write_text("{}", encoding="utf-8")
    assert target.read_text() == "{}"
    assert os.listdir(target.parent) == ["a.json"]


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
def test_failed_block_keeps_old_content_and_leaves_no_temp(tmp_path, error):
    target = tmp_path / "a.txt"
    target.write_text("old")
    with pytest.raises(type(error)):
        with files.atomic_path(target) as tmp:
            tmp.write_text("half")
            raise error
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["a.txt"]


@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_new_file_mode_follows_the_umask_like_open(tmp_path, umask, mask, expected):
    umask(mask)
    _write(tmp_path / "atomic.txt", "x")
    (tmp_path / "plain.txt").write_text("x")  # What open(..., "w") gives, for comparison.
    assert file_mode(tmp_path / "atomic.txt") == expected == file_mode(tmp_path / "plain.txt")


def test_mode_argument_and_existing_file_permissions(tmp_path, umask):
    umask(0o022)
    script = tmp_path / "run.sh"
    _write(script, "#!/bin/sh\n", mode=0o777)
    assert file_mode(script) == 0o755
    private = tmp_path / "private.txt"
    private.write_text("old")
    private.chmod(0o600)
    _write(private, "new")  # Rewriting keeps the file's own permissions, as open() does.
    assert private.read_text() == "new" and file_mode(private) == 0o600


def test_directory_target_is_a_one_line_error_naming_the_flag(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    with pytest.raises(files.WriteError) as err:
        _write(folder, "x", flag="--out")
    assert str(err.value) == f"--out {folder} is a folder; pass the path of a file to write"
    assert isinstance(err.value, UserError) and isinstance(err.value, OSError)
    assert os.listdir(tmp_path) == ["out"] and os.listdir(folder) == []


def test_parent_that_is_a_file_names_it_not_errno_17(tmp_path):
    blocker = tmp_path / "results.csv"
    blocker.write_text("keep")
    with pytest.raises(files.WriteError) as err:
        _write(blocker / "deeper" / "x.csv", "x", flag="--out")
    message = str(err.value)
    assert message == (
        f"--out {blocker / 'deeper' / 'x.csv'}: {blocker} is a file, not a folder; "
        "pass another --out"
    )
    assert "Errno" not in message and blocker.read_text() == "keep"


def test_unwritable_folder_names_the_flag(tmp_path, monkeypatch):
    real_open = os.open

    def refuse_temp(name, *args):
        if str(name).endswith(".tmp"):  # As a folder without write permission does.
            raise PermissionError(errno.EACCES, "Permission denied", str(name))
        return real_open(name, *args)

    monkeypatch.setattr(os, "open", refuse_temp)
    with pytest.raises(files.WriteError) as err:
        _write(tmp_path / "p.csv", "x", flag="--out")
    assert str(err.value) == (
        f"cannot write --out {tmp_path / 'p.csv'} (Permission denied); "
        "pass another --out in a folder you can write"
    )
    assert os.listdir(tmp_path) == []


def test_write_failure_never_shows_the_temp_name(tmp_path):
    target = tmp_path / "big.npz"
    with pytest.raises(files.WriteError) as err:
        with files.atomic_path(target, flag="--out") as tmp:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp))
    assert str(err.value) == (
        f"cannot write --out {target} (No space left on device); "
        "free some space or pass another --out"
    )
    assert ".tmp" not in str(err.value) and os.listdir(tmp_path) == []


def test_other_os_errors_from_the_block_pass_through(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        with files.atomic_path(tmp_path / "a.txt"):
            open(tmp_path / "missing-input.txt")
    assert not isinstance(err.value, UserError)
    assert os.listdir(tmp_path) == []


def test_check_output_path_creates_nothing(tmp_path):
    target = tmp_path / "new" / "deeper" / "p.csv"
    assert files.check_output_path(target, flag="--out") == target
    assert os.listdir(tmp_path) == []
    (tmp_path / "file").write_text("x")
    with pytest.raises(files.WriteError) as err:
        files.check_output_path(tmp_path / "file" / "p.csv")
    assert str(err.value) == (
        f"{tmp_path / 'file' / 'p.csv'}: {tmp_path / 'file'} is a file, not a folder; "
        "pass another path"
    )
    with pytest.raises(files.WriteError, match=r"^\S+ is a folder; pass the path of a file"):
        files.check_output_path(tmp_path)
