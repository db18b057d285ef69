"""Losses chosen by name, upstream's weighting, and the ranking metrics, against hand figures."""

import numpy as np
import pytest
import tensorflow as tf

from tpu_tiles_models import losses, margin, metrics
from tpu_tiles_models.errors import FlagError
from tpu_tiles_models.train_args import TrainArgs


def test_parse_losses_names_the_bad_item():
    assert [w for w, _ in losses.parse_losses("ListMLELoss:1,MSE:0.02")] == [1.0, 0.02]
    with pytest.raises(ValueError, match="unknown loss 'Nope'.*known: ListMLELoss"):
        losses.parse_losses("Nope:1")
    with pytest.raises(ValueError, match="weight of 'MSE' must be a number"):
        losses.parse_losses("MSE:x")


@pytest.mark.parametrize(
    "name,results",
    [
        ("LogMSE", "logmse"),
        ("LambdaNDCG", "pilot"),
        ("ApproxNDCG", "small_approxndcg"),
        ("StandardisedHinge", "small_zhinge"),
        # Before: "unknown loss" for these three.
        ("TopListMLE", "pilot"),
        ("SlowdownSoftmax", "small_softmax"),
        ("FastFirstListMLE", None),  # its data set is not here: choosing.md has the verdict
    ],
)
def test_a_removed_loss_is_refused_in_one_line_naming_its_results(name, results):
    with pytest.raises(FlagError) as info:
        losses.parse_losses(f"ListMLELoss:1,{name}:0.1")
    where = f"benchmarks/results/suite_{results}.md" if results else "docs/choosing.md"
    assert str(info.value) == (
        f"--losses: {name} was removed (the benchmark suite rejected it: {where}); leave it out"
    )
    assert name not in losses.LOSSES
    # A run file that records it still reads: only training resolves the names.
    assert TrainArgs(losses="ListMLELoss:1,LogMSE:0.1").losses == "ListMLELoss:1,LogMSE:0.1"


def test_a_loss_named_twice_is_refused_in_one_line():
    """Before: accepted without a word (each entry weighted on its own)."""
    with pytest.raises(FlagError) as info:
        losses.parse_losses("ListMLELoss:1,MSE:0.02,MSE:0.03")
    assert str(info.value) == (
        "--losses: MSE is given 2 times in 'ListMLELoss:1,MSE:0.02,MSE:0.03'; give it once, "
        "with its weights' sum (MSE:0.05)"
    )


def test_combined_loss_is_the_normalised_weighted_sum():
    y = tf.constant([[1.0, 2.0, 3.0], [3.0, 1.0, 2.0]])
    s = tf.constant([[0.5, 0.1, 0.9], [0.2, 0.3, 0.4]])
    mse = float(tf.keras.losses.MeanSquaredError()(y, s))
    mle = float(losses.LOSSES["ListMLELoss"]()(y, s))
    got = float(losses.CombinedLoss("ListMLELoss:1,MSE:3")(y, s))
    assert got == pytest.approx(0.25 * mle + 0.75 * mse, rel=1e-5)
    assert (
        losses.CombinedLoss.from_config(losses.CombinedLoss("MSE:1").get_config()).spec == "MSE:1"
    )


@pytest.mark.parametrize("name", ["ListMLELoss", "PairwiseHingeLoss"])
def test_every_ranking_loss_prefers_the_right_order(name):
    runtimes = tf.constant([[1.0, 2.0, 4.0, 8.0]])
    good = tf.constant([[0.0, 1.0, 2.0, 3.0]])  # lower score = faster: the right order
    loss = losses.LOSSES[name]()
    assert float(loss(runtimes, good)) < float(loss(runtimes, -good))


def test_top_k_error_by_hand():
    runtimes = np.array([4.0, 2.0, 8.0, 1.0])
    scores = np.array([0.0, 1.0, 2.0, 3.0])  # ranks config 0 first, config 3 last
    assert metrics.kernel_top_k_error(runtimes, scores, 1) == pytest.approx(3.0)  # 4 vs 1
    assert metrics.kernel_top_k_error(runtimes, scores, 2) == pytest.approx(1.0)  # 2 vs 1
    assert metrics.kernel_top_k_error(runtimes, scores, 10) == 0.0  # fewer than k: all count
    errors = metrics.top_k_errors([(runtimes, scores), (runtimes, -scores)], ks=(1, 2))
    assert errors == {1: pytest.approx(1.5), 2: pytest.approx(0.5)}
    assert metrics.kaggle_score(0.25) == 0.75


def test_ordered_pair_accuracy_by_hand():
    runtimes = np.array([1.0, 2.0, 3.0, 3.0])
    assert metrics.ordered_pair_accuracy(runtimes, runtimes) == 1.0
    assert metrics.ordered_pair_accuracy(runtimes, -runtimes) == 0.0
    # Pairs (0,1) right, (0,2),(0,3) right, (1,2),(1,3) wrong: 3 of 5; the tie is skipped.
    assert metrics.ordered_pair_accuracy(runtimes, np.array([0.0, 5.0, 1.0, 1.0])) == 0.6


def test_random_floor_and_pair_accuracy():
    runtimes = [np.array([1.0, 2.0, 4.0]), np.array([3.0, 1.0, 2.0, 8.0])]
    # With every config inside the top 5, no ranking can miss the best one.
    assert metrics.baseline_top_k_errors(runtimes, "random", draws=3)[5] == 0.0
    top1 = metrics.baseline_top_k_errors(runtimes, "random", draws=200)[1]
    assert top1 == pytest.approx(((0 + 1 + 3) / 3 + (2 + 0 + 1 + 7) / 4) / 2, rel=0.1)
    perfect = [(r, r) for r in runtimes]
    reversed_ = [(r, -r) for r in runtimes]
    assert metrics.mean_pair_accuracy(perfect) == 1.0
    assert metrics.mean_pair_accuracy(reversed_) == 0.0
    big = np.arange(2000.0)
    assert metrics.mean_pair_accuracy([(big, big)], max_configs=100) == 1.0


def test_default_baseline_ranks_config_0_first_then_at_random():
    runtimes = [np.array([2.0, 1.0, 4.0, 8.0]), np.array([1.0, 3.0, 2.0])]
    errors = metrics.baseline_top_k_errors(runtimes, "default", draws=200, ks=(1, 2))
    assert errors[1] == pytest.approx((1.0 + 0.0) / 2)  # config 0 is always the top 1
    # Top 2 of the first kernel: config 0 and one of the 3 others (1 of which is the best).
    assert errors[2] == pytest.approx((2 / 3 * 1.0 + 0.0) / 2, rel=0.1)
    random = metrics.baseline_top_k_errors(runtimes, "random", draws=5)
    assert metrics.baseline_top_k_errors(runtimes, draws=5) == random
    with pytest.raises(ValueError, match="baseline='best'"):
        metrics.baseline_scores(3, "best", np.random.default_rng(0))


def test_keep_default_takes_the_kth_place_and_keeps_the_rest_in_order():
    scores = np.array([9.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0])  # config 0 ranked last
    kept = margin.keep_default(scores, k=3)
    assert np.argsort(kept).tolist() == [1, 2, 0, 3, 4, 5, 6]
    # Already inside the top k: the ranking is unchanged.
    inside = np.array([1.0, 0.0, 2.0, 3.0])
    assert np.argsort(margin.keep_default(inside, k=3)).tolist() == [1, 0, 2, 3]
    # k larger than the kernel, and a one-config kernel.
    assert np.argsort(margin.keep_default(scores, k=10)).tolist() == np.argsort(scores).tolist()
    assert margin.keep_default(np.array([5.0])).tolist() == [0.0]
    runtimes = np.array([1.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0])  # config 0 is the best
    assert metrics.kernel_top_k_error(runtimes, scores, 5) == 4.0
    assert metrics.kernel_top_k_error(runtimes, margin.keep_default(scores), 5) == 0.0
    assert metrics.kernel_top_k_error(runtimes, margin.keep_default(scores), 1) == 4.0
