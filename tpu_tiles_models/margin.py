"""Config 0's rule, in one place (numpy): how a ranking favours the compiler's default.

models.py's `RankingRule` is its TensorFlow twin, the part a model hands in; this module is
the rest: applying it in numpy, choosing it on validation, reading and setting it on a model.
Two parts, applied in turn to a kernel's scores (lower = faster):
- the margin `m`, subtracted from config 0's score (`with_margin`): config 0 comes first where
  `gap = score[0] - min(score[1:]) <= m`, so each candidate's top-1 error is a vectorised sum;
- the gate: config 0 kept among the first `KEEP_TOP` places (`keep_default`, bit for bit
  models.py's `keep_default_places`).
`fit` picks the best margin among quantiles of the gaps and 0 (the smallest `|m|` wins a tie);
as in sample any margin looks better than it is, `choose` keeps one only where its
cross-fitted estimate (`FOLDS` folds) beats the model's own top-1, and that estimate is what a
run reports. `choose` also weighs `ALWAYS`, config 0 first on every kernel: it fits nothing,
so its estimate is exact, and where it is the lowest the rule's pick is never worse than the
compiler's. `KeepDefault.measure` then opens the gate where that lowers the top-5 error.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from tpu_tiles_models import metrics

CANDIDATES = 41  # candidate margins: quantiles 0, 1/40, ..., 1 of the kernels' gaps (and 0)
FOLDS = 5  # of the cross-fitted estimate; kernel i is in fold i % FOLDS
# A margin no gap between scores reaches (finite, as the models' weight must be): config 0
# first on every kernel, the compiler's pick.
ALWAYS = 1e9
# The gate keeps config 0 among this many first places: the 5 the Kaggle metric reads
# (models.py's KEEP_DEFAULT_TOP, which a test holds equal).
KEEP_TOP = 5

Kernels = Sequence[tuple[np.ndarray, np.ndarray]]  # (runtimes, scores) `[num_configs]` each


def with_margin(scores: np.ndarray, margin: float) -> np.ndarray:
    """`scores` `[num_configs]` with `margin` subtracted from config 0's (a float64 copy)."""
    out = np.array(scores, dtype=np.float64)
    out[metrics.DEFAULT_CONFIG] -= margin
    return out


def keep_default(scores: np.ndarray, k: int = KEEP_TOP) -> np.ndarray:
    """Each config's place (0 = fastest, float64, usable as scores `[num_configs]`) in `scores`'
    ranking with config 0 among its `k` first: where it is not, it takes the `k`-th place, the
    `k - 1` first picks stay and the rest move down one."""
    order = np.argsort(np.asarray(scores), kind="stable")
    place = int(np.flatnonzero(order == metrics.DEFAULT_CONFIG)[0])
    if place >= k:
        rest = np.delete(order, place)
        order = np.concatenate([rest[: k - 1], [metrics.DEFAULT_CONFIG], rest[k - 1 :]])
    ranks = np.empty(len(order))
    ranks[order] = np.arange(len(order))
    return ranks


def ranking(scores: np.ndarray, keep: bool = False) -> np.ndarray:
    """The scores to rank by: `scores`, or with the gate (`keep`) `keep_default`'s."""
    return keep_default(scores) if keep else scores


def _gaps_and_picks(
    kernels: Kernels,
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


def _fit(gaps, default, other) -> float:
    finite = gaps[np.isfinite(gaps)]
    margins = np.unique(
        np.concatenate([[0.0], np.quantile(finite, np.linspace(0, 1, CANDIDATES))])
        if len(finite)
        else [0.0]
    )
    errors = _pick_errors(gaps, default, other, margins).mean(axis=0)
    best = errors.min()
    tied = margins[errors <= best + 1e-12]
    return float(tied[np.argmin(np.abs(tied))])


def fit(kernels: Kernels) -> float:
    """The margin with the lowest mean top-1 error on `(runtimes, scores)` pairs."""
    return _fit(*_gaps_and_picks(kernels))


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


def fold_margins(kernels: Kernels) -> np.ndarray:
    """`[kernels]`: each kernel's margin fitted on the other folds (kernel i in fold
    i % `FOLDS`; 0.0 where there is no other)."""
    kernels = list(kernels)
    gaps, default, other = _gaps_and_picks(kernels)
    folds = np.arange(len(kernels)) % FOLDS
    out = np.zeros(len(kernels))
    for f in range(min(FOLDS, len(kernels))):
        rest = folds != f
        if rest.any():
            out[~rest] = _fit(gaps[rest], default[rest], other[rest])
    return out


def choose(kernels: Kernels) -> Margin:
    """The lowest top-1 error of three (see the module): no margin (the model's own ranking),
    the margin fitted on all of `kernels` (its cross-fitted estimate), or `ALWAYS`; a tie
    keeps the one that fits less (none, then `ALWAYS`)."""
    kernels = list(kernels)
    own = metrics.top_k_errors(kernels)
    folds = fold_margins(kernels)
    crossed = metrics.top_k_errors([(r, with_margin(s, m)) for (r, s), m in zip(kernels, folds)])
    always = metrics.top_k_errors([(r, with_margin(s, ALWAYS)) for r, s in kernels])
    best = Margin.none(own, len(kernels))
    if always[1] < best.errors[1]:
        best = Margin(ALWAYS, always, (ALWAYS,) * len(kernels))
    if crossed[1] < best.errors[1]:
        best = Margin(fit(kernels), crossed, tuple(folds.tolist()))
    return best


def _errors(kernels: Kernels, *, keep: bool = False) -> dict[int, float]:
    return metrics.top_k_errors((r, ranking(s, keep)) for r, s in kernels)


@dataclass(frozen=True)
class KeepDefault:
    """The rule a validation split chooses, and its top-k errors (`to_json`: the run file's
    record): `errors` the model's own, `margin` config 0's (0.0 where it does not pay) and
    `margin_errors` cross-fitted with it, `chosen` whether the gate then lowers the top-5
    error (`kept`), `rule` the whole rule's, `shifted` the margin's alone (fitted on every
    kernel). `forward`: the figure of the ranking `forward` hands in, the run file's
    `final_error.val`.
    """

    chosen: bool
    errors: dict[int, float]
    kept: dict[int, float]
    margin: float = 0.0
    margin_errors: dict[int, float] | None = None
    rule: dict[int, float] | None = None
    shifted: dict[int, float] | None = None

    @property
    def forward(self) -> dict[int, float]:
        """The errors of ranking by the margin and, where chosen, config 0 kept in the top 5."""
        return self.kept if self.chosen else (self.shifted or self.errors)

    @classmethod
    def measure(cls, kernels: Kernels, *, fit_margin: bool = False) -> KeepDefault:
        """Every way on `kernels`; with `fit_margin`, config 0's margin is fitted too."""
        kernels = list(kernels)
        plain = _errors(kernels)
        fitted = choose(kernels) if fit_margin else Margin.none(plain, len(kernels))
        shifted = [(r, with_margin(s, fitted.margin)) for r, s in kernels]
        own, kept = _errors(shifted), _errors(shifted, keep=True)
        chosen = kept[5] < own[5]
        rule = fitted.errors
        if chosen:  # the margin's cross-fitted ranking, then config 0 kept in the top 5
            folds = zip(kernels, fitted.folds)
            rule = _errors([(r, with_margin(s, m)) for (r, s), m in folds], keep=True)
        return cls(chosen, plain, kept, fitted.margin, fitted.errors, rule, own)

    def to_json(self) -> dict:
        out = dict(chosen=self.chosen, val=self.errors, val_kept=self.kept, margin=self.margin)
        out.update(val_margin=self.margin_errors, val_rule=self.rule)
        return {  # error tables keyed by "1", "5", "10"; a table not measured left out
            key: {str(k): e for k, e in value.items()} if isinstance(value, dict) else value
            for key, value in out.items()
            if value is not None
        }

    def describe(self) -> str:
        """The rule in words, as training's last line says it."""
        margin = f"config 0's margin {self.margin:.4g}" if self.margin else "no margin for config 0"
        if self.margin >= ALWAYS:  # the compiler's pick did best on validation
            margin = "config 0 first on every kernel"
        keep = "config 0 kept in the top 5" if self.chosen else "config 0 not kept in the top 5"
        return f"{margin}, {keep}"

    def put_into(self, model: Any) -> KeepDefault:
        """Sets the rule's weights of `model` (models.py's; the margin only where it carries
        one, `margin_of` not None); returns the record of what `model` now ranks by: without a
        gate config 0 is never kept, as graders rank by `forward`."""
        if self.margin:  # only fitted for a model that carries one
            set_rule(model, margin=margin_of(model) + self.margin)
        if rule_of(model) is None:
            return dataclasses.replace(self, chosen=False, rule=self.margin_errors or self.errors)
        set_rule(model, keep=self.chosen)
        return self


# The rule's two weights in a model of models.py (`RankingRule`: `gate`, `margin`), by the
# keywords that build them; a model without a rule (upstream's) or built without one has None.
_WEIGHTS = {"gate": "keep_default_gate", "margin": "default_margin"}


def _weight(model: Any, name: str) -> Any:
    return getattr(getattr(model, "rule", None), name, None)


def rule_of(model: Any) -> bool | None:
    """Whether `model`'s own ranking keeps config 0 in the top 5 (its gate); None for a model
    that carries no gate (upstream's, older runs of ours)."""
    gate = _weight(model, "gate")
    return None if gate is None else float(gate.numpy()) > 0.5


def margin_of(model: Any) -> float | None:
    """Config 0's margin `model` ranks with; None for a model that carries none."""
    weight = _weight(model, "margin")
    return None if weight is None else float(weight.numpy())


def set_rule(model: Any, *, margin: float | None = None, keep: bool | None = None) -> None:
    """Sets `model`'s margin and (`keep`) its gate, those given.

    Raises:
        ValueError: `model` was built without that weight, or the margin is not finite.
    """
    for name, value in (("margin", margin), ("gate", None if keep is None else float(keep))):
        if value is None:
            continue
        weight, owner = _weight(model, name), type(model).__name__
        if weight is None:
            raise ValueError(f"{owner} was built with {_WEIGHTS[name]}=false")
        if not math.isfinite(value):
            raise ValueError(f"{owner}: the {name} must be finite, got {value}")
        weight.assign(value)
