"""Ranking losses, chosen by name from one table, and upstream's weighted combination.

Labels are runtimes `[batch, num_configs]` and predictions are scores of the same shape;
lower score = predicted faster. The listwise losses of TF-Ranking treat a larger label as
"more relevant", so with runtimes as labels they push slow configs to high scores, which is
exactly the order we want.
"""

from __future__ import annotations

from typing import Callable

import tensorflow as tf
import tensorflow_ranking as tfr

from tpu_tiles_models.errors import FlagError
from tpu_tiles_models.train_args import DEFAULT_LOSSES


def _list_mle() -> tf.keras.losses.Loss:
    """ListMLE (Xia et al., ICML 2008): likelihood of the true permutation."""
    return tfr.keras.losses.ListMLELoss(temperature=10)


class FastFirstListMLE(tf.keras.losses.Loss):
    """ListMLE whose Plackett-Luce sequence starts at the fastest config.

    Upstream's ListMLE on runtimes explains the list from the slowest config down, so most of
    its signal is about spotting slow tiles; the metric (best of the top 5) is about the
    fastest ones. Ranking `-score` by `1 / runtime` (same order, positive as TF-Ranking
    requires of valid labels) puts the fastest config first in the sequence.
    """

    def __init__(self, temperature: float = 10.0, **kwargs):
        super().__init__(**kwargs)
        self._list_mle = tfr.keras.losses.ListMLELoss(temperature=temperature)

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        y_true = tf.cast(y_true, y_pred.dtype)
        return per_list(self._list_mle, 1.0 / tf.maximum(y_true, 1e-9), -y_pred)


def _fast_first_list_mle() -> tf.keras.losses.Loss:
    """ListMLE from the fastest config down: the metric's end of the list."""
    return FastFirstListMLE(temperature=10)


def _pairwise_hinge() -> tf.keras.losses.Loss:
    """Pairwise hinge: every mis-ordered pair of configs costs its margin violation."""
    return tfr.keras.losses.PairwiseHingeLoss(temperature=10)


def _mse() -> tf.keras.losses.Loss:
    """Mean squared error between scores and runtimes; anchors the score scale."""
    return tf.keras.losses.MeanSquaredError()


# The one table of losses: upstream's `--losses` names map to factories.
LOSSES: dict[str, Callable[[], tf.keras.losses.Loss]] = {
    "ListMLELoss": _list_mle,
    "FastFirstListMLE": _fast_first_list_mle,
    "PairwiseHingeLoss": _pairwise_hinge,
    "MSE": _mse,
}


def parse_losses(spec: str) -> list[tuple[float, tf.keras.losses.Loss]]:
    """Parses upstream's `--losses` string, e.g. `"ListMLELoss:1,MSE:0.02"`.

    Raises:
      FlagError: naming the bad item and the known loss names.
    """
    weighted = []
    for item in spec.split(","):
        name, _, weight = item.strip().partition(":")
        if name not in LOSSES:
            raise FlagError(
                f"--losses: unknown loss {name!r} in {spec!r}; known: {', '.join(LOSSES)}"
            )
        try:
            weighted.append((float(weight), LOSSES[name]()))
        except ValueError:
            raise FlagError(
                f"--losses: weight of {name!r} must be a number, e.g. {name}:1 (got {item!r})"
            ) from None
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
