"""Writing upstream's training artifacts: `model_<hash>/` and `run_<hash>.jsonz`.

`tiles_train.py` writes a Keras-2 SavedModel `model_<h>` and a gzip JSON `run_<h>.jsonz`
whose `h` is the md5 of the sorted-key JSON of its 15 argument fields (`train_args.args_hash`).
We write exactly that, and put our own extras under one extra key, `tpu_tiles`, never touching
upstream's. Reading them back is `runs.TrainedRun`'s job; the low-level readers live here,
beside the writers they mirror. Every path may be remote (`gs://...`, see `files`).
"""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
import warnings
import zlib
from pathlib import Path
from typing import Any, Mapping

import tensorflow as tf

from tpu_tiles_models import files
from tpu_tiles_models.errors import UserError
from tpu_tiles_models.losses import CombinedLoss
from tpu_tiles_models.train_args import args_hash

EXTRAS_KEY = "tpu_tiles"


class ExportError(UserError, RuntimeError):
    """A model directory or run file that cannot be used; the message says why and the fix."""


class ShapeMismatch(ExportError):
    """Saved and rebuilt variables differ in shape: usually other feature widths (data)."""


def run_file_for(model_dir: str | Path) -> Path | str:
    """`.../model_<h>` -> `.../run_<h>.jsonz`, as the course script derives it (a string for
    a remote path)."""
    name = files.basename(model_dir)
    if not name.startswith("model_"):
        raise ExportError(f"{model_dir}: a model directory is named model_<hash>")
    return files.with_name(model_dir, "run_" + name[len("model_") :] + ".jsonz")


def write_run(out_dir: str | Path, args: Mapping[str, Any], run_info: Mapping) -> Path | str:
    """Writes `run_<h>.jsonz` (gzip JSON) atomically; returns its path (a string if remote)."""
    name = f"run_{args_hash(args)}.jsonz"
    path = files.join(out_dir, name) if files.is_remote(out_dir) else Path(out_dir) / name
    files.write_bytes(path, gzip.compress(json.dumps(run_info).encode()))
    return path


def read_run(model_dir: str | Path) -> dict:
    """Reads the `run_<h>.jsonz` beside `model_dir`, checking that it belongs to it.

    Raises:
      ExportError: missing, truncated or corrupt run file, or one of another model.
    """
    run_file = run_file_for(model_dir)
    if not files.isfile(run_file):
        raise ExportError(
            f"{run_file} not found: {files.basename(model_dir)} needs its run file beside it "
            "(tiles_train.py writes both into --out_dir; copy them together)"
        )
    try:
        run_info = json.loads(gzip.decompress(files.read_bytes(run_file)))
        expected = args_hash(run_info["args"])
    except (OSError, EOFError, zlib.error, ValueError, KeyError, TypeError) as e:
        reason = " ".join(str(e).split()) or type(e).__name__
        raise ExportError(
            f"{run_file}: not a readable run file ({reason}); it is truncated or corrupt, "
            "copy it again from the training --out_dir"
        ) from None
    if files.basename(run_file) != f"run_{expected}.jsonz":
        raise ExportError(
            f"{run_file}: its args hash to {expected}, not to this name; it belongs to another "
            "model directory"
        )
    return run_info


def save_model_dir(model: tf.keras.Model, path: str | Path) -> Path | str:
    """`model.save(path)` as a Keras-2 SavedModel, written beside and renamed into place.

    A rerun replaces its own directory; an interrupted save leaves only a hidden temp dir
    that the next save removes. A remote `path` is saved locally, then its tree copied there
    (not atomic: the run file, written after it, is what marks a run complete).
    """
    if files.is_remote(path):
        with tempfile.TemporaryDirectory(prefix="tpu_tiles_model_") as tmp:
            local = save_model_dir(model, Path(tmp) / files.basename(path))
            files.remove(path)
            files.copy_tree(local, path)
        return path
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with warnings.catch_warnings():  # TF-GNN's specs save fine; TF warns about each one
            warnings.filterwarnings("ignore", message="Encoding a StructuredValue")
            model.save(str(tmp))
        old = path.with_name(f".{path.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if path.exists():
            path.rename(old)
        tmp.rename(path)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def load_saved_model(model_dir: str | Path) -> tf.keras.Model:
    """`tf.keras.models.load_model` as the course script calls it (loss in a custom scope).

    Keras 2 reads a SavedModel through tf.io.gfile, so a remote directory loads in place.
    """
    with tf.keras.saving.custom_object_scope({"CombinedLoss": CombinedLoss}):
        return tf.keras.models.load_model(str(model_dir), compile=False)


def copy_variables(target: tf.keras.Model, source: tf.keras.Model, *, origin: str) -> None:
    """The course script's pairwise in-order copy, with errors that say which and why."""
    tv, sv = target.trainable_variables, source.trainable_variables
    if len(tv) != len(sv):
        raise ExportError(
            f"{origin}: the saved model has {len(sv)} trainable variables but the rebuilt "
            f"{type(target).__name__} has {len(tv)}: it was saved from a different models.py "
            "or other --model_kwargs_json"
        )
    for i, (t, s) in enumerate(zip(tv, sv)):
        if t.shape != s.shape:
            raise ShapeMismatch(
                f"{origin}: variable {i} ({t.name}) has shape {s.shape.as_list()} saved but "
                f"{t.shape.as_list()} rebuilt: the feature widths differ (trained with "
                "--toy_data or other data) or it comes from a different models.py"
            )
    for t, s in zip(tv, sv):
        t.assign(s)
