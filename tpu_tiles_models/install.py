"""Installs our drop-in files into an upstream tpu_graphs checkout, and undoes it.

``install(ROOT)`` copies each file of :data:`DROPIN` to its place in ROOT. Before the first
overwrite of an upstream file it saves the original under ``ROOT/.tpu_tiles_backup`` and
records in its ``manifest.json`` the sha256 of what it installed: so a later install tells
our old copy (updated) from the user's edit (refused unless ``force``), and ``uninstall``
restores the originals and deletes what did not exist before. An upstream symbolic link is
recorded as where it points and comes back as that link. Both hold the checkout's lock
(`locks.claim`), so no backup ever holds our own copy, and act only inside the checkout: a
manifest entry that leaves it, or a backup folder that is not its own, is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import shutil
from importlib import util
from pathlib import Path

import tpu_tiles_models
from tpu_tiles_models import files, formats, locks, safe
from tpu_tiles_models.errors import UserError

# Our file (in the source dir) -> where it goes in the upstream checkout (posix, relative).
DROPIN = {
    "models.py": "tpu_graphs/baselines/tiles/models.py",
    "tiles_gen_predictions_csv.py": "tiles_gen_predictions_csv.py",
    "create_kaggle_csv.py": "create_kaggle_csv.py",
}
BACKUP_DIR = ".tpu_tiles_backup"
MANIFEST = "manifest.json"
CHECKOUT_MARKERS = ("tiles_train.py", "tpu_graphs/baselines/tiles")
MODIFIED_SUFFIX = ".modified"  # the user's edit that --force replaced, kept beside the backup


class InstallError(UserError, RuntimeError):
    """Installing or uninstalling cannot proceed; the message is one line with the fix."""


def default_source_dir() -> Path:
    """The folder of our models.py and scripts (the checkout's root, or the wheel's copy)."""
    from tpu_tiles_models import registry

    return registry.dropin_file("models.py").parent


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest_path(root: Path) -> Path:
    return root / BACKUP_DIR / MANIFEST


_MANIFEST_ENTRY = {"installed_sha256": (str,), "had_original": (bool,), "link": (str, type(None))}


def _load_manifest(root: Path) -> dict:
    """``{relpath: _MANIFEST_ENTRY}``, empty if there is none; each relpath a file inside the
    checkout and inside its backup folder (`_check_inside`)."""
    path = _manifest_path(root)
    instead = _instead_of_own_folder(path.parent)
    if instead:
        raise InstallError(
            f"{path.parent} is {instead}, not the checkout's own folder; tpu-tiles keeps its "
            "backups and manifest there: move it away and rerun"
        )
    if not path.exists():
        return {}
    fix = f"restore the files by hand from {path.parent}"
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise InstallError(f"{path} is unreadable ({err}); {fix}") from err
    installed = formats.checked(path, content, {"files": (dict,)}, fix)["files"]
    for rel, entry in installed.items():
        formats.checked(path, entry, _MANIFEST_ENTRY, fix, where=f"files[{rel!r}]")
        _check_inside(root, rel, f"{path}: the entry", fix)
    return installed


def _instead_of_own_folder(folder: Path) -> str:
    """What stands at ``folder`` instead of a folder of the checkout's own (a link, a file, a
    mount point: writing there writes elsewhere); '' if nothing does."""
    if folder.is_symlink():
        return f"a symbolic link to {os.readlink(folder)}"
    if folder.exists() and not folder.is_dir():
        return "a file"
    return "a mount point" if os.path.ismount(folder) else ""


def _check_inside(root: Path, rel: str, where: str, fix: str) -> None:
    """Raises unless ``rel`` names a file inside ``root`` and inside its backup folder (no
    absolute path, no `..`, no link out among its folders: `files.within`)."""
    files.within(root, rel, where=where, fix=fix)
    files.within(root / BACKUP_DIR, rel, where=where, fix=fix)


def _save_manifest(root: Path, installed: dict) -> None:
    """Writes the manifest atomically, or removes it when nothing is installed."""
    path = _manifest_path(root)
    if not installed:
        path.unlink(missing_ok=True)
        return
    text = json.dumps({"version": 1, "files": installed}, indent=2, sort_keys=True) + "\n"
    with safe.atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _refuse_folders(root: Path, relpaths: list[str]) -> None:
    """Raises if a folder stands where one of our files goes (a file copy cannot replace it)."""
    folders = [str(root / rel) for rel in relpaths if (root / rel).is_dir()]
    if folders:
        raise InstallError(
            f"{', '.join(folders)}: a folder where tpu-tiles puts a file; move it elsewhere "
            "and rerun"
        )


def _is_original(root: Path, rel: str, entry: dict) -> bool:
    """Whether ``rel`` still holds the upstream original we backed up (an install stopped
    between recording and copying), not the user's edit."""
    backup, dst = root / BACKUP_DIR / rel, root / rel
    if "link" in entry:
        return dst.is_symlink() and os.readlink(dst) == entry["link"]
    return bool(entry["had_original"]) and backup.is_file() and _sha256(backup) == _sha256(dst)


def _user_modified(root: Path, manifest: dict) -> list[str]:
    """Installed paths whose current content is neither what we installed nor the original."""
    return [
        rel
        for rel, entry in manifest.items()
        if (root / rel).exists()
        and _sha256(root / rel) != entry["installed_sha256"]
        and not _is_original(root, rel, entry)
    ]


def install(
    root: str | os.PathLike[str], *, force: bool = False, source_dir: Path | None = None
) -> list[str]:
    """Copies our drop-in files (from ``source_dir``, default `default_source_dir`) into the
    checkout ``root``; returns a line per action. ``force`` replaces the user's edits, kept.

    Raises:
      InstallError: ``root`` is not an upstream checkout, or holds edits (without ``force``).
      BusyError: another install or uninstall of ``root`` is running.
    """
    root = Path(files.canonical(root, what="ROOT"))
    missing = [m for m in CHECKOUT_MARKERS if not (root / m).exists()]
    if missing:
        raise InstallError(
            f"{root} is not a tpu_graphs checkout (no {', '.join(missing)}); pass the directory "
            "of 'git clone https://github.com/google-research-datasets/tpu_graphs'"
        )
    base = Path(source_dir) if source_dir is not None else default_source_dir()
    sources = {rel: base / name for name, rel in DROPIN.items()}  # {relpath in root: ours}
    missing = [name for name, rel in DROPIN.items() if not sources[rel].is_file()]
    if missing:
        raise InstallError(
            f"source files missing from {base}: {', '.join(missing)}; reinstall "
            "tpu-tiles-models from a complete checkout (pip install -e <checkout>)"
        )
    with locks.claim(root, flag="ROOT", command="install"):
        manifest = _load_manifest(root)  # before changing anything
        fix = "tpu-tiles writes only inside ROOT: put the folder itself in place of that link"
        for rel in sources:
            _check_inside(root, rel, f"{root}:", fix)
        _refuse_folders(root, list(sources))
        rels = [*sources, f"{BACKUP_DIR}/{MANIFEST}"]
        safe.claim([safe.Output(root / rel, "") for rel in rels])
        edited = [
            rel
            for rel in _user_modified(root, manifest)
            if rel in sources and _sha256(root / rel) != _sha256(sources[rel])
        ]
        if edited and not force:
            raise InstallError(
                f"refusing to overwrite {', '.join(str(root / r) for r in edited)}: changed since "
                "tpu-tiles installed it; rerun with --force to replace it (your copy is kept "
                f"under {root / BACKUP_DIR}) or --uninstall first"
            )
        lines = []
        for rel, src in sources.items():
            before = json.loads(json.dumps(manifest))
            try:
                line = _install_one(root, rel, src, manifest)
            except BaseException:
                _undo_record(root, rel, before)
                raise
            if line:
                lines.append(line)
        if not lines:
            lines = [
                f"already installed in {root}, nothing to do ({len(sources)} files up to date)"
            ]
        note = trainer_note()
        if note:
            lines.append(note)
        if not (root / "sample_submission.csv").exists():
            lines.append(
                f"note: {root / 'sample_submission.csv'} is missing; create_kaggle_csv.py needs it "
                "(download it from the Kaggle competition 'predict-ai-model-runtime' data page)"
            )
        return lines


def trainer_note() -> str:
    """A note when upstream's `tiles_train.py` cannot run here (it imports
    tensorflow-ranking, which pins TensorFlow < 2.16), else ''."""
    tf_version = tpu_tiles_models.tensorflow_version()
    modern = tf_version is not None and tpu_tiles_models.major_minor(tf_version) >= (2, 16)
    if util.find_spec("tensorflow_ranking") is not None and not modern:
        return ""
    return (
        "note: upstream's tiles_train.py needs tensorflow-ranking, which runs on TensorFlow "
        "2.13-2.15 only (the course stack, docs/install.md); here train with `tpu-tiles train "
        "--model=ResidualSAGE`, which writes the same model_<hash>/ and run_<hash>.jsonz"
    )


def _install_one(root: Path, rel: str, src: Path, manifest: dict) -> str:
    """Installs one file, updating ``manifest`` and its file; '' when already current."""
    dst, backup = root / rel, root / BACKUP_DIR / rel
    new_sha = _sha256(src)
    entry = manifest.get(rel)
    if entry and dst.exists() and _sha256(dst) == new_sha:
        if entry["installed_sha256"] != new_sha:  # the user already made it our new version
            entry["installed_sha256"] = new_sha
            _save_manifest(root, manifest)
        return ""
    if entry is None:
        # First install of this path: keep the upstream original, if any, for uninstall; a
        # link as where it points (a copy would come back as a file, or not at all).
        entry = manifest[rel] = {"had_original": dst.is_symlink() or dst.exists()}
        if dst.is_symlink():
            entry["link"] = os.readlink(dst)
            action = f"original link to {entry['link']} recorded in {_manifest_path(root)}"
        elif entry["had_original"]:
            _copy(dst, backup)
            action = f"original saved to {backup}"
        else:
            action = "new file"
    elif _is_original(root, rel, entry):  # a stopped install's record: finish it
        action = "original link recorded" if "link" in entry else f"original saved to {backup}"
    elif dst.exists() and _sha256(dst) != entry["installed_sha256"]:
        # The user's edit kept as <backup>.modified, or <backup>.<n>.modified beside an earlier
        # one; an edit already kept is not kept twice.
        sha, new = _sha256(dst), True
        for number in itertools.count(1):
            infix = "" if number == 1 else f".{number}"
            kept = backup.with_name(f"{backup.name}{infix}{MODIFIED_SUFFIX}")
            if not kept.exists():
                _copy(dst, kept)
                break
            if kept.is_file() and _sha256(kept) == sha:
                new = False
                break
        action = f"--force: your edited copy {'kept' if new else 'is already kept'} as {kept}"
    elif not dst.exists():
        action = "it had been deleted"
    else:
        action = "updated our earlier copy"
    entry["installed_sha256"] = new_sha
    # Record before copying: a crash in between then reads as "edited", never loses data.
    _save_manifest(root, manifest)
    _copy(src, dst)
    return f"installed {src.name} -> {dst} ({action})"


def _copy(src: Path, dst: Path) -> None:
    """`cp src dst`, staged (`safe.Stage`): a new `dst` gets src's permission bits less the
    umask, an existing one keeps its own."""
    with safe.Stage() as stage:
        shutil.copyfile(src, stage.path(dst, mode=src.stat().st_mode & 0o777))


def _undo_record(root: Path, rel: str, before: dict) -> None:
    """After a failed install of ``rel``: the manifest as it was, and no backup of a file
    this install did not replace (the next install or ``--uninstall`` then sees no edit)."""
    with contextlib.suppress(OSError):  # if this fails too, `_is_original` still tells
        if rel not in before:
            (root / BACKUP_DIR / rel).unlink(missing_ok=True)
        _save_manifest(root, before)
        if (root / BACKUP_DIR).is_dir():
            _prune_backup_dir(root / BACKUP_DIR)


def uninstall(root: str | os.PathLike[str], *, force: bool = False) -> list[str]:
    """Restores the files ``install`` replaced and removes the ones it created; refuses
    (unless ``force``) to discard edits made since. Returns one line per action.

    Raises:
      InstallError: nothing of ours is installed there, or edits (without ``force``).
      BusyError: another install or uninstall of ``root`` is running.
    """
    root = Path(files.canonical(root, what="ROOT"))
    with locks.claim(root, flag="ROOT", command="install"):
        manifest = _load_manifest(root)
        if not manifest:
            raise InstallError(
                f"nothing to uninstall: no {_manifest_path(root)} (tpu-tiles never installed here)"
            )
        _refuse_folders(root, list(manifest))
        edited = _user_modified(root, manifest)
        if edited and not force:
            raise InstallError(
                f"refusing to uninstall: {', '.join(str(root / r) for r in edited)} changed since "
                "tpu-tiles installed it; save your edits elsewhere and rerun with --force"
            )
        lines = []
        for rel in sorted(manifest):
            dst, backup = root / rel, root / BACKUP_DIR / rel
            if "link" in manifest[rel]:
                with safe.Stage() as stage:  # the link made beside it, renamed over it
                    os.symlink(manifest[rel]["link"], stage.path(dst))
                lines.append(f"restored the original link {dst} -> {manifest[rel]['link']}")
            elif manifest[rel]["had_original"]:
                if not backup.is_file():
                    raise InstallError(
                        f"backup {backup} of {dst} is gone; restore it with git (git checkout -- "
                        f"{rel}) and delete {_manifest_path(root)}"
                    )
                _copy(backup, dst)
                backup.unlink()
                lines.append(f"restored the original {dst}")
            else:
                dst.unlink(missing_ok=True)
                lines.append(f"removed {dst} (it did not exist before install)")
            del manifest[rel]
            _save_manifest(root, manifest)
        lines.extend(_prune_backup_dir(root / BACKUP_DIR))
        return lines


def _prune_backup_dir(backup_dir: Path) -> list[str]:
    """Removes the now-empty backup tree; reports edited copies kept by ``--force``."""
    kept = sorted(p for p in backup_dir.rglob(f"*{MODIFIED_SUFFIX}") if p.is_file())
    for directory in sorted(backup_dir.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if directory.is_dir() and not directory.is_symlink() and not any(directory.iterdir()):
            directory.rmdir()
    if backup_dir.is_dir() and not any(backup_dir.iterdir()):
        backup_dir.rmdir()
    return [f"kept your earlier edited copy {p}" for p in kept]
