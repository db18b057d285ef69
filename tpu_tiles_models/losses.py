"""Ranking losses, chosen by name from one table (`LOSSES`), and upstream's weighted combination.

Labels are runtimes `[batch, num_configs]`, predictions scores of that shape (lower = faster):
ranking losses rank a larger label higher, so they push slow configs to high scores, as we
want.
"""

from __future__ import annotations

from typing import Callable

import tensorflow as tf

from tpu_tiles_models import ranking
from tpu_tiles_models.errors import FlagError
from tpu_tiles_models.train_args import DEFAULT_LOSSES, REMOVED_LOSSES, loss_weights, removed

# The one table of losses: `--losses` names (upstream's first) -> factories.
LOSSES: dict[str, Callable[[], tf.keras.losses.Loss]] = {
    "ListMLELoss": lambda: ranking.ListMLE(temperature=10),
    "PairwiseHingeLoss": lambda: ranking.PairwiseHinge(temperature=10),
    # Anchors the score scale to the runtimes.
    "MSE": tf.keras.losses.MeanSquaredError,
}


def parse_losses(spec: str) -> list[tuple[float, tf.keras.losses.Loss]]:
    """(weight, loss) pairs of upstream's `--losses`, e.g. `"ListMLELoss:1,MSE:0.02"` (syntax
    and weights checked by `train_args.loss_weights`, the names here: each known, once), or
    `FlagError`."""
    pairs = loss_weights(spec)
    names = [name for name, _ in pairs]
    for name in names:
        if name in REMOVED_LOSSES:
            raise removed(f"--losses: {name}", REMOVED_LOSSES[name])
        if name not in LOSSES:
            raise FlagError(
                f"--losses: unknown loss {name!r} in {spec!r}; known: {', '.join(LOSSES)}"
            )
        if names.count(name) > 1:
            total = sum(w for n, w in pairs if n == name)
            raise FlagError(
                f"--losses: {name} is given {names.count(name)} times in {spec!r}; give it "
                f"once, with its weights' sum ({name}:{total:g})"
            )
    return [(weight, LOSSES[name]()) for name, weight in pairs]


def per_list(loss: tf.keras.losses.Loss, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
    """`loss` of each list, unreduced: `[batch]` (a `tf.distribute` strategy rejects the
    inner losses' default AUTO reduction: the one reduction is `CombinedLoss`')."""
    values = loss.call(y_true, y_pred)
    return tf.reduce_mean(tf.reshape(values, [tf.shape(y_pred)[0], -1]), axis=1)


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class CombinedLoss(tf.keras.losses.Loss):
    """Weighted average of the losses `spec` names (`--losses`), weights normalised to sum to
    1, as upstream does."""

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
        """Per-list losses `[batch]`."""
        y_true = tf.cast(y_true, y_pred.dtype)
        return tf.math.add_n([w * per_list(loss, y_true, y_pred) for w, loss in self._weighted])

    def get_config(self) -> dict:
        return {**super().get_config(), "spec": self.spec}
