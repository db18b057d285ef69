"""Config 0's margin (`margin.py`): the rule, the fit, and the cross-fitted choice, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from tpu_tiles_models import margin, metrics, scoring


def _kernel(runtimes, scores):
    return np.asarray(runtimes, dtype=np.float64), np.asarray(scores, dtype=np.float64)


def test_with_margin_lowers_config_0_only_and_copies():
    scores = np.array([3.0, 1.0, 2.0], dtype=np.float32)
    shifted = margin.with_margin(scores, 2.5)
    np.testing.assert_array_equal(shifted, [0.5, 1.0, 2.0])
    np.testing.assert_array_equal(scores, [3.0, 1.0, 2.0])
    assert shifted.dtype == np.float64


def test_config_0_comes_first_exactly_where_its_gap_is_at_most_the_margin():
    runtimes, scores = _kernel([2.0, 1.0, 4.0], [5.0, 3.0, 4.0])  # gap 2
    for m, first in ((1.999, 1), (2.0, 0), (7.0, 0), (-1.0, 1)):
        order = np.argsort(margin.with_margin(scores, m), kind="stable")
        assert order[0] == first, m


def _two_kinds(n: int, bias: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """Kernels whose model favours config 0 by `bias` too much: config 0 is the fastest in
    every other kernel, and the model's other pick is the fastest config in the rest."""
    out = []
    for i in range(n):
        if i % 2:  # config 0 twice as slow as config 1; the model prefers config 1 by 1.0
            out.append(_kernel([2.0, 1.0, 3.0], [3.0 - bias, 2.0, 5.0]))
        else:  # config 0 the fastest; the model prefers it by 1.0 more than the others
            out.append(_kernel([1.0, 1.5, 3.0], [-1.0 - bias, 0.0, 5.0]))
    return out


def test_fit_finds_the_margin_that_undoes_a_bias_toward_config_0():
    kernels = _two_kinds(40, bias=3.0)
    own = metrics.top_k_errors(kernels)[1]
    assert own == pytest.approx(0.5)  # config 0 first everywhere, twice as slow on half
    m = margin.fit(kernels)
    assert -4.0 <= m < -2.0  # the gaps are -4 (config 0 fastest) and -2 (it is not)
    fitted = [(r, margin.with_margin(s, m)) for r, s in kernels]
    assert metrics.top_k_errors(fitted)[1] == 0.0


def test_the_smallest_margin_wins_a_tie_and_0_is_a_candidate():
    kernels = [_kernel([1.0, 2.0], [0.0, 1.0]), _kernel([1.0, 2.0], [0.0, 3.0])]
    assert margin.fit(kernels) == 0.0  # already right: no margin needed


def test_choose_keeps_a_margin_that_pays_out_of_sample():
    kernels = _two_kinds(40, bias=3.0)
    chosen = margin.choose(kernels)
    assert chosen.margin == margin.fit(kernels) != 0.0
    assert chosen.errors[1] == 0.0  # every fold's margin separates the two kinds too


def test_choose_refuses_a_margin_that_only_fits_noise():
    """Runtimes unrelated to the scores: any margin's gain is in-sample luck, and the
    cross-fitted estimate says so."""
    rng = np.random.default_rng(0)
    kernels = [_kernel(rng.uniform(1, 2, 30), rng.normal(size=30)) for _ in range(200)]
    in_sample = margin.fit(kernels)
    gain = (
        metrics.top_k_errors(kernels)[1]
        - metrics.top_k_errors([(r, margin.with_margin(s, in_sample)) for r, s in kernels])[1]
    )
    assert in_sample != 0.0 and gain > 0  # in sample, a margin always looks like a gain
    chosen = margin.choose(kernels)
    assert chosen.margin == 0.0
    assert chosen.errors == metrics.top_k_errors(kernels)


def test_choose_puts_config_0_first_everywhere_where_the_compilers_pick_does_best():
    """Config 0 the fastest on 9 kernels in 10, the model's scores unrelated to which: its own
    pick is a random config, and config 0 everywhere (nothing fitted, so its estimate is
    exact) beats it and any margin fitted on the other folds."""
    rng = np.random.default_rng(1)
    kernels = []
    for i in range(100):
        runtimes = rng.uniform(1.2, 2.0, 20)
        runtimes[0 if i % 10 else 1] = 1.0
        kernels.append(_kernel(runtimes, rng.normal(size=20)))
    chosen = margin.choose(kernels)
    assert chosen.margin == margin.ALWAYS
    assert chosen.folds == (margin.ALWAYS,) * 100
    picks = [int(np.argmin(margin.with_margin(s, chosen.margin))) for _, s in kernels]
    assert picks == [0] * 100
    config_0 = np.mean([r[0] / r.min() - 1.0 for r, _ in kernels])
    assert chosen.errors[1] == pytest.approx(config_0)  # the compiler's pick's own error
    assert chosen.errors[1] < metrics.top_k_errors(kernels)[1]


def test_fold_margins_fit_each_fold_on_the_others():
    kernels = _two_kinds(10, bias=3.0)
    folds = margin.fold_margins(kernels)
    for f in range(margin.FOLDS):
        rest = [k for i, k in enumerate(kernels) if i % margin.FOLDS != f]
        assert folds[f] == margin.fit(rest)
    assert margin.fold_margins(kernels[:1]).tolist() == [0.0]


def test_one_config_kernels():
    kernels = [_kernel([1.0], [0.0]), *_two_kinds(20, bias=3.0)]
    m = margin.fit(kernels)
    assert -4.0 <= m < -2.0
    assert margin.choose(kernels).errors[1] == 0.0


def test_keep_default_measures_the_margin_then_the_keep_rule():
    """The record a run stores: the model's own errors, the margin's cross-fitted ones, and
    the rule's; with `fit_margin` off (upstream's models) the margin stays 0."""
    scored = [
        scoring.Scored(str(i), s.astype(np.float32), r)
        for i, (r, s) in enumerate(_two_kinds(40, 3))
    ]
    measured = margin.KeepDefault.measure(scoring.pairs(scored), fit_margin=True)
    assert measured.errors[1] == pytest.approx(0.5)
    assert measured.margin != 0.0 and measured.margin_errors[1] == 0.0
    assert measured.rule == measured.margin_errors  # config 0 already in every top 5
    blind = margin.KeepDefault.measure(scoring.pairs(scored))
    assert blind.margin == 0.0 and blind.margin_errors == blind.errors
    record = measured.to_json()
    assert record["margin"] == measured.margin and record["val_rule"]["1"] == 0.0


def test_set_rule_sets_a_models_weights_and_names_what_it_lacks():
    import models

    model = models.MLP(4, 8)
    assert margin.rule_of(model) is False and margin.margin_of(model) == 0.0
    margin.set_rule(model, margin=0.25, keep=True)
    assert margin.rule_of(model) is True and margin.margin_of(model) == 0.25
    with pytest.raises(ValueError, match=r"^MLP: the margin must be finite, got nan$"):
        margin.set_rule(model, margin=float("nan"))
    bare = models.MLP(4, 8, keep_default_gate=False, default_margin=False)
    assert margin.rule_of(bare) is None and margin.margin_of(bare) is None
    with pytest.raises(ValueError, match=r"^MLP was built with keep_default_gate=false$"):
        margin.set_rule(bare, keep=True)
    with pytest.raises(ValueError, match=r"^MLP was built with default_margin=false$"):
        margin.set_rule(bare, margin=0.1)
    assert margin.rule_of(object()) is None and margin.margin_of(object()) is None  # upstream's
