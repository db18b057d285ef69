"""Scoring every config of every kernel of a split with a model, and ranking by the scores.

The one scoring path: the trainer's validation and test predictions, `predict`, `evaluate`,
the bundle check and ensembles all use it, so their rankings agree exactly. Lower score =
predicted faster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

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
    limit: int | None = None,
    scorer: Callable[[Iterator], tuple] | None = None,
    progress: bool = True,
    desc: str = "scoring",
) -> list[Scored]:
    """Scores all configs of every kernel (or the first `limit`) of `split`.

    Args:
      model: a built model with upstream's `forward(graph, n)`.
      split, stats: the kernels and the feature statistics the model was trained with.
      limit: score only the first `limit` kernels.
      scorer: the `kernel_scorer` of an earlier call, to skip tracing it again.
      progress, desc: the progress bar.

    Returns:
      One `Scored` per kernel, in split order.
    """
    total = len(split) if limit is None else min(limit, len(split))
    iterator = iter(data.graph_dataset(split, stats).take(total))
    scorer = scorer or kernel_scorer(model)
    scored = []
    for _ in tqdm.trange(total, desc=desc, disable=not progress, leave=False):
        scores, tile_id, runtimes = scorer(iterator)
        scored.append(Scored(tile_id.numpy().decode(), scores.numpy(), runtimes.numpy()))
        interrupts.check()
    return scored


def errors(scored: Iterable[Scored]) -> dict[int, float]:
    """Mean top-1/5/10 errors (upstream's formula) of scored kernels with runtimes."""
    return metrics.top_k_errors((s.runtimes, s.scores) for s in scored)


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
