"""Writing a training run: its artifacts staged, put in place at the end, the run file last.

We write what upstream's `tiles_train.py` writes (in `run_file`'s format) from what training
computed (`finish`), our extras under one extra key, `tpu_tiles`. The run file marks a run done.

Nothing finished is lost (`writing_into`, `finish`): a run first writes every artifact under a
hidden name beside its place, and only once all are written renames them into place, the run
file last. A run that fails or is interrupted removes what it had written and leaves an earlier
run as it was; one killed outright (`kill -9`) leaves hidden files that the next run into the
same folder finishes (if the killed one had written everything) or removes. A finished run of
the same options (same `h`) or an existing `--results_csv` is replaced only with `--overwrite`,
and outputs are checked against the run's inputs (`files.prepare_outputs`) before any work.

Reading runs is `run_file`'s and `runs`'. A remote path (`gs://...`, see `files`) is written
locally and copied at the end, the run file last (not atomic: a bucket has no rename).
Importing this module loads no TensorFlow (the sweep's driver and Beam workers use it).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Protocol, Sequence

import tpu_tiles_models
from tpu_tiles_models import files, formats, interrupts, kaggle, run_file
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

    val: Any  # `scoring.KeepDefault`: its errors, rule and margin
    test_errors: dict[int, float] | None
    test_ranks: dict[str, list[int]] | None


class RunExistsError(ExportError, FileExistsError):
    """A rerun would replace a finished run (or an existing `--results_csv`) without
    `--overwrite`; refused before any work."""


def remove_unfinished(args: TrainArgs) -> None:
    """Removes an incomplete run of `args` (see `completed_run`): its run file first (so that
    it no longer looks complete), then its model dir, curve, results CSV and TensorBoard
    folder. For the sweep, whose points are named by their options: a point that is not
    complete (after `recover`) is trained again from nothing."""
    paths = RunPaths.of(args)
    leftovers = [paths.run_file, paths.model_dir, paths.curve, paths.results_csv]
    for path in [*leftovers, paths.tensorboard]:
        if path is not None:
            files.remove(path)


# -- the SavedModel --------------------------------------------------------------------------


def save_model(model: tf.keras.Model, path: str | Path) -> None:
    """`model.save(path)` as a Keras-2 SavedModel into a local folder (`finish` stages it); a
    full or unwritable disk is one line naming `--out_dir` and the model's place."""
    import tensorflow as tf

    path = Path(path)
    place = files.place_of(path)
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
    """Fails, before any training, if the run's out_dir has too little space for its model.

    Raises:
      WriteError: naming --out_dir, the space needed and the space free.
    """
    if not files.is_remote(artifacts.out_dir):  # a bucket has no free space to ask
        files.check_folder(artifacts.out_dir, flag="--out_dir", need_bytes=space_needed(model))


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
    """What a run writes: every artifact first under a hidden name (`stage`), all put in place
    together by `commit` once the run has finished, the run file last; removed again if the
    run does not get there.

    A local artifact is staged beside its place (`files.hidden_path`, with one tag for the
    whole run), so that putting it in place is a rename; a remote one (`gs://...`) in a local
    folder, copied to its place at the end.
    """

    args: TrainArgs
    places: RunPaths  # where its artifacts go, worked out once
    tag: str = field(default_factory=lambda: files.new_tag())
    staged: dict[Path, str] = field(default_factory=dict)  # hidden or local path -> its place
    paths: list[Path | str] = field(default_factory=list)  # copied to remote places
    made: Path | None = None  # the topmost folder of --out_dir this run made (make_dirs)
    # Folders written in place while the run goes (TensorBoard's): what was in them before.
    logs: dict[str, set[str] | None] = field(default_factory=dict)
    _spare: Path | None = None  # local staging for remote places
    _run_tmp: Path | None = None
    _committed: bool = False

    @property
    def out_dir(self) -> str:
        """The run's `--out_dir` (`~` expanded; a URL when remote)."""
        return self.places.out_dir

    def stage(self, place: str) -> Path:
        """The local path to write the artifact whose place is `place` (local or remote)."""
        if files.is_remote(place):
            if self._spare is None:
                self._spare = Path(tempfile.mkdtemp(prefix="tpu_tiles_stage_"))
            local = self._spare / str(len(self.staged)) / files.basename(place)
            local.parent.mkdir()
        else:
            local = files.hidden_path(place, tag=self.tag)
        self.staged[local] = place
        return local

    def log_into(self, folder: str) -> str:
        """Registers `folder`, written in place while the run goes (TensorBoard's events):
        if the run fails what it added goes; if it finishes, what an earlier run of the same
        options had there goes (the run it replaces)."""
        self.logs[folder] = set(_entries(folder)) if files.isdir(folder) else None
        return folder

    def commit(self, run_info: Mapping) -> Path | str:
        """Writes the run file and puts every staged artifact in place, the run file last;
        returns the run file's path.

        Locally that is a few renames that no signal interrupts; an old artifact in a place is
        moved aside first and removed once the run file is in place. Remote places are copied
        (an old remote run file is removed first: a run being replaced must not look complete
        while its model is copied).

        Raises:
          RunExistsError: a run of the same options finished meanwhile (without --overwrite).
        """
        run_place = self.places.run_file
        if run_info_hash(run_info) != self.places.hash:  # the content must name this run
            raise ValueError(f"run file content of another run than {run_place}")
        _refuse_to_replace(self.args, self.places)
        remote = {local: place for local, place in self.staged.items() if files.is_remote(place)}
        if files.is_remote(run_place):
            files.remove(run_place)
        for local, place in remote.items():
            self.paths.append(place)
            if local.is_dir():
                files.remove(place)
                files.copy_tree(local, place, flag="--out_dir")
            else:
                files.put_file(local, place)
            interrupts.check()
        if files.is_remote(run_place):
            files.write_bytes(run_place, run_file.run_bytes(run_info))
        else:
            self._run_tmp = files.hidden_path(run_place, tag=self.tag)
            files.write_bytes(self._run_tmp, run_file.run_bytes(run_info))  # all written: `recover`
            moves = [(local, Path(p)) for local, p in self.staged.items() if local not in remote]
            with interrupts.critical():
                _refuse_to_replace(self.args, self.places)
                _put_in_place(self.tag, moves, self._run_tmp, Path(run_place))
        self._committed = True
        for folder, before in self.logs.items():  # the replaced run's events
            for name in before or ():
                files.remove(files.join(folder, name))
        return self.final(run_place)

    def final(self, place: str) -> Path | str:
        """`place` as a result gives it: a `Path` when local, the URL when remote."""
        return place if files.is_remote(place) else Path(place)

    def remove(self) -> None:
        """Removes what the run wrote (it did not finish; nothing once it has)."""
        if self._committed:
            return
        for path in [*self.staged, self._run_tmp, *self.paths]:
            if path is not None:
                files.remove(path)
        for folder, before in self.logs.items():
            if before is None:
                files.remove(folder)
            else:
                for name in set(_entries(folder)) - before:
                    files.remove(files.join(folder, name))
        if not files.is_remote(self.out_dir):
            files.remove_made_dirs(self.made, self.out_dir)

    def cleanup(self) -> None:
        """Removes the local staging folder of remote places."""
        if self._spare is not None:
            shutil.rmtree(self._spare, ignore_errors=True)


def _entries(folder: str) -> list[str]:
    """The names in a local or remote folder."""
    return [files.basename(p) for p in files.glob(files.join(folder, "*"))]


def _put_in_place(
    tag: str, moves: list[tuple[Path, Path]], run_tmp: Path, run_file: Path, *, undo: bool = True
) -> None:
    """Renames each staged artifact onto its place, an old one there moved aside first
    (`.<name>.<tag>.old`), then the staged run file onto `run_file`; removes the old ones.

    If a rename fails, the ones done are undone (old artifacts back in place, unless not
    `undo`) and the error raised. A process killed in between leaves the staged run file, from
    which the next run into the folder finishes the job (`recover`).
    """
    done: list[tuple[Path, Path, Path | None]] = []
    try:
        for staged, place in moves:
            if not staged.exists():  # put in place already (`recover` after a kill)
                continue
            old = None
            if os.path.lexists(place):
                old = files.hidden_path(place, "old", tag=tag)
                os.rename(place, old)
            done.append((staged, place, old))
            os.rename(staged, place)
        os.replace(run_tmp, run_file)
    except BaseException:
        for staged, place, old in reversed(done) if undo else ():
            with contextlib.suppress(OSError):  # as much as can be undone
                if not os.path.lexists(staged) and os.path.lexists(place):
                    os.rename(place, staged)
                if old is not None:
                    os.rename(old, place)
        raise
    for _, _, old in done:
        if old is not None:
            files.remove(old)


def recover(out_dir: str | os.PathLike) -> None:
    """Finishes or removes what killed runs left in `out_dir` (their processes are gone).

    A run killed while putting its artifacts in place has left its staged run file, written
    only once every artifact was: its artifacts are put in place (it had finished; an
    earlier run of the same options there is replaced, as it would have been). Every other
    hidden file a killed run left there (and beside its results CSV) is removed.
    """
    out = files.expand(out_dir)
    for left in files.leftovers(out):
        h = formats.run_file_hash(left.name)
        if h is None or left.kind != "tmp":
            continue
        try:
            info = run_file.read_run_bytes(left.path)
            if run_info_problem(info) is not None:
                continue
            csv = info["args"]["results_csv"]
        except (OSError, EOFError, zlib.error, ValueError, RecursionError):
            continue  # not whole: the run had not finished; removed below
        places = [run_file.model_dir_path(out, h), run_file.curve_path(out, h)]
        if csv and not files.is_remote(csv):
            places.append(files.expand(csv))
        moves = [(files.hidden_path(p, tag=left.tag), Path(p)) for p in places]
        with contextlib.suppress(OSError):  # another run into the folder finished it first
            _put_in_place(
                left.tag, moves, left.path, Path(run_file.run_file_path(out, h)), undo=False
            )
        if len(places) == 3:
            files.remove_leftovers(Path(places[2]).parent, [Path(csv).name])
    files.remove_leftovers(out)


def _refuse_to_replace(args: TrainArgs, paths: RunPaths) -> None:
    """Without --overwrite, a finished run of the same options (its run file) or an existing
    --results_csv stops the run before any work.

    Raises:
      RunExistsError: naming the file and the flags that fix it.
    """
    if args.overwrite:
        return
    if files.exists(paths.run_file):
        raise RunExistsError(
            f"--out_dir {paths.out_dir} already holds {files.basename(paths.run_file)}, a run "
            "with these same "
            "options; pass --run_id=<tag> to train another beside it, or --overwrite to "
            "replace it once this run has finished"
        )
    csv = paths.results_csv
    if args.test_mode == "predictions" and files.exists(csv):
        raise RunExistsError(
            f"--results_csv {csv} already exists; pass another --results_csv, or --overwrite "
            "to replace it once this run has finished"
        )


def outputs(args: TrainArgs, paths: RunPaths | None = None) -> list[files.Output]:
    """Every path a run of `args` writes (at `paths`, default `RunPaths.of(args)`), for
    `files.prepare_outputs`."""
    paths = paths or RunPaths.of(args)
    places = [
        files.Output(paths.model_dir, "--out_dir", artifact=True),
        files.Output(paths.run_file, "--out_dir", artifact=True),
        files.Output(paths.curve, "--out_dir", run=paths.hash),
    ]
    if args.test_mode == "predictions":
        places.append(files.Output(paths.results_csv, "--results_csv", run=paths.hash))
    if paths.tensorboard:
        places.append(files.Output(paths.tensorboard, "--tensorboard"))
    if args.cache_dir:
        cache = files.expand(args.cache_dir)  # one that cannot be written: a warning (README)
        places.append(files.Output(cache, "--cache_dir", adds_to=True, best_effort=True))
    return places


@contextlib.contextmanager
def writing_into(
    args: TrainArgs, inputs: Sequence[files.Input] = (), paths: RunPaths | None = None
) -> Iterator[Artifacts]:
    """Prepares a run's artifacts, before any work; on any failure or Ctrl-C removes what the
    block wrote, leaving whatever was there before as it was.

    First finishes or removes what killed runs left in `--out_dir` (`recover`), checks the
    run's outputs against `inputs` and each other (`files.prepare_outputs`), and refuses to
    replace a finished run of the same options or an existing `--results_csv` without
    `--overwrite`; then creates `--out_dir` (a remote one needs no creating).

    Args:
      args: the run's options, resolved (`TrainArgs.resolved`: `results_csv` named).
      inputs: what the run reads: data split folders, member runs, a models.py.
      paths: `RunPaths.of(args)`, if the caller has it already.

    Raises:
      WriteError: `--out_dir` is a file, or cannot be created or written (`files.check_folder`).
      files.OutputError: an output clashes with an input.
      RunExistsError: a finished run would be replaced without `--overwrite`.
    """
    paths = paths or RunPaths.of(args)
    target = paths.out_dir
    files.check_folder(target, flag="--out_dir")
    recover(target)
    files.prepare_outputs(outputs(args, paths), inputs)
    _refuse_to_replace(args, paths)
    artifacts = Artifacts(args, paths)
    try:
        if not files.is_remote(target):
            artifacts.made = files.make_dirs(target, flag="--out_dir")
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
    stats: data.FeatureStats,
    *,
    final: FinalScores,
    curve: dict[str, list],
    extras: dict[str, Any],
    artifacts: Artifacts,
) -> TrainResult:
    """Writes upstream's artifacts (model dir first, run file last) from what the run computed;
    scores nothing itself.

    Args:
      args: resolved options (they name and hash the artifacts, at `artifacts.places`).
      model: the model to save, with its final weights.
      stats: the feature statistics it was trained with (stored in the run file).
      final: its final validation errors, kept-default choice and test ranking or errors
        (`scoring.final_scores`).
      curve: upstream's `train_curve` (empty lists for an untrained model: no PNG then).
      extras: ours, stored under the run file's `tpu_tiles` key.
      artifacts: from `writing_into(args)`.
    """
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
    )
    interrupts.check()
    save_model(model, artifacts.stage(paths.model_dir))
    interrupts.check()  # a Ctrl-C during the save stops here, before anything is in place
    if curve["epoch"]:
        _plot_curve(curve, extras, artifacts.stage(paths.curve))
    interrupts.check()
    run_file = artifacts.commit(run_info)
    model_dir = artifacts.final(paths.model_dir)
    results_csv = artifacts.final(results_csv) if results_csv else None
    print(
        f"wrote {model_dir}\nwrote {run_file}" + (f"\nwrote {results_csv}" if results_csv else "")
    )
    margin = f"config 0's margin {val.margin:.4g}" if val.margin else "no margin for config 0"
    keep = "config 0 kept in the top 5" if val.chosen else "config 0 not kept in the top 5"
    print(
        f"validation top-k error: {_rounded(val_errors)}; ranked by its rule ({margin}, {keep}; "
        f"the margin cross-fitted): {_rounded(val.rule or val.kept)}"
    )
    return TrainResult(args, model_dir, run_file, results_csv, val_errors, model)


def _rounded(errors: Mapping[int, float]) -> str:
    """Top-k errors as the closing line prints them: JSON, 4 decimals."""
    return json.dumps({str(k): round(v, 4) for k, v in errors.items()})
