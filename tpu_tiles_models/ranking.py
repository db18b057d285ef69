"""Learning-to-rank losses and ordered pair accuracy in plain TensorFlow, so that no run needs
`tensorflow-ranking` (not installable beside TensorFlow >= 2.16).

Each gives TF-Ranking 0.5's numbers (tests/test_ranking.py): labels and scores are
`[batch, list_size]`, larger = "rank higher"; a label < 0 marks padding, left out of every
pair, sum and rank; `temperature` divides the scores; `call` returns `[batch, 1]` (listwise)
or `[batch, list_size]` (each item's sum over its pairs).
"""

from __future__ import annotations

import math

import tensorflow as tf

# TF-Ranking gives a padding entry of ListMLE this logit (log 1e-10) and puts it last.
_PADDING_LOGIT = math.log(1e-10)
# ListMLE's tie shuffle's op-level seed: TF-Ranking's, so both order ties alike (one global seed).
_LIST_MLE_TIE_SEED = 37


def _gather(values: tf.Tensor, indices: tf.Tensor) -> tf.Tensor:
    """`values[b, indices[b, k]]` for every row b: `[batch, k]`."""
    return tf.gather(values, indices, batch_dims=1)


def _valid(labels: tf.Tensor) -> tf.Tensor:
    """True for real entries, False for padding (label < 0): `[batch, list_size]`."""
    return labels >= 0


def _both(valid: tf.Tensor) -> tf.Tensor:
    """`[batch, list_size, list_size]`: True for the pairs of two real entries."""
    return tf.logical_and(valid[:, :, None], valid[:, None, :])


def _ordered(labels: tf.Tensor, valid: tf.Tensor) -> tf.Tensor:
    """`[batch, list_size, list_size]`: True for the real pairs with label_i > label_j."""
    return tf.logical_and(labels[:, :, None] > labels[:, None, :], _both(valid))


def _descending_order(
    keys: tf.Tensor, valid: tf.Tensor, *, shuffle_ties: bool, seed: int | None = None
) -> tf.Tensor:
    """Indices `[batch, list_size]` that sort each row: the real entries by `keys`, largest
    first, then the padding. Equal keys in random order with `shuffle_ties` (the stable sorts
    keep a random permutation's order among equals), else in index order."""
    shape = tf.shape(keys)
    if shuffle_ties:
        start = tf.argsort(tf.random.uniform(shape, seed=seed), stable=True)
    else:
        start = tf.broadcast_to(tf.range(shape[1]), shape)
    by_key = tf.argsort(_gather(keys, start), direction="DESCENDING", stable=True)
    # A second stable sort, on validity alone, moves the padding behind the real entries.
    is_real = tf.cast(_gather(_gather(valid, start), by_key), tf.int32)
    real_first = tf.argsort(is_real, direction="DESCENDING", stable=True)
    return _gather(start, _gather(by_key, real_first))


def _ndcg_gains(labels: tf.Tensor) -> tf.Tensor:
    """NDCG's gains `2^label - 1` over `2^max_label` (which NDCG cancels; it keeps large labels
    from overflowing)."""
    top = tf.reduce_max(labels, axis=-1, keepdims=True)
    return tf.pow(2.0, labels - top) - tf.pow(2.0, -top)


def _discount(rank: tf.Tensor) -> tf.Tensor:
    """DCG's rank discount `1 / log2(1 + rank)`."""
    return math.log(2.0) / tf.math.log1p(rank)


def _inverse_ideal_dcg(gains: tf.Tensor) -> tf.Tensor:
    """`[batch, 1]`: `1 / DCG` of each row's best order (0 where that DCG is 0)."""
    best_first = tf.sort(gains, direction="DESCENDING")
    ranks = tf.cast(tf.range(1, tf.shape(gains)[1] + 1), gains.dtype)
    ideal = tf.reduce_sum(best_first * _discount(ranks), axis=-1, keepdims=True)
    return tf.math.divide_no_nan(tf.ones_like(ideal), ideal)


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
    order). Padding, as in TF-Ranking, comes last with logit log(1e-10), adding log(n_pad!).
    """

    def __init__(self, temperature: float = 1.0, *, shuffle_ties: bool = True, **kwargs):
        super().__init__(temperature, **kwargs)
        self.shuffle_ties = shuffle_ties

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        labels, scores = self._inputs(y_true, y_pred)
        valid = _valid(labels)
        scores = tf.where(valid, scores, tf.cast(_PADDING_LOGIT, scores.dtype))
        order = _descending_order(
            labels, valid, shuffle_ties=self.shuffle_ties, seed=_LIST_MLE_TIE_SEED
        )
        s = _gather(scores, order)
        # log of the reverse cumulative sum of exp(s), shifted by the row maximum for range.
        top = tf.stop_gradient(tf.reduce_max(s, axis=-1, keepdims=True))
        tail = tf.math.log(tf.cumsum(tf.exp(s - top), axis=-1, reverse=True)) + top
        return tf.reduce_sum(tail - s, axis=-1, keepdims=True)

    def get_config(self) -> dict:
        return {**super().get_config(), "shuffle_ties": self.shuffle_ties}


class _PairwiseLoss(_RankingLoss):
    """A loss `l(s_i - s_j)` over every pair of real items with label_i > label_j: `call`
    returns `sum_j w_ij * l(s_i - s_j)` per item, `w_ij` 1 or `_pair_weights` (no gradient)."""

    def _pair_loss(self, differences: tf.Tensor) -> tf.Tensor:
        raise NotImplementedError

    def _pair_weights(self, labels: tf.Tensor, scores: tf.Tensor, valid: tf.Tensor) -> tf.Tensor:
        """Weights of the pairs, broadcastable to `[batch, list_size, list_size]`: 1 here."""
        del scores, valid
        return tf.ones([], labels.dtype)

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        labels, scores = self._inputs(y_true, y_pred)
        valid = _valid(labels)
        ordered = tf.cast(_ordered(labels, valid), scores.dtype)
        weights = ordered * self._pair_weights(labels, scores, valid)
        losses = self._pair_loss(scores[:, :, None] - scores[:, None, :])
        return tf.reduce_sum(tf.stop_gradient(weights) * losses, axis=-1)


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class PairwiseHinge(_PairwiseLoss):
    """Pairwise hinge (RankSVM; Joachims, KDD 2002): each ordered pair costs
    `max(0, 1 - (s_i - s_j))`, `s` = scores / temperature."""

    def _pair_loss(self, differences: tf.Tensor) -> tf.Tensor:
        return tf.nn.relu(1.0 - differences)


def ndcg_lambda_weights(labels: tf.Tensor, scores: tf.Tensor, valid: tf.Tensor) -> tf.Tensor:
    """LambdaLoss's NDCG weights (Wang et al., CIKM 2018, NDCG-Loss2), `[batch, list_size,
    list_size]`: `w_ij = |G_i - G_j| / maxDCG * |1/log2(1 + d) - 1/log2(2 + d)| * list_size`,
    gains `G = 2^label - 1`, d = |r_i - r_j| for ranks r of the scores (ties random; padding
    last, where TF-Ranking's lowest score less 1e-6 can tie in float32); 0 with padding.
    """
    labels = tf.where(valid, labels, tf.zeros_like(labels))
    gains = _ndcg_gains(labels)
    gains *= _inverse_ideal_dcg(gains)
    order = _descending_order(scores, valid, shuffle_ties=True)
    ranks = tf.cast(tf.argsort(order, stable=True) + 1, labels.dtype)  # 1-based
    distance = tf.abs(ranks[:, :, None] - ranks[:, None, :])
    # A pair's own distance is 0 (the diagonal); its discount difference is left out there.
    apart = distance > 0
    safe = tf.where(apart, distance, tf.ones_like(distance))
    discount = tf.where(apart, tf.abs(_discount(safe) - _discount(safe + 1.0)), 0.0)
    both_real = tf.cast(_both(valid), labels.dtype)
    size = tf.cast(tf.shape(labels)[1], labels.dtype)
    return tf.abs(gains[:, :, None] - gains[:, None, :]) * both_real * discount * size


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class PairwiseLogistic(_PairwiseLoss):
    """Pairwise logistic loss (RankNet, ICML 2005), `log(1 + exp(-(s_i - s_j)))` per ordered
    pair; with `ndcg_weights`, weighted by `ndcg_lambda_weights` (LambdaLoss)."""

    def __init__(self, temperature: float = 1.0, *, ndcg_weights: bool = False, **kwargs):
        super().__init__(temperature, **kwargs)
        self.ndcg_weights = ndcg_weights

    def _pair_loss(self, differences: tf.Tensor) -> tf.Tensor:
        return tf.math.softplus(-differences)

    def _pair_weights(self, labels: tf.Tensor, scores: tf.Tensor, valid: tf.Tensor) -> tf.Tensor:
        if self.ndcg_weights:
            return ndcg_lambda_weights(labels, scores, valid)
        return super()._pair_weights(labels, scores, valid)

    def get_config(self) -> dict:
        return {**super().get_config(), "ndcg_weights": self.ndcg_weights}


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class ApproxNDCG(_RankingLoss):
    """ApproxNDCG (Qin, Liu and Li, Information Retrieval 13, 2010): minus the NDCG of the
    scores' order with the smooth ranks `r_i = 1 + sum_{real j != i} sigmoid(s_j - s_i)`,
    `-sum_i G_i / log2(1 + r_i) / maxDCG`; 0 for a list with no positive label."""

    def __init__(self, temperature: float = 0.1, **kwargs):
        super().__init__(temperature, **kwargs)

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        labels, scores = self._inputs(y_true, y_pred)
        valid = _valid(labels)
        labels = tf.where(valid, labels, tf.zeros_like(labels))
        both_real = tf.cast(_both(valid), scores.dtype)
        # sigmoid(s_j - s_i) summed over j, the item itself included (it adds 1/2).
        beaten_by = tf.sigmoid(scores[:, None, :] - scores[:, :, None]) * both_real
        ranks = 0.5 + tf.reduce_sum(beaten_by, axis=-1)
        gains = _ndcg_gains(labels)
        dcg = tf.reduce_sum(gains * _discount(ranks), axis=-1, keepdims=True)
        has_gain = tf.reduce_sum(labels, axis=-1, keepdims=True) > 0
        return -tf.cast(has_gain, scores.dtype) * dcg * _inverse_ideal_dcg(gains)


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class OrderedPairAccuracy(tf.keras.metrics.Metric):
    """Ordered pair accuracy: of the pairs of real items with label_i > label_j, the share with
    score_i > score_j, pooled over every list since `reset_state` (as TF-Ranking's
    `OPAMetric`). `sample_weight` weighs a pair by its higher-labelled item's weight."""

    def __init__(self, name: str = "opa_metric", dtype=None, **kwargs):
        super().__init__(name=name, dtype=dtype, **kwargs)
        self.correct = self.add_weight(name="correct", initializer="zeros")
        self.pairs = self.add_weight(name="pairs", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        labels = tf.cast(y_true, self.dtype)
        scores = tf.cast(y_pred, self.dtype)
        weights = tf.ones_like(labels)
        if sample_weight is not None:
            weights *= tf.cast(sample_weight, self.dtype)
        valid = tf.logical_and(_valid(labels), weights > 0)
        pair_weights = tf.cast(_ordered(labels, valid), self.dtype) * weights[:, :, None]
        right = tf.cast(scores[:, :, None] > scores[:, None, :], self.dtype)
        return tf.group(
            self.correct.assign_add(tf.reduce_sum(pair_weights * right)),
            self.pairs.assign_add(tf.reduce_sum(pair_weights)),
        )

    def result(self) -> tf.Tensor:
        return tf.math.divide_no_nan(self.correct, self.pairs)
