"""Scoring every config of every kernel of a split with a model, and ranking by the scores.

The one scoring path, so every command's rankings agree; lower score = predicted faster. A
model that scores any config NaN or infinite is refused here (`NonFiniteScores`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import numpy as np
import tensorflow as tf
import tqdm

from tpu_tiles_models import data, interrupts, kaggle, margin, metrics
from tpu_tiles_models.errors import UserError


class NonFiniteScores(UserError, FloatingPointError):
    """A model scored some config NaN or infinite (sorted, config 0 would stay first)."""


# What `score_split` suggests for a stored model that scores NaN (the trainer says its own).
STORED_MODEL_FIX = (
    "its weights or its run file's feature statistics are not finite (a run whose loss "
    "diverged?); train it again"
)


def check_finite(
    scores: np.ndarray, tile_id: str, *, who: str, fix: str = STORED_MODEL_FIX
) -> None:
    """Refuses one kernel's scores `[num_configs]` if any is NaN or infinite."""
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


# Kernels scored together in one call: at most this many nodes x (padded) configs, about one
# `forward` chunk of a big kernel, and at most this many padded configs per real one.
GROUP_WORK = 1 << 18
GROUP_PADDING = 1.25


def own_scores(model: tf.keras.Model):
    """The model's `forward` without its keep-default gate (which whoever ranks applies,
    `margin.rule_of`): our models' `config_scores` (margin applied), upstream's `forward`."""
    return getattr(model, "config_scores", None) or model.forward


def _score(model: tf.keras.Model, iterator: Iterator, *, dynamic: bool):
    """(scores [B, n], tile ids [B]) of the next graph: B kernels padded to n configs each."""
    graph = next(iterator)
    n = graph.node_sets["config"].sizes[0]
    return own_scores(model)(graph, n if dynamic else int(n)), graph.node_sets["g"]["tile_id"]


class KernelScorer:
    """A built model's traced scoring, reused across `score_split` calls: it pulls the next
    graph of an iterator inside the trace (a GraphTensor passed in costs more than scoring it);
    upstream's models need a Python int config count and run eagerly. `grouped`: several
    kernels per call (`independent_configs` models)."""

    def __init__(self, model: tf.keras.Model):
        self.model = model
        self.grouped = bool(getattr(model, "independent_configs", False))
        self._traced = tf.function(lambda it: _score(model, it, dynamic=True))
        self._eager = False
        # `score_split(reuse=True)`'s prepared passes: key -> (split, dataset).
        self._kept: dict[tuple, tuple[data.Split, tf.data.Dataset]] = {}

    def __call__(self, iterator: Iterator) -> tuple:
        if not self._eager:
            try:
                return self._traced(iterator)
            except (TypeError, ValueError, NotImplementedError):
                self._eager = True  # a tracing failure: nothing was pulled from the iterator
        return _score(self.model, iterator, dynamic=False)

    def dataset(self, split: data.Split, key: tuple, make, reuse: bool) -> tf.data.Dataset:
        """`make(cache=...)`'s dataset; with `reuse`, the one made before for `split` and `key`."""
        if not reuse:
            return make(cache=False)
        full_key = (id(split), *key)
        kept = self._kept.get(full_key)
        if kept is None or kept[0] is not split:
            kept = self._kept[full_key] = (split, make(cache=True))
        return kept[1]


def plan_groups(order: Sequence[int], configs: np.ndarray, nodes: np.ndarray) -> list[list[int]]:
    """Kernels of `order` in groups of similar config counts (`configs`, one per kernel) within
    `GROUP_WORK` and `GROUP_PADDING`; a big kernel alone."""
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
    """One `Scored` per kernel of `split` (or of `kernels`, in order) on at most `max_configs`
    configs each, by `own_scores`, refused by `check_finite` (`who`, `fix`). `reuse`: keep the
    prepared graphs in `scorer` for the next call on the same kernels (the trainer's sample;
    not a full pass, which would hold a second copy of the split).
    """
    scorer = scorer or KernelScorer(model)
    grouped = scorer.grouped
    order = list(range(len(split))) if kernels is None else [int(k) for k in kernels]
    # Grouped, each distinct config row is scored once (the real collection repeats rows).
    first_alone = bool(getattr(model, "default_first", False))
    distinct = {
        k: data.DistinctConfigs.of(split, k, max_configs, first_alone=first_alone, merge=grouped)
        for k in order
    }
    if grouped:
        configs = np.array([len(distinct[k].rows) for k in order])
        plan = plan_groups(order, configs, np.diff(split.node_offsets)[order])
        rows = {k: d.rows for k, d in distinct.items()}
        make = functools.partial(data.kernel_groups, split, stats, plan, rows)
    else:  # configs that see each other: one kernel a call, every config
        plan = [[k] for k in order]
        make = functools.partial(
            data.graph_dataset, split, stats, kernels=kernels, spread=max_configs
        )
    iterator = iter(scorer.dataset(split, (grouped, tuple(order), max_configs), make, reuse))
    scored: dict[int, Scored] = {}
    with tqdm.tqdm(total=len(order), desc=desc, disable=not progress, leave=False) as bar:
        for group in plan:
            scores, tile_ids = (t.numpy() for t in scorer(iterator))
            for j, k in enumerate(group):
                d = distinct[k]
                s = scored[k] = Scored(
                    tile_ids[j].decode(), scores[j, : len(d.rows)][d.inverse], d.runtimes(split)
                )
                check_finite(s.scores, s.tile_id, who=who, fix=fix)
            bar.update(len(group))
            interrupts.check()
    next(iterator, None)  # a kept (`reuse`) pass is complete only once its end is read
    return [scored[k] for k in order]


@dataclass(frozen=True)
class KernelSample:
    """Kernels of a split to score (None: all), and at most how many configs of each (None:
    all; see `score_split`)."""

    indices: tuple[int, ...] | None
    max_configs: int | None = None

    @property
    def is_subset(self) -> bool:
        return self.indices is not None or self.max_configs is not None


ALL_KERNELS = KernelSample(None)


def pairs(scored: Iterable[Scored]) -> list[tuple[np.ndarray, np.ndarray]]:
    """`(runtimes, scores)` of each kernel: what `metrics` and `margin` take."""
    return [(s.runtimes, s.scores) for s in scored]


def _top(scores: np.ndarray, k: int, keep_default: bool) -> list[int]:
    """The k lowest-score indices (with `keep_default`, config 0 kept among the 5 first)."""
    return np.argsort(margin.ranking(scores, keep_default), kind="stable")[:k].tolist()


def upstream_top(scores: np.ndarray, k: int, *, keep_default: bool = False) -> list[int]:
    """Upstream's ranking: `_top`, zero-padded when fewer than k."""
    order = _top(scores, k, keep_default)
    return order + [0] * (k - len(order))


def prediction_rows(
    scored: list[Scored], top_k: int, *, keep_default: bool = False
) -> list[tuple[str, list[int]]]:
    """CSV rows: each kernel's `_top`, padded to `top_k` distinct indices."""
    pad = kaggle.pad_top_k
    return [
        (s.tile_id, pad(_top(s.scores, top_k, keep_default), len(s.scores), top_k)) for s in scored
    ]


@dataclass
class FinalScores:
    """A finished model's validation record, and the test split's errors (`metrics` mode) or
    upstream's top-`kaggle.UPSTREAM_TOP` ranking per kernel (`predictions` mode)."""

    val: margin.KeepDefault
    test_errors: dict[int, float] | None = None
    test_ranks: dict[str, list[int]] | None = None


def final_scores(
    model,
    dataset,
    *,
    test_mode: str,
    scorer: KernelScorer | None = None,
    val: margin.KeepDefault | None = None,
    progress: bool = True,
) -> FinalScores:
    """The final validation on all of valid (unless `val`, the best epoch's, is given), its
    choices (config 0's margin, the keep gate) put into the model's weights, then the test
    split's errors or ranking by the model's rule (none without a test split)."""
    score = functools.partial(score_split, model, scorer=scorer, progress=progress)
    if val is None:
        scored = score(dataset.valid, dataset.stats, desc="valid")
        val = margin.KeepDefault.measure(
            pairs(scored), fit_margin=margin.margin_of(model) is not None
        )
    final = FinalScores(val.put_into(model))
    if dataset.test is not None and len(dataset.test):
        scored = score(dataset.test, dataset.stats, desc="test")
        keep = bool(margin.rule_of(model))
        if test_mode == "metrics":
            final.test_errors = metrics.top_k_errors(pairs(scored))
        else:
            top = kaggle.UPSTREAM_TOP
            final.test_ranks = {
                s.tile_id: upstream_top(s.scores, top, keep_default=keep) for s in scored
            }
    return final
