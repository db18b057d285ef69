"""A whole synthetic tree: tile ids per split, one kernel per npz file, and its summary."""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tpu_tiles_models import files, kaggle
from tpu_tiles_models.synthetic.families import COST_MODELS, make_kernel
from tpu_tiles_models.synthetic.graph import pick

SPLITS = ("train", "valid", "test")

# Benchmark groups: model names with their kernel-kind mix (conv, dot, reduce, elementwise).
BENCHMARK_GROUPS: dict[str, tuple[tuple[str, ...], tuple[float, float, float, float]]] = {
    "convnet": (
        (
            "resnet50",
            "resnet101",
            "inception_v3",
            "efficientnet_b0",
            "efficientnet_b7",
            "mobilenet_v2",
            "mask_rcnn",
            "retinanet",
            "unet3d",
            "densenet121",
            "shapemask",
            "vgg16",
            "alexnet",
        ),
        (0.55, 0.05, 0.12, 0.28),
    ),
    "transformer": (
        (
            "bert_base",
            "bert_large",
            "transformer_lm",
            "t5_small",
            "gpt2_medium",
            "vit_b16",
            "wmt_transformer",
            "albert",
            "xlnet",
        ),
        (0.12, 0.38, 0.2, 0.3),
    ),
    "recsys": (
        ("ncf", "dlrm", "wide_deep", "rnn_lm", "lstm_translate", "deepfm"),
        (0.05, 0.3, 0.2, 0.45),
    ),
}


def _benchmarks(seed: int) -> dict[str, list[tuple[str, str]]]:
    """Disjoint `(name, group)` benchmark pools for train and valid."""
    rng = np.random.default_rng([seed, 7919])
    names = []
    for group, (models, _) in BENCHMARK_GROUPS.items():
        for m in models:
            for mode in ("train", "inference"):
                batch = int(pick(rng, (1, 8, 16, 32, 64, 128, 256)))
                names.append((f"{m}_{mode}_batch_{batch}", group))
    order = rng.permutation(len(names))
    cut = int(0.8 * len(names))
    return {"train": [names[i] for i in order[:cut]], "valid": [names[i] for i in order[cut:]]}


def read_test_ids(path: str | Path) -> list[str]:
    """Tile ids (without `tile:xla:`) of a sample_submission-style csv, in file order."""
    prefix = kaggle.TILE_PREFIX
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    return [r[0][len(prefix) :] for r in rows if r and r[0].startswith(prefix)]


def _split_plan(
    counts: dict[str, int], seed: int, test_ids: list[str] | None
) -> list[tuple[str, int, str, tuple[float, ...]]]:
    """`(split, index, tile_id, kind weights)` for every kernel, deterministic in `seed`."""
    pools = _benchmarks(seed)
    plan, seen = [], set()
    for s_idx, split in enumerate(SPLITS):
        rng = np.random.default_rng([seed, 104729, s_idx])
        for i in range(counts[split]):
            if split == "test":
                group = list(BENCHMARK_GROUPS)[rng.integers(len(BENCHMARK_GROUPS))]
                tid = test_ids[i] if test_ids is not None else rng.bytes(16).hex()
            else:
                name, group = pools[split][rng.integers(len(pools[split]))]
                tid = f"{name}_{rng.bytes(8).hex()}"
            while tid in seen:  # never two kernels with one id
                tid = hashlib.md5(tid.encode()).hexdigest() if split == "test" else tid + "0"
            seen.add(tid)
            plan.append((split, i, tid, BENCHMARK_GROUPS[group][1]))
    return plan


def _write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Writes an npz atomically (see `files.atomic_path`)."""
    with files.atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)


def generate(
    out_dir: str | Path,
    *,
    train: int = 300,
    valid: int = 60,
    test: int = 60,
    seed: int = 0,
    max_configs: int | None = None,
    min_configs: int = 2,
    cost_model: str = "roofline",
    test_ids_from: str | Path | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Writes `out_dir/{train,valid,test}/<tile_id>.npz`.

    Args:
        out_dir: the tree's root.
        train: train kernels.
        valid: validation kernels.
        test: test kernels (ignored with `test_ids_from`).
        seed: everything is a function of it.
        max_configs: cap on configs per kernel (default 6000).
        min_configs: floor on configs per kernel.
        cost_model: "roofline" or "alt".
        test_ids_from: a sample_submission.csv whose tile ids (and count) the test split takes.
        progress: show a progress bar.

    Returns:
        `{"train": n, "valid": n, "test": n, "kernels": total, "configs": total_configs,
        "out_dir": str}`. Test runtimes are written as zeros.
    """
    if cost_model not in COST_MODELS:
        raise ValueError(f"cost_model must be one of {COST_MODELS}, got {cost_model!r}")
    if min_configs < 1 or (max_configs is not None and max_configs < min_configs):
        raise ValueError(f"need 1 <= min_configs <= max_configs, got {min_configs}, {max_configs}")
    test_ids = read_test_ids(test_ids_from) if test_ids_from is not None else None
    counts = {
        "train": train,
        "valid": valid,
        "test": len(test_ids) if test_ids is not None else test,
    }
    out = Path(out_dir)
    for split in SPLITS:
        (out / split).mkdir(parents=True, exist_ok=True)
    plan = _split_plan(counts, seed, test_ids)
    if progress:
        from tqdm import tqdm

        plan = tqdm(plan, desc="synthetic kernels", unit="kernel")
    total_configs = 0
    for split, i, tid, weights in plan:
        rng = np.random.default_rng([seed, SPLITS.index(split), i, 1])
        arrays = make_kernel(
            rng,
            kind_weights=weights,
            max_configs=max_configs,
            min_configs=min_configs,
            cost_model=cost_model,
            labelled=split != "test",
        )
        total_configs += len(arrays["config_feat"])
        _write_npz(out / split / f"{tid}.npz", arrays)
    return {
        **counts,
        "kernels": sum(counts.values()),
        "configs": total_configs,
        "out_dir": str(out),
    }


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    """min / p10 / p50 / p90 / max of a list (empty -> {})."""
    if not len(values):
        return {}
    q = np.quantile(np.asarray(values, np.float64), [0.0, 0.1, 0.5, 0.9, 1.0])
    return {k: float(v) for k, v in zip(("min", "p10", "p50", "p90", "max"), q)}


def summarize(root: str | Path) -> dict[str, Any]:
    """Counts and quick stats of a generated (or real) tree, for the CLI to print.

    Args:
        root: a tree with `{train,valid,test}/*.npz`.

    Returns:
        `{"root", "kernels", "configs", "splits": {split: {"kernels", "configs", "nodes",
        "edges", "configs_per_kernel", "best_ratio", "worst_over_best"}}}` where the last five
        are quantile dicts (ratio stats only for splits with runtimes).
    """
    root = Path(root)
    splits: dict[str, dict[str, Any]] = {}
    for split in SPLITS:
        paths = sorted((root / split).glob("*.npz"))
        nodes, edges, configs, best, spread = [], [], [], [], []
        for path in paths:
            with np.load(path) as d:
                nodes.append(len(d["node_opcode"]))
                edges.append(len(d["edge_index"]))
                configs.append(len(d["config_runtime"]))
                rt = d["config_runtime"].astype(np.float64)
                if rt.min() > 0:
                    best.append(float(np.min(rt / d["config_runtime_normalizers"])))
                    spread.append(float(rt.max() / rt.min()))
        splits[split] = {
            "kernels": len(paths),
            "configs": int(sum(configs)),
            "nodes": _quantiles(nodes),
            "edges": _quantiles(edges),
            "configs_per_kernel": _quantiles(configs),
            "best_ratio": _quantiles(best),
            "worst_over_best": _quantiles(spread),
        }
    return {
        "root": str(root),
        "kernels": sum(s["kernels"] for s in splits.values()),
        "configs": sum(s["configs"] for s in splits.values()),
        "splits": splits,
    }
