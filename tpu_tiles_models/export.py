"""A training run's artifacts: where they go, writing them (`finish`), reading the run file.

`tiles_train.py` writes a Keras-2 SavedModel `model_<h>` and a gzip JSON `run_<h>.jsonz`
whose `h` is the md5 of the sorted-key JSON of its 15 argument fields (`train_args.args_hash`;
ours adds our non-default options), and the test predictions `results_<ms>.csv` (names:
`formats`). We write exactly that, and put our own extras under one extra key, `tpu_tiles`,
never touching upstream's. The run file marks a run complete.

Nothing finished is lost (`writing_into`, `finish`): a run first writes every artifact under a
hidden name beside its place, and only once all are written renames them into place, the run
file last. A run that fails or is interrupted removes what it had written and leaves an earlier
run as it was; one killed outright (`kill -9`) leaves hidden files that the next run into the
same folder finishes (if the killed one had written everything) or removes. A finished run of
the same options (same `h`) or an existing `--results_csv` is replaced only with `--overwrite`,
and outputs are checked against the run's inputs (`files.prepare_outputs`) before any work.

The run file's keys, hash and shape check are `run_file`'s. Opening a trained run is
`runs.TrainedRun`'s job; the low-level readers live here, beside the
writers they mirror. Every path may be remote (`gs://...`, see `files`): remote artifacts are
written locally and copied at the end, the run file last (not atomic: a bucket has no rename).

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
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import tpu_tiles_models
from tpu_tiles_models import files, formats, interrupts, kaggle
from tpu_tiles_models.errors import UserError, one_line
from tpu_tiles_models.run_file import (
    EXTRAS_KEY,
    IDENTITY_KEY,
    KEEP_DEFAULT_KEY,
    run_info_hash,
    run_info_problem,
)
from tpu_tiles_models.train_args import TrainArgs

if TYPE_CHECKING:
    import tensorflow as tf

    from tpu_tiles_models import data, scoring

UPSTREAM_TOP = 10  # upstream writes this many indices per kernel into results_*.csv


class ExportError(UserError, RuntimeError):
    """A model directory or run file that cannot be used; the message says why and the fix."""


class ShapeMismatch(ExportError):
    """Saved and rebuilt variables differ in shape: usually other feature widths (data)."""


class RunExistsError(ExportError, FileExistsError):
    """A rerun would replace a finished run (or an existing `--results_csv`) without
    `--overwrite`; refused before any work."""


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


@dataclass(frozen=True)
class RunPaths:
    """Where a run's artifacts go: worked out once from its options (`of`), then read by
    everything that writes, checks or removes them."""

    out_dir: str  # `--out_dir`, `~` expanded (a URL when remote)
    hash: str  # the run's `h` (`TrainArgs.hash`)
    model_dir: str
    run_file: str
    curve: str
    results_csv: str  # `--results_csv`, `~` expanded
    tensorboard: str | None  # the run's folder under `--tensorboard`, if any

    @classmethod
    def of(cls, args: TrainArgs) -> RunPaths:
        """The places of a run of `args` (resolved: `results_csv` named)."""
        out, h = files.expand(args.out_dir), args.hash()
        board = tensorboard_dir(files.expand(args.tensorboard), h) if args.tensorboard else None
        return cls(
            out_dir=out,
            hash=h,
            model_dir=model_dir_path(out, h),
            run_file=run_file_path(out, h),
            curve=curve_path(out, h),
            results_csv=files.expand(args.results_csv),
            tensorboard=board,
        )


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


# -- the run file ----------------------------------------------------------------------------


def _run_bytes(run_info: Mapping) -> bytes:
    return gzip.compress(json.dumps(run_info, allow_nan=False).encode())


def write_run(out_dir: str | Path, run_info: Mapping) -> Path | str:
    """Writes `run_<h>.jsonz` (gzip JSON) atomically, `h` from its content (`run_info_hash`);
    returns its path (a string if remote)."""
    path = run_file_path(out_dir, run_info_hash(run_info))
    files.write_bytes(path, _run_bytes(run_info))
    return path if files.is_remote(path) else Path(path)


def _read_run_bytes(path: str | os.PathLike) -> Any:
    """The run file's JSON content, of any shape (`run_info_problem` checks it). Raises
    OSError, EOFError, zlib.error, ValueError or RecursionError (nesting deeper than Python's
    JSON reader goes) if it is not whole."""
    return json.loads(gzip.decompress(files.read_bytes(path)))


def read_run(model_dir: str | Path) -> dict:
    """Reads the `run_<h>.jsonz` beside `model_dir`, checking that it belongs to it.

    Raises:
      ExportError: missing, truncated or corrupt run file, or one of another model.
    """
    run_file = run_file_for(model_dir)
    if files.isdir(run_file):
        raise ExportError(
            f"{run_file} is a folder, not a run file: copy the run file of "
            f"{files.basename(model_dir)} again from the training --out_dir"
        )
    if not files.isfile(run_file):
        raise ExportError(
            f"{run_file} not found: {files.basename(model_dir)} needs its run file beside it "
            "(tiles_train.py writes both into --out_dir; copy them together)"
        )
    try:
        run_info = _read_run_bytes(run_file)
    except RecursionError:
        reason = "nested deeper than a run file is"
    except (OSError, EOFError, zlib.error, ValueError) as e:
        reason = " ".join(str(e).split()) or type(e).__name__
    else:
        reason = run_info_problem(run_info)
    if reason is None:
        try:
            expected = run_info_hash(run_info)
        except (ValueError, TypeError) as e:  # a value JSON cannot hash
            reason = " ".join(str(e).split()) or type(e).__name__
    if reason is not None:
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


def model_dir_complete(model_dir: str | os.PathLike) -> bool:
    """Whether a SavedModel folder has everything `load_model` reads: `saved_model.pb` and
    the variables' index and every data shard (`variables.data-00000-of-00002`, ...)."""
    pb = files.join(model_dir, formats.SAVED_MODEL_FILE)
    variables = files.join(model_dir, "variables")
    if not files.isfile(pb) or not files.isfile(files.join(variables, "variables.index")):
        return False
    shards = files.glob(files.join(variables, "variables.data-*-of-*"))
    if not shards:
        return False
    total = int(files.basename(shards[0]).rsplit("-of-", 1)[1])
    return len(shards) == total


def completed_run(out_dir: str | os.PathLike, h: str) -> dict | None:
    """The run file of run `h` in `out_dir` if the whole run is there (see `whole_run`)."""
    return whole_run(model_dir_path(files.expand(out_dir), h))


def whole_run(model_dir: str | os.PathLike) -> dict | None:
    """The run file of `model_dir`'s run if the whole run is there, else None: a run file
    that reads and names it, a complete model dir (`model_dir_complete`), and its results CSV
    when it ranked the test split."""
    try:
        info = read_run(model_dir)
    except ExportError:
        return None
    if not model_dir_complete(model_dir):
        return None
    csv = (info.get("args") or {}).get("results_csv")
    if "test_predictions" in info and csv and not files.isfile(files.expand(csv)):
        return None
    return info


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


def require_saved_model(model_dir: str | Path) -> None:
    """Fails unless `model_dir` has a `saved_model.pb` that parses as a SavedModel with a
    graph in it: an empty or garbled one would load nowhere (a grader's `load_model`), yet
    nothing else reads it before the weights are copied.

    Raises:
      ExportError: no such file, or not a SavedModel; naming the file and the fix.
    """
    from google.protobuf.message import DecodeError
    from tensorflow.core.protobuf import saved_model_pb2

    pb = files.join(model_dir, formats.SAVED_MODEL_FILE)
    again = "copy the whole model_<hash> folder again from the training --out_dir"
    if not files.isfile(pb):
        raise ExportError(
            f"{model_dir}: no {formats.SAVED_MODEL_FILE} in it; give the model_<hash> folder "
            "training wrote"
        )
    saved = saved_model_pb2.SavedModel()
    try:
        content = files.read_bytes(pb)
        saved.ParseFromString(content)
    except (OSError, DecodeError) as err:
        raise ExportError(
            f"{pb}: not a readable SavedModel ({one_line(err, 120)}); {again}"
        ) from None
    if not (saved.meta_graphs and saved.meta_graphs[0].meta_info_def.tags):
        what = "empty" if not content else "not a SavedModel (no graph in it)"
        raise ExportError(f"{pb}: {what}; {again}")


def require_variables(model_dir: str | Path) -> str:
    """The checkpoint prefix of `model_dir`'s variables, checking (cheaply) that its index
    file is there.

    Raises:
      ExportError: no `variables/variables.index`: the weights are missing.
    """
    prefix = files.join(model_dir, *formats.VARIABLES_PREFIX)
    if not files.isfile(prefix + ".index"):
        raise ExportError(
            f"{model_dir}: no {'/'.join(formats.VARIABLES_PREFIX)}.index in it, so its weights "
            "are missing; copy the whole model_<hash> folder again from the training --out_dir"
        )
    return prefix


def check_variables(model_dir: str | Path) -> None:
    """Fails unless `model_dir`'s variables are all there and whole: every tensor is read.

    Raises:
      ExportError: no `variables/` index, or a missing or truncated data file.
    """
    _read_variables(model_dir)


def _read_variables(model_dir: str | Path) -> dict[str, Any]:
    """Every tensor of `model_dir`'s variables checkpoint by key (`check_variables`' errors)."""
    import tensorflow as tf

    prefix = require_variables(model_dir)
    try:
        # Not tf.train.load_checkpoint: it takes a prefix that some file systems (ram://)
        # also call a folder for the latest-checkpoint file it does not have.
        reader = tf.compat.v1.train.NewCheckpointReader(prefix)
        return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    except (OSError, IndexError, ValueError, tf.errors.OpError) as err:
        raise ExportError(
            f"{model_dir}: its variables are truncated or corrupt ({one_line(err, 160)}); copy "
            "the whole model_<hash> folder again from the training --out_dir"
        ) from None


def saved_variables(model_dir: str | Path) -> list | None:
    """The saved model's variables in the order Keras 2 lists them, from its checkpoint alone.

    A Keras 2 SavedModel keeps `model.variables` (the trainable ones first, in
    `trainable_variables` order) as its root's list `variables`: its checkpoint's object graph
    says where each one's value is (`variables/<i>/...`, or a shorter path's key for a variable
    the model also holds by name, such as models.py's ranking gate). Every tensor is read, so
    missing or truncated files fail here (`check_variables`). None when the checkpoint is laid
    out otherwise: then only `load_saved_model` can list them.
    """
    tensors = _read_variables(model_dir)
    graph = tensors.get(_OBJECT_GRAPH)
    ordered = _listed_keys(graph) if graph is not None else None
    if ordered is None:  # no object graph to read: the plain `variables/<i>` layout only
        keys = [k for k in tensors if k.startswith("variables/") and k.endswith(_VARIABLE_VALUE)]
        ordered = [f"variables/{i}/{_VARIABLE_VALUE}" for i in range(len(keys))]
        if set(keys) != set(ordered):
            return None
    if not ordered or any(k not in tensors for k in ordered):
        return None
    return [tensors[k] for k in ordered]


_VARIABLE_VALUE = ".ATTRIBUTES/VARIABLE_VALUE"  # a variable's value in a TF2 checkpoint
_OBJECT_GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"  # a TF2 checkpoint's object graph


def _listed_keys(graph: Any) -> list[str] | None:
    """The checkpoint keys of the values of the root's `variables` list, in list order, from
    a serialized object graph; None when it has no such list of variables."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    proto = trackable_object_graph_pb2.TrackableObjectGraph()
    try:
        proto.ParseFromString(graph.item() if hasattr(graph, "item") else graph)
    except (DecodeError, TypeError, ValueError):
        return None
    if not proto.nodes:
        return None
    listed = [c.node_id for c in proto.nodes[0].children if c.local_name == "variables"]
    if len(listed) != 1:
        return None
    keys: dict[int, str] = {}
    for child in proto.nodes[listed[0]].children:
        values = [
            a.checkpoint_key
            for a in proto.nodes[child.node_id].attributes
            if a.name == "VARIABLE_VALUE"
        ]
        if not child.local_name.isdigit() or len(values) != 1:
            return None
        keys[int(child.local_name)] = values[0]
    if sorted(keys) != list(range(len(keys))):
        return None
    return [keys[i] for i in range(len(keys))]


def load_saved_model(model_dir: str | Path) -> tf.keras.Model:
    """`tf.keras.models.load_model` as the course script calls it (loss in a custom scope).

    Keras 2 reads a SavedModel through tf.io.gfile, so a remote directory loads in place.

    Raises:
      ExportError: its files are missing, truncated or corrupt; one line naming the folder.
    """
    import tensorflow as tf

    from tpu_tiles_models.losses import CombinedLoss

    try:
        with tf.keras.saving.custom_object_scope({"CombinedLoss": CombinedLoss}):
            return tf.keras.models.load_model(str(model_dir), compile=False)
    except (OSError, IndexError, ValueError, KeyError, tf.errors.OpError) as err:
        check_variables(model_dir)  # the likely cause, said precisely
        raise ExportError(
            f"{model_dir}: not a loadable SavedModel ({one_line(err, 160)}); copy the whole "
            "model_<hash> folder again from the training --out_dir"
        ) from None


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


def copy_saved_variables(target: tf.keras.Model, values: list | None) -> bool:
    """`copy_variables` from `saved_variables`' values, without reviving the SavedModel (its
    function library takes most of a second to load). False, and nothing copied, when their
    count or a shape differs (or `values` is None): `copy_variables` then says which and why.
    """
    tv = target.trainable_variables
    if values is None or len(values) != len(tv):
        return False
    if any(tuple(t.shape) != tuple(v.shape) for t, v in zip(tv, values)):
        return False
    for t, v in zip(tv, values):
        t.assign(v)
    return True


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
            files.write_bytes(run_place, _run_bytes(run_info))
        else:
            self._run_tmp = files.hidden_path(run_place, tag=self.tag)
            files.write_bytes(self._run_tmp, _run_bytes(run_info))  # all written: `recover`
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
            info = _read_run_bytes(left.path)
            if run_info_problem(info) is not None:
                continue
            csv = info["args"]["results_csv"]
        except (OSError, EOFError, zlib.error, ValueError, RecursionError):
            continue  # not whole: the run had not finished; removed below
        places = [model_dir_path(out, h), curve_path(out, h)]
        if csv and not files.is_remote(csv):
            places.append(files.expand(csv))
        moves = [(files.hidden_path(p, tag=left.tag), Path(p)) for p in places]
        with contextlib.suppress(OSError):  # another run into the folder finished it first
            _put_in_place(left.tag, moves, left.path, Path(run_file_path(out, h)), undo=False)
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


def run_inputs(model_dir: str | os.PathLike, flag: str = "--dir") -> list[files.Input]:
    """A trained run's model dir and run file, as inputs for `files.prepare_outputs`."""
    return [
        files.Input(model_dir, f"model directory of {flag}", folder=True),
        files.Input(run_file_for(model_dir), f"run file of {flag}"),
    ]


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
    final: scoring.FinalScores,
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
    val_errors = val.errors
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
