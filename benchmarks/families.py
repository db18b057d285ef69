"""Data-side calibration of every synthetic generator family (run by hand, not a test).

For each family, generates a set (default 300 train / 60 valid kernels, seed 0) and records:

- nodes, edges and configs per kernel (train + valid): quantiles;
- random ranking's top-1/5/10 error on valid (mean of `--random_seeds` seeds), the floor a
  model must beat; upstream's EarlyJoinSAGE on the *real* validation split reaches top-5
  0.02-0.10 and top-1 0.05-0.45, so random ranking should be clearly worse than that;
- the compiler-default tile's error on valid: `max(0, 1 / best - 1)` per kernel where `best`
  is the least `runtime / normalizer` (the normaliser is the default tile's runtime);
- a graph-blind ranker's top-k errors on valid: a ridge regression of
  `log(runtime / normalizer)` (centred per kernel) on the config features alone, fitted on
  train; it shows how much of the ranking needs the graph;
- duplicated config rows: their share and the median relative runtime gap between copies
  (real data: about 0.4%);
- how close per-column means and stds of node and config features are to the real train
  split's (`tile_feature_stats.json`): over the columns that are not constant on real train,
  the median and 75th percentile of |log10(std ratio)| (a column constant here counts as
  infinitely far), the median |mean difference| in real stds, and how many of those columns
  are constant here.

Writes `benchmarks/results/families.json` and prints a table.

    python benchmarks/families.py   # --stats PATH if shared/data is not beside the checkout
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tpu_tiles_models import files, metrics, synthetic

REPO = Path(__file__).resolve().parents[1]
DEFAULT_STATS = REPO.parent / "shared" / "data" / "tile_feature_stats.json"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "families.json"
QUANTILES = {"min": 0.0, "p10": 0.1, "p50": 0.5, "p90": 0.9, "p99": 0.99, "max": 1.0}
# What is known of the real tile:xla collection (the TpuGraphs README and paper, upstream's
# published tiles_evaluate.py output for EarlyJoinSAGE on the real validation split, issue 11).
REAL = {
    "kernels": {"train": 5709, "valid": 676, "test": 844},
    "nodes": {"min": 2, "mode": "20-40", "max": 394},
    "edges": {"min": 1, "max": 711},
    "configs_per_kernel": {"min": 2, "max": "over 6000"},
    "duplicate_runtime_gap": "about 0.4%",
    "early_join_sage_valid": {"top1": "0.05-0.45", "top5": "0.02-0.10"},
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", default=",".join(synthetic.FAMILIES))
    p.add_argument("--train", type=int, default=300)
    p.add_argument("--valid", type=int, default=60)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max_configs", type=int, default=None)
    p.add_argument("--random_seeds", type=int, default=20)
    p.add_argument("--stats", default=str(DEFAULT_STATS), help="real tile_feature_stats.json")
    p.add_argument("--work", default="", help="keep the generated sets here (default: temp)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="JSON results file (and .md beside)")
    p.add_argument(
        "--markdown_only", action="store_true", help="only rewrite the .md from the JSON file"
    )
    args = p.parse_args(argv)
    unknown = [f for f in args.families.split(",") if f not in synthetic.FAMILIES]
    if unknown:
        p.error(f"--families: unknown {unknown}; known: {', '.join(synthetic.FAMILIES)}")
    return args


def load_split(root: Path, split: str) -> list[dict[str, np.ndarray]]:
    """Every kernel of a split, in name order."""
    kernels = []
    for path in sorted((root / split).glob("*.npz")):
        with np.load(path) as d:
            kernels.append({k: d[k] for k in d.files})
    return kernels


def quantiles(values: list[float]) -> dict[str, float]:
    """The `QUANTILES` of a list."""
    q = np.quantile(np.asarray(values, np.float64), list(QUANTILES.values()))
    return {name: round(float(v), 3) for name, v in zip(QUANTILES, q)}


def targets(kernel: dict[str, np.ndarray]) -> np.ndarray:
    """`[c]` runtime / normaliser, the quantity the competition ranks."""
    return kernel["config_runtime"] / kernel["config_runtime_normalizers"]


def random_errors(valid: list[dict[str, np.ndarray]], seeds: int) -> dict[str, float]:
    """Mean over `seeds` random rankings of the top-k errors on valid."""
    errors = metrics.random_top_k_errors([targets(k) for k in valid], draws=seeds)
    return {f"top{k}": round(v, 4) for k, v in errors.items()}


def default_tile_error(valid: list[dict[str, np.ndarray]]) -> float:
    """Mean over kernels of how much slower the default tile is than the best listed one."""
    return round(float(np.mean([max(0.0, 1.0 / targets(k).min() - 1.0) for k in valid])), 4)


def _config_design(config_feat: np.ndarray) -> np.ndarray:
    """`[c, 48]` graph-blind features: log1p of each config column and its square."""
    x = np.log1p(np.maximum(config_feat.astype(np.float64), 0.0))
    return np.concatenate([x, x**2], axis=1)


def graph_blind_errors(
    train: list[dict[str, np.ndarray]], valid: list[dict[str, np.ndarray]]
) -> dict[str, float]:
    """Top-k errors on valid of a ridge ranker that sees only config features."""
    xs, ys = [], []
    for k in train:
        x = _config_design(k["config_feat"])
        y = np.log(targets(k))
        xs.append(x - x.mean(axis=0))  # per-kernel centring: only the ranking inside counts
        ys.append(y - y.mean())
    x, y = np.concatenate(xs), np.concatenate(ys)
    w = np.linalg.solve(x.T @ x + 1.0 * np.eye(x.shape[1]), x.T @ y)
    errors = metrics.top_k_errors((targets(k), _config_design(k["config_feat"]) @ w) for k in valid)
    return {f"top{k}": round(v, 4) for k, v in errors.items()}


def duplicates(kernels: list[dict[str, np.ndarray]]) -> dict[str, float]:
    """Share of config rows that repeat an earlier row, and the median relative runtime gap
    between a repeated row and its first copy."""
    repeated, rows, gaps = 0, 0, []
    for k in kernels:
        cfg, rt = k["config_feat"], k["config_runtime"].astype(np.float64)
        _, first, inverse = np.unique(cfg, axis=0, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        dup = np.flatnonzero(first[inverse] != np.arange(len(cfg)))
        repeated, rows = repeated + len(dup), rows + len(cfg)
        base = rt[first[inverse[dup]]]
        gaps.extend(np.abs(rt[dup] - base) / base)
    return {
        "share": round(repeated / max(rows, 1), 4),
        "median_gap": round(float(np.median(gaps)), 5) if gaps else None,
    }


def _rank_quantile(values: np.ndarray, q: float) -> float | None:
    """The `q` quantile as one of the values (no interpolation, so it stays finite while
    fewer than `1 - q` of the values are infinite); None (JSON null) when it is infinite."""
    value = float(np.quantile(values, q, method="inverted_cdf"))
    return round(value, 3) if np.isfinite(value) else None


def feature_closeness(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> dict[str, Any]:
    """How near the per-column mean/std of `x` `[rows, d]` are to the real ones (`[d]` each),
    over the columns not constant on real train (there the std is exactly 1 and the mean 0
    or 1). A column constant here counts as infinitely far in the std ratio."""
    varying = ~((std == 1.0) & np.isin(mean, (0.0, 1.0)))
    m, s = x[:, varying].mean(axis=0), x[:, varying].std(axis=0)
    with np.errstate(divide="ignore"):
        log_ratio = np.abs(np.log10(s / std[varying]))
    mean_gap = np.abs(m - mean[varying]) / std[varying]
    return {
        "real_columns": int(varying.sum()),
        "constant_here": int((s == 0).sum()),
        "median_abs_log10_std_ratio": _rank_quantile(log_ratio, 0.5),
        "p75_abs_log10_std_ratio": _rank_quantile(log_ratio, 0.75),
        "median_mean_gap_in_real_stds": round(float(np.median(mean_gap)), 3),
    }


def family_figures(root: Path, stats: dict[str, Any] | None, seeds: int) -> dict[str, Any]:
    """Every figure of one generated set."""
    train, valid = load_split(root, "train"), load_split(root, "valid")
    both = train + valid
    out: dict[str, Any] = {
        "kernels": {"train": len(train), "valid": len(valid)},
        "nodes": quantiles([len(k["node_opcode"]) for k in both]),
        "edges": quantiles([len(k["edge_index"]) for k in both]),
        "configs_per_kernel": quantiles([len(k["config_feat"]) for k in both]),
        "best_over_default": quantiles([targets(k).min() for k in both]),
        "worst_over_best": quantiles([targets(k).max() / targets(k).min() for k in both]),
        "random_valid": random_errors(valid, seeds),
        "default_tile_valid": default_tile_error(valid),
        "graph_blind_valid": graph_blind_errors(train, valid),
        "duplicates": duplicates(both),
    }
    if stats is not None:
        nodes = np.concatenate([k["node_feat"] for k in train]).astype(np.float64)
        configs = np.concatenate([k["config_feat"] for k in train]).astype(np.float64)
        out["node_features"] = feature_closeness(
            nodes, np.array(stats["node_mean"]), np.array(stats["node_std"])
        )
        out["config_features"] = feature_closeness(
            configs, np.array(stats["config_mean"]), np.array(stats["config_std"])
        )
    return out


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def print_table(results: dict[str, dict[str, Any]]) -> None:
    """One row per family."""
    head = (
        f"{'family':<10}{'nodes p50/max':>14}{'configs p10/p50/max':>21}"
        f"{'random t1/t5/t10':>20}{'default':>9}{'blind t1/t5':>13}{'dup %':>7}{'gap %':>7}"
        f"{'node std':>10}{'cfg std':>9}"
    )
    print(head)
    for name, r in results.items():
        n, c, rnd, b = (
            r["nodes"],
            r["configs_per_kernel"],
            r["random_valid"],
            r["graph_blind_valid"],
        )
        gap = r["duplicates"]["median_gap"]
        print(
            f"{name:<10}{n['p50']:>7.0f}/{n['max']:<6.0f}"
            f"{c['p10']:>9.0f}/{c['p50']:.0f}/{c['max']:<6.0f}"
            f"{rnd['top1']:>8.3f}/{rnd['top5']:.3f}/{rnd['top10']:.3f}"
            f"{r['default_tile_valid']:>9.3f}{b['top1']:>7.3f}/{b['top5']:.3f}"
            f"{100 * r['duplicates']['share']:>7.2f}"
            f"{100 * gap if gap is not None else float('nan'):>7.2f}"
            f"{_fmt(r.get('node_features', {}).get('median_abs_log10_std_ratio')):>10}"
            f"{_fmt(r.get('config_features', {}).get('median_abs_log10_std_ratio')):>9}"
        )
    print(
        "node/cfg std: median |log10(std / real std)| over the columns real train varies on "
        "(a column constant here counts as infinitely far)"
    )


def markdown(doc: dict[str, Any]) -> str:
    """families.md: the calibration table README shows, from the JSON results."""
    s = doc["settings"]
    lines = [
        f"`{s['command']}` ({s['train']} train / {s['valid']} valid kernels, seed {s['seed']}; "
        f"random ranking: mean of {s['random_seeds']} draws)",
        "",
        "| family | nodes p50 / max | configs per kernel p10 / p50 / max | random top-1 / 5 / 10 "
        "err | config-only ranker top-1 / 5 err | duplicate rows, runtime gap | node / config "
        "std distance to real* |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in doc["families"].items():
        n, c, rnd, b, d = (
            r["nodes"],
            r["configs_per_kernel"],
            r["random_valid"],
            r["graph_blind_valid"],
            r["duplicates"],
        )
        gap = "-" if d["median_gap"] is None else f"{100 * d['median_gap']:.2f}%"
        node = _fmt(r.get("node_features", {}).get("median_abs_log10_std_ratio"))
        config = _fmt(r.get("config_features", {}).get("median_abs_log10_std_ratio"))
        lines.append(
            f"| {name} | {n['p50']:.0f} / {n['max']:.0f} | {c['p10']:.0f} / {c['p50']:.0f} / "
            f"{c['max']:.0f} | {rnd['top1']:.3f} / {rnd['top5']:.3f} / {rnd['top10']:.3f} | "
            f"{b['top1']:.3f} / {b['top5']:.3f} | {100 * d['share']:.1f}%, {gap} | {node} / "
            f"{config} |"
        )
    lines += [
        "",
        "Real collection: nodes 2-394 (mode 20-40), configs 2 to over 6,000 per kernel, "
        "duplicate configs about 0.4% apart; upstream's EarlyJoinSAGE on the real validation "
        "split: top-1 error 0.05-0.45, top-5 0.02-0.10 per benchmark.",
        "*median |log10(synthetic std / real std)| over the feature columns that vary on the "
        "real train split (`shared/data/tile_feature_stats.json`); 0 is a perfect match.",
    ]
    return "\n".join(lines) + "\n"


def _one_family(
    name: str, work: Path, args: argparse.Namespace, stats: dict[str, Any] | None
) -> dict[str, Any]:
    """Generates (or reuses) one family's set under `work` and measures it."""
    root = work / f"{name}_{args.train}_{args.valid}_{args.seed}_{args.max_configs}"
    start = time.perf_counter()
    if not root.is_dir():
        synthetic.generate(
            root,
            train=args.train,
            valid=args.valid,
            test=0,
            seed=args.seed,
            max_configs=args.max_configs,
            family=name,
            progress=False,
        )
    out = {
        "summary": synthetic.FAMILIES[name].summary,
        "seconds_to_generate": round(time.perf_counter() - start, 1),
    }
    out.update(family_figures(root, stats, args.random_seeds))
    return out


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    out = Path(args.out)
    if args.markdown_only:
        out.with_suffix(".md").write_text(markdown(json.loads(out.read_text())))
        print(f"wrote {out.with_suffix('.md')}")
        return
    stats_path = Path(args.stats)
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else None
    if stats is None:
        print(f"{stats_path} not found: feature closeness left out")
    with tempfile.TemporaryDirectory(prefix="families_") as tmp:
        work = Path(args.work or tmp)
        results = {name: _one_family(name, work, args, stats) for name in args.families.split(",")}
    print_table(results)
    command = " ".join(["python benchmarks/families.py", *argv])
    meta = {
        "command": command,
        "train": args.train,
        "valid": args.valid,
        "seed": args.seed,
        "max_configs": args.max_configs,
        "random_seeds": args.random_seeds,
        "stats": stats_path.name if stats else None,
    }
    with files.atomic_path(out) as tmp:
        doc = {"settings": meta, "real": REAL, "families": results}
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(doc))
    print(f"wrote {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
