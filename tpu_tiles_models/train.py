"""The trainer, `train(TrainArgs) -> TrainResult`: upstream's flags and artifacts (written by
`export`); inside, one traced step, a cosine learning rate, and the weights kept by
Kaggle-form validation score rather than sampled OPA (docs/training.md).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from types import ModuleType
from typing import Any, Callable

import numpy as np
import tensorflow as tf
import tqdm

from tpu_tiles_models import (
    data,
    export,
    files,
    formats,
    interrupts,
    margin,
    ranking,
    registry,
    run_file,
    safe,
    scoring,
)
from tpu_tiles_models.errors import FlagError, UserError
from tpu_tiles_models.losses import CombinedLoss, parse_losses
from tpu_tiles_models.train_args import TrainArgs


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
            # Its slots now: a tf.function whose first call makes variables is traced twice.
            self.optimizer.build(model.trainable_variables)
        self.loss = CombinedLoss(args.losses, reduction=tf.keras.losses.Reduction.NONE)
        self.opa = ranking.OrderedPairAccuracy()
        self.mean_loss = tf.keras.metrics.Mean()
        self._traced: dict[bool, Callable] = {}

    def _train_step(self, graph, labels):
        """One replica's step; gradients are summed over replicas."""
        with tf.GradientTape() as tape:
            scores = self.model(graph, training=True)
            loss = tf.reduce_mean(self.loss(labels, scores))
            loss += tf.add_n(self.model.losses) if self.model.losses else 0.0
            scaled = loss / self.strategy.num_replicas_in_sync
        grads = tape.gradient(scaled, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        self.mean_loss.update_state(loss)
        self.opa.update_state(labels, scores)

    def _eval_step(self, graph, labels):
        scores = self.model(graph, training=False)
        self.mean_loss.update_state(tf.reduce_mean(self.loss(labels, scores)))
        self.opa.update_state(labels, scores)

    def run(
        self, batches: tf.data.Dataset, *, train: bool, progress: bool, desc: str, total: int | None
    ) -> tuple[float, float]:
        """One pass over `batches`; returns (mean loss, OPA). The traced step pulls its batch
        itself: handing it a GraphTensor built in Python costs ~30x the step on small batches.
        """
        if train not in self._traced:
            step = self._train_step if train else self._eval_step

            def traced(iterator, step=step):
                self.strategy.run(step, args=next(iterator))

            self._traced[train] = tf.function(traced)
        self.opa.reset_state()
        self.mean_loss.reset_state()
        iterator = iter(batches)
        with tqdm.tqdm(total=total, desc=desc, disable=not progress, leave=False) as bar:
            while True:
                try:
                    self._traced[train](iterator)
                except (StopIteration, tf.errors.OutOfRangeError):
                    break
                bar.update()
                interrupts.check()
        return float(self.mean_loss.result()), float(self.opa.result())


def _val_score(
    model, split, stats, sample: scoring.KernelSample, progress, scorer
) -> tuple[float, margin.KeepDefault]:
    """On `sample`'s valid kernels: the model's own Kaggle-form score and the errors both ways
    (`margin.KeepDefault`)."""
    scored = scoring.score_split(
        model,
        split,
        stats,
        kernels=sample.indices,
        max_configs=sample.max_configs,
        scorer=scorer,
        progress=progress,
        desc="valid",
        reuse=sample.is_subset,  # the same sample every epoch: prepared once
        who="the model in training",
        fix=DIVERGED_FIX,
    )
    measured = margin.KeepDefault.measure(
        scoring.pairs(scored), fit_margin=margin.margin_of(model) is not None
    )
    return 1.0 - measured.errors[5], measured


def _epoch_sample(args: TrainArgs, valid: data.Split) -> scoring.KernelSample:
    """The valid kernels scored each epoch: upstream's `--validate_batches` first ones, else
    every one, on at most `--score_configs` configs (all where none has more)."""
    if args.validate_batches > 0:
        count = min(args.validate_batches * args.batch, len(valid))
        return scoring.KernelSample(tuple(range(count)))
    counts = valid.config_counts()
    capped = 0 < args.score_configs < (counts.max() if len(counts) else 0)
    return scoring.KernelSample(None, args.score_configs if capped else None)


class _Candidates:
    """The weights of the epochs with the best keys so far (at most `size`, best first)."""

    def __init__(self, size: int):
        self.size = size
        self.kept: list[tuple[float, int, list[np.ndarray]]] = []  # (key, epoch, weights)

    def offer(self, key: float, epoch: int, model: tf.keras.Model) -> None:
        if np.isnan(key) or (len(self.kept) == self.size and key <= self.kept[-1][0]):
            return
        self.kept.append((key, epoch, [v.numpy() for v in model.trainable_variables]))
        self.kept.sort(key=lambda c: -c[0])  # stable: an earlier epoch wins a tie
        del self.kept[self.size :]


def _choose(
    candidates: _Candidates, model, dataset: data.Dataset, progress: bool, scorer
) -> tuple[int, list[np.ndarray], margin.KeepDefault, dict[int, float]]:
    """Scores each candidate on all of valid; returns the best one's (epoch, weights, errors
    both ways) and each candidate's score by epoch."""
    results = []
    for _, epoch, weights in candidates.kept:
        _assign(model, weights)
        key, measured = _val_score(
            model, dataset.valid, dataset.stats, scoring.ALL_KERNELS, progress, scorer
        )
        results.append((key, epoch, weights, measured))
    _, epoch, weights, measured = max(results, key=lambda r: r[0])  # the first of equals
    return epoch, weights, measured, {e: key for key, e, _, _ in results}


def _assign(model: tf.keras.Model, weights: list[np.ndarray]) -> None:
    for v, value in zip(model.trainable_variables, weights):
        v.assign(value)


def _strategy(name: str) -> tf.distribute.Strategy:
    """The `--strategy`; multi-worker reads the cluster and this task from `TF_CONFIG`."""
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "multiworker":
        _check_tf_config(os.environ.get("TF_CONFIG", ""))
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    else:
        strategy = tf.distribute.MirroredStrategy()
    # Only full steps (`_datasets_and_loop`): a GraphTensor cannot be padded with empty values.
    strategy.extended.experimental_enable_get_next_as_optional = False
    return strategy


_TF_CONFIG_EXAMPLE = (
    '{"cluster": {"worker": ["host1:12345", "host2:12345"]}, "task": {"type": "worker", '
    '"index": 0}}'
)


def _check_tf_config(text: str) -> None:
    """Refuses a `TF_CONFIG` that `--strategy=multiworker` cannot use, in one line."""
    fix = f"set it on every worker, e.g. TF_CONFIG='{_TF_CONFIG_EXAMPLE}' (see docs/multi_gpu.md)"
    if not text.strip():
        raise FlagError(
            "--strategy=multiworker needs TF_CONFIG (the cluster's workers and this task's "
            f"index) in the environment of every worker; {fix}"
        )
    try:
        config = json.loads(text)
    except ValueError as e:
        raise FlagError(f"TF_CONFIG is not valid JSON ({e}); {fix}") from None
    cluster = config.get("cluster") if isinstance(config, dict) else None
    task = config.get("task") if isinstance(config, dict) else None
    if not (isinstance(cluster, dict) and cluster and isinstance(task, dict)):
        raise FlagError(f"TF_CONFIG needs a 'cluster' and this worker's 'task'; {fix}")
    kind, index = task.get("type"), task.get("index")
    hosts = cluster.get(kind) if isinstance(kind, str) else None
    if not (isinstance(hosts, list) and isinstance(index, int) and 0 <= index < len(hosts)):
        jobs = ", ".join(
            f"{k} ({len(v) if isinstance(v, list) else v!r})" for k, v in cluster.items()
        )
        raise FlagError(
            f"TF_CONFIG's task {json.dumps(task)} is not one of its cluster's {jobs}; {fix}"
        )


def _num_workers(strategy: tf.distribute.Strategy) -> int:
    """Hosts taking part: the chief and workers of TF_CONFIG's cluster, else 1."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return 1
    spec = resolver.cluster_spec().as_dict()
    return max(1, len(spec.get("worker", [])) + len(spec.get("chief", [])))


def _is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the artifacts (not on non-chief workers)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


def _check_model_size(args: TrainArgs, module: ModuleType) -> None:
    """Builds a `--model_kwargs_json` model in a `tf.Graph` (which allocates nothing) on a
    made-up kernel of full feature widths, so a size too big fails before any data is read."""
    if not registry.parse_model_kwargs(args.model_kwargs_json):
        return
    rng = np.random.default_rng(0)
    nodes, configs = 3, args.configs
    kernel = data.Split(
        name="train",
        tile_ids=["size_check"],
        files=["size_check.npz"],
        node_feat=rng.random((nodes, formats.NODE_FEAT_DIM), dtype=np.float32),
        node_opcode=np.arange(nodes, dtype=np.int32),
        edge_index=np.array([[1, 0], [2, 1]], dtype=np.int32),
        config_feat=rng.random((configs, formats.CONFIG_FEAT_DIM), dtype=np.float32),
        config_runtime=np.ones(configs),
        config_runtime_normalizers=np.ones(configs),
        node_offsets=np.array([0, nodes]),
        edge_offsets=np.array([0, 2]),
        config_offsets=np.array([0, configs]),
    )
    stats = data.FeatureStats.fit(kernel)
    try:
        with tf.Graph().as_default(), registry.parameter_limit(args.model, args.model_kwargs_json):
            model = registry.build_model(
                args.model, args.configs, formats.MAX_OPCODE + 1, args.model_kwargs_json, module
            )
            model.forward(data.kernel_graph(kernel, 0, stats), configs)
    except UserError:
        raise
    except Exception:  # a models.py that builds only eagerly: the real build will tell
        return


def train(args: TrainArgs) -> export.TrainResult:
    """Trains, validates, ranks the test split and writes upstream's artifacts.

    Raises (each a one-line `UserError`, leaving nothing behind):
      FlagError: options that do not go together, or an output that clashes with an input.
      DataError: a data file no model can read (named, with the fix).
      RunExistsError: a finished run of these options, without `--overwrite`.
      BusyError: another process writing the same run.
      DivergedError, NonFiniteScores: the loss or the scores are no longer finite.
    """
    args = args.resolved()
    paths = run_file.RunPaths.of(args)  # the run's places and hash, worked out once
    files.require_local(args.models, flag="--models")  # Python imports local files only
    module = registry.load_models_module(args.models or None)
    registry.model_class(args.model, module)  # a bad name or loss fails before any data is read
    parse_losses(args.losses)
    # First TensorFlow work: a multi-worker strategy must exist before any other op.
    strategy = _strategy(args.strategy)
    _check_model_size(args, module)
    if not _is_chief(strategy):
        return _train_as_worker(args, strategy, module)
    inputs = safe.split_inputs(args.data_root) + registry.models_inputs(args.models)
    with export.writing_into(args, inputs, paths) as artifacts:
        return _train(args, strategy, artifacts, module)


def _train_as_worker(
    args: TrainArgs, strategy: tf.distribute.Strategy, module: ModuleType
) -> export.TrainResult:
    """A non-chief worker: trains in step with the chief and saves into a scratch folder, then
    deletes it (TF's multi-worker guide: every worker must save)."""
    with tempfile.TemporaryDirectory(prefix="tpu_tiles_worker_") as scratch:
        csv = str(run_file.results_csv_path(scratch, "worker"))
        mine = args.replace(out_dir=scratch, results_csv=csv, tensorboard="")
        with export.writing_into(mine) as artifacts:
            return _train(mine, strategy, artifacts, module)


def _train(
    args: TrainArgs,
    strategy: tf.distribute.Strategy,
    artifacts: export.Artifacts,
    module: ModuleType,
) -> export.TrainResult:
    progress = not args.no_progress
    tf.keras.utils.set_random_seed(args.seed)
    dataset = data.load_dataset(
        files.expand(args.data_root),
        min_train_configs=args.configs,
        cache_dir=files.expand(args.cache_dir) if args.cache_dir else None,
        toy_data=args.toy_data,
        skip_bad=args.skip_bad,
        skip_hint="train with --skip_bad",  # what a bad file's message offers
        progress=progress,
    )
    interrupts.check()
    # `tile_geometry: true` built with this data's column map, as `tpu-tiles columns` prints it.
    kwargs = registry.with_column_map(
        args.model,
        registry.parse_model_kwargs(args.model_kwargs_json),
        lambda: registry.column_map(dataset.stats, dataset.train, module),
    )
    with strategy.scope(), registry.parameter_limit(args.model, args.model_kwargs_json):
        model = registry.build_model(
            args.model, args.configs, dataset.num_ops, json.dumps(kwargs), module
        )
        # All variables from one eager forward, as the course script builds them.
        model.forward(
            data.kernel_graph(dataset.train, 0, dataset.stats), dataset.train.num_configs(0)
        )
    export.check_space(artifacts, model)  # before the training it would waste
    loop, train_batches, valid_batches, steps = _datasets_and_loop(args, dataset, model, strategy)
    sample = _epoch_sample(args, dataset.valid)
    # The best few epochs by sample score are rescored on all of valid; by OPA, as upstream.
    rescore = sample.is_subset and args.select_by != "opa"
    candidates = _Candidates(args.score_candidates if rescore else 1)
    scorer = scoring.KernelScorer(model)
    # tf.summary writes a remote folder itself.
    writer = (
        tf.summary.create_file_writer(artifacts.log_into(artifacts.places.tensorboard))
        if args.tensorboard
        else None
    )

    curve: dict[str, list] = dict(epoch=[], train_loss=[], train_opa=[], val_loss=[], val_opa=[])
    # Wall and CPU seconds (all threads): on a shared machine only the CPU seconds compare.
    extras: dict[str, Any] = dict(val_score=[], epoch_seconds=[], epoch_cpu_seconds=[])
    if sample.is_subset:
        extras["val_score_kernels"] = len(sample.indices or dataset.valid.tile_ids)
        extras["val_score_configs"] = sample.max_configs
    best_key, best_epoch, best_val = -np.inf, -1, None
    for epoch in range(args.epochs):
        start, cpu_start = time.perf_counter(), time.process_time()
        train_loss, train_opa = loop.run(
            train_batches, train=True, progress=progress, desc=f"epoch {epoch}", total=steps
        )
        if not np.isfinite(train_loss):
            raise DivergedError(
                f"training loss is {train_loss} at epoch {epoch}: the model diverged and its "
                f"weights are lost; {DIVERGED_FIX}"
            )
        val_loss, val_opa = loop.run(
            valid_batches, train=False, progress=progress, desc="valid", total=None
        )
        score, measured = _val_score(model, dataset.valid, dataset.stats, sample, progress, scorer)
        seconds = time.perf_counter() - start
        row = (epoch, train_loss, train_opa, val_loss, val_opa)
        for key, value in zip(curve, row):
            curve[key].append(value)
        extras["val_score"].append(score)
        extras["epoch_seconds"].append(seconds)
        extras["epoch_cpu_seconds"].append(time.process_time() - cpu_start)
        if writer is not None:
            with writer.as_default(step=epoch):
                for name, value in dict(zip(curve, row), val_score=score).items():
                    if name != "epoch":
                        tf.summary.scalar(name, value)
            writer.flush()
        key = val_opa if args.select_by == "opa" else score
        candidates.offer(key, epoch, model)
        improved = key > best_key
        if improved:
            best_key, best_epoch = key, epoch
            best_val = None if sample.is_subset else measured  # all of valid, or not
        print(
            f"epoch {epoch:3d}  loss {train_loss:.4f}  opa {train_opa:.3f}  val_loss "
            f"{val_loss:.4f}  val_opa {val_opa:.3f}  val_score {score:.4f}  {seconds:.1f}s"
            + ("  *best" if improved else ""),
            flush=True,
        )
        if args.early_stop > 0 and epoch - best_epoch >= args.early_stop:
            print(f"no gain for {args.early_stop} epochs since epoch {best_epoch}; stopping")
            break
    if rescore and candidates.kept:
        best_epoch, weights, best_val, full = _choose(candidates, model, dataset, progress, scorer)
        extras["candidate_scores"] = {str(e): s for e, s in full.items()}
        print(
            f"kept epoch {best_epoch}: best on every config of "
            + ", ".join(f"epoch {e} ({s:.4f})" for e, s in full.items())
        )
        _assign(model, weights)
    elif candidates.kept:  # none: every epoch's score was NaN; keep the last weights
        _assign(model, candidates.kept[0][2])
    extras["best_epoch"] = best_epoch
    extras[run_file.MODEL_KWARGS_KEY] = registry.resolved_kwargs(args.model, kwargs, module)
    final = scoring.final_scores(
        model, dataset, test_mode=args.test_mode, scorer=scorer, val=best_val, progress=progress
    )
    return export.finish(
        args, model, dataset.stats, final=final, curve=curve, extras=extras, artifacts=artifacts
    )


DIVERGED_FIX = "lower --lr or --clip_norm, or check --losses and --model_kwargs_json"


class DivergedError(UserError, FloatingPointError):
    """The training loss is NaN or infinite: the weights are lost (a model that scores NaN
    would rank configs in file order, passing for a real one)."""


def _steps(split: data.Split, args: TrainArgs, workers: int, local_replicas: int) -> int:
    """Steps one pass takes when each worker reads its share of the usable kernels."""
    usable = int((split.config_counts() >= args.configs).sum())
    return (usable // workers) // (args.batch * local_replicas)


def _datasets_and_loop(args: TrainArgs, dataset: data.Dataset, model, strategy):
    """(loop, train batches, valid batches, steps per epoch). Each replica takes its own
    batches, each worker its own shard of the kernels, and every worker runs the same number
    of steps (one that ran out first would leave the others waiting in an all-reduce)."""
    replicas = strategy.num_replicas_in_sync
    workers = _num_workers(strategy)
    local = max(replicas // workers, 1)
    steps = _steps(dataset.train, args, workers, local)
    valid_steps = _steps(dataset.valid, args, workers, local)
    if args.validate_batches > 0:
        valid_steps = min(valid_steps, args.validate_batches)

    def batches(split: data.Split, seed: int, shuffle: bool, count: int):
        def make(ctx: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
            return data.training_batches(
                split,
                dataset.stats,
                num_configs=args.configs,
                batch_size=args.batch,
                seed=seed,
                shuffle=shuffle,
                shard=(ctx.input_pipeline_id, ctx.num_input_pipelines) if ctx else (0, 1),
                # Only a model that reads position 0 as the default says so (`_pick_configs`).
                default_first=getattr(model, "default_first", False),
            ).take(count * local)

        return make() if replicas == 1 else strategy.distribute_datasets_from_function(make)

    train_batches = batches(dataset.train, args.seed, True, steps)
    valid_batches = batches(dataset.valid, args.seed + 1, False, valid_steps)
    return _Loop(model, args, steps * args.epochs, strategy), train_batches, valid_batches, steps
