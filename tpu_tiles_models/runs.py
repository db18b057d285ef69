"""`TrainedRun`: the one way to open a trained model, ours or upstream's.

A trained run is a `model_<h>/` SavedModel and the `run_<h>.jsonz` beside it. Opening one
checks that the two belong together, reads the arguments, history and (our trainer's) feature
statistics, and rebuilds the model by the course procedure: a fresh instance of the class named
in the run file, one `forward` to create its variables, then a pairwise in-order copy of the
saved trainable variables. `predict`, `evaluate`, `bundle` and `ensemble` all go through here.
A run may be remote (`gs://.../model_<h>`): it is read in place through tf.io.gfile.
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

from tpu_tiles_models import data, export, files, registry, run_file, scoring
from tpu_tiles_models.errors import FlagError
from tpu_tiles_models.train_args import TrainArgs


@dataclasses.dataclass
class TrainedRun:
    """A model directory, its run file's content, and the models.py to rebuild it from.

    Build with `TrainedRun.open`. `info` is the whole run file: upstream's `args`,
    `train_curve`, `final_error`, `test_predictions`, and our extras under `tpu_tiles`.
    `model_dir` and `run_file` are strings (URLs) for a remote run.
    """

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
        """Opens `model_dir` and its run file; nothing heavy is loaded yet.

        Args:
          model_dir: a `model_<hash>` directory.
          models_path: the models.py (or upstream checkout) holding its class; default ours.
          models_flag: the flag that chose `models_path`, named in messages (None: a file
            the user did not name, such as a hand-in's own models.py).

        Raises:
          ExportError: no such directory, no SavedModel in it (or an empty or corrupt
            saved_model.pb), or a missing, corrupt or foreign run file; each in one line naming
            the path and the fix.
        """
        path = files.canonical(model_dir, what="the model directory")
        path = path if files.is_remote(path) else Path(path)
        if not files.isdir(path):
            raise export.ExportError(
                f"{path}: no such model directory; give the model_<hash> folder training wrote"
            )
        export.require_saved_model(path)
        export.require_variables(path)
        info = export.read_run(path)
        where = Path(os.path.expanduser(os.fspath(models_path))) if models_path else None
        return cls(path, export.run_file_for(path), info, where, models_flag)

    # -- what the run file says ----------------------------------------------------------

    @property
    def args(self) -> dict[str, Any]:
        """Upstream's 15 argument fields, as stored."""
        return self.info["args"]

    @property
    def extras(self) -> dict[str, Any]:
        """Our trainer's extras (`tpu_tiles` key); empty for upstream's runs."""
        return self.info.get(export.EXTRAS_KEY) or {}

    @property
    def train_args(self) -> TrainArgs:
        """All training options: ours when stored, else upstream's fields over our defaults."""
        stored = self.extras.get("train_args")
        try:
            return TrainArgs.from_dict(stored if stored else self.args)
        except FlagError as e:
            raise export.ExportError(
                f"{self.run_file}: its training options do not read ({e})"
            ) from None

    @functools.cached_property
    def stats(self) -> data.FeatureStats | None:
        """The feature statistics it was trained with (our trainer stores them), else None."""
        stored = self.extras.get("feature_stats")
        try:
            return data.FeatureStats.from_json(stored) if stored else None
        except data.DataError as e:
            raise export.ExportError(
                f"{self.run_file}: {e}; copy it again from the training --out_dir, or train again"
            ) from None

    @property
    def val_errors(self) -> dict[str, float]:
        """Validation top-k errors written at training (`{"1": .., "5": .., "10": ..}`)."""
        return self.info.get("final_error", {}).get("val") or {}

    @property
    def keep_default(self) -> bool | None:
        """Whether its validation chose to keep config 0 in the top 5 (`scoring.KeepDefault`);
        None when the run file does not say (upstream's runs, older ones of ours)."""
        record = self.extras.get(export.KEEP_DEFAULT_KEY)
        return bool(record["chosen"]) if record else None

    def keeps_default_in(self, model: tf.keras.Model) -> bool:
        """Whether `model` (built from this run) ranks with config 0 kept in the top 5: its own
        rule (`scoring.rule_of`); for a model without one, the run file's `keep_default`
        (runs of ours from before models carried it ranked their test split by it)."""
        own = scoring.rule_of(model)
        return bool(self.keep_default) if own is None else own

    @property
    def stored_kwargs(self) -> dict[str, Any]:
        """Its `model_kwargs_json` as stored in upstream's args: what a grader builds with."""
        return registry.parse_model_kwargs(self.args["model_kwargs_json"])

    @property
    def model_kwargs(self) -> dict[str, Any]:
        """The keywords its model was built with: as our trainer recorded them
        (`run_file.MODEL_KWARGS_KEY`); for a run of ours written before they were recorded, the
        stored ones over the class defaults of that time (`registry.earlier_kwargs`); for
        upstream's runs, the stored ones (its trainer builds with nothing else). Keywords
        added to our classes since a run of ours was written keep their earlier values
        (`registry.without_added`)."""
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
        """`tf.keras.models.load_model` of the directory, as the course script calls it."""
        return export.load_saved_model(self.model_dir)

    @functools.cached_property
    def saved_values(self) -> list | None:
        """The saved trainable (and other) variables in order, from the checkpoint alone
        (`export.saved_variables`); None when only `saved_model` can list them."""
        return export.saved_variables(self.model_dir)

    def copy_into(self, model: tf.keras.Model) -> None:
        """The course's pairwise in-order copy of the saved variables into `model` (built).

        Read from the checkpoint when its count and shapes fit (the same values, without
        loading the SavedModel); otherwise from `saved_model`, which says what differs.
        """
        if not export.copy_saved_variables(model, self.saved_values):
            export.copy_variables(model, self.saved_model, origin=str(self.model_dir))

    def dataset(
        self,
        data_root: str | os.PathLike,
        *,
        split: str = "test",
        toy_data: bool = False,
        cache_dir: str | None = None,
        progress: bool = True,
    ) -> data.Dataset:
        """`split` of `data_root` under the statistics the model was trained with.

        Our runs store them, so only `split` is read. For upstream's they are refitted as its
        training did: every split, train kernels with at least `--configs` configs, the first
        100 files of each with `toy_data`.
        """
        root = files.expand(data_root)
        stats = self.stats
        if stats is not None:
            return data.load_dataset(
                root, splits=(split,), stats=stats, cache_dir=cache_dir, progress=progress
            )
        return data.load_dataset(
            root,
            min_train_configs=self.args["configs"],
            toy_data=toy_data,
            cache_dir=cache_dir,
            progress=progress,
        )

    def build(
        self, sample: data.Split, stats: data.FeatureStats, *, as_stored: bool = False
    ) -> tf.keras.Model:
        """The course procedure: fresh class, one `forward` on kernel 0, in-order copy.

        Built with `model_kwargs`, or with `as_stored` the args' `model_kwargs_json` alone, as
        a grader's copy of the course script builds it (`check`).

        Raises:
          ExportError: variable count differs; ShapeMismatch: a shape differs.
        """
        args = self.args
        kwargs = self.stored_kwargs if as_stored else self.model_kwargs
        with self._only_saved_sizes(kwargs):
            model = registry.build_model(
                args["model"],
                args["configs"],
                stats.num_ops,
                json.dumps(kwargs),
                self.module,
                source=f"the model_kwargs_json of {self.run_file}",
            )
            graph = data.kernel_graph(sample, 0, stats)
            model.forward(graph, sample.num_configs(0))
        self.copy_into(model)
        return model

    @contextlib.contextmanager
    def _only_saved_sizes(self, kwargs: dict[str, Any]) -> Iterator[None]:
        """Within it, a variable larger than every saved one, or more trainable variables than
        the saved model holds, fail as they are declared, before memory is taken: a run file
        whose keywords do not describe its model (`hidden_dim` 10^7 beside a model saved 8
        wide) fails in one line, not in minutes of allocation and then out of memory.

        Raises:
          ShapeMismatch: naming the variable, the largest saved shape and the run file.
        """
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
            raise export.ShapeMismatch(
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
        """The rebuilt model and `split` under its statistics.

        When refitted statistics give other widths than the saved model, the `--toy_data`
        subset's statistics are tried, since training on it is the usual cause.
        """
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
            except export.ShapeMismatch as e:  # other causes are not about the data
                if self.stats is not None:
                    raise
                errors.append(str(e))
        raise export.ExportError(
            f"{errors[0]}; retrying with the --toy_data subset's statistics failed too, so the "
            f"model was trained on other data than {data_root}"
        )
