"""Ranking losses, chosen by name from one table, and upstream's weighted combination.

Labels are runtimes `[batch, num_configs]` and predictions are scores of the same shape;
lower score = predicted faster. The ranking losses (`ranking`, TF-Ranking's conventions)
treat a larger label as "more relevant", so with runtimes as labels they push slow configs to
high scores, which is exactly the order we want. A negative label marks a padding entry
(`--pad_configs` repeats the configs of a kernel that has fewer than `--configs`): every loss
here leaves it out.
"""

from __future__ import annotations

from typing import Callable

import tensorflow as tf

from tpu_tiles_models import ranking
from tpu_tiles_models.errors import FlagError
from tpu_tiles_models.train_args import DEFAULT_LOSSES, REMOVED_LOSSES, loss_weights, removed


def _list_mle() -> tf.keras.losses.Loss:
    """ListMLE (Xia et al., ICML 2008): likelihood of the true permutation."""
    return ranking.ListMLE(temperature=10)


def _pairwise_hinge() -> tf.keras.losses.Loss:
    """Pairwise hinge: every mis-ordered pair of configs costs its margin violation."""
    return ranking.PairwiseHinge(temperature=10)


def _valid(y_true: tf.Tensor) -> tf.Tensor:
    """1.0 for real configs, 0.0 for padding (negative labels): `[batch, num_configs]`."""
    return tf.cast(y_true >= 0, y_true.dtype)


class MaskedMSE(tf.keras.losses.Loss):
    """Mean squared error between scores and runtimes over the real configs of each list.

    With no padding it is Keras' `MeanSquaredError`: it anchors the score scale.
    """

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        y_true = tf.cast(y_true, y_pred.dtype)
        valid = _valid(y_true)
        squared = valid * tf.square(y_pred - y_true)
        return tf.reduce_sum(squared, -1) / tf.maximum(tf.reduce_sum(valid, -1), 1.0)


def _standardise(y_true: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Per-list z-scores of the real entries of `y_true`, and their mask (both `[b, n]`).

    Kernels differ in runtime spread by orders of magnitude (worst / best from 1.0 to over
    100); z-scores give every kernel's pairs margins on one scale.
    """
    valid = _valid(y_true)
    count = tf.maximum(tf.reduce_sum(valid, -1, keepdims=True), 1.0)
    mean = tf.reduce_sum(valid * y_true, -1, keepdims=True) / count
    variance = tf.reduce_sum(valid * tf.square(y_true - mean), -1, keepdims=True) / count
    return valid * (y_true - mean) / tf.sqrt(variance + 1e-12), valid


class StandardisedHinge(tf.keras.losses.Loss):
    """Pairwise hinge whose margin is the gap between per-kernel standardised runtimes.

    For every pair with `z_i > z_j` (config i slower), `max(0, (z_i - z_j) - (s_i - s_j))`,
    where `z` are the list's runtimes as z-scores: a pair of configs far apart in runtime must
    be far apart in score, a near tie barely counts. The mean over ordered pairs of real
    configs is the list's loss. (Pairwise hinge with all configs of a kernel per step is the
    1st-place Kaggle tile recipe; the standardised margin is ours.)
    """

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        y_true = tf.cast(y_true, y_pred.dtype)
        z, valid = _standardise(y_true)
        gap = z[:, :, None] - z[:, None, :]  # [b, n, n]: > 0 where i is slower than j
        pairs = valid[:, :, None] * valid[:, None, :] * tf.cast(gap > 0, y_pred.dtype)
        violation = tf.nn.relu(gap - (y_pred[:, :, None] - y_pred[:, None, :]))
        return tf.reduce_sum(pairs * violation, [1, 2]) / tf.maximum(
            tf.reduce_sum(pairs, [1, 2]), 1.0
        )


def speedup_relevance(y_true: tf.Tensor, sharpness: float) -> tf.Tensor:
    """Runtimes `[b, n]` -> relevance `sharpness * best / runtime` per list; padding stays -1.

    The fastest config of a list gets `sharpness`, one twice as slow half of it. NDCG's gain
    `2^relevance - 1` then grows steeply towards the fastest configs, which is where the
    metric (the best runtime among the top k) looks.
    """
    valid = y_true >= 0
    big = tf.reduce_max(y_true) + 1.0
    best = tf.reduce_min(tf.where(valid, y_true, big), -1, keepdims=True)
    relevance = sharpness * best / tf.maximum(y_true, 1e-9)
    return tf.where(valid, relevance, -tf.ones_like(y_true))


class _FastestFirst(tf.keras.losses.Loss):
    """A ranking loss on `speedup_relevance` labels and `-score` logits.

    Args:
      inner: a `ranking` loss (larger label = more relevant, larger logit = ranked first).
      sharpness: see `speedup_relevance`.
    """

    def __init__(self, inner: tf.keras.losses.Loss, sharpness: float = 8.0, **kwargs):
        super().__init__(**kwargs)
        self._inner, self._sharpness = inner, sharpness

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        y_true = tf.cast(y_true, y_pred.dtype)
        return per_list(self._inner, speedup_relevance(y_true, self._sharpness), -y_pred)


def _approx_ndcg() -> tf.keras.losses.Loss:
    """ApproxNDCG (Qin et al., 2010) on speedup gains: a smooth NDCG, top of the list first."""
    return _FastestFirst(ranking.ApproxNDCG(temperature=0.1))


def _lambda_ndcg() -> tf.keras.losses.Loss:
    """LambdaLoss (Wang et al., CIKM 2018): pairwise logistic, each pair weighted by the NDCG
    it would gain if swapped, on speedup gains."""
    return _FastestFirst(ranking.PairwiseLogistic(ndcg_weights=True))


def _mse() -> tf.keras.losses.Loss:
    """Mean squared error between scores and runtimes (real configs only)."""
    return MaskedMSE()


# The one table of losses: upstream's `--losses` names map to factories.
LOSSES: dict[str, Callable[[], tf.keras.losses.Loss]] = {
    "ListMLELoss": _list_mle,
    "PairwiseHingeLoss": _pairwise_hinge,
    "StandardisedHinge": StandardisedHinge,
    "ApproxNDCG": _approx_ndcg,
    "LambdaNDCG": _lambda_ndcg,
    "MSE": _mse,
}


def parse_losses(spec: str) -> list[tuple[float, tf.keras.losses.Loss]]:
    """Parses upstream's `--losses` string, e.g. `"ListMLELoss:1,MSE:0.02"` (its syntax and
    weights are checked by `train_args.loss_weights`, the names here).

    Raises:
      FlagError: naming the bad item and the known loss names, or the bad weights.
    """
    weighted = []
    for name, weight in loss_weights(spec):
        if name in REMOVED_LOSSES:
            raise removed(f"--losses: {name}", REMOVED_LOSSES[name])
        if name not in LOSSES:
            raise FlagError(
                f"--losses: unknown loss {name!r} in {spec!r}; known: {', '.join(LOSSES)}"
            )
        weighted.append((weight, LOSSES[name]()))
    return weighted


def per_list(loss: tf.keras.losses.Loss, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
    """`loss` of each list, unreduced: `[batch]`.

    Calling the inner losses unreduced leaves one reduction, which a `tf.distribute`
    strategy requires to be explicit (it rejects the inner losses' default AUTO).
    """
    values = loss.call(y_true, y_pred)
    return tf.reduce_mean(tf.reshape(values, [tf.shape(y_pred)[0], -1]), axis=1)


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class CombinedLoss(tf.keras.losses.Loss):
    """Weighted average of named losses, as upstream's `--losses` defines it.

    Args:
      spec: comma-separated `name:weight` items naming `LOSSES`; weights are normalised to
        sum to 1, as upstream does.
    """

    def __init__(
        self,
        spec: str = DEFAULT_LOSSES,
        reduction=tf.keras.losses.Reduction.AUTO,
        name: str | None = None,
    ):
        super().__init__(reduction=reduction, name=name)
        self.spec = spec
        weighted = parse_losses(spec)
        total = sum(w for w, _ in weighted)
        self._weighted = [(w / total, loss) for w, loss in weighted]

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        """Per-list losses `[batch]`; the one reduction is this loss's own (see `per_list`)."""
        y_true = tf.cast(y_true, y_pred.dtype)
        return tf.math.add_n([w * per_list(loss, y_true, y_pred) for w, loss in self._weighted])

    def get_config(self) -> dict:
        return {**super().get_config(), "spec": self.spec}
