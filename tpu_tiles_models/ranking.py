"""Learning-to-rank losses and ordered pair accuracy in plain TensorFlow, so that no run needs
`tensorflow-ranking` (not installable beside TensorFlow >= 2.16).

Each gives TF-Ranking 0.5's numbers on lists without padding (tests/test_ranking.py; no
list here is padded): labels and scores are `[batch, list_size]`, larger = "rank higher";
`temperature` divides the scores; `call` returns `[batch, 1]` (listwise) or
`[batch, list_size]` (each item's sum over its pairs).
"""

from __future__ import annotations

import tensorflow as tf

# ListMLE's tie shuffle's op-level seed: TF-Ranking's, so both order ties alike (one global seed).
_LIST_MLE_TIE_SEED = 37


def _gather(values: tf.Tensor, indices: tf.Tensor) -> tf.Tensor:
    """`values[b, indices[b, k]]` for every row b: `[batch, k]`."""
    return tf.gather(values, indices, batch_dims=1)


def _ordered(labels: tf.Tensor) -> tf.Tensor:
    """`[batch, list_size, list_size]`: True for the pairs with label_i > label_j."""
    return labels[:, :, None] > labels[:, None, :]


def _descending_order(keys: tf.Tensor, *, shuffle_ties: bool, seed: int | None = None) -> tf.Tensor:
    """Indices `[batch, list_size]` that sort each row by `keys`, largest first. Equal keys in
    random order with `shuffle_ties` (the stable sort keeps a random permutation's order among
    equals), else in index order."""
    shape = tf.shape(keys)
    if shuffle_ties:
        start = tf.argsort(tf.random.uniform(shape, seed=seed), stable=True)
    else:
        start = tf.broadcast_to(tf.range(shape[1]), shape)
    by_key = tf.argsort(_gather(keys, start), direction="DESCENDING", stable=True)
    return _gather(start, by_key)


class _RankingLoss(tf.keras.losses.Loss):
    """A loss of labels and scores `[batch, list_size]`; the scores are divided by `temperature`."""

    def __init__(self, temperature: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.temperature = temperature

    def _inputs(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        y_pred = tf.convert_to_tensor(y_pred)
        return tf.cast(y_true, y_pred.dtype), y_pred / self.temperature

    def get_config(self) -> dict:
        return {**super().get_config(), "temperature": self.temperature}


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class ListMLE(_RankingLoss):
    """ListMLE (Xia et al., ICML 2008): the Plackett-Luce negative log-likelihood of the labels'
    order, `sum_k [log(sum_{m >= k} exp(s_m)) - s_k]`, `s` the scores / temperature in that
    order. Equal labels in a random order drawn on each call (`shuffle_ties=False`: in index
    order).
    """

    def __init__(self, temperature: float = 1.0, *, shuffle_ties: bool = True, **kwargs):
        super().__init__(temperature, **kwargs)
        self.shuffle_ties = shuffle_ties

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        labels, scores = self._inputs(y_true, y_pred)
        order = _descending_order(labels, shuffle_ties=self.shuffle_ties, seed=_LIST_MLE_TIE_SEED)
        s = _gather(scores, order)
        # log of the reverse cumulative sum of exp(s), shifted by the row maximum for range.
        top = tf.stop_gradient(tf.reduce_max(s, axis=-1, keepdims=True))
        tail = tf.math.log(tf.cumsum(tf.exp(s - top), axis=-1, reverse=True)) + top
        return tf.reduce_sum(tail - s, axis=-1, keepdims=True)

    def get_config(self) -> dict:
        return {**super().get_config(), "shuffle_ties": self.shuffle_ties}


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class PairwiseHinge(_RankingLoss):
    """Pairwise hinge (RankSVM; Joachims, KDD 2002): each pair of items with label_i >
    label_j costs `max(0, 1 - (s_i - s_j))`, `s` = scores / temperature; `call` returns each
    item's sum over its pairs."""

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        labels, scores = self._inputs(y_true, y_pred)
        ordered = tf.cast(_ordered(labels), scores.dtype)
        return tf.reduce_sum(
            ordered * tf.nn.relu(1.0 - (scores[:, :, None] - scores[:, None, :])), -1
        )


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class OrderedPairAccuracy(tf.keras.metrics.Metric):
    """Ordered pair accuracy: of the pairs of items with label_i > label_j, the share with
    score_i > score_j, pooled over every list since `reset_state` (as TF-Ranking's
    `OPAMetric`, unweighted)."""

    def __init__(self, name: str = "opa_metric", dtype=None, **kwargs):
        super().__init__(name=name, dtype=dtype, **kwargs)
        self.correct = self.add_weight(name="correct", initializer="zeros")
        self.pairs = self.add_weight(name="pairs", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        if sample_weight is not None:  # Keras's fit passes None
            raise ValueError("OrderedPairAccuracy is unweighted: sample_weight must be None")
        labels = tf.cast(y_true, self.dtype)
        scores = tf.cast(y_pred, self.dtype)
        pairs = tf.cast(_ordered(labels), self.dtype)
        right = tf.cast(scores[:, :, None] > scores[:, None, :], self.dtype)
        return tf.group(
            self.correct.assign_add(tf.reduce_sum(pairs * right)),
            self.pairs.assign_add(tf.reduce_sum(pairs)),
        )

    def result(self) -> tf.Tensor:
        return tf.math.divide_no_nan(self.correct, self.pairs)
