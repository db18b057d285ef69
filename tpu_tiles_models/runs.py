"""`TrainedRun`: the one way to open a trained model, ours or upstream's: a `model_<h>/`
SavedModel and the `run_<h>.jsonz` beside it (`run_file`'s), checked to belong together, the
model rebuilt by the course procedure (`TrainedRun.build`). A remote run (`gs://...`) is read
in place through tf.io.gfile.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import tensorflow as tf

from tpu_tiles_models import data, files, formats, margin, registry, run_file
from tpu_tiles_models.errors import FlagError, one_line
from tpu_tiles_models.train_args import TrainArgs


class ShapeMismatch(run_file.ExportError):
    """Saved and rebuilt variables differ in shape: usually other feature widths (data)."""


# The fix for a model folder with a file missing, truncated or corrupt.
_AGAIN = "copy the whole model_<hash> folder again from the training --out_dir"


def require_saved_model(model_dir: str | Path) -> None:
    """`ExportError` unless `model_dir` has a `saved_model.pb` that parses as a SavedModel with
    a graph in it (nothing else reads it before the weights are copied; a grader would)."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.protobuf import saved_model_pb2

    pb = files.join(model_dir, formats.SAVED_MODEL_FILE)
    if not files.isfile(pb):
        raise run_file.ExportError(
            f"{model_dir}: no {formats.SAVED_MODEL_FILE} in it; give the model_<hash> folder "
            "training wrote"
        )
    saved = saved_model_pb2.SavedModel()
    try:
        content = files.read_bytes(pb)
        saved.ParseFromString(content)
    except (OSError, DecodeError) as err:
        raise run_file.ExportError(
            f"{pb}: not a readable SavedModel ({one_line(err, 120)}); {_AGAIN}"
        ) from None
    if not (saved.meta_graphs and saved.meta_graphs[0].meta_info_def.tags):
        what = "empty" if not content else "not a SavedModel (no graph in it)"
        raise run_file.ExportError(f"{pb}: {what}; {_AGAIN}")


def require_variables(model_dir: str | Path) -> str:
    """The checkpoint prefix of `model_dir`'s variables; `ExportError` without its index."""
    prefix = files.join(model_dir, *formats.VARIABLES_PREFIX)
    if not files.isfile(prefix + ".index"):
        raise run_file.ExportError(
            f"{model_dir}: no {'/'.join(formats.VARIABLES_PREFIX)}.index in it, so its weights "
            f"are missing; {_AGAIN}"
        )
    return prefix


def check_variables(model_dir: str | Path) -> dict[str, Any]:
    """Every tensor of `model_dir`'s variables checkpoint by key; `ExportError` when one is
    missing or truncated."""
    prefix = require_variables(model_dir)
    try:
        # Not tf.train.load_checkpoint: it takes a prefix that some file systems (ram://)
        # also call a folder for the latest-checkpoint file it does not have.
        reader = tf.compat.v1.train.NewCheckpointReader(prefix)
        return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    except (OSError, IndexError, ValueError, tf.errors.OpError) as err:
        raise run_file.ExportError(
            f"{model_dir}: its variables are truncated or corrupt ({one_line(err, 160)}); {_AGAIN}"
        ) from None


def saved_variables(model_dir: str | Path) -> list | None:
    """The saved model's variables in the order Keras 2 lists them, from its checkpoint alone:
    a Keras 2 SavedModel keeps `model.variables` (the trainable ones first) as its root's list
    `variables`: its checkpoint's object graph says where each one's value is
    (`variables/<i>/...`, or a shorter path's key for a variable the model also holds by name,
    such as models.py's ranking gate). None when the checkpoint is laid out otherwise: then
    only `load_saved_model` can list them.
    """
    from google.protobuf.message import DecodeError
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    tensors = check_variables(model_dir)
    graph = tensors.get("_CHECKPOINTABLE_OBJECT_GRAPH")  # a TF2 checkpoint's
    if graph is None:
        return None
    proto = trackable_object_graph_pb2.TrackableObjectGraph()
    try:
        proto.ParseFromString(graph.item() if hasattr(graph, "item") else graph)
    except (DecodeError, TypeError, ValueError):
        return None
    root = proto.nodes[0].children if proto.nodes else []
    listed = [c.node_id for c in root if c.local_name == "variables"]
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
    ordered = [keys.get(i) for i in range(len(keys))]
    if not ordered or any(k not in tensors for k in ordered):  # None: keys not 0..n-1
        return None
    return [tensors[k] for k in ordered]


def load_saved_model(model_dir: str | Path) -> tf.keras.Model:
    """`tf.keras.models.load_model` as the course script calls it (loss in a custom scope);
    `ExportError` when its files are missing, truncated or corrupt."""
    from tpu_tiles_models.losses import CombinedLoss

    try:
        with tf.keras.saving.custom_object_scope({"CombinedLoss": CombinedLoss}):
            return tf.keras.models.load_model(str(model_dir), compile=False)
    except (OSError, IndexError, ValueError, KeyError, tf.errors.OpError) as err:
        check_variables(model_dir)  # the likely cause, said precisely
        raise run_file.ExportError(
            f"{model_dir}: not a loadable SavedModel ({one_line(err, 160)}); {_AGAIN}"
        ) from None


def copy_variables(target: tf.keras.Model, source: tf.keras.Model, *, origin: str) -> None:
    """The course script's pairwise in-order copy, with errors that say which and why."""
    tv, sv = target.trainable_variables, source.trainable_variables
    if len(tv) != len(sv):
        raise run_file.ExportError(
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


@dataclasses.dataclass
class TrainedRun:
    """A model directory, its run file's content (`info`), and the models.py to rebuild it
    from. Build with `TrainedRun.open`; `model_dir` and `run_file` are URLs for a remote run."""

    model_dir: Path | str
    run_file: Path | str
    info: dict[str, Any]
    models_path: Path | None = None
    models_flag: str | None = "--models"  # what chose models_path, for messages

    @classmethod
    def open(
        cls,
        model_dir: str | os.PathLike,
        *,
        models_path: str | os.PathLike | None = None,
        models_flag: str | None = "--models",
    ) -> TrainedRun:
        """Opens `model_dir` and its run file, checking both; nothing heavy is loaded yet.
        `models_flag` names `models_path` in messages (None: a file the user did not name)."""
        path = files.canonical(model_dir, what="the model directory")
        path = path if files.is_remote(path) else Path(path)
        if not files.isdir(path):
            raise run_file.ExportError(
                f"{path}: no such model directory; give the model_<hash> folder training wrote"
            )
        require_saved_model(path)
        require_variables(path)
        info = run_file.read_run(path)
        where = Path(os.path.expanduser(os.fspath(models_path))) if models_path else None
        return cls(path, run_file.run_file_for(path), info, where, models_flag)

    # -- what the run file says ----------------------------------------------------------

    @property
    def args(self) -> dict[str, Any]:
        """Upstream's 15 argument fields, as stored."""
        return self.info["args"]

    @property
    def extras(self) -> dict[str, Any]:
        """Our trainer's extras; empty for upstream's runs."""
        return self.info.get(run_file.EXTRAS_KEY) or {}

    @property
    def train_args(self) -> TrainArgs:
        """All training options: ours when stored, else upstream's fields over our defaults."""
        stored = self.extras.get("train_args")
        try:
            return TrainArgs.from_dict(stored if stored else self.args)
        except FlagError as e:
            raise run_file.ExportError(
                f"{self.run_file}: its training options do not read ({e})"
            ) from None

    @functools.cached_property
    def stats(self) -> data.FeatureStats | None:
        """The feature statistics it was trained with (our trainer stores them), else None."""
        stored = self.extras.get("feature_stats")
        try:
            return data.FeatureStats.from_json(stored) if stored else None
        except data.DataError as e:
            raise run_file.ExportError(
                f"{self.run_file}: {e}; copy it again from the training --out_dir, or train again"
            ) from None

    @property
    def val_errors(self) -> dict[str, float]:
        """Validation top-k errors written at training (`{"1": .., "5": .., "10": ..}`)."""
        return self.info.get("final_error", {}).get("val") or {}

    @property
    def keep_default(self) -> bool | None:
        """Whether its validation chose to keep config 0 in the top 5 (`margin.KeepDefault`);
        None when the run file does not say (upstream's runs, older ones of ours)."""
        record = self.extras.get(run_file.KEEP_DEFAULT_KEY)
        return bool(record["chosen"]) if record else None

    def keeps_default_in(self, model: tf.keras.Model) -> bool | None:
        """Whether `model` (built from this run) ranks with config 0 kept in the top 5: its own
        rule (`margin.rule_of`), else the run file's `keep_default` (older runs of ours)."""
        own = margin.rule_of(model)
        return self.keep_default if own is None else own

    @property
    def stored_kwargs(self) -> dict[str, Any]:
        """Its `model_kwargs_json` as stored in upstream's args: what a grader builds with."""
        return registry.parse_model_kwargs(self.args["model_kwargs_json"])

    @property
    def model_kwargs(self) -> dict[str, Any]:
        """The keywords its model was built with: as our trainer recorded them; for older runs
        of ours, the stored ones over the class defaults of that time; for upstream's, the
        stored ones. Keywords added to our classes since keep their earlier values."""
        recorded = self.extras.get(run_file.MODEL_KWARGS_KEY)
        name = self.args["model"]
        if recorded is not None:  # the stored ones are among them (unless edited in memory)
            kwargs = {**recorded, **self.stored_kwargs}
        elif self.extras:
            kwargs = registry.earlier_kwargs(name, self.stored_kwargs)
        else:
            return self.stored_kwargs
        return registry.without_added(name, kwargs, self.module)

    @functools.cached_property
    def module(self) -> ModuleType:
        """The models.py module its class comes from."""
        return registry.load_models_module(self.models_path, flag=self.models_flag)

    def model_class(self) -> type:
        """The class named in the run file (one-line error if `module` lacks it)."""
        return registry.model_class(self.args["model"], self.module)

    # -- loading -------------------------------------------------------------------------

    @functools.cached_property
    def saved_model(self) -> tf.keras.Model:
        return load_saved_model(self.model_dir)

    @functools.cached_property
    def saved_values(self) -> list | None:
        return saved_variables(self.model_dir)

    def copy_into(self, model: tf.keras.Model) -> None:
        """The course's pairwise in-order copy of the saved variables into `model` (built): from
        the checkpoint when count and shapes fit (reviving the SavedModel takes most of a
        second), else from `saved_model`, which says what differs."""
        tv, values = model.trainable_variables, self.saved_values
        if values is None or [tuple(t.shape) for t in tv] != [tuple(v.shape) for v in values]:
            copy_variables(model, self.saved_model, origin=str(self.model_dir))
            return
        for t, v in zip(tv, values):
            t.assign(v)

    def dataset(
        self,
        data_root: str | os.PathLike,
        *,
        split: str = "test",
        toy_data: bool = False,
        cache_dir: str | None = None,
        progress: bool = True,
    ) -> data.Dataset:
        """`split` of `data_root` under the statistics the model was trained with: stored by
        our runs; for upstream's refitted as its training did (every split, train kernels with
        at least `--configs` configs, the first 100 files of each with `toy_data`)."""
        if self.stats is not None:
            how = dict(splits=(split,), stats=self.stats)
        else:
            how = dict(min_train_configs=self.args["configs"], toy_data=toy_data)
        root = files.expand(data_root)
        return data.load_dataset(root, cache_dir=cache_dir, progress=progress, **how)

    def build(
        self, sample: data.Split, stats: data.FeatureStats, *, as_stored: bool = False
    ) -> tf.keras.Model:
        """The course procedure: fresh class, one `forward` on kernel 0, in-order copy; with
        `as_stored`, from the args' `model_kwargs_json` alone, as a grader builds it."""
        name, configs = self.args["model"], self.args["configs"]
        kwargs = self.stored_kwargs if as_stored else self.model_kwargs
        source = f"the model_kwargs_json of {self.run_file}"
        with self._only_saved_sizes(kwargs):
            model = registry.build_model(
                name, configs, stats.num_ops, json.dumps(kwargs), self.module, source=source
            )
            model.forward(data.kernel_graph(sample, 0, stats), sample.num_configs(0))
        self.copy_into(model)
        return model

    @contextlib.contextmanager
    def _only_saved_sizes(self, kwargs: dict[str, Any]) -> Iterator[None]:
        """Within it, a variable larger than every saved one, or more trainable variables than
        saved, fail as they are declared (`ShapeMismatch`): a run file whose keywords do not
        describe its model fails in one line, not in minutes of allocation."""
        saved = self.saved_values
        shapes = [
            tuple(v.shape) for v in (saved if saved is not None else self.saved_model.variables)
        ]
        largest = max(shapes, key=math.prod, default=())
        trainable = 0

        def creator(next_creator, **kw):
            nonlocal trainable
            shape = tf.TensorShape(kw.get("shape"))
            trainable += kw.get("trainable") is True  # as Keras declares its weights
            if shape.is_fully_defined() and shape.num_elements() > math.prod(largest):
                what = f"a variable of shape {shape.as_list()}, larger than any saved"
            elif trainable > len(shapes):
                what = f"more trainable variables than the {len(shapes)} saved"
            else:
                return next_creator(**kw)
            raise ShapeMismatch(
                f"{self.run_file}: its model keywords {json.dumps(kwargs, sort_keys=True)} build "
                f"{self.args['model']} with {what} in {self.model_dir} (largest "
                f"{list(largest)}): the run file or the data's feature widths are not the ones "
                "it was trained with; copy the model_<hash> folder and its run file again from "
                "the training --out_dir"
            )

        with tf.variable_creator_scope(creator):
            yield

    def load(
        self,
        data_root: str | os.PathLike,
        *,
        split: str = "test",
        cache_dir: str | None = None,
        progress: bool = True,
    ) -> tuple[tf.keras.Model, data.Dataset]:
        """The rebuilt model and `split` under its statistics; when refitted ones give other
        widths than the saved model, the `--toy_data` subset's (the usual cause) are tried."""
        self.model_class()  # an unknown class fails before any data is read,
        if self.saved_values is None:  # and so do missing or truncated variables
            _ = self.saved_model
        errors = []
        for toy in (False, True):
            dataset = self.dataset(
                data_root, split=split, toy_data=toy, cache_dir=cache_dir, progress=progress
            )
            try:
                return self.build(getattr(dataset, split), dataset.stats), dataset
            except ShapeMismatch as e:  # other causes are not about the data
                if self.stats is not None:
                    raise
                errors.append(str(e))
        raise run_file.ExportError(
            f"{errors[0]}; retrying with the --toy_data subset's statistics failed too, so the "
            f"model was trained on other data than {data_root}"
        )
