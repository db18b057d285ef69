"""install/uninstall into a fake upstream tpu_graphs checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import UPSTREAM_MODELS, file_mode

from tpu_tiles_models import cli, locks
from tpu_tiles_models import install as inst
from tpu_tiles_models.errors import UserError
from tpu_tiles_models.install import InstallError

# What install adds where upstream's trainer cannot run (the modern stack), else "".
NOTE = inst.trainer_note()


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative posix path -> bytes)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def source(tmp_path) -> Path:
    """A fake tpu-tiles-models checkout holding the three drop-in files."""
    src = tmp_path / "ours"
    src.mkdir()
    for name in inst.DROPIN:
        (src / name).write_text(f"# our {name}\n")
    return src


def test_round_trip_restores_originals(upstream_checkout, source):
    before = _tree(upstream_checkout)
    lines = inst.install(upstream_checkout, source_dir=source)

    for name, rel in inst.DROPIN.items():
        assert (upstream_checkout / rel).read_bytes() == (source / name).read_bytes()
    backup = upstream_checkout / inst.BACKUP_DIR
    assert (backup / "tpu_graphs/baselines/tiles/models.py").read_bytes() == UPSTREAM_MODELS
    files = json.loads((backup / inst.MANIFEST).read_text())["files"]
    assert set(files) == set(inst.DROPIN.values())
    assert files["tpu_graphs/baselines/tiles/models.py"]["had_original"] is True
    assert files["create_kaggle_csv.py"]["had_original"] is False
    assert any("original saved to" in line and "models.py" in line for line in lines)
    assert any("create_kaggle_csv.py" in line and "new file" in line for line in lines)
    assert any("sample_submission.csv is missing" in line for line in lines)

    undo = inst.uninstall(upstream_checkout)
    assert _tree(upstream_checkout) == before
    assert not backup.exists()
    assert any(line.startswith("restored the original") for line in undo)
    assert sum("did not exist before install" in line for line in undo) == 2


def test_second_install_is_a_no_op(upstream_checkout, source):
    inst.install(upstream_checkout, source_dir=source)
    (upstream_checkout / "sample_submission.csv").write_text("ID,TopConfigs\n")
    installed = _tree(upstream_checkout)
    lines = inst.install(upstream_checkout, source_dir=source)
    assert lines[0].startswith("already installed")
    assert lines[1:] == ([inst.trainer_note()] if inst.trainer_note() else [])
    assert _tree(upstream_checkout) == installed


def test_update_keeps_the_first_original(upstream_checkout, source):
    inst.install(upstream_checkout, source_dir=source)
    (source / "models.py").write_text("# our models.py, version 2\n")
    lines = inst.install(upstream_checkout, source_dir=source)
    assert lines[0].endswith("(updated our earlier copy)")
    models = upstream_checkout / "tpu_graphs/baselines/tiles/models.py"
    assert models.read_text() == "# our models.py, version 2\n"
    inst.uninstall(upstream_checkout)
    assert models.read_bytes() == UPSTREAM_MODELS


def test_refuses_user_modified_file_unless_forced(upstream_checkout, source):
    inst.install(upstream_checkout, source_dir=source)
    models = upstream_checkout / "tpu_graphs/baselines/tiles/models.py"
    models.write_text("# my edits\n")
    (source / "models.py").write_text("# our models.py, version 2\n")

    with pytest.raises(InstallError) as err:
        inst.install(upstream_checkout, source_dir=source)
    message = str(err.value)
    assert str(models) in message and "--force" in message and "\n" not in message
    assert models.read_text() == "# my edits\n"

    lines = inst.install(upstream_checkout, force=True, source_dir=source)
    assert models.read_text() == "# our models.py, version 2\n"
    kept = upstream_checkout / inst.BACKUP_DIR / "tpu_graphs/baselines/tiles/models.py.modified"
    assert kept.read_text() == "# my edits\n"
    assert any(str(kept) in line for line in lines)

    undo = inst.uninstall(upstream_checkout)
    assert models.read_bytes() == UPSTREAM_MODELS
    assert kept.read_text() == "# my edits\n"  # Uninstall never deletes the user's work.
    assert undo[-1] == f"kept your earlier edited copy {kept}"


def test_uninstall_refuses_user_modified_file_unless_forced(upstream_checkout, source):
    inst.install(upstream_checkout, source_dir=source)
    script = upstream_checkout / "create_kaggle_csv.py"
    script.write_text("# my edits\n")
    with pytest.raises(InstallError, match="refusing to uninstall: .*create_kaggle_csv.py"):
        inst.uninstall(upstream_checkout)
    assert script.read_text() == "# my edits\n"
    inst.uninstall(upstream_checkout, force=True)
    assert not script.exists()
    assert (
        upstream_checkout / "tpu_graphs/baselines/tiles/models.py"
    ).read_bytes() == UPSTREAM_MODELS


def test_deleted_file_is_reinstalled(upstream_checkout, source):
    inst.install(upstream_checkout, source_dir=source)
    (upstream_checkout / "tiles_gen_predictions_csv.py").unlink()
    lines = [line for line in inst.install(upstream_checkout, source_dir=source) if line != NOTE]
    root = upstream_checkout
    assert lines == [
        f"installed tiles_gen_predictions_csv.py -> {root / 'tiles_gen_predictions_csv.py'}"
        " (it had been deleted)",
        f"note: {root / 'sample_submission.csv'} is missing; create_kaggle_csv.py needs it "
        "(download it from the Kaggle competition 'predict-ai-model-runtime' data page)",
    ]


def test_upstream_trainer_note_where_tensorflow_ranking_cannot_import(
    upstream_checkout, source, monkeypatch
):
    """Where upstream's trainer cannot run, install says so in one line and names ours."""
    monkeypatch.setattr(inst.util, "find_spec", lambda name: None)
    note = inst.trainer_note()
    assert note in inst.install(upstream_checkout, source_dir=source)
    assert "tiles_train.py needs tensorflow-ranking" in note and "\n" not in note
    assert "tpu-tiles train --model=ResidualSAGE" in note


def test_not_a_checkout(tmp_path, source):
    other = tmp_path / "not_a_checkout"
    other.mkdir()
    (other / "tiles_train.py").write_text("")
    with pytest.raises(InstallError) as err:
        inst.install(other, source_dir=source)
    message = str(err.value)
    assert f"{other} is not a tpu_graphs checkout (no tpu_graphs/baselines/tiles)" in message
    assert "google-research-datasets/tpu_graphs" in message
    assert list(other.iterdir()) == [other / "tiles_train.py"]  # Nothing written.
    with pytest.raises(InstallError, match=r"\(no tiles_train.py, tpu_graphs/baselines/tiles\)"):
        inst.install(tmp_path / "nowhere", source_dir=source)


def test_missing_source_files(upstream_checkout, source):
    (source / "models.py").unlink()
    with pytest.raises(InstallError, match=rf"source files missing from {source}: models.py"):
        inst.install(upstream_checkout, source_dir=source)
    assert not (upstream_checkout / inst.BACKUP_DIR).exists()


def test_uninstall_without_install(upstream_checkout):
    with pytest.raises(InstallError, match="nothing to uninstall"):
        inst.uninstall(upstream_checkout)


def test_default_source_dir_is_the_repo_root():
    assert (inst.default_source_dir() / "tpu_tiles_models" / "install.py").is_file()


def test_install_error_is_a_user_error():
    assert issubclass(InstallError, UserError) and issubclass(InstallError, RuntimeError)


@pytest.mark.parametrize("mask, plain, executable", [(0o022, 0o644, 0o755), (0o002, 0o664, 0o775)])
def test_copies_get_modes_as_cp_would(upstream_checkout, source, umask, mask, plain, executable):
    """New files: the source's bits less the umask; replaced files keep their own mode."""
    umask(mask)
    (source / "create_kaggle_csv.py").chmod(0o666)
    (source / "tiles_gen_predictions_csv.py").chmod(0o777)
    models = upstream_checkout / "tpu_graphs/baselines/tiles/models.py"
    models.chmod(0o640)
    inst.install(upstream_checkout, source_dir=source)
    backup = upstream_checkout / inst.BACKUP_DIR
    assert file_mode(upstream_checkout / "create_kaggle_csv.py") == plain
    assert file_mode(upstream_checkout / "tiles_gen_predictions_csv.py") == executable
    assert file_mode(backup / inst.MANIFEST) == plain
    assert file_mode(backup / "tpu_graphs/baselines/tiles/models.py") == 0o640 & ~mask
    assert file_mode(models) == 0o640  # Replaced in place: upstream's mode is kept.
    inst.uninstall(upstream_checkout)
    assert models.read_bytes() == UPSTREAM_MODELS and file_mode(models) == 0o640


def test_folder_in_the_way_is_one_line(upstream_checkout, source):
    folder = upstream_checkout / "create_kaggle_csv.py"
    folder.mkdir()
    before = _tree(upstream_checkout)
    with pytest.raises(InstallError) as err:
        inst.install(upstream_checkout, source_dir=source)
    assert str(err.value) == (
        f"{folder}: a folder where tpu-tiles puts a file; move it elsewhere and rerun"
    )
    assert _tree(upstream_checkout) == before and not (upstream_checkout / inst.BACKUP_DIR).exists()
    folder.rmdir()
    inst.install(upstream_checkout, source_dir=source)
    (upstream_checkout / "create_kaggle_csv.py").unlink()
    folder.mkdir()
    with pytest.raises(InstallError, match="a folder where tpu-tiles puts a file"):
        inst.uninstall(upstream_checkout)


def _failing_copy(monkeypatch, target: Path, error: BaseException) -> None:
    """`install._copy` fails for `target` (a read-only file, a full disk, a kill)."""
    copy = inst._copy

    def copy_file(src, dst):
        if Path(dst) == target:
            raise error
        return copy(src, dst)

    monkeypatch.setattr(inst, "_copy", copy_file)


def test_a_failed_install_leaves_no_record(upstream_checkout, source, monkeypatch):
    """The next install and --uninstall do not take upstream's own file for an edit."""
    before = _tree(upstream_checkout)
    models = upstream_checkout / "tpu_graphs/baselines/tiles/models.py"
    full = inst.files.WriteError(f"cannot write {models} (No space left on device); free some")
    _failing_copy(monkeypatch, models, full)
    with pytest.raises(inst.files.WriteError):
        inst.install(upstream_checkout, source_dir=source)
    assert _tree(upstream_checkout) == before  # no record, no backup: as if never run
    with pytest.raises(InstallError, match="nothing to uninstall"):
        inst.uninstall(upstream_checkout)
    monkeypatch.undo()
    lines = inst.install(upstream_checkout, source_dir=source)  # no --force needed
    assert any("models.py" in line and "original saved to" in line for line in lines)
    inst.uninstall(upstream_checkout)
    assert _tree(upstream_checkout) == before


def test_an_install_killed_after_its_record_is_finished_not_called_an_edit(
    upstream_checkout, source, monkeypatch
):
    """A kill between the record and the copy leaves upstream's file in place: the next
    install finishes without --force, and never calls it "your edited copy"."""
    before = _tree(upstream_checkout)
    models = upstream_checkout / "tpu_graphs/baselines/tiles/models.py"
    _failing_copy(monkeypatch, models, KeyboardInterrupt())
    monkeypatch.setattr(inst, "_undo_record", lambda *args: None)  # killed: no undo
    with pytest.raises(KeyboardInterrupt):
        inst.install(upstream_checkout, source_dir=source)
    assert (upstream_checkout / inst.BACKUP_DIR / inst.MANIFEST).exists()
    monkeypatch.undo()
    for force in (False, True):
        lines = inst.install(upstream_checkout, force=force, source_dir=source)
        assert not any("edited" in line for line in lines)
        assert models.read_bytes() == (source / "models.py").read_bytes()
        models.write_bytes(UPSTREAM_MODELS)  # as the killed install left it, again
    inst.uninstall(upstream_checkout)
    assert _tree(upstream_checkout) == before


# A manifest of valid JSON and another shape -> what the one line says of it.
MANIFESTS = {
    "files_a_list": (lambda m: dict(m, files=[1, 2]), "'files' is a list, not an object"),
    "no_files": (lambda m: {"version": 1}, "it has no 'files'"),
    "entry_empty": (
        lambda m: dict(m, files={**m["files"], "create_kaggle_csv.py": {}}),
        "files['create_kaggle_csv.py'] has no 'installed_sha256'",
    ),
    "had_original_a_string": (
        lambda m: dict(
            m, files={rel: dict(e, had_original="yes") for rel, e in m["files"].items()}
        ),
        "files['create_kaggle_csv.py'].had_original is a string, not true/false",
    ),
}


@pytest.mark.parametrize("uninstall", [False, True])
@pytest.mark.parametrize("case", sorted(MANIFESTS))
def test_a_manifest_of_another_shape_is_one_line(case, uninstall, upstream_checkout, capsys):
    """Before: an AttributeError, TypeError or KeyError traceback; now nothing is changed."""
    from tpu_tiles_models import cli

    assert cli.main(["install", str(upstream_checkout)]) == 0
    manifest = upstream_checkout / inst.BACKUP_DIR / inst.MANIFEST
    change, problem = MANIFESTS[case]
    manifest.write_text(json.dumps(change(json.loads(manifest.read_text()))))
    before = _tree(upstream_checkout)
    capsys.readouterr()
    code = cli.main(["install", str(upstream_checkout), *(["--uninstall"] if uninstall else [])])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == (
        f"tpu-tiles install: error: {manifest}: {problem}; restore the files by hand from "
        f"{manifest.parent}"
    )
    assert _tree(upstream_checkout) == before


# -- issue 48: one install at a time; links stay links --------------------------------------


def _links(root: Path) -> dict[str, str]:
    """Every symbolic link under ``root`` (relative posix path -> where it points)."""
    return {
        p.relative_to(root).as_posix(): os.readlink(p) for p in root.rglob("*") if p.is_symlink()
    }


def test_a_second_install_at_once_is_refused_in_one_line(upstream_checkout, tmp_path, capsys):
    """Defect 1: install and --uninstall hold the checkout's output lock, however ROOT is
    spelled (here through a link); the second is refused in one line, changing nothing."""
    link = tmp_path / "link"
    link.symlink_to(upstream_checkout)
    before = _tree(upstream_checkout)
    with locks.claim(upstream_checkout, flag="ROOT", command="install"):
        for argv in (["install", str(link)], ["install", f"{upstream_checkout}/", "--uninstall"]):
            assert cli.main(argv) == 2
            assert capsys.readouterr().err == (
                f"tpu-tiles install: error: ROOT {upstream_checkout} is being written by tpu-tiles "
                f"install (pid {os.getpid()}); wait for it to end, or pass another ROOT\n"
            )
    assert _tree(upstream_checkout) == before
    assert sorted(os.listdir(tmp_path)) == ["link", upstream_checkout.name]


def test_two_installs_at_once_keep_upstreams_original(upstream_checkout):
    """Defect 1 as reported: `install up & install up; wait`. Whichever order they run in,
    the backup is upstream's file (never our copy) and --uninstall brings it back."""
    models = upstream_checkout / "tpu_graphs/baselines/tiles/models.py"
    argv = [sys.executable, "-m", "tpu_tiles_models.cli", "install", str(upstream_checkout)]
    env = dict(os.environ, PYTHONPATH=str(Path(inst.__file__).parents[1]))
    for _ in range(2):
        pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        runs = [subprocess.Popen(argv, env=env, **pipes) for _ in range(2)]
        codes = sorted(p.wait() for p in runs)
        assert codes in ([0, 0], [0, 2]), [p.stderr.read() for p in runs]
        backup = upstream_checkout / inst.BACKUP_DIR / "tpu_graphs/baselines/tiles/models.py"
        assert backup.read_bytes() == UPSTREAM_MODELS
        assert cli.main(["install", str(upstream_checkout), "--uninstall"]) == 0
        assert models.read_bytes() == UPSTREAM_MODELS
        assert not (upstream_checkout / inst.BACKUP_DIR).exists()


def test_an_upstream_link_comes_back_as_that_link(upstream_checkout, tmp_path, capsys):
    """Defect 20: an upstream file that is a symbolic link (relative, to a file outside the
    checkout) is recorded as its link, replaced by our file without writing through it, and
    --uninstall puts the same link back; a dangling link too (it used to be taken for no
    file at all, and removed)."""
    shared = tmp_path / "shared.py"
    shared.write_bytes(UPSTREAM_MODELS)
    models = upstream_checkout / "tpu_graphs/baselines/tiles/models.py"
    models.unlink()
    models.symlink_to(os.path.relpath(shared, models.parent))
    (upstream_checkout / "create_kaggle_csv.py").symlink_to("nowhere.py")
    links, before = _links(upstream_checkout), _tree(upstream_checkout)
    assert cli.main(["install", str(upstream_checkout)]) == 0
    out = capsys.readouterr().out
    manifest = f"{upstream_checkout / inst.BACKUP_DIR / inst.MANIFEST}"
    assert f"(original link to {links[inst.DROPIN['models.py']]} recorded in {manifest})" in out
    assert "(original link to nowhere.py recorded in" in out
    assert _links(upstream_checkout) == {} and shared.read_bytes() == UPSTREAM_MODELS
    assert models.read_bytes() == (inst.default_source_dir() / "models.py").read_bytes()
    assert cli.main(["install", str(upstream_checkout), "--uninstall"]) == 0
    assert "restored the original link" in capsys.readouterr().out
    assert _links(upstream_checkout) == links and _tree(upstream_checkout) == before
    assert not (upstream_checkout / inst.BACKUP_DIR).exists()


# -- issue 58: install owns its checkout ---------------------------------------------------


def _forge(root: Path, rel: str, **entry) -> Path:
    """An installed checkout whose manifest also names `rel` (a hand edit, a classmate's
    checkout); returns the manifest."""
    assert cli.main(["install", str(root)]) == 0
    manifest = root / inst.BACKUP_DIR / inst.MANIFEST
    content = json.loads(manifest.read_text())
    content["files"][rel] = {"installed_sha256": "0" * 64, **entry}
    manifest.write_text(json.dumps(content))
    return manifest


# name in the manifest ({victim}: a file outside the checkout) -> its entry, and why refused
OUT = "climbs out of {root} with '..'"
FORGED = {
    "absolute_had_original": (
        "{victim}",
        dict(had_original=True),
        "is an absolute path, not a name in {root}",
    ),
    "dotdot_new_file": ("../victim.txt", dict(had_original=False), OUT),
    "dotdot_link": ("../made_link", dict(had_original=True, link="/"), OUT),
    "through_a_link": (
        "out/victim.txt",
        dict(had_original=False),
        "leads out of {root} through the symbolic link {root}/out",
    ),
}


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("case", sorted(FORGED))
def test_uninstall_acts_only_inside_the_checkout(case, force, upstream_checkout, capsys):
    """Defect 1: a manifest entry that is absolute, climbs out with `..` or leads out
    through a link is refused in one line naming the manifest and the entry; nothing outside
    the checkout (nor in it) is deleted, replaced or made. Before: the victim was deleted (the
    absolute "backup" was the file itself), or a link made beside the checkout."""
    root, outside = upstream_checkout, upstream_checkout.parent
    victim = outside / "victim.txt"
    victim.write_text("the user's own file\n")
    (root / "out").symlink_to(outside)
    name, entry, why = FORGED[case]
    name = name.format(victim=victim)
    manifest = _forge(root, name, **entry)
    before, around = _tree(root), sorted(os.listdir(outside))
    capsys.readouterr()
    code = cli.main(["install", str(root), "--uninstall", *(["--force"] if force else [])])
    assert (code, capsys.readouterr().err) == (
        2,
        f"tpu-tiles install: error: {manifest}: the entry {name!r} {why.format(root=root)}; "
        f"restore the files by hand from {manifest.parent}\n",
    )
    assert victim.read_text() == "the user's own file\n"
    assert sorted(os.listdir(outside)) == around and _tree(root) == before


def test_install_refuses_a_file_it_would_write_through_a_link_out(upstream_checkout, tmp_path):
    """What install would record, uninstall would refuse: so install writes through no link
    that leads out of the checkout either (here its tiles package is another checkout's)."""
    other = tmp_path / "other_tiles"
    tiles = upstream_checkout / "tpu_graphs/baselines/tiles"
    tiles.rename(other)
    tiles.symlink_to(other)
    before = (other / "models.py").read_bytes()
    with pytest.raises(inst.files.OutsideError) as err:
        inst.install(upstream_checkout)
    assert str(err.value) == (
        f"{upstream_checkout}: 'tpu_graphs/baselines/tiles/models.py' leads out of "
        f"{upstream_checkout} through the symbolic link {tiles}; tpu-tiles writes only inside "
        "ROOT: put the folder itself in place of that link"
    )
    assert (other / "models.py").read_bytes() == before
    assert not (upstream_checkout / inst.BACKUP_DIR).exists()


@pytest.mark.parametrize("uninstall", [False, True])
def test_a_backup_folder_that_is_a_link_is_refused(uninstall, upstream_checkout, tmp_path, capsys):
    """Defect 4: `ln -s ../elsewhere U/.tpu_tiles_backup; tpu-tiles install U` wrote the
    backup of upstream's file and the manifest into `elsewhere`, over the user's own file."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "create_kaggle_csv.py").write_text("the user's own script\n")
    if uninstall:  # an installed checkout whose backup folder was replaced by a link
        assert cli.main(["install", str(upstream_checkout)]) == 0
        shutil.copytree(upstream_checkout / inst.BACKUP_DIR, elsewhere, dirs_exist_ok=True)
        shutil.rmtree(upstream_checkout / inst.BACKUP_DIR)
    backup = upstream_checkout / inst.BACKUP_DIR
    backup.symlink_to("../elsewhere")
    before, there = _tree(upstream_checkout), _tree(elsewhere)
    capsys.readouterr()
    code = cli.main(["install", str(upstream_checkout), *(["--uninstall"] if uninstall else [])])
    assert (code, capsys.readouterr().err) == (
        2,
        f"tpu-tiles install: error: {backup} is a symbolic link to ../elsewhere, not the "
        "checkout's own folder; tpu-tiles keeps its backups and manifest there: move it away "
        "and rerun\n",
    )
    assert _tree(upstream_checkout) == before and _tree(elsewhere) == there


def test_a_backup_folder_that_is_a_file_or_a_mount_point_is_refused(upstream_checkout, monkeypatch):
    backup = upstream_checkout / inst.BACKUP_DIR
    backup.write_text("not a folder\n")
    with pytest.raises(InstallError, match=r"\.tpu_tiles_backup is a file, not the checkout's"):
        inst.install(upstream_checkout)
    backup.unlink()
    backup.mkdir()  # another disk's folder mounted there (needs root: as ismount says so)
    monkeypatch.setattr(inst.os.path, "ismount", lambda path: Path(path) == backup)
    with pytest.raises(InstallError, match=r"\.tpu_tiles_backup is a mount point, not the"):
        inst.install(upstream_checkout)
    assert not any(backup.iterdir())


def test_restoring_a_link_changes_nothing_where_it_points(upstream_checkout, tmp_path):
    """The link --uninstall puts back is made beside the file and renamed over it, never
    written or chmodded through: the file it points to (outside the checkout) keeps its mode,
    whatever mode the installed copy had."""
    shared = tmp_path / "shared.py"
    shared.write_bytes(UPSTREAM_MODELS)
    shared.chmod(0o644)
    models = upstream_checkout / "tpu_graphs/baselines/tiles/models.py"
    models.unlink()
    models.symlink_to(shared)
    inst.install(upstream_checkout)
    models.chmod(0o600)
    inst.uninstall(upstream_checkout)
    assert os.readlink(models) == str(shared) and file_mode(shared) == 0o644
