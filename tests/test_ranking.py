"""Our ranking losses and OPA: hand-worked values on any stack, and TF-Ranking's own values
and gradients where `tensorflow_ranking` imports (the course stack)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from tpu_tiles_models import losses, ranking

LN2, LN3 = math.log(2.0), math.log(3.0)


def _value_and_gradient(loss, y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    """`loss.call(y_true, y_pred)` and the gradient of its sum with respect to `y_pred`."""
    y_pred = tf.constant(y_pred, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(y_pred)
        value = loss.call(tf.constant(y_true, tf.float32), y_pred)
    return value.numpy(), tape.gradient(value, y_pred).numpy()


def _close(got, want, rel: float = 1e-5) -> None:
    """Equal to float32 rounding, relative to the largest magnitude in `want` (or 1)."""
    want = np.asarray(want, np.float64)
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=rel, atol=rel * scale)


# ---- By hand: the maths on any stack, TF-Ranking or not. ----


def test_list_mle_by_hand():
    # Labels (1, 3, 2) order the items 1, 2, 0. Scores / temperature 2 are (0, ln 2, 0) in that
    # order, exp: (1, 2, 1): loss = [ln(1+2+1) - 0] + [ln(2+1) - ln 2] + [ln 1 - 0] = ln 6.
    loss = ranking.ListMLE(temperature=2.0)
    value, grad = _value_and_gradient(loss, [[1.0, 3.0, 2.0]], [[0.0, 0.0, 2 * LN2]])
    assert value.shape == (1, 1)
    _close(value, [[math.log(6.0)]])
    # d/ds_k = (sum over the terms whose tail holds k of its softmax share - [k heads a term])
    # / temperature: item 1: (1/4 - 1)/2; item 2: (2/4 + 2/3 - 1)/2; item 0: (1/4 + 1/3)/2.
    _close(grad, [[7 / 24, -3 / 8, 1 / 12]])
    # One item: ln(e^s) - s = 0.
    _close(_value_and_gradient(loss, [[4.0]], [[3.0]])[0], [[0.0]])


def test_list_mle_ties():
    # Tied labels, scores (0, ln 3): item 0 first gives ln(1 + 3) - 0 = ln 4, item 1 first
    # gives ln 4 - ln 3 = ln(4/3).
    y, s = [[1.0, 1.0]], [[0.0, LN3]]
    in_index_order = ranking.ListMLE(shuffle_ties=False)
    _close(_value_and_gradient(in_index_order, y, s)[0], [[math.log(4.0)]])
    tf.random.set_seed(0)
    shuffled = ranking.ListMLE()
    values = [float(shuffled.call(tf.constant(y), tf.constant(s))[0, 0]) for _ in range(32)]
    assert {round(v, 5) for v in values} == {round(math.log(4.0), 5), round(math.log(4 / 3), 5)}
    # Tied labels with tied scores: every order gives the same value, ln 2 + 0.
    _close(_value_and_gradient(shuffled, [[1.0, 1.0]], [[2.0, 2.0]])[0], [[LN2]])


def test_pairwise_hinge_by_hand():
    # Labels (2, 1, 0), scores / 10 = (1.5, 0, 2). Pairs (i above j): (0,1): 1 - 1.5 < 0 -> 0;
    # (0,2): 1 - (1.5 - 2) = 1.5; (1,2): 1 - (0 - 2) = 3. `call` sums each item's pairs.
    loss = ranking.PairwiseHinge(temperature=10.0)
    value, grad = _value_and_gradient(loss, [[2.0, 1.0, 0.0]], [[15.0, 0.0, 20.0]])
    _close(value, [[1.5, 3.0, 0.0]])
    # Each active pair moves its upper item by -1/10 and its lower one by +1/10.
    _close(grad, [[-0.1, -0.1, 0.2]])
    # Equal labels make no pair.
    value, _ = _value_and_gradient(loss, [[1.0, 1.0]], [[0.0, 99.0]])
    _close(value, [[0.0, 0.0]])
    # With the trainer's per-list mean over items: (1.5 + 3 + 0) / 3.
    per_list = losses.per_list(loss, tf.constant([[2.0, 1.0, 0.0]]), tf.constant([[15.0, 0, 20]]))
    _close(per_list.numpy(), [1.5])


def test_ordered_pair_accuracy_by_hand():
    opa = ranking.OrderedPairAccuracy()
    assert opa.name == "opa_metric"
    # Labels (0, 1, 2), scores (3, 1, 2): of the pairs (1>0), (2>0), (2>1) only (2>1) has the
    # higher score: 1/3.
    opa.update_state(tf.constant([[0.0, 1.0, 2.0]]), tf.constant([[3.0, 1.0, 2.0]]))
    assert float(opa.result()) == pytest.approx(1 / 3)
    # Pairs pool over updates: one more pair, tied in score (wrong).
    opa.update_state(tf.constant([[1.0, 0.0]]), tf.constant([[5.0, 5.0]]))
    assert float(opa.result()) == pytest.approx(1 / 4)
    opa.reset_state()
    assert float(opa.result()) == 0.0
    with pytest.raises(ValueError, match="sample_weight must be None"):
        opa.update_state(tf.constant([[0.0, 1.0]]), tf.constant([[1.0, 0.0]]), [[1.0, 1.0]])


def test_losses_table_uses_these_classes():
    assert isinstance(losses.LOSSES["ListMLELoss"](), ranking.ListMLE)
    assert isinstance(losses.LOSSES["PairwiseHingeLoss"](), ranking.PairwiseHinge)
    assert losses.LOSSES["ListMLELoss"]().temperature == 10


# ---- Against TF-Ranking 0.5.5, where it imports (not on TensorFlow >= 2.16). ----


@pytest.fixture(scope="module")
def tfr():
    return pytest.importorskip("tensorflow_ranking")


def _lists(*, ties: bool) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Named (labels, scores) batches `[batch, 7]` (one `[1, 1]`). Scores are distinct and
    away from hinge kinks. With `ties=False` no two labels of a list are equal."""
    rng = np.random.default_rng(7)
    random = rng.uniform(0.0, 4.0, (3, 7))
    tied = rng.integers(0, 3, (3, 7)).astype(float)
    mixed = np.stack([random[0], random[2], tied[0] if ties else random[1]])
    batches = {"random": random, "one": np.array([[2.0]]), "mixed": mixed}
    if ties:
        batches["tied"] = tied
    return {
        name: (labels.astype(np.float32), (rng.normal(size=labels.shape) * 8).astype(np.float32))
        for name, labels in batches.items()
    }


def _theirs(tfr, name: str):
    k = tfr.keras.losses
    return {
        "ListMLE": lambda: k.ListMLELoss(temperature=10),
        "PairwiseHinge": lambda: k.PairwiseHingeLoss(temperature=10),
    }[name]()


OURS = {
    "ListMLE": lambda: ranking.ListMLE(temperature=10),
    "PairwiseHinge": lambda: ranking.PairwiseHinge(temperature=10),
}


def _assert_same(ours, theirs, y, s, *, seed: int | None = None) -> None:
    """`call`, its gradient, `losses.per_list` and the Keras-reduced value agree. With `seed`
    the global seed is reset before each call (so random tie orders are drawn alike)."""

    def run(loss):
        if seed is not None:
            tf.random.set_seed(seed)
        value, grad = _value_and_gradient(loss, y, s)
        if seed is not None:
            tf.random.set_seed(seed)
        per_list = losses.per_list(loss, tf.constant(y), tf.constant(s)).numpy()
        if seed is not None:
            tf.random.set_seed(seed)
        return value, grad, per_list, float(loss(tf.constant(y), tf.constant(s)))

    for got, want in zip(run(ours), run(theirs)):
        _close(got, want)


@pytest.mark.parametrize("name", sorted(OURS))
def test_equals_tf_ranking_without_label_ties(tfr, name):
    for y, s in _lists(ties=False).values():
        _assert_same(OURS[name](), _theirs(tfr, name), y, s)


def test_pairwise_hinge_equals_tf_ranking_with_label_ties(tfr):
    # Tied labels make no pair: the loss does not depend on their order.
    for y, s in _lists(ties=True).values():
        _assert_same(OURS["PairwiseHinge"](), _theirs(tfr, "PairwiseHinge"), y, s)


def test_list_mle_ties_equal_tf_ranking_in_any_order(tfr):
    # Give tied labels tied scores: every order of a tie then has the same value, and the same
    # gradient summed over the tie, whichever order either implementation draws.
    for y, s in _lists(ties=True).values():
        for row in range(len(y)):
            for label in np.unique(y[row]):
                s[row, y[row] == label] = s[row, y[row] == label][0]
        ours, theirs = (
            _value_and_gradient(loss, y, s) for loss in (OURS["ListMLE"](), _theirs(tfr, "ListMLE"))
        )
        _close(ours[0], theirs[0])
        for row in range(len(y)):
            for label in np.unique(y[row]):
                tie = y[row] == label
                _close(ours[1][row, tie].sum(), theirs[1][row, tie].sum())


def test_list_mle_ties_equal_tf_ranking_under_one_seed(tfr):
    # Both shuffle ties with the same draw (op seed 37 under the global seed): the same order.
    for seed in (0, 1, 2):
        for y, s in _lists(ties=True).values():
            _assert_same(OURS["ListMLE"](), _theirs(tfr, "ListMLE"), y, s, seed=seed)


def test_ordered_pair_accuracy_equals_tf_ranking(tfr):
    ours, theirs = ranking.OrderedPairAccuracy(), tfr.keras.metrics.OPAMetric()
    for y, s in _lists(ties=True).values():
        s = np.round(s / 4)  # some tied scores too
        for metric in (ours, theirs):
            metric.update_state(tf.constant(y), tf.constant(s))
        _close(float(ours.result()), float(theirs.result()))
