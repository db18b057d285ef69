"""Ranking the configs of whole splits with a model, and the course's prediction command.

`score_split` is the one scoring path: the trainer's validation and test predictions, the
evaluator and `tiles_gen_predictions_csv.py` all use it, so their rankings agree exactly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import tensorflow as tf
import tqdm

from tpu_tiles_models import data, export, kaggle, registry


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

    Pass the `kernel_scorer` of an earlier call as `scorer` to skip tracing it again.
    """
    total = len(split) if limit is None else min(limit, len(split))
    iterator = iter(data.graph_dataset(split, stats).take(total))
    scorer = scorer or kernel_scorer(model)
    scored = []
    for _ in tqdm.trange(total, desc=desc, disable=not progress, leave=False):
        scores, tile_id, runtimes = scorer(iterator)
        scored.append(Scored(tile_id.numpy().decode(), scores.numpy(), runtimes.numpy()))
    return scored


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


# ---------------------------------------------------------------------------------------------
# Reloading a trained model for prediction
# ---------------------------------------------------------------------------------------------


def load_for_prediction(
    model_dir: str | Path,
    data_root: str | Path,
    *,
    split: str = "test",
    cache_dir: str | None = None,
    models_path: str | Path | None = None,
    progress: bool = True,
) -> tuple[tf.keras.Model, data.Dataset, dict]:
    """Reloads `model_dir` by the course procedure with the statistics it was trained with.

    The returned dataset holds `split` (and, when the statistics were refitted, every split).
    See `trained_data`; when refitted statistics give other widths than the saved model, the
    `--toy_data` subset is tried, since that is the usual cause.
    """
    model_dir = Path(os.path.expanduser(str(model_dir))).resolve()
    if not model_dir.is_dir():
        raise export.ExportError(f"{model_dir}: no such model directory (pass --dir model_<h>)")
    run_info = export.read_run(model_dir)
    module = registry.load_models_module(models_path)
    registry.model_class(run_info["args"]["model"], module)  # fail fast on unknown names
    saved = export.load_saved_model(model_dir)
    errors = []
    for toy in (False, True):
        dataset, _ = trained_data(
            run_info, data_root, split=split, toy_data=toy, cache_dir=cache_dir,
            progress=progress,
        )  # fmt: skip
        sample = data.kernel_graph(getattr(dataset, split), 0, dataset.stats)
        try:
            model = export.rebuild(
                model_dir, run_info, sample, num_ops=dataset.num_ops, module=module, saved=saved
            )
            return model, dataset, run_info
        except export.ShapeMismatch as e:  # other causes are not about the data: no retry
            if _has_stored_stats(run_info):
                raise
            errors.append(str(e))
    raise export.ExportError(
        f"{errors[0]}; retrying with the --toy_data subset's statistics failed too, so the "
        f"model was trained on other data than {data_root}"
    )


def _has_stored_stats(run_info: dict) -> bool:
    return run_info.get(export.EXTRAS_KEY, {}).get("feature_stats") is not None


def trained_data(
    run_info: dict,
    data_root: str | Path,
    *,
    split: str = "test",
    toy_data: bool = False,
    cache_dir: str | None = None,
    progress: bool = True,
) -> tuple[data.Dataset, str]:
    """`split` under the statistics the model of `run_info` was trained with, and their source.

    Our trainer stores them in the run file, so only `split` is read. For a model from
    upstream's `tiles_train.py` they are refitted as training did: all splits, train kernels
    with at least `--configs` configs, the first 100 files of each with `toy_data`.
    """
    if _has_stored_stats(run_info):
        stats = data.FeatureStats.from_json(run_info[export.EXTRAS_KEY]["feature_stats"])
        dataset = data.load_dataset(data_root, splits=(split,), stats=stats,
                                    cache_dir=cache_dir, progress=progress)  # fmt: skip
        return dataset, "stats from run file"
    dataset = data.load_dataset(
        data_root,
        min_train_configs=run_info["args"]["configs"],
        toy_data=toy_data,
        cache_dir=cache_dir,
        progress=progress,
    )
    return dataset, "stats refitted from train"


def predict_to_csv(
    model_dir: str | Path,
    data_root: str | Path,
    out: str | Path,
    *,
    top_k: int = kaggle.TOP_K,
    cache_dir: str | None = None,
    models_path: str | Path | None = None,
    progress: bool = True,
) -> tuple[Path, int]:
    """The course command: ranks every test kernel, writes `ID,TopConfigs`; returns (path, rows)."""
    model, dataset, _ = load_for_prediction(
        model_dir, data_root, cache_dir=cache_dir, models_path=models_path, progress=progress
    )
    scored = score_split(model, dataset.test, dataset.stats, progress=progress, desc="test")
    rows = prediction_rows(scored, top_k)
    kaggle.write_predictions_csv(out, rows)
    return Path(out), len(rows)
