"""Scoring every config of every kernel of a split with a model, and ranking by the scores.

The one scoring path: the trainer's validation and test predictions, `predict`, `evaluate`,
the bundle check and ensembles all use it, so their rankings agree exactly. Lower score =
predicted faster. A model call is traced once for all kernel sizes (`KernelScorer`), and for
models whose configs are scored independently, small kernels share a call (`plan_groups`).
The trainer's per-epoch validation scores a fixed `KernelSample` of the kernels. A model that
scores any config NaN or infinite is refused here (`NonFiniteScores`), for every caller.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import numpy as np
import tensorflow as tf
import tqdm

from tpu_tiles_models import data, interrupts, kaggle, margin, metrics
from tpu_tiles_models.errors import UserError
from tpu_tiles_models.kernel_files import benchmark_of


class NonFiniteScores(UserError, FloatingPointError):
    """A model scored some config NaN or infinite. Sorting such scores leaves configs in file
    order, and config 0 is the compiler's default, so the ranking would pass for a fair one."""


# What `score_split` suggests for a model that scores NaN: one whose weights or feature
# statistics a run file holds (the trainer says its own).
STORED_MODEL_FIX = (
    "its weights or its run file's feature statistics are not finite (a run whose loss "
    "diverged?); train it again"
)


def check_finite(
    scores: np.ndarray, tile_id: str, *, who: str, fix: str = STORED_MODEL_FIX
) -> None:
    """Refuses one kernel's scores `[num_configs]` if any is NaN or infinite.

    Raises:
      NonFiniteScores: naming `who` (the model), the kernel, and `fix`.
    """
    bad = ~np.isfinite(scores)
    if bad.any():
        raise NonFiniteScores(
            f"{who} scores {int(bad.sum())} of the {len(bad)} configs of kernel {tile_id} as "
            f"{scores[bad][0]}, so it cannot rank them; {fix}"
        )


@dataclass
class Scored:
    """One kernel's scores `[num_configs]` (lower = faster) and runtimes (zeros on test)."""

    tile_id: str
    scores: np.ndarray
    runtimes: np.ndarray


# Kernels scored together in one model call (`score_split`): at most this many nodes x
# (padded) configs per call, about one `forward` chunk of a big kernel, and at most this many
# padded configs per real one.
GROUP_WORK = 1 << 18
GROUP_PADDING = 1.25


def own_scores(model: tf.keras.Model):
    """The model's `forward` without its keep-default rule: our models' `config_scores` (their
    fitted margin applied; the keep rule is applied once, by whoever ranks: `rule_of`),
    upstream's `forward`."""
    return getattr(model, "config_scores", None) or model.forward


def rule_of(model: tf.keras.Model) -> bool | None:
    """Whether `model`'s own ranking keeps config 0 in the top 5 (its gate, see models.py);
    None for a model that carries no rule (upstream's, older runs of ours)."""
    return getattr(model, "keeps_default", None)


def carries_margin(model: tf.keras.Model) -> bool:
    """Whether `model` carries config 0's margin (models.py's `default_margin` weight)."""
    return getattr(model, "default_margin", None) is not None


def carry_rule(model: tf.keras.Model, val: KeepDefault) -> KeepDefault:
    """Puts validation's choices into `model`'s weights: config 0's margin (fitted on scores
    with the model's margin so far, 0 after training) and the gate. Returns the record of
    what the model carries: without a gate, config 0 is never kept (a grader ranks by
    `forward` alone)."""
    if val.margin:  # only fitted for a model that carries one (`carries_margin`)
        model.set_default_margin(model.default_margin + val.margin)
    if rule_of(model) is None:
        return val.without_keep()
    model.set_keeps_default(val.chosen)
    return val


def _score_next(model: tf.keras.Model, iterator: Iterator, *, dynamic: bool):
    """Pulls one one-kernel graph; returns (scores [n], tile_id, runtimes [n])."""
    graph = next(iterator)
    n = graph.node_sets["config"].sizes[0]
    scores = own_scores(model)(graph, n if dynamic else int(n))[0]
    return scores, graph.node_sets["g"]["tile_id"][0], graph.node_sets["config"]["runtimes"]


def _score_group(model: tf.keras.Model, iterator: Iterator):
    """Pulls one graph of B kernels padded to n configs each (`data.kernel_groups`); returns
    (scores [B, n], tile ids [B], runtimes [B, n])."""
    graph = next(iterator)
    scores = own_scores(model)(graph, graph.node_sets["config"].sizes[0])
    runtimes = tf.reshape(graph.node_sets["config"]["runtimes"], tf.shape(scores))
    return scores, graph.node_sets["g"]["tile_id"], runtimes


class KernelScorer:
    """A model's traced scoring functions, made once and reused across `score_split` calls.

    Calling it scores the next kernel of an iterator: `(scores [n], tile_id, runtimes [n])`.
    The graph is pulled inside one traced function: a GraphTensor built in Python and passed
    in costs more than scoring it. Our models take the config count as a tensor, so one
    trace serves every kernel size; upstream's need a Python int (they `tf.stack` n copies)
    and fail to trace, so for them we fall back to eager calls, as upstream runs them.

    `grouped` (models whose `independent_configs` says padding is harmless): `group` scores
    several small kernels in one call, which saves the fixed cost of a call per kernel.
    The model must be built (one eager `forward`) first.
    """

    def __init__(self, model: tf.keras.Model):
        self.model = model
        self.grouped = bool(getattr(model, "independent_configs", False))
        self._one = tf.function(lambda it: _score_next(model, it, dynamic=True))
        self._group = tf.function(lambda it: _score_group(model, it))
        self._eager = False
        # `score_split(..., reuse=True)`'s prepared passes: key -> (split, dataset).
        self._kept: dict[tuple, tuple[data.Split, tf.data.Dataset]] = {}

    def __call__(self, iterator: Iterator) -> tuple:
        if not self._eager:
            try:
                return self._one(iterator)
            except (TypeError, ValueError, NotImplementedError):
                self._eager = True  # a tracing failure: nothing was pulled from the iterator
        return _score_next(self.model, iterator, dynamic=False)

    def group(self, iterator: Iterator) -> tuple:
        """`(scores [B, n], tile ids [B], runtimes [B, n])` of the next group's kernels."""
        return self._group(iterator)

    def dataset(self, split: data.Split, key: tuple, make, reuse: bool) -> tf.data.Dataset:
        """`make(cache)`'s dataset; with `reuse`, the one made for the same `split` and `key`
        before, which replays the graphs its first pass kept."""
        if not reuse:
            return make(False)
        full_key = (id(split), *key)
        kept = self._kept.get(full_key)
        if kept is None or kept[0] is not split:
            kept = self._kept[full_key] = (split, make(True))
        return kept[1]


def kernel_scorer(model: tf.keras.Model) -> KernelScorer:
    """The `KernelScorer` of `model` (built), to pass to every `score_split` call."""
    return KernelScorer(model)


def plan_groups(order: Sequence[int], configs: np.ndarray, nodes: np.ndarray) -> list[list[int]]:
    """Kernels of `order` in groups to score together: similar config counts (`configs`, one per
    kernel of `order`), within `GROUP_WORK` and `GROUP_PADDING`; a big kernel alone."""
    plan: list[list[int]] = []
    group: list[int] = []
    node_sum = real = 0
    for k, c, n in sorted(zip(order, configs, nodes), key=lambda t: t[1]):  # stable
        c, n = int(c), int(n)
        if group and (
            (node_sum + n) * c > GROUP_WORK or (len(group) + 1) * c > GROUP_PADDING * (real + c)
        ):
            plan.append(group)
            group, node_sum, real = [], 0, 0
        group.append(k)
        node_sum, real = node_sum + n, real + c
    if group:
        plan.append(group)
    return plan


def score_split(
    model: tf.keras.Model,
    split: data.Split,
    stats: data.FeatureStats,
    *,
    kernels: Sequence[int] | None = None,
    max_configs: int | None = None,
    scorer: KernelScorer | None = None,
    progress: bool = True,
    desc: str = "scoring",
    reuse: bool = False,
    who: str = "the model",
    fix: str = STORED_MODEL_FIX,
) -> list[Scored]:
    """Scores all configs of every kernel (or of `kernels`) of `split`; refuses a model that
    scores any config NaN or infinite.

    Args:
      model: a built model with upstream's `forward(graph, n)`; scored without its ranking
        rule (`own_scores`), which the caller applies (`rule_of`).
      split, stats: the kernels and the feature statistics the model was trained with.
      kernels: the indices of the kernels to score, in that order; default all.
      max_configs: score at most this many configs of a kernel, evenly spread in file order
        (the same ones every time; `Scored` then holds theirs); default all.
      scorer: the `kernel_scorer` of an earlier call, to skip tracing it again.
      progress, desc: the progress bar.
      reuse: keep the kernels' prepared graphs in `scorer`, and use those kept by an earlier
        call with the same split, kernels and `max_configs` (the trainer's sample, scored
        every epoch; a full pass would hold a second copy of the split).
      who, fix: the model (its directory) and what to do, for the message of non-finite
        scores.

    Returns:
      One `Scored` per kernel, in split order (or the order of `kernels`).

    Raises:
      NonFiniteScores: at the first kernel with a NaN or infinite score, naming it.
    """
    scorer = scorer or kernel_scorer(model)
    if scorer.grouped:
        scored = _score_groups(split, stats, kernels, max_configs, scorer, progress, desc, reuse)
        for s in scored:
            check_finite(s.scores, s.tile_id, who=who, fix=fix)
        return scored
    total = len(split) if kernels is None else len(kernels)
    key = ("one", None if kernels is None else tuple(kernels), max_configs)
    graphs = scorer.dataset(
        split,
        key,
        lambda cache: data.graph_dataset(
            split, stats, kernels=kernels, spread=max_configs, cache=cache
        ),
        reuse,
    )
    iterator = iter(graphs)
    scored = []
    for _ in tqdm.trange(total, desc=desc, disable=not progress, leave=False):
        scores, tile_id, runtimes = scorer(iterator)
        scored.append(Scored(tile_id.numpy().decode(), scores.numpy(), runtimes.numpy()))
        check_finite(scored[-1].scores, scored[-1].tile_id, who=who, fix=fix)
        interrupts.check()
    _to_the_end(iterator)
    return scored


def _to_the_end(iterator: Iterator) -> None:
    """Reads past the last graph: a kept (`reuse`) pass is complete only once its end is read."""
    next(iterator, None)


def _score_groups(
    split, stats, kernels, max_configs, scorer, progress, desc, reuse
) -> list[Scored]:
    """`score_split` with several kernels per model call (`plan_groups`)."""
    order = list(range(len(split))) if kernels is None else [int(k) for k in kernels]
    # Each distinct config row is scored once and its score copied to the configs that
    # repeat it (the real collection has such repeats): the same scores, less work.
    first_alone = bool(getattr(scorer.model, "default_first", False))
    distinct = {
        k: data.DistinctConfigs.of(split, k, max_configs, first_alone=first_alone) for k in order
    }
    configs = np.array([len(distinct[k].rows) for k in order])
    nodes = np.diff(split.node_offsets)[order]
    plan = plan_groups(order, configs, nodes)
    key = ("groups", tuple(order), max_configs)
    rows = {k: d.rows for k, d in distinct.items()}
    groups = scorer.dataset(
        split,
        key,
        lambda cache: data.kernel_groups(split, stats, plan, cache=cache, rows=rows),
        reuse,
    )
    iterator = iter(groups)
    results: dict[int, Scored] = {}
    with tqdm.tqdm(total=len(order), desc=desc, disable=not progress, leave=False) as bar:
        for group in plan:
            scores, tile_ids, _ = (t.numpy() for t in scorer.group(iterator))
            for j, k in enumerate(group):
                d = distinct[k]
                kernel_scores = scores[j, : len(d.rows)][d.inverse]
                results[k] = Scored(tile_ids[j].decode(), kernel_scores, d.runtimes(split))
            bar.update(len(group))
            interrupts.check()
    _to_the_end(iterator)
    return [results[k] for k in order]


@dataclass(frozen=True)
class KernelSample:
    """Kernels of a split to score, each one's weight in the mean over the split, and at most
    how many configs of each (evenly spread in file order, see `score_split`).

    `indices=None`: every kernel, equal weights; `max_configs=None`: every config.
    """

    indices: tuple[int, ...] | None
    weights: tuple[float, ...] | None = None
    max_configs: int | None = None

    @property
    def is_subset(self) -> bool:
        return self.indices is not None or self.max_configs is not None


ALL_KERNELS = KernelSample(None)


def stratified_sample(
    split: data.Split, fraction: float, *, seed: int, max_configs: int | None = None
) -> KernelSample:
    """A fixed sample of about `fraction` of `split`'s kernels, stratified by program and size,
    and of each at most `max_configs` configs (None: all).

    The strata are the kernels of one program with 2-9, 10-99, 100-999 or 1000+ configs
    (a Kaggle score is a mean over kernels, and small and large kernels are ranked with
    different success). Each stratum gives `round(fraction * size)` kernels, at least one,
    drawn with `seed`; each kernel drawn weighs `size / drawn`, so the weighted mean of a
    per-kernel figure estimates its mean over the whole split without bias. A big kernel
    costs as much to score as hundreds of small ones, and the sample keeps their proportion,
    so its cost is about `fraction` of a full pass. `fraction >= 1` (or strata too small to
    sample): every kernel. A cap no kernel reaches is no cap (`max_configs=None`).
    """
    if fraction <= 0:
        raise ValueError(f"fraction must be positive, got {fraction}")
    counts = split.config_counts()
    if max_configs is not None and (len(counts) == 0 or counts.max() <= max_configs):
        max_configs = None
    if fraction >= 1:
        return KernelSample(None, max_configs=max_configs)
    sizes = np.minimum(np.floor(np.log10(np.maximum(counts, 1))), 3)
    strata: dict[tuple[str, int], list[int]] = {}
    for i, (tile_id, size) in enumerate(zip(split.tile_ids, sizes)):
        strata.setdefault((benchmark_of(tile_id), int(size)), []).append(i)
    rng = np.random.default_rng(seed)
    chosen: dict[int, float] = {}
    for key in sorted(strata):
        members = strata[key]
        take = max(1, round(fraction * len(members)))
        for i in rng.choice(members, size=take, replace=False):
            chosen[int(i)] = len(members) / take
    if len(chosen) == len(split.tile_ids):  # every stratum too small to sample
        return KernelSample(None, max_configs=max_configs)
    indices = tuple(sorted(chosen))
    return KernelSample(indices, tuple(chosen[i] for i in indices), max_configs)


def ranking(scores: np.ndarray, keep_default: bool = False) -> np.ndarray:
    """The scores to rank by: `scores`, or with `keep_default` `metrics.keep_default`'s."""
    return metrics.keep_default(scores) if keep_default else scores


def errors(
    scored: Iterable[Scored], weights: Sequence[float] | None = None, *, keep_default: bool = False
) -> dict[int, float]:
    """Mean top-1/5/10 errors (upstream's formula) of scored kernels with runtimes; with
    `keep_default`, of the rankings with config 0 kept among the 5 first.

    `weights`: one per kernel for a weighted mean (`KernelSample.weights`).
    """
    pairs = ((s.runtimes, ranking(s.scores, keep_default)) for s in scored)
    return metrics.top_k_errors(pairs, weights=weights)


@dataclass(frozen=True)
class KeepDefault:
    """The ranking rule a validation split chooses, and the figures (stored in the run file,
    `to_json`).

    `margin`: config 0's margin (`margin.choose`; 0.0 where it does not pay or the model
    cannot carry one), `margin_errors` the cross-fitted top-k errors of ranking with it.
    `chosen`: whether keeping config 0 in the top 5 lowers the top-5 error once the margin is
    applied (and, once final, only when the model carries the gate: `carry_rule`). `errors`
    are the model's own top-k errors, `kept` those with the margin and config 0 kept in the
    top 5; `rule` those of the whole rule the run ranks by (the margin cross-fitted, then the
    keep rule where chosen); `shifted` those with the margin alone (fitted on every kernel).
    `forward` is the figure of the ranking the model's `forward` gives: the run file's
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
    def measure(
        cls,
        scored: list[Scored],
        weights: Sequence[float] | None = None,
        *,
        fit_margin: bool = False,
    ) -> KeepDefault:
        """Every way on `scored` (weighted means with `weights`, see `errors`); with
        `fit_margin`, config 0's margin is fitted too (`margin.choose`)."""
        plain = errors(scored, weights)
        pairs = [(s.runtimes, s.scores) for s in scored]
        fitted = (
            margin.choose(pairs, weights) if fit_margin else margin.Margin.none(plain, len(pairs))
        )
        shifted = [
            dataclasses.replace(s, scores=margin.with_margin(s.scores, fitted.margin))
            for s in scored
        ]
        own, kept = errors(shifted, weights), errors(shifted, weights, keep_default=True)
        chosen = kept[5] < own[5]
        rule = fitted.errors
        if chosen:  # the margin's cross-fitted ranking, then config 0 kept in the top 5
            rule = metrics.top_k_errors(
                [
                    (r, metrics.keep_default(margin.with_margin(sc, m)))
                    for (r, sc), m in zip(pairs, fitted.folds)
                ],
                weights=weights,
            )
        return cls(chosen, plain, kept, fitted.margin, fitted.errors, rule, own)

    def without_keep(self) -> KeepDefault:
        """This record for a model that cannot carry the keep rule: not chosen, and the rule's
        errors the margin's alone."""
        return dataclasses.replace(self, chosen=False, rule=self.margin_errors or self.errors)

    def to_json(self) -> dict:
        out = {
            "chosen": self.chosen,
            "val": {str(k): v for k, v in self.errors.items()},
            "val_kept": {str(k): v for k, v in self.kept.items()},
            "margin": self.margin,
        }
        if self.margin_errors is not None:
            out["val_margin"] = {str(k): v for k, v in self.margin_errors.items()}
        if self.rule is not None:
            out["val_rule"] = {str(k): v for k, v in self.rule.items()}
        return out


def upstream_top(scores: np.ndarray, k: int, *, keep_default: bool = False) -> list[int]:
    """Upstream's ranking: the k lowest-score indices, zero-padded when fewer than k (with
    `keep_default`, config 0 kept among the 5 first)."""
    order = np.argsort(ranking(scores, keep_default), kind="stable")[:k].tolist()
    return order + [0] * (k - len(order))


def prediction_rows(
    scored: list[Scored], top_k: int, *, keep_default: bool = False
) -> list[tuple[str, list[int]]]:
    """CSV rows: each kernel's `top_k` fastest configs, padded to distinct indices (with
    `keep_default`, config 0 kept among the 5 first)."""
    return [
        (
            s.tile_id,
            kaggle.pad_top_k(
                np.argsort(ranking(s.scores, keep_default), kind="stable")[:top_k].tolist(),
                len(s.scores),
                top_k,
            ),
        )
        for s in scored
    ]


@dataclass
class FinalScores:
    """A finished model's final figures, as its run file stores them: its validation errors
    and whether to keep config 0 in the top 5 (`val`), and the test split's errors (`metrics`
    mode) or upstream's top-`kaggle.UPSTREAM_TOP` ranking per kernel (`predictions` mode)."""

    val: KeepDefault
    test_errors: dict[int, float] | None = None
    test_ranks: dict[str, list[int]] | None = None


def final_scores(
    model,
    dataset,
    *,
    test_mode: str,
    scorer: KernelScorer | None = None,
    val: KeepDefault | None = None,
    progress: bool = True,
) -> FinalScores:
    """The final validation (every config of every validation kernel; not again when `val`,
    the best epoch's, is given) and the test split's errors or ranking. Validation's choices,
    config 0's margin and keeping config 0 in the top 5, go into the model's weights, and the
    test ranking follows the model's rule. No test split: no test figures."""
    if val is None:
        val = KeepDefault.measure(
            score_split(
                model, dataset.valid, dataset.stats, scorer=scorer, progress=progress, desc="valid"
            ),
            fit_margin=carries_margin(model),
        )
    val = carry_rule(model, val)
    final = FinalScores(val)
    if dataset.test is not None and len(dataset.test):
        scored = score_split(
            model, dataset.test, dataset.stats, scorer=scorer, progress=progress, desc="test"
        )
        if test_mode == "metrics":
            final.test_errors = errors(scored)
        else:
            final.test_ranks = {
                s.tile_id: upstream_top(
                    s.scores, kaggle.UPSTREAM_TOP, keep_default=bool(rule_of(model))
                )
                for s in scored
            }
    return final
