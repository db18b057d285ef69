"""A training run's artifacts: where they go, writing them (`finish`), reading the run file.

`tiles_train.py` writes a Keras-2 SavedModel `model_<h>` and a gzip JSON `run_<h>.jsonz`
whose `h` is the md5 of the sorted-key JSON of its 15 argument fields (`train_args.args_hash`),
and the test predictions `results_<ms>.csv` (names: `formats`). We write exactly that, and put
our own extras under one extra key, `tpu_tiles`, never touching upstream's. The run file is
written last: it marks a run complete, and a run that fails or is interrupted removes every
artifact it had started (`writing_into`). Opening a trained run is `runs.TrainedRun`'s job; the
low-level readers live here, beside the writers they mirror. Every path may be remote
(`gs://...`, see `files`).

Importing this module loads no TensorFlow (what needs it imports it when called): the sweep's
driver and Beam workers use the layout without it.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import tempfile
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

import tpu_tiles_models
from tpu_tiles_models import files, formats, interrupts, kaggle
from tpu_tiles_models.errors import FlagError, UserError
from tpu_tiles_models.train_args import TrainArgs, args_hash

if TYPE_CHECKING:
    import tensorflow as tf

    from tpu_tiles_models import data

EXTRAS_KEY = "tpu_tiles"
UPSTREAM_TOP = 10  # upstream writes this many indices per kernel into results_*.csv


class ExportError(UserError, RuntimeError):
    """A model directory or run file that cannot be used; the message says why and the fix."""


class ShapeMismatch(ExportError):
    """Saved and rebuilt variables differ in shape: usually other feature widths (data)."""


# -- where the artifacts go ------------------------------------------------------------------
# Each path is `files.join(out_dir, name)`: a string, local or remote, spelled as `out_dir` is
# (a point's results_csv is part of its hash, so its spelling must not change).


def model_dir_path(out_dir: str | os.PathLike, h: str) -> str:
    """`<out_dir>/model_<h>`."""
    return files.join(out_dir, formats.model_dir_name(h))


def run_file_path(out_dir: str | os.PathLike, h: str) -> str:
    """`<out_dir>/run_<h>.jsonz`."""
    return files.join(out_dir, formats.run_file_name(h))


def curve_path(out_dir: str | os.PathLike, h: str) -> str:
    """`<out_dir>/train_curve_<h>.png`."""
    return files.join(out_dir, formats.curve_name(h))


def results_csv_path(out_dir: str | os.PathLike, tag: str | int) -> str:
    """`<out_dir>/results_<tag>.csv`: test predictions (`TrainArgs.resolved` names upstream's)."""
    return files.join(out_dir, formats.results_csv_name(tag))


def tensorboard_dir(tensorboard: str | os.PathLike, h: str) -> str:
    """`<tensorboard>/run_<h>`: the run's per-epoch scalars."""
    return files.join(tensorboard, formats.tensorboard_run_name(h))


def run_file_for(model_dir: str | os.PathLike) -> Path | str:
    """`.../model_<h>` -> `.../run_<h>.jsonz`, as the course script derives it."""
    h = formats.run_hash(files.basename(model_dir))
    if h is None:
        raise ExportError(f"{model_dir}: a model directory is named model_<hash>")
    return files.with_name(model_dir, formats.run_file_name(h))


def _temporaries(path: Path) -> tuple[Path, Path]:
    """The hidden folders `save_model_dir` writes beside `path`: the new copy, the old one."""
    return path.with_name(f".{path.name}.tmp"), path.with_name(f".{path.name}.old")


def remove_unfinished(args: TrainArgs) -> None:
    """What a killed run of `args` may have left while its run file does not exist: its model
    dir and save temporaries, curve, results CSV and TensorBoard folder."""
    out, h = files.expand(args.out_dir), args.hash()
    folder = model_dir_path(out, h)
    leftovers = [folder, curve_path(out, h), files.expand(args.results_csv)]
    if not files.is_remote(folder):
        leftovers += _temporaries(Path(folder))
    if args.tensorboard:
        leftovers.append(tensorboard_dir(files.expand(args.tensorboard), h))
    for path in leftovers:
        files.remove(path)


# -- the run file ----------------------------------------------------------------------------


def write_run(out_dir: str | Path, args: Mapping[str, Any], run_info: Mapping) -> Path | str:
    """Writes `run_<h>.jsonz` (gzip JSON) atomically; returns its path (a string if remote)."""
    path = run_file_path(out_dir, args_hash(args))
    files.write_bytes(path, gzip.compress(json.dumps(run_info).encode()))
    return path if files.is_remote(path) else Path(path)


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
    if files.basename(run_file) != formats.run_file_name(expected):
        raise ExportError(
            f"{run_file}: its args hash to {expected}, not to this name; it belongs to another "
            "model directory"
        )
    return run_info


def completed_run(out_dir: str | os.PathLike, h: str) -> dict | None:
    """The run file of run `h` in `out_dir` if the run is complete (its run file exists and is
    whole), else None."""
    try:
        return read_run(model_dir_path(files.expand(out_dir), h))
    except ExportError:
        return None


# -- the SavedModel --------------------------------------------------------------------------


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
    tmp, old = _temporaries(path)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with warnings.catch_warnings():  # TF-GNN's specs save fine; TF warns about each one
            warnings.filterwarnings("ignore", message="Encoding a StructuredValue")
            model.save(str(tmp))
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
    import tensorflow as tf

    from tpu_tiles_models.losses import CombinedLoss

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


# -- writing a run ---------------------------------------------------------------------------


@dataclass
class TrainResult:
    """Where the artifacts went and how good the model is."""

    args: TrainArgs
    model_dir: Path | str  # a string (URL) when remote, like run_file and results_csv
    run_file: Path | str
    results_csv: Path | str | None
    val_errors: dict[int, float]
    model: tf.keras.Model


@dataclass
class Artifacts:
    """What a run writes, removed again if the run does not finish.

    Artifacts are written at local paths: for a local `--out_dir` their real places, for a
    remote one (`gs://...`) a local staging folder (`out_dir`) whose files `publish` copies to
    `destination` at the end, before the run file is written (it marks the run complete).
    A remote file outside a local `--out_dir` (`--results_csv`) is staged the same way.
    """

    out_dir: Path  # where to write now: --out_dir itself, or the local staging folder
    created_out_dir: bool
    destination: str = ""  # the remote --out_dir; "" when out_dir is local
    paths: list[Path | str] = field(default_factory=list)  # removed if the run fails
    staged: dict[Path, str] = field(default_factory=dict)  # local path -> remote place
    _spare: Path | None = None  # local staging for remote files outside a local out_dir

    def add(self, path: Path) -> Path:
        """Registers `path`, about to be written (under `out_dir` when staging)."""
        if self.destination and path.is_relative_to(self.out_dir):
            self.staged[path] = files.join(self.destination, *path.relative_to(self.out_dir).parts)
        else:
            self.paths.append(path)
        return path

    def place(self, path: str) -> Path:
        """The local path to write the artifact whose place is `path` (local or remote)."""
        if not files.is_remote(path):
            return self.add(Path(path))
        if self._spare is None:
            self._spare = Path(tempfile.mkdtemp(prefix="tpu_tiles_stage_"))
        local = self._spare / str(len(self.staged)) / files.basename(path)
        local.parent.mkdir()
        self.staged[local] = path
        return local

    def final(self, path: Path) -> Path | str:
        """Where the file written at `path` ends up."""
        return self.staged.get(path, path)

    @property
    def target(self) -> Path | str:
        """The --out_dir the artifacts end up in."""
        return self.destination or self.out_dir

    def publish(self, run_name: str) -> None:
        """Copies the staged artifacts to their remote places (nothing when all are local).

        Call it just before writing the run file `run_name` into `target`. An old run file
        there is removed first: a run being replaced must not look complete meanwhile.
        """
        if self.destination:
            files.remove(files.join(self.destination, run_name))
        for local, remote in self.staged.items():
            self.paths.append(remote)
            if local.is_dir():
                files.remove(remote)
                files.copy_tree(local, remote, flag="--out_dir")
            else:
                files.put_file(local, remote)
            interrupts.check()

    def remove(self) -> None:
        for path in self.paths:
            files.remove(path)
        if self.created_out_dir and self.out_dir.is_dir() and not any(self.out_dir.iterdir()):
            self.out_dir.rmdir()

    def cleanup(self) -> None:
        """Removes the local staging folders."""
        for folder in (self._spare, self.out_dir if self.destination else None):
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def writing_into(out_dir: str | os.PathLike) -> Iterator[Artifacts]:
    """Creates `out_dir` if needed; on any failure or Ctrl-C removes what the block wrote.

    A remote `out_dir` gets a local staging folder instead (see `Artifacts`).

    Raises:
      FlagError: `out_dir` is a file.
    """
    target = files.expand(out_dir)
    if files.exists(target) and not files.isdir(target):
        raise FlagError(f"--out_dir {target} is a file; pass a folder")
    if files.is_remote(target):
        staging = Path(tempfile.mkdtemp(prefix="tpu_tiles_stage_"))
        artifacts = Artifacts(staging, created_out_dir=False, destination=target)
    else:
        path = Path(target)
        artifacts = Artifacts(path, created_out_dir=not path.exists())
    try:
        artifacts.out_dir.mkdir(parents=True, exist_ok=True)
        yield artifacts
    except BaseException:
        artifacts.remove()
        raise
    finally:
        artifacts.cleanup()


def _plot_curve(curve: dict, extras: dict, path: Path) -> None:
    """train_curve_<h>.png: losses, OPA and the validation score per epoch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    epochs = curve["epoch"]
    for ax, keys, title in (
        (axes[0], ("train_loss", "val_loss"), "loss"),
        (axes[1], ("train_opa", "val_opa"), "ordered pair accuracy"),
    ):
        for key in keys:
            ax.plot(epochs, curve[key], label=key)
        ax.set_title(title)
        ax.legend()
    axes[2].plot(epochs, extras["val_score"], label="1 - top-5 error")
    axes[2].set_title("validation score (Kaggle form)")
    for ax in axes:
        ax.set_xlabel("epoch")
    fig.tight_layout()
    with files.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=90)
    plt.close(fig)


def finish(
    args: TrainArgs,
    model: tf.keras.Model,
    dataset: data.Dataset,
    *,
    curve: dict[str, list],
    extras: dict[str, Any],
    artifacts: Artifacts,
    scorer: Callable | None = None,
    val_errors: dict[int, float] | None = None,
) -> TrainResult:
    """Final validation, test ranking, and upstream's artifacts (model dir first, run file last).

    Args:
      args: resolved options (they name and hash the artifacts).
      model: the model to save, with its final weights.
      dataset: `valid` and `test` splits (test may be None) and the statistics.
      curve: upstream's `train_curve` (empty lists for an untrained model: no PNG then).
      extras: ours, stored under the run file's `tpu_tiles` key.
      artifacts: from `writing_into(args.out_dir)`.
      scorer: a traced `scoring.kernel_scorer(model)` to reuse, if any.
      val_errors: the model's top-k errors on every config of every validation kernel, if
        already known (the best epoch's, whose weights these are): not scored again then.
    """
    from tpu_tiles_models import scoring  # TensorFlow

    progress = not args.no_progress
    out_dir = artifacts.out_dir
    if val_errors is None:
        val_errors = scoring.errors(
            scoring.score_split(
                model, dataset.valid, dataset.stats, scorer=scorer, progress=progress, desc="valid"
            )
        )
    upstream = args.upstream_args()
    run_info: dict[str, Any] = dict(
        train_curve=curve, final_error=dict(val=val_errors), args=upstream
    )
    results_csv = None
    if dataset.test is not None and len(dataset.test):
        scored = scoring.score_split(
            model, dataset.test, dataset.stats, scorer=scorer, progress=progress, desc="test"
        )
        if args.test_mode == "metrics":
            run_info["final_error"]["test"] = scoring.errors(scored)
        else:
            ranks = {s.tile_id: scoring.upstream_top(s.scores, UPSTREAM_TOP) for s in scored}
            run_info["test_predictions"] = ranks
            results_csv = artifacts.place(files.expand(args.results_csv))
            kaggle.write_predictions_csv(results_csv, list(ranks.items()), flag="--results_csv")
    h = args.hash()
    run_info[EXTRAS_KEY] = dict(
        extras,
        version=tpu_tiles_models.__version__,
        select_by=args.select_by,
        feature_stats=dataset.stats.to_json(),
        toy_data=args.toy_data,
        data_root=args.data_root,
        train_args=args.to_dict(),
    )
    interrupts.check()
    model_dir = save_model_dir(model, artifacts.add(Path(model_dir_path(out_dir, h))))
    interrupts.check()  # a Ctrl-C during the save stops here, before the run file exists
    if curve["epoch"]:
        _plot_curve(curve, extras, artifacts.add(Path(curve_path(out_dir, h))))
    artifacts.publish(formats.run_file_name(h))
    run_file = write_run(artifacts.target, upstream, run_info)
    model_dir = artifacts.final(model_dir)
    results_csv = artifacts.final(results_csv) if results_csv else None
    print(
        f"wrote {model_dir}\nwrote {run_file}" + (f"\nwrote {results_csv}" if results_csv else "")
    )
    print(
        "validation top-k error: "
        + json.dumps({str(k): round(v, 4) for k, v in val_errors.items()})
    )
    return TrainResult(args, model_dir, run_file, results_csv, val_errors, model)
