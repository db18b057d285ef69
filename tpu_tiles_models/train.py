"""The standalone trainer: upstream's flags and artifacts, a faster and better loop inside.

Like `tiles_train.py` it samples `--configs` configs from `--batch` kernels per step, trains
with `--losses` under Adam with `--clip_norm`, validates every epoch, keeps the best weights,
then writes `model_<h>/`, `run_<h>.jsonz` and `results_<ms>.csv` into `--out_dir`, with `h`
computed from the same 15 fields. Inside, the step is one traced `tf.function`, the learning
rate follows a cosine schedule, and "best" means the best Kaggle-form validation score
(1 - top-5 error on all configs of the validation kernels) rather than sampled OPA.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import tensorflow as tf
import tensorflow_ranking as tfr
import tqdm

import tpu_tiles_models
from tpu_tiles_models import data, export, files, kaggle, metrics, predict, registry
from tpu_tiles_models.losses import DEFAULT_LOSSES, CombinedLoss

UPSTREAM_TOP = 10  # upstream writes this many indices per kernel into results_*.csv


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Upstream's flag names and defaults (so its command lines work), then ours."""
    a = parser.add_argument
    a("--model", default="EarlyJoinSAGE", help="class name in models.py (tpu-tiles models)")
    a("--model_kwargs_json", default="{}", help="JSON object of constructor kwargs")
    a("--epochs", type=int, default=100)
    a("--eval_every", type=int, default=5, help="deprecated upstream; kept for the hash")
    a("--early_stop", type=int, default=20, help="stop after this many epochs without gain")
    a("--losses", default=DEFAULT_LOSSES, help='e.g. "ListMLELoss:1,MSE:0.02"')
    a("--lr", type=float, default=1e-3)
    a("--clip_norm", type=float, default=1e-3)
    a("--configs", type=int, default=10, help="configs sampled per kernel per step")
    a("--batch", type=int, default=10, help="kernels per step")
    a("--validate_batches", type=int, default=-1, help=">0: validate on this many batches")
    a("--test_mode", choices=["metrics", "predictions"], default="predictions")
    a("--out_dir", default="~/out/tpugraphs_tiles")
    a("--results_csv", default="", help="default <out_dir>/results_<ms>.csv")
    a("--run_id", default="")
    a("--data_root", default="~/data/tpugraphs/npz/tile/xla")
    a("--cache_dir", default="~/data/tpugraphs/cache/tile")
    a("--toy_data", action="store_true", help="first 100 files of each split")
    a("--skip_bad", action="store_true", help="leave out unreadable npz files, with a warning")
    a(
        "--models",
        default=None,
        help="models.py file or upstream checkout whose swapped-in models.py to use (default ours)",
    )
    # Ours.
    a("--lr_schedule", choices=["cosine", "constant"], default="cosine")
    a(
        "--select_by",
        choices=["score", "opa"],
        default="score",
        help="keep the weights with the best Kaggle-form score (ours) or OPA (upstream)",
    )
    a("--seed", type=int, default=0)
    a(
        "--strategy",
        choices=["default", "mirrored"],
        default="default",
        help="mirrored: tf.distribute.MirroredStrategy over this host's GPUs",
    )
    a("--no_progress", action="store_true", help="no progress bars (logs, CI)")


def upstream_args(flags: argparse.Namespace) -> dict[str, Any]:
    """The `TrainArgs` dict that upstream stores in `run_<h>.jsonz` and hashes."""
    results_csv = flags.results_csv or os.path.join(
        os.path.expanduser(flags.out_dir), f"results_{int(time.time() * 1000)}.csv"
    )
    return dict(
        epochs=flags.epochs, eval_every=flags.eval_every, batch_size=flags.batch,
        configs=flags.configs, early_stop=flags.early_stop, losses=flags.losses,
        learning_rate=flags.lr, clip_norm=flags.clip_norm, model=flags.model,
        model_kwargs_json=flags.model_kwargs_json, test_mode=flags.test_mode,
        out_dir=flags.out_dir, results_csv=results_csv,
        validate_batches=flags.validate_batches, run_id=flags.run_id,
    )  # fmt: skip


@dataclass
class TrainResult:
    """Where the artifacts went and how good the model is."""

    model_dir: Path
    run_file: Path
    results_csv: Path | None
    val_errors: dict[int, float]
    model: tf.keras.Model


class _Loop:
    """One model's optimiser, traced steps and running metrics."""

    def __init__(
        self,
        model: tf.keras.Model,
        flags: argparse.Namespace,
        steps: int,
        strategy: tf.distribute.Strategy,
    ):
        self.model, self.strategy = model, strategy
        lr: Any = flags.lr
        if flags.lr_schedule == "cosine":
            lr = tf.keras.optimizers.schedules.CosineDecay(flags.lr, max(steps, 1), alpha=0.05)
        with strategy.scope():
            self.optimizer = tf.keras.optimizers.Adam(lr, clipnorm=flags.clip_norm)
        self.loss = CombinedLoss(flags.losses, reduction=tf.keras.losses.Reduction.NONE)
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
        self,
        ds: tf.data.Dataset,
        *,
        train: bool,
        progress: bool,
        desc: str,
        total: int | None = None,
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
        return float(self.mean_loss.result()), float(self.opa.result())


def _val_score(model, split, stats, limit, progress, scorer=None) -> tuple[float, dict]:
    """Kaggle-form score and top-k errors on all configs of (the first `limit`) valid kernels."""
    scored = predict.score_split(
        model, split, stats, limit=limit, scorer=scorer, progress=progress, desc="valid"
    )
    errors = metrics.top_k_errors((s.runtimes, s.scores) for s in scored)
    return metrics.kaggle_score(errors[5]), errors


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
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def train(flags: argparse.Namespace) -> TrainResult:
    """Trains, validates, predicts the test split and writes upstream's artifacts."""
    progress = not flags.no_progress
    module = registry.load_models_module(flags.models)
    registry.model_class(flags.model, module)  # fail before loading data
    registry.parse_model_kwargs(flags.model_kwargs_json)
    args = upstream_args(flags)
    out_dir = Path(os.path.expanduser(flags.out_dir))
    out_dir.mkdir(parents=True, exist_ok=True)
    tf.keras.utils.set_random_seed(flags.seed)

    ds = data.load_dataset(
        os.path.expanduser(flags.data_root), min_train_configs=flags.configs,
        cache_dir=os.path.expanduser(flags.cache_dir) if flags.cache_dir else None,
        toy_data=flags.toy_data, skip_bad=flags.skip_bad, progress=progress,
    )  # fmt: skip
    strategy = _strategy(flags.strategy)
    with strategy.scope():
        model = registry.build_model(
            flags.model, flags.configs, ds.num_ops, flags.model_kwargs_json, module
        )
        # All variables from one eager forward, as the course script builds them.
        model.forward(data.kernel_graph(ds.train, 0, ds.stats), ds.train.num_configs(0))
    train_ds = data.training_batches(
        ds.train, ds.stats, num_configs=flags.configs, batch_size=flags.batch, seed=flags.seed
    )
    replicas = strategy.num_replicas_in_sync
    steps_per_epoch = int((ds.train.config_counts() >= flags.configs).sum()) // (
        flags.batch * replicas
    )
    valid_ds = data.training_batches(
        ds.valid,
        ds.stats,
        num_configs=flags.configs,
        batch_size=flags.batch,
        seed=flags.seed + 1,
        shuffle=False,
    )
    if flags.validate_batches > 0:
        valid_ds = valid_ds.take(flags.validate_batches)
    if replicas > 1:  # each replica takes its own batches of --batch kernels
        train_ds = strategy.distribute_datasets_from_function(lambda _: train_ds)
        valid_ds = strategy.distribute_datasets_from_function(lambda _: valid_ds)
    score_limit = flags.validate_batches * flags.batch if flags.validate_batches > 0 else None
    loop = _Loop(model, flags, steps_per_epoch * flags.epochs, strategy)
    scorer = predict.kernel_scorer(model)

    curve = dict(epoch=[], train_loss=[], train_opa=[], val_loss=[], val_opa=[])
    extras: dict[str, Any] = dict(val_score=[], epoch_seconds=[])
    best, best_key, best_epoch = None, -np.inf, -1
    for epoch in range(flags.epochs):
        start = time.perf_counter()
        train_loss, train_opa = loop.run(
            train_ds, train=True, progress=progress, desc=f"epoch {epoch}", total=steps_per_epoch
        )
        val_loss, val_opa = loop.run(valid_ds, train=False, progress=progress, desc="valid")
        score, _ = _val_score(model, ds.valid, ds.stats, score_limit, progress, scorer)
        seconds = time.perf_counter() - start
        for key, value in zip(curve, (epoch, train_loss, train_opa, val_loss, val_opa)):
            curve[key].append(value)
        extras["val_score"].append(score)
        extras["epoch_seconds"].append(seconds)
        key = score if flags.select_by == "score" else val_opa
        improved = key > best_key
        if improved:
            best_key, best_epoch = key, epoch
            best = [v.numpy() for v in model.trainable_variables]
        print(
            f"epoch {epoch:3d}  loss {train_loss:.4f}  opa {train_opa:.3f}  val_loss "
            f"{val_loss:.4f}  val_opa {val_opa:.3f}  val_score {score:.4f}  {seconds:.1f}s"
            + ("  *best" if improved else ""),
            flush=True,
        )
        if flags.early_stop > 0 and epoch - best_epoch >= flags.early_stop:
            print(f"no gain for {flags.early_stop} epochs since epoch {best_epoch}; stopping")
            break
    for v, value in zip(model.trainable_variables, best):
        v.assign(value)
    return _finish(flags, args, model, ds, curve, extras, best_epoch, out_dir, progress, scorer)


def _finish(
    flags, args, model, ds, curve, extras, best_epoch, out_dir, progress, scorer
) -> TrainResult:
    """Final validation, test ranking, and the artifacts."""
    _, val_errors = _val_score(model, ds.valid, ds.stats, None, progress, scorer)
    run_info: dict[str, Any] = dict(train_curve=curve, final_error=dict(val=val_errors), args=args)
    results_csv = None
    if ds.test is not None and len(ds.test):
        scored = predict.score_split(
            model, ds.test, ds.stats, scorer=scorer, progress=progress, desc="test"
        )
        if flags.test_mode == "metrics":
            run_info["final_error"]["test"] = metrics.top_k_errors(
                (s.runtimes, s.scores) for s in scored
            )
        else:
            ranks = {s.tile_id: predict.upstream_top(s.scores, UPSTREAM_TOP) for s in scored}
            run_info["test_predictions"] = ranks
            results_csv = Path(args["results_csv"])
            results_csv.parent.mkdir(parents=True, exist_ok=True)
            kaggle.write_predictions_csv(results_csv, list(ranks.items()))
    h = export.args_hash(args)
    run_info[export.EXTRAS_KEY] = dict(
        extras, version=tpu_tiles_models.__version__, best_epoch=best_epoch,
        select_by=flags.select_by, feature_stats=ds.stats.to_json(),
        toy_data=flags.toy_data, data_root=flags.data_root,
    )  # fmt: skip
    # The model directory first: a run file never points at a model that is not there.
    model_dir = export.save_model_dir(model, out_dir / f"model_{h}")
    run_file = export.write_run(out_dir, args, run_info)
    if curve["epoch"]:
        _plot_curve(curve, extras, out_dir / f"train_curve_{h}.png")
    print(
        f"wrote {model_dir}\nwrote {run_file}" + (f"\nwrote {results_csv}" if results_csv else "")
    )
    print(
        "validation top-k error: "
        + json.dumps({str(k): round(v, 4) for k, v in val_errors.items()})
    )
    return TrainResult(model_dir, run_file, results_csv, val_errors, model)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tpu-tiles train", description=__doc__.splitlines()[0])
    add_flags(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> TrainResult:
    with contextlib.suppress(AttributeError):
        tf.get_logger().setLevel("ERROR")
    return train(parse(argv))
