"""benchmarks/default_regret.py's measures (it runs by hand, on the suite's runs)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import load_benchmark

regret = load_benchmark("default_regret")


def test_kernel_features_pool_the_nodes_and_place_config_0_among_the_configs(tmp_path):
    path = tmp_path / "k.npz"
    configs = np.array([[2.0, 0.0], [1.0, 0.0], [3.0, 0.0], [2.0, 5.0]])
    nodes = np.array([[0.0, 3.0], [np.e - 1.0, 1.0]])
    np.savez(path, node_feat=nodes, config_feat=configs, config_runtime=[6.0, 3.0, 4.0, 9.0])
    x, slowdown = regret.kernel_features(path)
    assert slowdown == pytest.approx(np.log(2.0))
    assert x.shape == (2 * 2 + 2 * 2 + 2,)
    np.testing.assert_allclose(x[:2], [0.5, (np.log(4.0) + np.log(2.0)) / 2])  # node means
    np.testing.assert_allclose(x[2:4], [1.0, np.log(4.0)])  # node maxima
    np.testing.assert_allclose(x[4:6], [np.log(3.0), 0.0])  # config 0's own
    # column 0: one config below config 0, one above; column 1: one above
    np.testing.assert_allclose(x[6:8], [0.0, -0.25])
    np.testing.assert_allclose(x[8:], [np.log(2), np.log(4)])


def test_how_few_kernels_hold_half_of_the_error():
    assert regret.half_holders(np.array([0.1, 0.5, 0.3, 0.1])) == 1
    assert regret.half_holders(np.array([0.1, 0.2, 0.4, 0.3])) == 2
    assert regret.half_holders(np.full(10, 0.1)) == 5


def test_auc_counts_the_pairs_a_positive_wins_and_ties_as_half():
    assert regret.auc(np.array([3.0, 2.0, 1.0, 0.0]), np.array([1, 0, 1, 0], bool)) == 0.75
    assert regret.auc(np.array([1.0, 1.0]), np.array([1, 0], bool)) == 0.5
    assert np.isnan(regret.auc(np.array([1.0, 2.0]), np.array([0, 0], bool)))


def test_the_margin_bound_takes_the_best_threshold_on_the_kernels_themselves():
    gap = np.array([2.0, -1.0, 0.0])
    default, other = np.array([0.5, 0.1, 0.0]), np.array([0.0, 0.3, 0.2])
    # thresholds -1, 0, 2 and none switch 3, 2, 1 and 0 kernels: 0.167, 0.1, 0.033, 0.2
    assert regret.margin_bound(gap, default, other) == pytest.approx(0.1 / 3)


def test_switching_keeps_config_0_where_the_other_config_never_pays():
    default = np.linspace(0.0, 0.5, 20)
    other = default + 1.0
    predicted = np.arange(20.0)
    assert regret.switch_error(predicted, default, other) == pytest.approx(default.mean())


def test_switching_gains_where_the_predicted_slowdown_finds_the_slow_kernels():
    default = np.r_[np.zeros(18), 1.0, 1.0]
    other = np.r_[np.ones(18), 0.0, 0.0]
    predicted = default.copy()  # the two slow kernels ranked first, in whichever fold
    # Each fold's share is fitted on the other four, which hold one or both slow kernels.
    assert regret.switch_error(predicted, default, other) < default.mean()


def test_the_ridge_recovers_a_linear_slowdown_out_of_sample():
    rng = np.random.default_rng(0)
    w = rng.normal(size=8)
    x, new = rng.normal(size=(200, 8)), rng.normal(size=(50, 8))
    x[:, 7] = new[:, 7] = 1.0  # a constant column is dropped, not divided by 0
    predict = regret.fit_regret(x, x @ w + 0.1 * rng.normal(size=200))
    assert np.corrcoef(predict(new), new @ w)[0, 1] > 0.99


def test_the_table_gives_data_columns_once_and_model_columns_over_seeds():
    rows = [
        dict(
            family="fusion",
            model="ResidualSAGE",
            seed=s,
            default=0.0461,
            half=2,
            either=e,
            rule=0.0461,
            margin_bound=0.045,
            gap_auc=0.8,
            rho=0.4,
            switch=0.05,
        )
        for s, e in ((0, 0.014), (1, 0.016))
    ]
    text = regret.markdown(rows, "python benchmarks/default_regret.py --work W")
    assert (
        "| fusion | ResidualSAGE (2) | 0.0461 | 2 | 0.0150 +- 0.0014 | 0.0461 +- 0.0000 "
        "| 0.0450 +- 0.0000 | 0.80 +- 0.00 | 0.40 | 0.0500 +- 0.0000 |" in text
    )
    assert text.startswith("`python benchmarks/default_regret.py --work W`")
