"""The standalone trainer: upstream's flags and artifacts, a faster and better loop inside.

Like `tiles_train.py` it samples `configs` configs from `batch` kernels per step, trains with
`losses` under Adam with `clip_norm`, validates every epoch, keeps the best weights, then
writes `model_<h>/`, `run_<h>.jsonz` and `results_<ms>.csv` into `out_dir`, with `h` computed
from the same 15 fields. Inside, the step is one traced `tf.function`, the learning rate
follows a cosine schedule, and "best" means the best Kaggle-form validation score (1 - top-5
error on all configs of the validation kernels) rather than sampled OPA.

`train(TrainArgs) -> TrainResult` is the API; `main(argv)` parses upstream's flag syntax.
A run that fails or is interrupted removes every artifact it had started. `data_root`,
`cache_dir`, `out_dir`, `results_csv` and `tensorboard` may be remote (`gs://...`, through
tf.io.gfile): artifacts for a remote place are written locally, then copied there at the end,
the run file last.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_ranking as tfr
import tqdm
from absl import flags as absl_flags

import tpu_tiles_models
from tpu_tiles_models import data, export, files, interrupts, kaggle, registry, scoring
from tpu_tiles_models.errors import FlagError
from tpu_tiles_models.losses import CombinedLoss, parse_losses
from tpu_tiles_models.train_args import TrainArgs

UPSTREAM_TOP = 10  # upstream writes this many indices per kernel into results_*.csv


@dataclass
class TrainResult:
    """Where the artifacts went and how good the model is."""

    args: TrainArgs
    model_dir: Path | str  # a string (URL) when remote, like run_file and results_csv
    run_file: Path | str
    results_csv: Path | str | None
    val_errors: dict[int, float]
    model: tf.keras.Model


class _Loop:
    """One model's optimiser, traced steps and running metrics."""

    def __init__(
        self, model: tf.keras.Model, args: TrainArgs, steps: int, strategy: tf.distribute.Strategy
    ):
        self.model, self.strategy = model, strategy
        lr: Any = args.lr
        if args.lr_schedule == "cosine":
            lr = tf.keras.optimizers.schedules.CosineDecay(args.lr, max(steps, 1), alpha=0.05)
        with strategy.scope():
            self.optimizer = tf.keras.optimizers.Adam(lr, clipnorm=args.clip_norm)
            # Its slots now, not in the first step: a tf.function whose first call creates
            # variables is traced twice, and tracing is most of a short run's time.
            self.optimizer.build(model.trainable_variables)
        self.loss = CombinedLoss(args.losses, reduction=tf.keras.losses.Reduction.NONE)
        self.opa = tfr.keras.metrics.OPAMetric()
        self.mean_loss = tf.keras.metrics.Mean()
        self._traced: dict[bool, Callable] = {}

    def _train_step(self, graph, labels):
        """One replica's step on its own batch; gradients are summed over replicas."""
        with tf.GradientTape() as tape:
            scores = self.model(graph, training=True)
            loss = tf.reduce_mean(self.loss(labels, scores))
            loss += tf.add_n(self.model.losses) if self.model.losses else 0.0
            scaled = loss / self.strategy.num_replicas_in_sync
        grads = tape.gradient(scaled, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        self._update_metrics(loss, labels, scores)

    def _eval_step(self, graph, labels):
        scores = self.model(graph, training=False)
        self._update_metrics(tf.reduce_mean(self.loss(labels, scores)), labels, scores)

    def _update_metrics(self, loss, labels, scores):
        self.mean_loss.update_state(loss)
        self.opa.update_state(labels, scores)

    def run(
        self, ds: tf.data.Dataset, *, train: bool, progress: bool, desc: str, total: int | None
    ) -> tuple[float, float]:
        """One pass over `ds`; returns (mean loss, OPA).

        The traced step pulls its batch with `next(iterator)`: handing a GraphTensor built in
        Python to a tf.function costs ~30x more than the step itself on small batches.
        """
        if train not in self._traced:
            step = self._train_step if train else self._eval_step

            def traced(iterator, step=step):
                self.strategy.run(step, args=next(iterator))

            self._traced[train] = tf.function(traced)
        self.opa.reset_state()
        self.mean_loss.reset_state()
        iterator = iter(ds)
        with tqdm.tqdm(total=total, desc=desc, disable=not progress, leave=False) as bar:
            while True:
                try:
                    self._traced[train](iterator)
                except (StopIteration, tf.errors.OutOfRangeError):
                    break
                bar.update()
                interrupts.check()
        return float(self.mean_loss.result()), float(self.opa.result())


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


def _val_score(model, split, stats, limit, progress, scorer) -> tuple[float, dict[int, float]]:
    """Kaggle-form score and top-k errors on all configs of (the first `limit`) valid kernels."""
    scored = scoring.score_split(
        model, split, stats, limit=limit, scorer=scorer, progress=progress, desc="valid"
    )
    errors = scoring.errors(scored)
    return 1.0 - errors[5], errors


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


def _strategy(name: str) -> tf.distribute.Strategy:
    """The `--strategy`; multi-worker reads the cluster and this task from `TF_CONFIG`."""
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "multiworker" and not os.environ.get("TF_CONFIG"):
        raise FlagError(
            "--strategy=multiworker needs TF_CONFIG (the cluster's workers and this "
            "task's index) in the environment of every worker; see README"
        )
    if name == "multiworker":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    else:
        strategy = tf.distribute.MirroredStrategy()
    # Every replica runs the same number of full steps (see `_datasets_and_loop`), so the
    # distributed iterator need not pad a last partial step with empty values, which a
    # GraphTensor cannot have.
    strategy.extended.experimental_enable_get_next_as_optional = False
    return strategy


def _num_workers(strategy: tf.distribute.Strategy) -> int:
    """Hosts taking part: the chief and workers of TF_CONFIG's cluster, else 1."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return 1
    spec = resolver.cluster_spec().as_dict()
    return max(1, len(spec.get("worker", [])) + len(spec.get("chief", [])))


def _is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the artifacts: always, except on non-chief workers."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


def _check_before_data(args: TrainArgs) -> None:
    """Fails on a bad model name, kwargs or loss before any data is read."""
    files.require_local(args.models, flag="--models")  # Python imports local files only
    module = registry.load_models_module(args.models or None)
    registry.model_class(args.model, module)
    registry.parse_model_kwargs(args.model_kwargs_json)
    parse_losses(args.losses)


def train(args: TrainArgs) -> TrainResult:
    """Trains, validates, ranks the test split and writes upstream's artifacts.

    Args:
      args: every option; `results_csv` is filled in with upstream's default if empty.

    Returns:
      The artifacts' paths, the final validation errors and the trained model.

    Raises:
      UserError: bad options or data, in one line; nothing is left behind.
    """
    args = args.resolved()
    _check_before_data(args)
    # First TensorFlow work: a multi-worker strategy must exist before any other op.
    strategy = _strategy(args.strategy)
    if not _is_chief(strategy):
        return _train_as_worker(args, strategy)
    if args.test_mode == "predictions":
        files.check_output_path(files.expand(args.results_csv), flag="--results_csv")
    with writing_into(args.out_dir) as artifacts:
        return _train(args, strategy, artifacts)


def _train_as_worker(args: TrainArgs, strategy: tf.distribute.Strategy) -> TrainResult:
    """A non-chief worker: trains in step with the chief, saves into a scratch folder that it
    then deletes (every worker must save, TF's multi-worker guide says; only the chief's
    artifacts are kept)."""
    with tempfile.TemporaryDirectory(prefix="tpu_tiles_worker_") as scratch:
        csv = os.path.join(scratch, "results.csv")
        mine = args.replace(out_dir=scratch, results_csv=csv, tensorboard="")
        with writing_into(scratch) as artifacts:
            return _train(mine, strategy, artifacts)


def _train(args: TrainArgs, strategy: tf.distribute.Strategy, artifacts: Artifacts) -> TrainResult:
    progress = not args.no_progress
    tf.keras.utils.set_random_seed(args.seed)
    ds = data.load_dataset(
        files.expand(args.data_root),
        min_train_configs=args.configs,
        cache_dir=files.expand(args.cache_dir) if args.cache_dir else None,
        toy_data=args.toy_data,
        skip_bad=args.skip_bad,
        progress=progress,
    )
    interrupts.check()
    module = registry.load_models_module(args.models or None)
    with strategy.scope():
        model = registry.build_model(
            args.model, args.configs, ds.num_ops, args.model_kwargs_json, module
        )
        # All variables from one eager forward, as the course script builds them.
        model.forward(data.kernel_graph(ds.train, 0, ds.stats), ds.train.num_configs(0))
    loop, train_ds, valid_ds, steps = _datasets_and_loop(args, ds, model, strategy)
    score_limit = args.validate_batches * args.batch if args.validate_batches > 0 else None
    scorer = scoring.kernel_scorer(model)
    writer = _tensorboard(args, artifacts)

    curve: dict[str, list] = dict(epoch=[], train_loss=[], train_opa=[], val_loss=[], val_opa=[])
    extras: dict[str, Any] = dict(val_score=[], epoch_seconds=[])
    best, best_key, best_epoch, best_errors = None, -np.inf, -1, None
    for epoch in range(args.epochs):
        start = time.perf_counter()
        train_loss, train_opa = loop.run(
            train_ds, train=True, progress=progress, desc=f"epoch {epoch}", total=steps
        )
        val_loss, val_opa = loop.run(
            valid_ds, train=False, progress=progress, desc="valid", total=None
        )
        score, errors = _val_score(model, ds.valid, ds.stats, score_limit, progress, scorer)
        seconds = time.perf_counter() - start
        row = (epoch, train_loss, train_opa, val_loss, val_opa)
        for key, value in zip(curve, row):
            curve[key].append(value)
        extras["val_score"].append(score)
        extras["epoch_seconds"].append(seconds)
        _log_scalars(writer, epoch, dict(zip(curve, row), val_score=score))
        key = score if args.select_by == "score" else val_opa
        improved = key > best_key
        if improved:
            best_key, best_epoch = key, epoch
            best = [v.numpy() for v in model.trainable_variables]
            best_errors = errors if score_limit is None else None  # all of valid, or not
        print(
            f"epoch {epoch:3d}  loss {train_loss:.4f}  opa {train_opa:.3f}  val_loss "
            f"{val_loss:.4f}  val_opa {val_opa:.3f}  val_score {score:.4f}  {seconds:.1f}s"
            + ("  *best" if improved else ""),
            flush=True,
        )
        if args.early_stop > 0 and epoch - best_epoch >= args.early_stop:
            print(f"no gain for {args.early_stop} epochs since epoch {best_epoch}; stopping")
            break
    if best is not None:  # None: every epoch's score was NaN; keep the last weights
        for v, value in zip(model.trainable_variables, best):
            v.assign(value)
    extras["best_epoch"] = best_epoch
    return finish(
        args,
        model,
        ds,
        curve=curve,
        extras=extras,
        artifacts=artifacts,
        scorer=scorer,
        val_errors=best_errors,
    )


def _steps(split: data.Split, args: TrainArgs, workers: int, local_replicas: int) -> int:
    """Steps one pass takes when each worker reads its share of the usable kernels."""
    usable = int((split.config_counts() >= args.configs).sum())
    return (usable // workers) // (args.batch * local_replicas)


def _datasets_and_loop(args: TrainArgs, ds: data.Dataset, model, strategy):
    """(loop, train batches, valid batches, steps per epoch), distributed when replicated.

    With several replicas each takes its own batches of `--batch` kernels; with several
    workers each reads its own shard of the kernels, and every worker runs the same number
    of steps (a worker that ran out first would leave the others waiting in an all-reduce).
    """
    replicas = strategy.num_replicas_in_sync
    workers = _num_workers(strategy)
    local = max(replicas // workers, 1)
    steps = _steps(ds.train, args, workers, local)
    valid_steps = _steps(ds.valid, args, workers, local)
    if args.validate_batches > 0:
        valid_steps = min(valid_steps, args.validate_batches)

    def batches(split: data.Split, seed: int, shuffle: bool, count: int, shard=(0, 1)):
        return data.training_batches(
            split,
            ds.stats,
            num_configs=args.configs,
            batch_size=args.batch,
            seed=seed,
            shuffle=shuffle,
            shard=shard,
        ).take(count * local)

    if replicas == 1:
        train_ds = batches(ds.train, args.seed, True, steps)
        valid_ds = batches(ds.valid, args.seed + 1, False, valid_steps)
    else:

        def shard(ctx: tf.distribute.InputContext) -> tuple[int, int]:
            return ctx.input_pipeline_id, ctx.num_input_pipelines

        train_ds = strategy.distribute_datasets_from_function(
            lambda ctx: batches(ds.train, args.seed, True, steps, shard(ctx))
        )
        valid_ds = strategy.distribute_datasets_from_function(
            lambda ctx: batches(ds.valid, args.seed + 1, False, valid_steps, shard(ctx))
        )
    loop = _Loop(model, args, steps * args.epochs, strategy)
    return loop, train_ds, valid_ds, steps


def _tensorboard(args: TrainArgs, artifacts: Artifacts):
    """A summary writer under `--tensorboard/<run name>`, or None (tf.summary writes a remote
    folder itself)."""
    if not args.tensorboard:
        return None
    log_dir = files.join(files.expand(args.tensorboard), f"run_{args.hash()}")
    artifacts.paths.append(log_dir)
    return tf.summary.create_file_writer(log_dir)


def _log_scalars(writer, epoch: int, values: dict[str, float]) -> None:
    if writer is None:
        return
    with writer.as_default(step=epoch):
        for name, value in values.items():
            if name != "epoch":
                tf.summary.scalar(name, value)
    writer.flush()


def finish(
    args: TrainArgs,
    model: tf.keras.Model,
    ds: data.Dataset,
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
      ds: `valid` and `test` splits (test may be None) and the statistics.
      curve: upstream's `train_curve` (empty lists for an untrained model: no PNG then).
      extras: ours, stored under the run file's `tpu_tiles` key.
      artifacts: from `writing_into(args.out_dir)`.
      scorer: a traced `scoring.kernel_scorer(model)` to reuse, if any.
      val_errors: the model's top-k errors on every config of every validation kernel, if
        already known (the best epoch's, whose weights these are): not scored again then.
    """
    progress = not args.no_progress
    out_dir = artifacts.out_dir
    if val_errors is None:
        _, val_errors = _val_score(model, ds.valid, ds.stats, None, progress, scorer)
    upstream = args.upstream_args()
    run_info: dict[str, Any] = dict(
        train_curve=curve, final_error=dict(val=val_errors), args=upstream
    )
    results_csv = None
    if ds.test is not None and len(ds.test):
        scored = scoring.score_split(
            model, ds.test, ds.stats, scorer=scorer, progress=progress, desc="test"
        )
        if args.test_mode == "metrics":
            run_info["final_error"]["test"] = scoring.errors(scored)
        else:
            ranks = {s.tile_id: scoring.upstream_top(s.scores, UPSTREAM_TOP) for s in scored}
            run_info["test_predictions"] = ranks
            results_csv = artifacts.place(files.expand(args.results_csv))
            kaggle.write_predictions_csv(results_csv, list(ranks.items()), flag="--results_csv")
    h = args.hash()
    run_info[export.EXTRAS_KEY] = dict(
        extras,
        version=tpu_tiles_models.__version__,
        select_by=args.select_by,
        feature_stats=ds.stats.to_json(),
        toy_data=args.toy_data,
        data_root=args.data_root,
        train_args=args.to_dict(),
    )
    interrupts.check()
    model_dir = export.save_model_dir(model, artifacts.add(out_dir / f"model_{h}"))
    interrupts.check()  # a Ctrl-C during the save stops here, before the run file exists
    if curve["epoch"]:
        _plot_curve(curve, extras, artifacts.add(out_dir / f"train_curve_{h}.png"))
    artifacts.publish(f"run_{h}.jsonz")
    run_file = export.write_run(artifacts.target, upstream, run_info)
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


def _seed_flags(argv: Sequence[str]) -> tuple[list[int], bool, list[str]]:
    """`--seeds=0,1,2` and `--ensemble` (absl syntax); returns them and the other flags."""
    values = absl_flags.FlagValues()
    absl_flags.DEFINE_list("seeds", [], "train one run per seed", flag_values=values)
    absl_flags.DEFINE_boolean(
        "ensemble", False, "then ensemble the seeds' runs", flag_values=values
    )
    try:
        rest = values(["tpu-tiles train", *argv], known_only=True)[1:]
        seeds = [int(s) for s in values.seeds]
    except (absl_flags.Error, ValueError) as e:
        raise FlagError(f"--seeds takes integers, e.g. --seeds=0,1,2 ({e})") from None
    if values.ensemble and len(seeds) < 2:
        raise FlagError("--ensemble needs at least two --seeds, e.g. --seeds=0,1,2 --ensemble")
    return seeds, values.ensemble, rest


def main(argv: Sequence[str] | None = None) -> TrainResult:
    """`tpu-tiles train`: parses upstream's flag syntax and trains.

    With `--seeds=0,1,2` it trains one run per seed, and with `--ensemble` also their
    ensemble (`ensemble.train_seeds`); it returns the last result.
    """
    seeds, ensemble, rest = _seed_flags(list(argv or []))
    args = TrainArgs.from_argv(rest)
    if not seeds:
        return train(args)
    from tpu_tiles_models import ensemble as ensembles  # it builds on this module

    return ensembles.train_seeds(args, seeds, ensemble=ensemble)[-1]
