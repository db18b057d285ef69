"""safe.atomic_path: all or nothing, the umask's permissions, one-line errors naming the flag."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
from conftest import as_dead, dead_pid, file_mode

from tpu_tiles_models import files, safe
from tpu_tiles_models.errors import UserError


def _write(path: Path, text: str, **kwargs) -> None:
    with safe.atomic_path(path, **kwargs) as tmp:
        tmp.write_text(text, encoding="utf-8")


def test_writes_through_a_hidden_temp_beside_the_target(tmp_path):
    target = tmp_path / "new" / "sub" / "a.json"
    with safe.atomic_path(target) as tmp:
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
        with safe.atomic_path(target) as tmp:
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
        with safe.atomic_path(target, flag="--out") as tmp:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp))
    assert str(err.value) == (
        f"cannot write --out {target} (No space left on device); "
        "free some space or pass another --out"
    )
    assert ".tmp" not in str(err.value) and os.listdir(tmp_path) == []


def test_other_os_errors_from_the_block_pass_through(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        with safe.atomic_path(tmp_path / "a.txt"):
            open(tmp_path / "missing-input.txt")
    assert not isinstance(err.value, UserError)
    assert os.listdir(tmp_path) == []


def test_a_claim_creates_nothing(tmp_path):
    safe.claim([safe.Output(tmp_path / "new" / "deeper" / "p.csv", "--out")])
    assert os.listdir(tmp_path) == []
    (tmp_path / "file").write_text("x")
    with pytest.raises(files.WriteError) as err:
        safe.claim([safe.Output(tmp_path / "file" / "p.csv", "")])
    assert str(err.value) == (
        f"{tmp_path / 'file' / 'p.csv'}: {tmp_path / 'file'} is a file, not a folder; "
        "pass another path"
    )
    with pytest.raises(files.WriteError, match=r"^\S+ is a folder; pass the path of a file"):
        safe.claim([safe.Output(tmp_path, "")])


# -- hidden temporaries and what killed processes left ----------------------------------------


def test_hidden_files_name_their_owner_and_only_dead_owners_are_leftovers(tmp_path):
    mine = safe.hidden_path(tmp_path / "model_x")
    assert mine.parent == tmp_path and mine.name.startswith(".model_x.") and mine.suffix == ".tmp"
    mine.mkdir()
    left_dir = safe.hidden_path(tmp_path / "model_x")
    left_dir.mkdir()
    left_dir = as_dead(left_dir)
    left_old = safe.hidden_path(tmp_path / "r.csv", "old")
    left_old.write_text("x")
    left_old = as_dead(left_old)
    (tmp_path / "r.csv").write_text("y")  # what replaced it (without: it is put back)
    other_host = tmp_path / f".r.csv.ffffff-{dead_pid()}-0123abcd.tmp"  # another machine's
    other_host.write_text("x")
    (tmp_path / ".hidden.tmp").write_text("a user's own hidden file")
    found = safe.leftovers(tmp_path)
    assert [(f.path, f.name, f.kind) for f in found] == sorted(
        [(left_dir, "model_x", "tmp"), (left_old, "r.csv", "old")]
    )
    assert safe.leftovers(tmp_path, ["r.csv"]) == [found[1]]
    assert safe.remove_leftovers(tmp_path) == [f.path for f in found]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [mine.name, other_host.name, ".hidden.tmp", "r.csv"]
    )


def test_a_killed_writes_leftover_goes_with_the_next_write_of_that_output(tmp_path):
    out = tmp_path / "p.csv"
    with safe.atomic_path(out) as tmp:
        tmp.write_text("half")
        left = as_dead(tmp)  # `kill -9` here: the temp stays, with the dead process's id
        tmp.write_text("")  # (atomic_path needs its own temp back to finish this write)
    assert left.exists()
    safe.claim([safe.Output(out, "--out")])
    assert sorted(os.listdir(tmp_path)) == ["p.csv"]


def test_a_staged_name_in_an_error_is_the_place_it_is_for(tmp_path):
    (tmp_path / "f").write_text("x")
    staged = safe.hidden_path(tmp_path / "f" / "r.csv")
    with pytest.raises(files.WriteError) as err:
        _write(staged, "x", flag="--results_csv")
    assert str(err.value).startswith(f"--results_csv {tmp_path / 'f' / 'r.csv'}: ")


# -- outputs against inputs ---------------------------------------------------------------------


def _clash(outputs, inputs=()) -> str:
    with pytest.raises(safe.OutputError) as err:
        safe.claim(outputs, inputs)
    assert isinstance(err.value, UserError) and "\n" not in str(err.value)
    return str(err.value)


def test_an_output_never_overwrites_an_input(tmp_path):
    data = tmp_path / "data"
    (data / "test").mkdir(parents=True)
    npz = data / "test" / "k.npz"
    npz.write_bytes(b"npz")
    sample = tmp_path / "sample.csv"
    sample.write_text("s")
    (tmp_path / "link.csv").symlink_to(sample)
    os.link(sample, tmp_path / "hard.csv")
    inputs = [*safe.split_inputs(data), safe.Input(sample, "--sample file")]
    out = safe.Output
    assert _clash([out(npz, "--out")], inputs) == (
        f"--out {npz} is in the --data_root's test split {data / 'test'}; writing there would "
        "change what this command reads, so pass another --out"
    )
    for same in ("sample.csv", "link.csv", "hard.csv"):
        message = _clash([out(tmp_path / same, "--out", example="x.csv")], inputs)
        assert message == (
            f"--out {tmp_path / same} is the --sample file {sample}; writing it would destroy "
            "that input, so pass another --out (e.g. x.csv)"
        )
    assert "holds the --data_root's train split" in _clash([out(data, "OUT", folder=True)], inputs)
    safe.claim([out(data, "--cache_dir", folder=True, adds_to=True)], inputs)  # adds files only
    two = [out(tmp_path / "a.json", "--json"), out(tmp_path / "a.json", "--png")]
    assert "--png" in _clash(two) and "is also --json" in _clash(two)
    safe.claim([out(tmp_path / "new" / "p.csv", "--out")], inputs)
    assert npz.read_bytes() == b"npz" and sample.read_text() == "s"
    assert not (tmp_path / "new").exists()


def test_an_output_never_overwrites_a_finished_run(tmp_path):
    model = tmp_path / "model_abc"
    (model / "variables").mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"pb")
    run_file = tmp_path / "run_abc.jsonz"
    run_file.write_bytes(b"gz")
    out = safe.Output
    assert _clash([out(run_file, "--out")]) == (
        f"--out {run_file} is a run file of a finished training run; writing it would break "
        "that run, so pass another --out"
    )
    assert f"is inside the model directory {model}" in _clash(
        [out(model / "variables" / "p.csv", "--json")]
    )
    safe.claim([out(run_file, "--out_dir", artifact=True)])  # the run's own: export


# -- checked up front: read-only disks, names too long, free space, folders made -----------


def test_read_only_disk_is_named_not_told_to_free_space(tmp_path, read_only):
    read_only(tmp_path)
    expected = (
        f"cannot write --out {tmp_path / 'p.csv'} (Read-only file system); "
        "pass another --out on a disk you can write"
    )
    with pytest.raises(files.WriteError) as err:
        _write(tmp_path / "p.csv", "x", flag="--out")
    assert str(err.value) == expected
    with pytest.raises(files.WriteError) as err:  # the same, before any work
        safe.claim([safe.Output(tmp_path / "p.csv", "--out")])
    assert str(err.value) == expected
    with pytest.raises(files.WriteError) as err:  # a folder still to be made there
        safe.claim([safe.Output(tmp_path / "new" / "run", "--out_dir", folder=True)])
    assert str(err.value) == (
        f"cannot write --out_dir {tmp_path / 'new' / 'run'} (Read-only file system); "
        "pass another --out_dir on a disk you can write"
    )
    assert os.listdir(tmp_path) == []


def test_a_claim_needs_the_space(tmp_path, monkeypatch):
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage._replace(free=1500))
    out = tmp_path / "out"
    with pytest.raises(files.WriteError) as err:
        safe.claim([safe.Output(out, "--out_dir", folder=True, need_bytes=2_500_000)])
    assert str(err.value) == (
        f"cannot write --out_dir {tmp_path / 'out'}: about 2.5 MB needed, 1.5 KB free on its "
        "disk; free some space or pass another --out_dir"
    )
    safe.claim([safe.Output(out, "--out_dir", folder=True, need_bytes=1500)])
    assert os.listdir(tmp_path) == []


def test_a_name_too_long_for_the_file_system(tmp_path):
    folder = tmp_path / ("a" * 300) / "run"
    with pytest.raises(files.WriteError) as err:
        safe.claim([safe.Output(folder, "--out_dir", folder=True)])
    assert str(err.value) == (
        f"cannot write --out_dir {folder}: the name 'aaaaaaaaaaaaaaaaaaaa...' is 300 bytes "
        "long, more than the 255 its file system allows; pass another --out_dir with shorter "
        "names"
    )
    # A file is written under a longer temp name first (`hidden_path`): 250 bytes do not fit.
    extra = len(safe.hidden_path(tmp_path / "x").name) - 1
    name = "b" * 246 + ".csv"
    with pytest.raises(files.WriteError, match=rf"is 250 bytes long, more than the {255 - extra} "):
        _write(tmp_path / name, "x", flag="--out")
    _write(tmp_path / name[extra:], "x", flag="--out")
    assert os.listdir(tmp_path) == [name[extra:]]


def test_a_failed_write_removes_the_folders_it_made(tmp_path):
    (tmp_path / "old").mkdir()
    for target in (tmp_path / "new" / "deeper" / "x.csv", tmp_path / "old" / "more" / "x.csv"):
        with pytest.raises(RuntimeError):
            with safe.atomic_path(target):
                raise RuntimeError("the writer failed")
    assert os.listdir(tmp_path) == ["old"] and os.listdir(tmp_path / "old") == []


def test_make_dirs_returns_what_it_made_and_remove_made_dirs_keeps_the_rest(tmp_path):
    assert files.make_dirs(tmp_path) is None
    made = files.make_dirs(tmp_path / "a" / "b" / "c")
    assert made == tmp_path / "a" and (tmp_path / "a" / "b" / "c").is_dir()
    (tmp_path / "a" / "keep").write_text("someone else's")
    files.remove_made_dirs(made, tmp_path / "a" / "b" / "c")
    assert sorted(os.listdir(tmp_path / "a")) == ["keep"]
    (tmp_path / "f").write_text("x")
    with pytest.raises(files.WriteError, match=r"f is a file, not a folder; pass another --out"):
        files.make_dirs(tmp_path / "f" / "g", flag="--out")


def test_copy_tree_gives_the_permissions_the_umask_gives(tmp_path, umask):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    for path, mode in ((src / "a", 0o666), (src / "sub" / "run", 0o777)):
        path.write_text("x")
        path.chmod(mode)
    (src / "sub").chmod(0o777)
    files.copy_tree(src, tmp_path / "dst")  # as `cp -r`: the source's bits less the umask
    dst = tmp_path / "dst"
    assert [file_mode(p) for p in (dst / "a", dst / "sub" / "run", dst / "sub")] == [
        0o644,
        0o755,
        0o755,
    ]
    assert (dst / "sub" / "run").read_text() == "x"
