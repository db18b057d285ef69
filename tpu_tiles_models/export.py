"""Writing a training run: its artifacts staged, put in place at the end, the run file last.

We write what upstream's `tiles_train.py` writes (in `run_file`'s format) from what training
computed (`finish`), our extras under one extra key, `tpu_tiles`. The run file marks a run done.

Outputs are claimed before any work (`writing_into`), staged and put in place together
(`safe.Stage`; a commit a kill cut short is finished by the next run, `recover`); a finished
run of the same options is replaced only with `--overwrite`. Loads no TensorFlow on import.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Protocol, Sequence

import tpu_tiles_models
from tpu_tiles_models import files, formats, interrupts, kaggle, run_file, safe
from tpu_tiles_models.errors import one_line
from tpu_tiles_models.run_file import (
    EXTRAS_KEY,
    IDENTITY_KEY,
    KEEP_DEFAULT_KEY,
    ExportError,
    RunPaths,
    run_info_hash,
    run_info_problem,
)
from tpu_tiles_models.train_args import TrainArgs

if TYPE_CHECKING:
    import tensorflow as tf

    from tpu_tiles_models import data


class FinalScores(Protocol):
    """What `finish` writes of `scoring.FinalScores` (scoring is not imported here)."""

    val: Any  # `margin.KeepDefault`: its errors, rule and margin
    test_errors: dict[int, float] | None
    test_ranks: dict[str, list[int]] | None


class RunExistsError(ExportError, FileExistsError):
    """A rerun would replace a finished run (or an existing `--results_csv`) without
    `--overwrite`; refused before any work."""


def remove_unfinished(args: TrainArgs) -> None:
    """Removes an incomplete run of `args` (`completed_run`), its run file first (so that it no
    longer looks complete): the sweep trains such a point again from nothing."""
    p = RunPaths.of(args)
    for path in (p.run_file, p.model_dir, p.curve, p.results_csv, p.tensorboard):
        if path is not None:
            files.remove(path)


# -- the SavedModel --------------------------------------------------------------------------


def save_model(model: tf.keras.Model, path: str | Path) -> None:
    """`model.save(path)` as a Keras-2 SavedModel into a local folder (`finish` stages it); a
    full or unwritable disk is one line naming `--out_dir` and the model's place."""
    import tensorflow as tf

    path = Path(path)
    place = safe.place_of(path)
    try:
        with warnings.catch_warnings():  # TF-GNN's specs save fine; TF warns about each one
            warnings.filterwarnings("ignore", message="Encoding a StructuredValue")
            model.save(str(path))
    except (OSError, tf.errors.OpError) as err:
        free = files.format_size(shutil.disk_usage(path.parent).free)
        raise files.WriteError(
            f"cannot write --out_dir {place.parent}: saving {place.name} (about "
            f"{files.format_size(space_needed(model))}) failed with {free} free on its disk "
            f"({one_line(err, 160)}); "
            + files.room_fix("--out_dir", err if isinstance(err, OSError) else None)
        ) from None


# What a SavedModel holds beside its variables: the traced functions and Keras's metadata
# (about 0.2 MB for a tiny MLP, 3 MB for ResidualSAGE; this leaves room to spare).
_SAVED_MODEL_GRAPHS = 16 * 2**20


def space_needed(model: tf.keras.Model) -> int:
    """Bytes the saved `model_<h>/` of `model` takes, about: its variables and traced graphs."""
    return _SAVED_MODEL_GRAPHS + sum(v.shape.num_elements() * v.dtype.size for v in model.weights)


def check_space(artifacts: Artifacts, model: tf.keras.Model) -> None:
    """Fails, before any training, if the run's out_dir has too little space for its model."""
    need = space_needed(model)
    safe.claim([safe.Output(artifacts.places.out_dir, "--out_dir", folder=True, need_bytes=need)])


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
    """What a run writes (`safe.Stage`): its artifacts put in place by `commit` once the run has
    finished, the run file last; removed if the run does not get there."""

    args: TrainArgs
    places: RunPaths  # where its artifacts go, worked out once
    staged: safe.Stage = field(default_factory=safe.Stage)
    # Folders written in place while the run goes (TensorBoard's): what was in them before.
    logs: dict[str, set[str] | None] = field(default_factory=dict)

    def stage(self, place: str) -> Path:
        """The local path to write the artifact whose place is `place` (local or remote)."""
        flag = "--results_csv" if place == self.places.results_csv else "--out_dir"
        return self.staged.path(place, flag=flag)

    def log_into(self, folder: str) -> str:
        """Registers `folder`, written in place while the run goes (TensorBoard's events):
        if the run fails what it added goes; if it finishes, what an earlier run of the same
        options had there goes (the run it replaces)."""
        self.logs[folder] = set(_entries(folder)) if files.isdir(folder) else None
        return folder

    def commit(self, run_info: Mapping) -> Path | str:
        """Writes the run file and puts every artifact in place, the run file last; returns its
        path. A run of the same options finished meanwhile: RunExistsError (no --overwrite)."""
        run_place = self.places.run_file
        if run_info_hash(run_info) != self.places.hash:  # the content must name this run
            raise ValueError(f"run file content of another run than {run_place}")
        # Staged last, written whole: a run killed after this is finished by `recover`.
        safe.write_bytes(self.stage(run_place), run_file.run_bytes(run_info))
        _refuse_to_replace(self.args, self.places)
        if files.is_remote(run_place):  # a bucket has no rename: no old run file marks the new
            files.remove(run_place)  # artifacts while they are copied
        self.staged.commit()
        for folder, before in self.logs.items():  # the replaced run's events
            for name in before or ():
                files.remove(files.join(folder, name))
        self.logs = {}
        return _final(run_place)

    def remove(self) -> None:
        """Removes what the run wrote (it did not finish; nothing once it has)."""
        for folder, before in self.logs.items():
            if before is None:
                files.remove(folder)
            else:
                for name in set(_entries(folder)) - before:
                    files.remove(files.join(folder, name))
        self.staged.discard()


def _final(place: str) -> Path | str:
    """`place` as a result gives it: a `Path` when local, the URL when remote."""
    return place if files.is_remote(place) else Path(place)


def _entries(folder: str) -> list[str]:
    """The names in a local or remote folder."""
    return [files.basename(p) for p in files.glob(files.join(folder, "*"))]


def recover(out_dir: str | os.PathLike) -> None:
    """Finishes or removes what killed runs left in `out_dir`. One killed while putting its
    artifacts in place left its staged run file, written once every artifact was: they are put
    in place (an earlier run of the same options replaced, as it would have been), each found
    from the run's own folder, never the working folder. Every other hidden file a killed
    process left there goes, but an `.old` copy whose place is empty is put back."""
    out = files.expand(out_dir)
    for left in safe.leftovers(out):
        h = formats.run_file_hash(left.name)
        if h is None or left.kind != "tmp":
            continue
        try:
            info = run_file.read_run_bytes(left.path)
            if run_info_problem(info) is not None:
                continue
            csv = run_file.results_csv_place(out, info["args"])
        except (OSError, EOFError, zlib.error, ValueError, RecursionError):
            continue  # not whole: the run had not finished; removed below
        places = [run_file.model_dir_path(out, h), run_file.curve_path(out, h), *csv]
        moves = [(safe.hidden_path(p, tag=left.tag), Path(p)) for p in places]
        with contextlib.suppress(OSError):  # another run into the folder finished it first
            safe.put_in_place([*moves, (left.path, Path(run_file.run_file_path(out, h)))])
        for path in csv:  # its moved-aside copy, now replaced
            safe.remove_leftovers(os.path.dirname(path), [os.path.basename(path)])
    safe.remove_leftovers(out)


def _refuse_to_replace(args: TrainArgs, paths: RunPaths) -> None:
    """Without --overwrite, a finished run of the same options (its run file) or an existing
    --results_csv is a RunExistsError naming the file and the flags that fix it."""
    if args.overwrite:
        return
    if files.exists(paths.run_file):
        raise RunExistsError(
            f"--out_dir {paths.out_dir} already holds {files.basename(paths.run_file)}, a run "
            "with these same options; pass --run_id=<tag> to train another beside it, or "
            "--overwrite to replace it once this run has finished"
        )
    csv = paths.results_csv
    if args.test_mode == "predictions" and files.exists(csv):
        raise RunExistsError(
            f"--results_csv {csv} already exists; pass another --results_csv, or --overwrite "
            "to replace it once this run has finished"
        )


def outputs(args: TrainArgs, paths: RunPaths | None = None) -> list[safe.Output]:
    """Every path a run of `args` writes (at `paths`, default `RunPaths.of(args)`), for
    `safe.claim`. Free space is checked once the model is built (`check_space`)."""
    paths = paths or RunPaths.of(args)
    places = [
        safe.Output(paths.out_dir, "--out_dir", folder=True, adds_to=True),
        safe.Output(paths.model_dir, "--out_dir", folder=True, artifact=True),
        safe.Output(paths.run_file, "--out_dir", need_bytes=0, artifact=True),
        safe.Output(paths.curve, "--out_dir", need_bytes=0, run=paths.hash),
    ]
    if args.test_mode == "predictions":
        places.append(safe.Output(paths.results_csv, "--results_csv", need_bytes=0, run=paths.hash))
    if paths.tensorboard:  # the run's own folder under --tensorboard
        board = files.expand(args.tensorboard)
        places.append(safe.Output(board, "--tensorboard", folder=True, adds_to=True))
        places.append(safe.Output(paths.tensorboard, "--tensorboard", folder=True))
    if args.cache_dir:
        cache = files.expand(args.cache_dir)  # one that cannot be written: a warning (README)
        places.append(
            safe.Output(cache, "--cache_dir", folder=True, adds_to=True, best_effort=True)
        )
    return places


@contextlib.contextmanager
def writing_into(
    args: TrainArgs, inputs: Sequence[safe.Input] = (), paths: RunPaths | None = None
) -> Iterator[Artifacts]:
    """Before any work, finishes or removes what killed runs left in `--out_dir` (`recover`),
    claims the run's outputs against `inputs` (what it reads: data splits, member runs, a
    models.py; `safe.claim`), refuses to replace a finished run of the same options or an
    existing `--results_csv` without `--overwrite` (RunExistsError), and makes `--out_dir`.
    On any failure or stop signal in the block, removes what it wrote."""
    paths = paths or RunPaths.of(args)
    recover(paths.out_dir)
    safe.claim(outputs(args, paths), inputs)
    _refuse_to_replace(args, paths)
    artifacts = Artifacts(args, paths)
    try:
        if not files.is_remote(paths.out_dir):
            artifacts.staged.make_dirs(paths.out_dir, flag="--out_dir")
        yield artifacts
    except BaseException:
        artifacts.remove()
        raise


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
    fig.savefig(path, format="png", dpi=90)  # `path` is staged (`finish`)
    plt.close(fig)


# Which of the run file's figures were measured on kernels that chose something (issue 60):
# selection flatters them, so only a split that chose nothing (a test split) tells.
IN_SAMPLE = {
    "final_error.val": "in sample: the epoch and config 0's rule were chosen on these kernels",
    f"tpu_tiles.{KEEP_DEFAULT_KEY}": "the epoch chosen on these kernels; val_margin and val_rule "
    "cross-fit the rule (out of sample for the rule only)",
    "final_error.test": "out of sample (nothing was chosen on the test split)",
}


def finish(
    args: TrainArgs,
    model: tf.keras.Model,
    stats: data.FeatureStats,
    *,
    final: FinalScores,
    curve: dict[str, list],
    extras: dict[str, Any],
    artifacts: Artifacts,
) -> TrainResult:
    """Writes upstream's artifacts from what the run computed (`final`: its scores, from
    `scoring.final_scores`; `curve`: empty lists for an untrained model, then no PNG; `extras`:
    ours, under the run file's `tpu_tiles` key), the run file last; scores nothing itself."""
    paths, val = artifacts.places, final.val
    val_errors = val.forward  # the figure of the ranking the run hands in
    run_info: dict[str, Any] = dict(
        train_curve=curve, final_error=dict(val=val_errors), args=args.upstream_args()
    )
    results_csv = None
    if final.test_errors is not None:
        run_info["final_error"]["test"] = final.test_errors
    if final.test_ranks is not None:
        run_info["test_predictions"] = final.test_ranks
        results_csv = paths.results_csv
        staged = artifacts.stage(results_csv)
        kaggle.write_predictions_csv(staged, list(final.test_ranks.items()), flag="--results_csv")
    run_info[EXTRAS_KEY] = dict(
        extras,
        version=tpu_tiles_models.__version__,
        select_by=args.select_by,
        feature_stats=stats.to_json(),
        toy_data=args.toy_data,
        data_root=args.data_root,
        train_args=args.to_dict(),
        **{IDENTITY_KEY: args.identity()},
        **{KEEP_DEFAULT_KEY: val.to_json()},
        in_sample=IN_SAMPLE,
    )
    interrupts.check()
    save_model(model, artifacts.stage(paths.model_dir))
    interrupts.check()  # a Ctrl-C during the save stops here, before anything is in place
    if curve["epoch"]:
        _plot_curve(curve, extras, artifacts.stage(paths.curve))
    interrupts.check()
    run_file = artifacts.commit(run_info)
    model_dir = _final(paths.model_dir)
    results_csv = _final(results_csv) if results_csv else None
    print(
        f"wrote {model_dir}\nwrote {run_file}" + (f"\nwrote {results_csv}" if results_csv else "")
    )
    print(
        f"validation top-k error: {_rounded(val_errors)}; ranked by its rule ({val.describe()}; "
        f"the margin cross-fitted): {_rounded(val.rule or val.kept)}"
    )
    return TrainResult(args, model_dir, run_file, results_csv, val_errors, model)


def _rounded(errors: Mapping[int, float]) -> str:
    """Top-k errors as the closing line prints them: JSON, 4 decimals."""
    return json.dumps({str(k): round(v, 4) for k, v in errors.items()})
