"""Scoring every config of every kernel of a split with a model, and ranking by the scores.

The one scoring path: the trainer's validation and test predictions, `predict`, `evaluate`,
the bundle check and ensembles all use it, so their rankings agree exactly. Lower score =
predicted faster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import tensorflow as tf
import tqdm

from tpu_tiles_models import data, interrupts, kaggle, metrics


@dataclass
class Scored:
    """One kernel's scores `[num_configs]` (lower = faster) and runtimes (zeros on test)."""

    tile_id: str
    scores: np.ndarray
    runtimes: np.ndarray


def _score_next(model: tf.keras.Model, iterator: Iterator, *, dynamic: bool):
    """Pulls one one-kernel graph; returns (scores [n], tile_id, runtimes [n])."""
    graph = next(iterator)
    n = graph.node_sets["config"].sizes[0]
    scores = model.forward(graph, n if dynamic else int(n))[0]
    return scores, graph.node_sets["g"]["tile_id"][0], graph.node_sets["config"]["runtimes"]


def kernel_scorer(model: tf.keras.Model) -> Callable[[Iterator], tuple]:
    """`iterator -> (scores [n], tile_id, runtimes [n])` for the iterator's next kernel.

    The graph is pulled inside one traced function: a GraphTensor built in Python and passed
    in costs more than scoring it. Our models take the config count as a tensor, so one
    trace serves every kernel size; upstream's need a Python int (they `tf.stack` n copies)
    and fail to trace, so for them we fall back to eager calls, as upstream runs them.
    The model must be built (one eager `forward`) first.
    """
    traced = tf.function(lambda it: _score_next(model, it, dynamic=True))
    eager = False

    def score(iterator: Iterator) -> tuple:
        nonlocal eager
        if not eager:
            try:
                return traced(iterator)
            except (TypeError, ValueError, NotImplementedError):
                eager = True  # a tracing failure: nothing was pulled from the iterator
        return _score_next(model, iterator, dynamic=False)

    return score


def score_split(
    model: tf.keras.Model,
    split: data.Split,
    stats: data.FeatureStats,
    *,
    kernels: Sequence[int] | None = None,
    max_configs: int | None = None,
    scorer: Callable[[Iterator], tuple] | None = None,
    progress: bool = True,
    desc: str = "scoring",
) -> list[Scored]:
    """Scores all configs of every kernel (or of `kernels`) of `split`.

    Args:
      model: a built model with upstream's `forward(graph, n)`.
      split, stats: the kernels and the feature statistics the model was trained with.
      kernels: the indices of the kernels to score, in that order; default all.
      max_configs: score at most this many configs of a kernel, evenly spread in file order
        (the same ones every time; `Scored` then holds theirs); default all.
      scorer: the `kernel_scorer` of an earlier call, to skip tracing it again.
      progress, desc: the progress bar.

    Returns:
      One `Scored` per kernel, in split order (or the order of `kernels`).
    """
    total = len(split) if kernels is None else len(kernels)
    iterator = iter(data.graph_dataset(split, stats, kernels=kernels, spread=max_configs))
    scorer = scorer or kernel_scorer(model)
    scored = []
    for _ in tqdm.trange(total, desc=desc, disable=not progress, leave=False):
        scores, tile_id, runtimes = scorer(iterator)
        scored.append(Scored(tile_id.numpy().decode(), scores.numpy(), runtimes.numpy()))
        interrupts.check()
    return scored


def errors(scored: Iterable[Scored], weights: Sequence[float] | None = None) -> dict[int, float]:
    """Mean top-1/5/10 errors (upstream's formula) of scored kernels with runtimes.

    `weights`: one per kernel for a weighted mean (`KernelSample.weights`).
    """
    return metrics.top_k_errors(((s.runtimes, s.scores) for s in scored), weights=weights)


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
    sample): every kernel.
    """
    if fraction <= 0:
        raise ValueError(f"fraction must be positive, got {fraction}")
    if fraction >= 1:
        return KernelSample(None, max_configs=max_configs)
    sizes = np.minimum(np.floor(np.log10(np.maximum(split.config_counts(), 1))), 3)
    strata: dict[tuple[str, int], list[int]] = {}
    for i, (tile_id, size) in enumerate(zip(split.tile_ids, sizes)):
        strata.setdefault((data.benchmark_of(tile_id), int(size)), []).append(i)
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


def upstream_top(scores: np.ndarray, k: int) -> list[int]:
    """Upstream's ranking: the k lowest-score indices, zero-padded when fewer than k."""
    order = np.argsort(scores, kind="stable")[:k].tolist()
    return order + [0] * (k - len(order))


def prediction_rows(scored: list[Scored], top_k: int) -> list[tuple[str, list[int]]]:
    """CSV rows: each kernel's `top_k` fastest configs, padded to distinct indices."""
    return [
        (
            s.tile_id,
            kaggle.pad_top_k(
                np.argsort(s.scores, kind="stable")[:top_k].tolist(), len(s.scores), top_k
            ),
        )
        for s in scored
    ]
