"""Installs our drop-in files into an upstream tpu_graphs checkout, and undoes it.

``install(ROOT)`` copies each file of :data:`DROPIN` to its place in ROOT. Before the
first overwrite of an upstream file it saves the original under ``ROOT/.tpu_tiles_backup``
and records, in ``ROOT/.tpu_tiles_backup/manifest.json``, the sha256 of what it installed.
That record is how a later install tells "our old copy" (safe to update) from "a file the
user edited" (refused unless ``force``), and how ``uninstall`` restores the originals and
deletes the files that did not exist before. An upstream file that is a symbolic link is
recorded as its link (``"link"``: where it points), not copied, and comes back as that link.
Both hold the checkout's output lock (`locks.claim`) throughout: a second install or
uninstall into it at once is refused in one line, so no backup ever holds our own copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
from importlib import util
from pathlib import Path
from typing import Union

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
# What marks a directory as a tpu_graphs checkout (tiles_train.py imports the package).
CHECKOUT_MARKERS = ("tiles_train.py", "tpu_graphs/baselines/tiles")
# A user's edited copy that --force replaces is kept here (relative path + suffix; a later
# --force numbers its copy, `models.py.2.modified`, and never replaces an earlier one).
MODIFIED_SUFFIX = ".modified"

PathLike = Union[str, "os.PathLike[str]"]


class InstallError(UserError, RuntimeError):
    """Installing or uninstalling cannot proceed; the message is one line with the fix."""


def default_source_dir() -> Path:
    """The folder that holds our models.py and scripts (checkout root, or the wheel's copy)."""
    from tpu_tiles_models import registry

    return registry.dropin_file("models.py").parent


def check_checkout(root: PathLike) -> Path:
    """Returns ``root`` resolved, or raises unless it looks like a tpu_graphs checkout."""
    path = Path(files.canonical(root, what="ROOT"))
    missing = [m for m in CHECKOUT_MARKERS if not (path / m).exists()]
    if missing:
        raise InstallError(
            f"{path} is not a tpu_graphs checkout (no {', '.join(missing)}); pass the directory "
            "of 'git clone https://github.com/google-research-datasets/tpu_graphs'"
        )
    return path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest_path(root: Path) -> Path:
    return root / BACKUP_DIR / MANIFEST


_MANIFEST_ENTRY = {"installed_sha256": (str,), "had_original": (bool,), "link": (str, type(None))}


def _load_manifest(root: Path) -> dict:
    """``{relpath: {"installed_sha256": str, "had_original": bool, "link"?: str}}``; empty if
    none."""
    path = _manifest_path(root)
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
    return installed


def _save_manifest(root: Path, installed: dict) -> None:
    """Writes the manifest atomically, or removes it when nothing is installed."""
    path = _manifest_path(root)
    if not installed:
        path.unlink(missing_ok=True)
        return
    manifest = {"version": 1, "files": installed}
    text = json.dumps(manifest, indent=2, sort_keys=True, allow_nan=False) + "\n"
    with safe.atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _sources(source_dir: PathLike | None) -> dict[str, Path]:
    """``{relpath in ROOT: our file}``; raises if any of our files is missing."""
    base = Path(source_dir) if source_dir is not None else default_source_dir()
    sources = {rel: base / name for name, rel in DROPIN.items()}
    missing = [name for name, rel in DROPIN.items() if not sources[rel].is_file()]
    if missing:
        raise InstallError(
            f"source files missing from {base}: {', '.join(missing)}; reinstall "
            "tpu-tiles-models from a complete checkout (pip install -e <checkout>)"
        )
    return sources


def _refuse_folders(root: Path, relpaths: list[str]) -> None:
    """Raises if a folder stands where one of our files goes (a file copy cannot replace it)."""
    folders = [str(root / rel) for rel in relpaths if (root / rel).is_dir()]
    if folders:
        raise InstallError(
            f"{', '.join(folders)}: a folder where tpu-tiles puts a file; move it elsewhere "
            "and rerun"
        )


def _is_original(root: Path, rel: str, entry: dict) -> bool:
    """Whether ``rel`` still holds the upstream original we backed up: an install that
    stopped between recording and copying left it so; it is not the user's edit."""
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
    root: PathLike, *, force: bool = False, source_dir: PathLike | None = None
) -> list[str]:
    """Copies our drop-in files into the tpu_graphs checkout ``root``.

    Args:
      root: the upstream checkout.
      force: replace files the user edited since our last install (their copy is kept
        as ``ROOT/.tpu_tiles_backup/<relpath>.modified``, or ``<relpath>.<n>.modified``
        when an earlier ``--force`` kept one).
      source_dir: where our files are; defaults to this repository's root.

    Returns:
      One line per action, or a single line saying everything is already installed.
    """
    root = check_checkout(root)
    sources = _sources(source_dir)
    with locks.claim(root, flag="ROOT", command="install"):
        _refuse_folders(root, list(sources))
        rels = [*sources, f"{BACKUP_DIR}/{MANIFEST}"]
        safe.claim([safe.Output(root / rel, "") for rel in rels])  # before changing anything
        manifest = _load_manifest(root)
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
                line = _install_one(root, rel, src, manifest, force=force)
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
    """A note when upstream's `tiles_train.py` cannot run here, else ''.

    It imports tensorflow-ranking, which pins TensorFlow < 2.16 and cannot be imported beside
    a newer one; `tpu-tiles train` writes the same artifacts on every stack.
    """
    tf_version = tpu_tiles_models.tensorflow_version()
    modern = tf_version is not None and tpu_tiles_models.major_minor(tf_version) >= (2, 16)
    if util.find_spec("tensorflow_ranking") is not None and not modern:
        return ""
    return (
        "note: upstream's tiles_train.py needs tensorflow-ranking, which runs on TensorFlow "
        "2.13-2.15 only (the course stack, docs/install.md); here train with `tpu-tiles train "
        "--model=ResidualSAGE`, which writes the same model_<hash>/ and run_<hash>.jsonz"
    )


def _install_one(root: Path, rel: str, src: Path, manifest: dict, *, force: bool) -> str:
    """Installs one file, updating ``manifest`` and its file; '' when already current."""
    dst, backup = root / rel, root / BACKUP_DIR / rel
    new_sha = _sha256(src)
    entry = manifest.get(rel)
    if entry and dst.exists() and _sha256(dst) == new_sha:
        if entry["installed_sha256"] != new_sha:  # The user already made it our new version.
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
            safe.copy_file(dst, backup)
            action = f"original saved to {backup}"
        else:
            action = "new file"
    elif _is_original(root, rel, entry):
        # A stopped install's record: finish it.
        action = "original link recorded" if "link" in entry else f"original saved to {backup}"
    elif dst.exists() and _sha256(dst) != entry["installed_sha256"]:
        kept, new = _keep_edited_copy(dst, backup)
        action = f"--force: your edited copy {'kept' if new else 'is already kept'} as {kept}"
    elif not dst.exists():
        action = "it had been deleted"
    else:
        action = "updated our earlier copy"
    entry["installed_sha256"] = new_sha
    # Record before copying: a crash in between then reads as "edited", never loses data.
    _save_manifest(root, manifest)
    safe.copy_file(src, dst)
    return f"installed {src.name} -> {dst} ({action})"


def _keep_edited_copy(dst: Path, backup: Path) -> tuple[Path, bool]:
    """Copies the user's edited ``dst`` into the backup folder without replacing any copy an
    earlier ``--force`` kept: ``<name>.modified``, then ``<name>.2.modified``, ... Returns the
    copy and whether it is new (an edit already kept byte for byte is not copied twice)."""
    sha = _sha256(dst)
    for number in itertools.count(1):
        infix = "" if number == 1 else f".{number}"
        kept = backup.with_name(f"{backup.name}{infix}{MODIFIED_SUFFIX}")
        if not kept.exists():
            safe.copy_file(dst, kept)
            return kept, True
        if kept.is_file() and _sha256(kept) == sha:
            return kept, False
    raise AssertionError("unreachable")  # itertools.count never ends


def _undo_record(root: Path, rel: str, before: dict) -> None:
    """After a failed install of ``rel``: the manifest as it was, and no backup of a file
    this install did not replace (the next install or ``--uninstall`` then sees no edit)."""
    with contextlib.suppress(OSError):  # if this fails too, `_is_original` still tells
        if rel not in before:
            (root / BACKUP_DIR / rel).unlink(missing_ok=True)
        _save_manifest(root, before)
        if (root / BACKUP_DIR).is_dir():
            _prune_backup_dir(root / BACKUP_DIR)


def uninstall(root: PathLike, *, force: bool = False) -> list[str]:
    """Restores the files ``install`` replaced and removes the ones it created.

    Refuses (unless ``force``) when an installed file was edited since, as restoring
    would discard those edits. Returns one line per action.
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
                _put_link(manifest[rel]["link"], dst)
                lines.append(f"restored the original link {dst} -> {manifest[rel]['link']}")
            elif manifest[rel]["had_original"]:
                if not backup.is_file():
                    raise InstallError(
                        f"backup {backup} of {dst} is gone; restore it with git (git checkout -- "
                        f"{rel}) and delete {_manifest_path(root)}"
                    )
                safe.copy_file(backup, dst)
                backup.unlink()
                lines.append(f"restored the original {dst}")
            else:
                dst.unlink(missing_ok=True)
                lines.append(f"removed {dst} (it did not exist before install)")
            del manifest[rel]
            _save_manifest(root, manifest)
        lines.extend(_prune_backup_dir(root / BACKUP_DIR))
        return lines


def _put_link(target: str, dst: Path) -> None:
    """Makes `dst` a symbolic link to `target` in one step: made under a hidden name beside
    it, then renamed over what is there."""
    tmp = safe.hidden_path(dst)
    os.symlink(target, tmp)
    try:
        os.replace(tmp, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _prune_backup_dir(backup_dir: Path) -> list[str]:
    """Removes the now-empty backup tree; reports edited copies kept by ``--force``."""
    kept = sorted(p for p in backup_dir.rglob(f"*{MODIFIED_SUFFIX}") if p.is_file())
    for directory in sorted(backup_dir.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
    if backup_dir.is_dir() and not any(backup_dir.iterdir()):
        backup_dir.rmdir()
    return [f"kept your earlier edited copy {p}" for p in kept]
