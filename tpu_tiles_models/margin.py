"""Config 0's margin: how much to favour the compiler's default, fitted on validation (numpy).

The margin `m` is subtracted from config 0's score (`with_margin`): config 0 comes first where
`gap = score[0] - min(score[1:]) <= m`, so each candidate's top-1 error is a vectorised sum.
`fit` picks the best among quantiles of the gaps and 0 (the smallest `|m|` wins a tie); as in
sample any margin looks better than it is, `choose` keeps one only where its cross-fitted
estimate (`FOLDS` folds) beats the model's own top-1, and that estimate is what a run reports.
`choose` also weighs `ALWAYS`, config 0 first on every kernel: it fits nothing, so its estimate
is exact, and where it is the lowest the rule's pick is never worse than the compiler's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from tpu_tiles_models import metrics

CANDIDATES = 41  # candidate margins: quantiles 0, 1/40, ..., 1 of the kernels' gaps (and 0)
FOLDS = 5  # of the cross-fitted estimate; kernel i is in fold i % FOLDS
# A margin no gap between scores reaches (finite, as the models' weight must be): config 0
# first on every kernel, the compiler's pick.
ALWAYS = 1e9


def with_margin(scores: np.ndarray, margin: float) -> np.ndarray:
    """`scores` `[num_configs]` with `margin` subtracted from config 0's (a float64 copy)."""
    out = np.array(scores, dtype=np.float64)
    out[metrics.DEFAULT_CONFIG] -= margin
    return out


def _gaps_and_picks(
    kernels: Sequence[tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per kernel: the gap, and the top-1 errors of config 0 and of the model's best other
    config (a one-config kernel: gap -inf, config 0 either way)."""
    gaps, default, other = [], [], []
    for runtimes, scores in kernels:
        runtimes = np.asarray(runtimes, dtype=np.float64)
        scores = np.asarray(scores, dtype=np.float64)
        best = runtimes.min()
        default.append(runtimes[0] / best - 1.0)
        if len(scores) < 2:
            gaps.append(-np.inf)
            other.append(default[-1])
            continue
        j = 1 + int(np.argmin(scores[1:]))  # ties to the lower index, as a stable sort
        gaps.append(scores[0] - scores[j])
        other.append(runtimes[j] / best - 1.0)
    return np.asarray(gaps), np.asarray(default), np.asarray(other)


def _pick_errors(gaps, default, other, margins: np.ndarray) -> np.ndarray:
    """`[kernels, margins]` top-1 errors: config 0 where `gap <= margin`, else the other."""
    return np.where(gaps[:, None] <= margins[None, :], default[:, None], other[:, None])


def _fit(gaps, default, other, weights) -> float:
    finite = gaps[np.isfinite(gaps)]
    margins = np.unique(
        np.concatenate([[0.0], np.quantile(finite, np.linspace(0, 1, CANDIDATES))])
        if len(finite)
        else [0.0]
    )
    errors = np.average(_pick_errors(gaps, default, other, margins), axis=0, weights=weights)
    best = errors.min()
    tied = margins[errors <= best + 1e-12]
    return float(tied[np.argmin(np.abs(tied))])


def fit(
    kernels: Sequence[tuple[np.ndarray, np.ndarray]], weights: Sequence[float] | None = None
) -> float:
    """The margin with the lowest (weighted) mean top-1 error on `(runtimes, scores)` pairs."""
    gaps, default, other = _gaps_and_picks(kernels)
    return _fit(gaps, default, other, None if weights is None else np.asarray(weights))


@dataclass(frozen=True)
class Margin:
    """A fitted margin (0.0 where it does not pay), the cross-fitted top-k errors of ranking
    with it, and each kernel's margin in that estimate (`fold_margins`)."""

    margin: float
    errors: dict[int, float]
    folds: tuple[float, ...] = ()

    @classmethod
    def none(cls, errors: dict[int, float], count: int) -> Margin:
        """No margin on `count` kernels whose own top-k errors are `errors`."""
        return cls(0.0, errors, (0.0,) * count)


def fold_margins(
    kernels: Sequence[tuple[np.ndarray, np.ndarray]], weights: Sequence[float] | None = None
) -> np.ndarray:
    """`[kernels]`: each kernel's margin fitted on the other folds (kernel i in fold
    i % `FOLDS`; 0.0 where there is no other)."""
    kernels = list(kernels)
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    gaps, default, other = _gaps_and_picks(kernels)
    folds = np.arange(len(kernels)) % FOLDS
    out = np.zeros(len(kernels))
    for f in range(min(FOLDS, len(kernels))):
        rest = folds != f
        if rest.any():
            out[~rest] = _fit(
                gaps[rest], default[rest], other[rest], None if w is None else w[rest]
            )
    return out


def choose(
    kernels: Sequence[tuple[np.ndarray, np.ndarray]], weights: Sequence[float] | None = None
) -> Margin:
    """The lowest top-1 error of three (see the module): no margin (the model's own ranking),
    the margin fitted on all of `kernels` (its cross-fitted estimate), or `ALWAYS`; a tie
    keeps the one that fits less (none, then `ALWAYS`)."""
    kernels = list(kernels)
    own = metrics.top_k_errors(kernels, weights=weights)
    folds = fold_margins(kernels, weights)
    crossed = metrics.top_k_errors(
        [(r, with_margin(s, m)) for (r, s), m in zip(kernels, folds)], weights=weights
    )
    always = metrics.top_k_errors(
        [(r, with_margin(s, ALWAYS)) for r, s in kernels], weights=weights
    )
    best = Margin.none(own, len(kernels))
    if always[1] < best.errors[1]:
        best = Margin(ALWAYS, always, (ALWAYS,) * len(kernels))
    if crossed[1] < best.errors[1]:
        best = Margin(fit(kernels, weights), crossed, tuple(folds.tolist()))
    return best
