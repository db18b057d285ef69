"""Upstream's training artifacts: `model_<hash>/`, `run_<hash>.jsonz`, and reloading them.

`tiles_train.py` writes a Keras-2 SavedModel `model_<h>` and a gzip JSON `run_<h>.jsonz`
whose `h` is the md5 of the sorted-key JSON of its 15 argument fields. The course script
reloads by `load_model`, rebuilding the class from `args`, one `forward` to create its
variables, and a pairwise in-order copy of `trainable_variables`. We write and read exactly
that, and put our own extras under one extra key, `tpu_tiles`, never touching upstream's.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any, Mapping

import tensorflow as tf
import tensorflow_gnn as tfgnn

from tpu_tiles_models import files, registry
from tpu_tiles_models.losses import CombinedLoss

# The fields of upstream's `TrainArgs`, which its hash covers (and nothing else).
ARG_FIELDS = (
    "epochs",
    "eval_every",
    "batch_size",
    "configs",
    "early_stop",
    "losses",
    "learning_rate",
    "clip_norm",
    "model",
    "model_kwargs_json",
    "test_mode",
    "out_dir",
    "results_csv",
    "validate_batches",
    "run_id",
)
EXTRAS_KEY = "tpu_tiles"


class ExportError(RuntimeError):
    """A model directory or run file that cannot be used; the message says why and the fix."""


class ShapeMismatch(ExportError):
    """Saved and rebuilt variables differ in shape: usually other feature widths (data)."""


def args_hash(args: Mapping[str, Any]) -> str:
    """Upstream's `TrainArgs.compute_hash`: md5 of `json.dumps(args, sort_keys=True)`."""
    missing = [f for f in ARG_FIELDS if f not in args]
    if missing:
        raise ValueError(f"args lack upstream fields: {', '.join(missing)}")
    fields = {f: args[f] for f in ARG_FIELDS}
    return hashlib.md5(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def run_file_for(model_dir: str | Path) -> Path:
    """`.../model_<h>` -> `.../run_<h>.jsonz`, as the course script derives it."""
    model_dir = Path(model_dir)
    if not model_dir.name.startswith("model_"):
        raise ExportError(f"{model_dir}: a model directory is named model_<hash>")
    return model_dir.with_name("run_" + model_dir.name[len("model_") :] + ".jsonz")


def write_run(out_dir: str | Path, args: Mapping[str, Any], run_info: Mapping) -> Path:
    """Writes `run_<h>.jsonz` (gzip JSON) atomically; returns its path."""
    path = Path(out_dir) / f"run_{args_hash(args)}.jsonz"
    with files.atomic_path(path) as tmp:
        tmp.write_bytes(gzip.compress(json.dumps(run_info).encode()))
    return path


def read_run(model_dir: str | Path) -> dict:
    """Reads the `run_<h>.jsonz` beside `model_dir`, checking that it belongs to it."""
    run_file = run_file_for(model_dir)
    if not run_file.is_file():
        raise ExportError(
            f"{run_file} not found: {Path(model_dir).name} needs its run file beside it "
            "(tiles_train.py writes both into --out_dir; copy them together)"
        )
    try:
        run_info = json.loads(gzip.decompress(run_file.read_bytes()))
        expected = args_hash(run_info["args"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ExportError(f"{run_file}: not a readable run file ({e})") from None
    if run_file.name != f"run_{expected}.jsonz":
        raise ExportError(
            f"{run_file}: its args hash to {expected}, not to this name; it belongs to another "
            "model directory"
        )
    return run_info


def save_model_dir(model: tf.keras.Model, path: str | Path) -> Path:
    """`model.save(path)` as a Keras-2 SavedModel, written beside and renamed into place.

    A rerun replaces its own directory; an interrupted save leaves only a hidden temp dir
    that the next save removes.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
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
    """`tf.keras.models.load_model` as the course script calls it (loss in a custom scope)."""
    if not Path(model_dir, "saved_model.pb").is_file():
        raise ExportError(f"{model_dir}: no saved_model.pb; pass a model_<hash> directory")
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


def rebuild(
    model_dir: str | Path,
    run_info: Mapping,
    sample_graph: tfgnn.GraphTensor,
    *,
    num_ops: int,
    module: ModuleType | None = None,
    saved: tf.keras.Model | None = None,
) -> tf.keras.Model:
    """The course procedure: fresh class from `args`, one `forward`, in-order variable copy.

    `sample_graph` is one kernel with all its configs, preprocessed like the training data.
    `saved` skips the (slow) `load_model` when the caller has it already.
    """
    args = run_info["args"]
    model = registry.build_model(
        args["model"], args["configs"], num_ops, args["model_kwargs_json"], module
    )
    model.forward(sample_graph, int(sample_graph.node_sets["config"].sizes[0]))
    copy_variables(model, saved or load_saved_model(model_dir), origin=str(model_dir))
    return model
