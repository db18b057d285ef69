"""Learning-to-rank losses and ordered pair accuracy, written in plain TensorFlow.

Its one job: the ranking losses and metric the trainer names (`losses.LOSSES`, the OPA
metric), so that no run needs `tensorflow-ranking`, which cannot be installed beside
TensorFlow >= 2.16. Each follows TF-Ranking 0.5's conventions, so a run computes the same
numbers as it did with TF-Ranking (tests/test_ranking.py checks values and gradients against
it where it imports):

- inputs are labels `y_true` and scores `y_pred`, both `[batch, list_size]`; a larger label
  means "rank higher", and so does a larger score;
- a label < 0 marks a padding entry: it is left out of every pair, sum and rank;
- `temperature` divides the scores before anything else;
- `call` returns what TF-Ranking's Keras losses return from theirs: `[batch, 1]` per list for
  the listwise losses, `[batch, list_size]` (each item's sum over its pairs) for the pairwise
  ones, so that the Keras reductions and `losses.per_list` give the same numbers.
"""

from __future__ import annotations

import math

import tensorflow as tf

# TF-Ranking gives a padding entry of ListMLE this logit (log 1e-10) and puts it last.
_PADDING_LOGIT = math.log(1e-10)
# The op-level seed of ListMLE's tie shuffle. It is TF-Ranking's, so that under one global
# seed (`tf.random.set_seed`) both draw the same numbers and put ties in the same order.
_LIST_MLE_TIE_SEED = 37


def _gather(values: tf.Tensor, indices: tf.Tensor) -> tf.Tensor:
    """`values[b, indices[b, k]]` for every row b: `[batch, k]`."""
    return tf.gather(values, indices, batch_dims=1)


def _valid(labels: tf.Tensor) -> tf.Tensor:
    """True for real entries, False for padding (label < 0): `[batch, list_size]`."""
    return labels >= 0


def _descending_order(
    keys: tf.Tensor, valid: tf.Tensor, *, shuffle_ties: bool, seed: int | None = None
) -> tf.Tensor:
    """Indices `[batch, list_size]` that sort each row: the real entries by `keys`, largest
    first, then the padding.

    Entries with equal keys come in a uniformly random order when `shuffle_ties` (a random
    permutation goes first, and the stable sorts after it keep its order among equals), in
    index order otherwise.
    """
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


def _ranks(order: tf.Tensor) -> tf.Tensor:
    """1-based rank of each entry, `[batch, list_size]` int32, from a sorting `order`."""
    return tf.argsort(order, stable=True) + 1


def _ndcg_gains(labels: tf.Tensor) -> tf.Tensor:
    """NDCG's gains `2^label - 1` divided by `2^max_label` (padding counted as label 0).

    NDCG divides by the ideal DCG, so the common factor cancels; it keeps large labels from
    overflowing.
    """
    top = tf.reduce_max(labels, axis=-1, keepdims=True)
    return tf.pow(2.0, labels - top) - tf.pow(2.0, -top)


def _discount(rank: tf.Tensor) -> tf.Tensor:
    """DCG's rank discount `1 / log2(1 + rank)`."""
    return math.log(2.0) / tf.math.log1p(rank)


def _inverse_ideal_dcg(gains: tf.Tensor) -> tf.Tensor:
    """`1 / DCG` of the best order of each row of `gains` (0 where that DCG is 0): `[batch, 1]`."""
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
        """(labels, scores / temperature), both in the scores' float dtype."""
        y_pred = tf.convert_to_tensor(y_pred)
        return tf.cast(y_true, y_pred.dtype), y_pred / self.temperature

    def get_config(self) -> dict:
        return {**super().get_config(), "temperature": self.temperature}


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class ListMLE(_RankingLoss):
    """ListMLE (Xia et al., "Listwise approach to learning to rank", ICML 2008).

    The negative log-likelihood, under the Plackett-Luce model of the scores, of the order of
    the labels (largest first). With `s` the scores / temperature put in that order,
    `loss = sum_k [log(sum_{m >= k} exp(s_m)) - s_k]`.

    Ties: items with equal labels are put in a uniformly random order, drawn afresh on each
    call (as TF-Ranking does, with its op-level seed, so that under one global seed the order
    is TF-Ranking's). `shuffle_ties=False` keeps them in index order instead.

    Padding: as in TF-Ranking, each padding entry takes part as an item placed after all real
    ones with the fixed logit log(1e-10). It gets no gradient; it adds 1e-10 to each real
    item's sum of exp(s), which is lost in float32 rounding unless the scores / temperature
    fall below about -6; and its own terms add the constant log(n_pad!) to the value (0 for
    one padding entry).

    Args:
      temperature: the scores are divided by it (upstream uses 10).
      shuffle_ties: see Ties above.

    `call` returns the loss of each list, `[batch, 1]`.
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
        # log of the reverse cumulative sum of exp(s), shifted by the row maximum for range
        # (the shift cancels, so it carries no gradient).
        top = tf.stop_gradient(tf.reduce_max(s, axis=-1, keepdims=True))
        tail = tf.math.log(tf.cumsum(tf.exp(s - top), axis=-1, reverse=True)) + top
        return tf.reduce_sum(tail - s, axis=-1, keepdims=True)

    def get_config(self) -> dict:
        return {**super().get_config(), "shuffle_ties": self.shuffle_ties}


class _PairwiseLoss(_RankingLoss):
    """A loss `l(s_i - s_j)` over every pair of real items with label_i > label_j.

    `call` returns `sum_j w_ij * l(s_i - s_j)` for each item i, `[batch, list_size]` (TF-Ranking's
    shape): padding and items ranked below all others get 0. The pair weights `w_ij` are 1,
    or a subclass's `_pair_weights`; no gradient flows through them.
    """

    def _pair_loss(self, differences: tf.Tensor) -> tf.Tensor:
        raise NotImplementedError

    def _pair_weights(self, labels: tf.Tensor, scores: tf.Tensor, valid: tf.Tensor) -> tf.Tensor:
        """Weights of the pairs, broadcastable to `[batch, list_size, list_size]`: 1 here."""
        del scores, valid
        return tf.ones([], labels.dtype)

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        labels, scores = self._inputs(y_true, y_pred)
        valid = _valid(labels)
        ordered = tf.logical_and(
            labels[:, :, None] > labels[:, None, :],
            tf.logical_and(valid[:, :, None], valid[:, None, :]),
        )
        weights = tf.cast(ordered, scores.dtype) * self._pair_weights(labels, scores, valid)
        losses = self._pair_loss(scores[:, :, None] - scores[:, None, :])
        return tf.reduce_sum(tf.stop_gradient(weights) * losses, axis=-1)


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class PairwiseHinge(_PairwiseLoss):
    """Pairwise hinge (RankSVM's loss, Herbrich et al. 2000; Joachims, KDD 2002).

    Each pair with label_i > label_j costs `max(0, 1 - (s_i - s_j))`, `s` = scores /
    temperature: the higher-labelled item must lead by a margin of `temperature` in score.
    Shapes: see `_PairwiseLoss`.
    """

    def _pair_loss(self, differences: tf.Tensor) -> tf.Tensor:
        return tf.nn.relu(1.0 - differences)


def ndcg_lambda_weights(labels: tf.Tensor, scores: tf.Tensor, valid: tf.Tensor) -> tf.Tensor:
    """LambdaLoss's NDCG weights (Wang et al., "The LambdaLoss framework for ranking metric
    optimization", CIKM 2018, NDCG-Loss2): `[batch, list_size, list_size]`.

    For items i, j at ranks r_i, r_j of the current scores (real items by score, largest first,
    ties in random order; padding after them) and d = |r_i - r_j|:
    `w_ij = |G_i - G_j| / maxDCG * |1/log2(1 + d) - 1/log2(2 + d)| * list_size`,
    with gains `G = 2^label - 1` (padding 0) and maxDCG the DCG of the labels' own order.
    The last factor, the list size with its padding, is TF-Ranking's: it brings the weights
    to the scale of unweighted pairs. Pairs with a padding item or with d = 0 weigh 0.
    (TF-Ranking ranks padding last by giving it the lowest score less 1e-6, which float32
    can round to a tie with a real score of magnitude 32 or more; here padding always
    ranks last.)
    """
    labels = tf.where(valid, labels, tf.zeros_like(labels))
    gains = _ndcg_gains(labels)
    gains *= _inverse_ideal_dcg(gains)
    ranks = tf.cast(_ranks(_descending_order(scores, valid, shuffle_ties=True)), labels.dtype)
    distance = tf.abs(ranks[:, :, None] - ranks[:, None, :])
    # A pair's own distance is 0 (the diagonal); its discount difference is left out there.
    apart = distance > 0
    safe = tf.where(apart, distance, tf.ones_like(distance))
    discount = tf.where(apart, tf.abs(_discount(safe) - _discount(safe + 1.0)), 0.0)
    both_real = tf.cast(tf.logical_and(valid[:, :, None], valid[:, None, :]), labels.dtype)
    size = tf.cast(tf.shape(labels)[1], labels.dtype)
    return tf.abs(gains[:, :, None] - gains[:, None, :]) * both_real * discount * size


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class PairwiseLogistic(_PairwiseLoss):
    """Pairwise logistic loss (RankNet, Burges et al., ICML 2005), optionally LambdaLoss.

    Each pair with label_i > label_j costs `log(1 + exp(-(s_i - s_j)))`, `s` = scores /
    temperature. With `ndcg_weights`, each pair is weighted by `ndcg_lambda_weights`: the
    LambdaLoss of Wang et al. (CIKM 2018), a bound on the NDCG the order loses.
    Shapes: see `_PairwiseLoss`.
    """

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
    """ApproxNDCG (Qin, Liu and Li, "A general approximation framework for direct
    optimization of information retrieval measures", Information Retrieval 13, 2010).

    Minus the NDCG of the scores' order, with each real item's rank replaced by the smooth
    `r_i = 1 + sum_{real j != i} sigmoid(s_j - s_i)`, `s` = scores / temperature:
    `loss = -sum_i G_i / log2(1 + r_i) / maxDCG`, gains `G = 2^label - 1`, maxDCG the DCG of
    the labels' own order. A list with no positive label has no NDCG: its loss is 0.

    `call` returns the loss of each list, `[batch, 1]`.
    """

    def __init__(self, temperature: float = 0.1, **kwargs):
        super().__init__(temperature, **kwargs)

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        labels, scores = self._inputs(y_true, y_pred)
        valid = _valid(labels)
        labels = tf.where(valid, labels, tf.zeros_like(labels))
        both_real = tf.cast(tf.logical_and(valid[:, :, None], valid[:, None, :]), scores.dtype)
        # sigmoid(s_j - s_i) summed over j, the item itself included (it adds 1/2).
        beaten_by = tf.sigmoid(scores[:, None, :] - scores[:, :, None]) * both_real
        ranks = 0.5 + tf.reduce_sum(beaten_by, axis=-1)
        gains = _ndcg_gains(labels)
        dcg = tf.reduce_sum(gains * _discount(ranks), axis=-1, keepdims=True)
        has_gain = tf.reduce_sum(labels, axis=-1, keepdims=True) > 0
        return -tf.cast(has_gain, scores.dtype) * dcg * _inverse_ideal_dcg(gains)


@tf.keras.utils.register_keras_serializable(package="tpu_tiles")
class OrderedPairAccuracy(tf.keras.metrics.Metric):
    """Ordered pair accuracy (OPA): of the pairs of real items with label_i > label_j, the
    share with score_i > score_j (equal scores count as wrong).

    Pairs are pooled over every list seen since `reset_state`, so a list counts by its number
    of pairs, as TF-Ranking's `OPAMetric` does. `y_true`, `y_pred`: `[batch, list_size]`;
    `sample_weight` (scalar, `[batch, 1]` or `[batch, list_size]`) weighs each pair by its
    higher-labelled item's weight, and items of weight 0 are left out.
    """

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
        ordered = tf.logical_and(
            labels[:, :, None] > labels[:, None, :],
            tf.logical_and(valid[:, :, None], valid[:, None, :]),
        )
        pair_weights = tf.cast(ordered, self.dtype) * weights[:, :, None]
        right = tf.cast(scores[:, :, None] > scores[:, None, :], self.dtype)
        return tf.group(
            self.correct.assign_add(tf.reduce_sum(pair_weights * right)),
            self.pairs.assign_add(tf.reduce_sum(pair_weights)),
        )

    def result(self) -> tf.Tensor:
        return tf.math.divide_no_nan(self.correct, self.pairs)

    def reset_state(self) -> None:
        self.correct.assign(0.0)
        self.pairs.assign(0.0)
