"""Every synthetic family against the real tile:xla collection (run by hand, not a test).

For each family, one data set at the suite's budget (`suite.BUDGET`: 1,000 train / 200 valid /
20 test kernels, data seed 0, no config cap: the families' own counts, up to 10,000 a kernel),
then:

- data figures from `tpu-tiles inspect`'s report (`inspection.report.inspect_root`, the one
  reader of a data root's statistics): configs, nodes and edges per kernel, runtime /
  normaliser over all configs, worst / best per kernel, config 0 as the default and as the
  fastest, duplicate rows, programs per split and their overlap;
- rankers on the validation split: `random` (mean of 20 draws), `default` (config 0 first,
  then random order; mean of 20 draws), a config-only ridge (fitted on train: log runtime /
  normaliser, centred per kernel, on log1p of every config column and its square), and the
  models of `--models` (default upstream's `MLP` and `EarlyJoinSAGE`) trained by `tpu-tiles
  sweep` at the suite's budget (upstream's flags but 40 epochs), seeds `--seeds` (0,1,2), mean
  +- std over seeds; errors on every config of every validation kernel (the trainer's final
  validation). Given the suite's `--work`, it reuses the suite's data sets and runs;
- with `--full FAMILY=DIR`, the real-size target on a `python benchmarks/synth.py DIR --scale
  full --family FAMILY` set: kernels per split and configs in all;
- every calibration target beside the real figure (`REAL`, from REAL_DATA_FACTS.md) with its
  value per family, met or not.
- cross-checks against real figures that set no target: how often runtime falls as the
  output tile grows (real train split: 83% of kernels), and the config-only ridge on upstream's
  15 real measured kernels (`--fixture`), fitted on the other fixture kernels and on each
  family's train split.

Writes `benchmarks/results/families.json` and `families.md` (docs/synthetic.md's block, through
`update_readme.py`).

    python benchmarks/families.py --work /tmp/families            # data, then the models
    python benchmarks/families.py --work /tmp/families --models ""  # data figures only
    python benchmarks/families.py --work /tmp/families --full fusion=/tmp/fusion_full
    python benchmarks/families.py --markdown_only                  # rewrite the .md
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

# benchmarks/suite.py, beside this script: the budget, the data sets and the sweep's runs are
# the suite's, so the two scripts given the same --work share them (neither trains twice).
# Importing it registers the benchmark families (alt, fusion, inference).
from suite import (
    BUDGETS,
    add_budget_flags,
    budget_text,
    finished_runs,
    grid_file,
    make_data,
    mean_std,
    run_sweep,
)

from tpu_tiles_models import data, metrics, run_file, safe, synthetic
from tpu_tiles_models.inspection import report as inspect_report

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "benchmarks" / "results" / "families.json"
DRAWS = 20  # random orders for the random and default rankers
# Upstream's test fixture of 15 real measured TPU kernels, decoded (shared, never committed).
FIXTURE = REPO.parent / "shared" / "data" / "real_fixture_op_tuning.json"
FIXTURE_MIN_CONFIGS = 6  # fixture kernels scored: more configs than a top-5 holds
# The real collection (shared/REAL_DATA_FACTS.md): what each target is measured against.
REAL = {
    "train_configs_mean": 1946,
    "valid_configs_le_1000": 415 / 676,
    "valid_configs_gt_9000": 14 / 676,
    "train_configs_lt_10": 84 / 5709,
    "nodes_mean": "40.1 / 46.9 / 36.4",
    "edges_minus_nodes": "2.0 / 2.7 / 1.2",
    "nodes_max": 394,
    "ratio_mean": 4.98,
    "ratio_std": 8.20,
    "worst_over_best_median": 5.5,
    "config0_fastest": 11 / 15,
    "ejs_top5": 0.041,
    "ejs_top1": 0.117,
    "mlp_top5": 0.708,
    "full_kernels": (5709, 676, 844),
    "full_configs": 13.4e6,
    "output_tile_falls": 0.83,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", default=",".join(synthetic.FAMILIES))
    add_budget_flags(p)
    p.set_defaults(recipes="upstream", shuffled=False)  # the suite's grid and data, as default
    p.add_argument("--models", default="EarlyJoinSAGE,MLP", help="'' for data figures only")
    p.add_argument("--seeds", default="0,1,2", help="training seeds")
    p.add_argument(
        "--full",
        default="",
        help="FAMILY=DIR,...: `benchmarks/synth.py DIR --scale full --family FAMILY` sets, for "
        "the real-size target (a family without one shows '-')",
    )
    p.add_argument("--work", default="", help="data sets, runs and cache (kept; reused)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="JSON results file (and .md beside)")
    p.add_argument(
        "--fixture",
        default=str(FIXTURE),
        help="upstream's 15 real measured kernels, decoded (the cross-checks; '' to skip)",
    )
    p.add_argument(
        "--markdown_only", action="store_true", help="only rewrite the .md from the JSON file"
    )
    args = p.parse_args(argv)
    unknown = [f for f in args.families.split(",") if f not in synthetic.FAMILIES]
    if unknown:
        p.error(f"--families: unknown {unknown}; known: {', '.join(synthetic.FAMILIES)}")
    try:
        args.full = dict(item.split("=", 1) for item in filter(None, args.full.split(",")))
    except ValueError:
        p.error(f"--full: give FAMILY=DIR,..., got {args.full!r}")
    if set(args.full) - set(synthetic.FAMILIES):
        p.error(f"--full: unknown families {sorted(set(args.full) - set(synthetic.FAMILIES))}")
    if args.fixture and not args.markdown_only and not Path(args.fixture).is_file():
        p.error(f"--fixture: no file {args.fixture}; give the decoded fixture, or '' to skip")
    if not args.markdown_only and not args.work:
        p.error("--work is required (the data sets and runs are kept there)")
    return args


# --------------------------------------------------------------------------------------
# Rankers without training.
# --------------------------------------------------------------------------------------
def kernel_ratios(split: data.Split) -> list[np.ndarray]:
    """`[c]` runtime / normaliser of every kernel of a split."""
    ratio = split.config_runtime / split.config_runtime_normalizers
    offsets = split.config_offsets
    return [ratio[offsets[i] : offsets[i + 1]] for i in range(len(split))]


def _errors(values: dict[int, float]) -> dict[str, float]:
    return {f"top{k}": round(v, 4) for k, v in values.items()}


def default_errors(valid: list[np.ndarray], draws: int = DRAWS) -> dict[str, float]:
    """Top-k errors of ranking config 0 (the default) first and the rest at random."""
    per_draw = []
    for d in range(draws):
        rng = np.random.default_rng(d)
        scores = [np.r_[-1.0, rng.random(len(r) - 1)] for r in valid]
        per_draw.append(metrics.top_k_errors(zip(valid, scores)))
    return _errors({k: float(np.mean([e[k] for e in per_draw])) for k in metrics.TOP_KS})


def config_design(config_feat: np.ndarray) -> np.ndarray:
    """`[c, 48]` config-only features: log1p of each config column and its square."""
    x = np.log1p(np.maximum(config_feat.astype(np.float64), 0.0))
    return np.concatenate([x, x**2], axis=1)


def kernel_configs(split: data.Split) -> list[np.ndarray]:
    """`[c, 24]` config features of every kernel of a split."""
    offsets = split.config_offsets
    return [split.config_feat[offsets[i] : offsets[i + 1]] for i in range(len(split))]


def fit_ridge(configs: list[np.ndarray], ratios: list[np.ndarray]) -> np.ndarray:
    """`[48]` weights of a ridge on config features alone (`config_design`) for log runtime /
    normaliser, both centred per kernel: only the ranking inside a kernel counts.

    Args:
      configs: per kernel, `[c, 24]` config features.
      ratios: per kernel, `[c]` runtime / normaliser.
    """
    xs, ys = [], []
    for cfg, ratio in zip(configs, ratios):
        x, y = config_design(cfg), np.log(ratio)
        xs.append(x - x.mean(axis=0))
        ys.append(y - y.mean())
    x, y = np.concatenate(xs), np.concatenate(ys)
    return np.linalg.solve(x.T @ x + np.eye(x.shape[1]), x.T @ y)


def train_ridge(root: Path) -> np.ndarray:
    """`fit_ridge` on the train split of `root`."""
    train = data.load_split(root, "train", progress=False)
    return fit_ridge(kernel_configs(train), kernel_ratios(train))


def rankers(root: Path, ridge: np.ndarray) -> dict[str, dict[str, float]]:
    """random, default and config-only ridge (`ridge`, from `train_ridge`) top-k errors on the
    validation split."""
    valid = data.load_split(root, "valid", progress=False)
    ratios = kernel_ratios(valid)
    scores = [config_design(cfg) @ ridge for cfg in kernel_configs(valid)]
    return {
        "random": _errors(metrics.baseline_top_k_errors(ratios, draws=DRAWS)),
        "default": default_errors(ratios),
        "config-only ridge": _errors(metrics.top_k_errors(zip(ratios, scores))),
    }


def fixture_kernels(path: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    """`([c, 24] config features, [c] runtime / normaliser)` of every kernel of the decoded
    real fixture, its default run first (as config 0 is in the real data); runs that failed
    or timed nothing left out, as upstream's reader does."""
    kernels = []
    for k in json.loads(path.read_text())["kernels"]:
        runs = [r for r in k["runs"] if not r["error"] and r["compute_time_ns"] > 1]
        runs.sort(key=lambda r: not r["is_default"])  # stable: the rest keep their order
        cfg = np.array([r["config_feat_24"] for r in runs], np.float64)
        runtime = np.array([r["compute_time_ns"] for r in runs], np.float64)
        kernels.append((cfg, runtime / k["normalizer_default_ns"]))
    return kernels


def fixture_rankers(kernels: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, Any]:
    """Random, default and a config-only ridge fitted on the other fixture kernels (leave one
    kernel out), on each fixture kernel with at least `FIXTURE_MIN_CONFIGS` configs."""
    scored = [i for i, (_, r) in enumerate(kernels) if len(r) >= FIXTURE_MIN_CONFIGS]
    ratios = [kernels[i][1] for i in scored]
    loo = []
    for i in scored:
        rest = [k for j, k in enumerate(kernels) if j != i]
        w = fit_ridge([c for c, _ in rest], [r for _, r in rest])
        loo.append((kernels[i][1], config_design(kernels[i][0]) @ w))
    return {
        "kernels": len(kernels),
        "scored": len(scored),
        "configs": [len(r) for r in ratios],
        "random": _errors(metrics.baseline_top_k_errors(ratios, draws=DRAWS)),
        "default": default_errors(ratios),
        "ridge, other fixture kernels": _errors(metrics.top_k_errors(loo)),
    }


def fixture_ridge(ridge: np.ndarray, kernels: list[tuple[np.ndarray, np.ndarray]]) -> dict:
    """Top-k errors on the scored fixture kernels of a config-only ridge fitted on a family's
    train split (`train_ridge`): does what it learns from the family's tiles rank real
    kernels?"""
    scored = [(r, config_design(c) @ ridge) for c, r in kernels if len(r) >= FIXTURE_MIN_CONFIGS]
    return _errors(metrics.top_k_errors(scored))


# --------------------------------------------------------------------------------------
# Trained models.
# --------------------------------------------------------------------------------------
def train_models(a: argparse.Namespace, roots: dict[str, Path], work: Path) -> None:
    """The suite's sweep over models x seeds x families (resumable: finished points stay)."""
    run_sweep(a, grid_file(a, roots, work), work)


def model_rows(
    work: Path, roots: dict[str, Path], models: list[str]
) -> dict[str, dict[str, dict[str, Any]]]:
    """`{family: {model: {"top1": [mean, std], "top5": ..., "seeds", "seconds"}}}` from the
    sweep's run files."""
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    wanted = set(models)
    for family, run in finished_runs(work, roots):
        if run.train_args.model not in wanted or run.train_args.model_kwargs_json != "{}":
            continue  # another script's model or variant (the suite's), sharing the folder
        errors = (run.extras.get(run_file.KEEP_DEFAULT_KEY) or {}).get("val") or run.val_errors
        seconds = sum(run.extras.get("epoch_seconds", []))
        runs.setdefault((family, run.train_args.model), []).append(
            {"top1": errors["1"], "top5": errors["5"], "seconds": seconds}
        )
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (family, model), rows in sorted(runs.items()):
        cell: dict[str, Any] = {"seeds": len(rows)}
        for k in ("top1", "top5"):
            mean, std = mean_std([r[k] for r in rows])
            cell[k] = [round(mean, 4), round(std, 4)]
        cell["seconds"] = round(statistics.fmean(r["seconds"] for r in rows))
        out.setdefault(family, {})[model] = cell
    return out


# --------------------------------------------------------------------------------------
# Data figures and targets.
# --------------------------------------------------------------------------------------
def data_figures(root: Path) -> dict[str, Any]:
    """The figures the targets read, from `tpu-tiles inspect`'s report of `root`."""
    report = inspect_report.inspect_root(root, progress=False)["splits"]
    train, valid, test = report["train"], report["valid"], report["test"]
    both = [train, valid]
    valid_bins = valid["configs"]["histogram"]
    kernels = lambda s: max(s["kernels"], 1)  # noqa: E731

    def mean_over(key: str) -> float:
        return sum(s[key]["mean"] * s["kernels"] for s in both) / sum(kernels(s) for s in both)

    runtimes = [s["runtimes"] for s in both]
    weights = [s["configs"]["total"] for s in both]
    ratio_mean = np.average([r["ratio"]["mean"] for r in runtimes], weights=weights)
    ratio_var = np.average(
        [r["ratio"]["std"] ** 2 + (r["ratio"]["mean"] - ratio_mean) ** 2 for r in runtimes],
        weights=weights,
    )
    config0 = [s["runtimes"]["config0"] for s in both]
    programs = {name: report[name]["programs"] for name in ("train", "valid")}
    return {
        "train_configs_mean": round(train["configs"]["mean"], 1),
        "train_configs_median": train["configs"]["p50"],
        "valid_configs_mean": round(valid["configs"]["mean"], 1),
        "valid_configs_median": valid["configs"]["p50"],
        "valid_configs_le_1000": round(valid_bins[0]["kernels"] / kernels(valid), 4),
        "valid_configs_gt_9000": round(
            sum(b["kernels"] for b in valid_bins if b["lo"] > 9000) / kernels(valid), 4
        ),
        "configs_min": min(s["configs"]["min"] for s in (train, valid, test)),
        "configs_max": max(s["configs"]["max"] for s in (train, valid, test)),
        "train_configs_lt_10": round(train["configs"]["fewer_than_10"]["share"], 4),
        "nodes_mean": round(mean_over("nodes"), 1),
        "nodes_max": max(s["nodes"]["max"] for s in both),
        "edges_minus_nodes": round(mean_over("edges") - mean_over("nodes"), 2),
        "ratio_mean": round(float(ratio_mean), 3),
        "ratio_std": round(float(np.sqrt(ratio_var)), 3),
        "worst_over_best_median": round(train["runtimes"]["worst_over_best"]["p50"], 2),
        "config0_default": round(
            sum(c["is_default"]["kernels"] for c in config0) / sum(kernels(s) for s in both), 4
        ),
        "config0_fastest": round(
            sum(c["fastest"]["kernels"] for c in config0) / sum(kernels(s) for s in both), 4
        ),
        "normaliser_spread_median": round(train["runtimes"]["normaliser_spread"]["p50"], 4),
        "duplicate_share": round(sum(s["duplicates"]["rows"] for s in both) / sum(weights), 4),
        "duplicate_gap_median": valid["duplicates"]["gap"]["p50"]
        if valid["duplicates"]["gap"]
        else None,
        "train_programs": programs["train"]["count"],
        "train_program_sizes": [
            programs["train"]["kernels_per_program"]["min"],
            programs["train"]["kernels_per_program"]["p50"],
            programs["train"]["kernels_per_program"]["max"],
        ],
        "valid_programs": programs["valid"]["count"],
        "valid_programs_in_train": len(
            set(programs["train"]["kernels"]) & set(programs["valid"]["kernels"])
        ),
        "test_anonymised": test["programs"]["anonymised_kernels"] == test["kernels"],
        "output_tile_falls": round(train["runtimes"]["output_tile"]["runtime_falls"]["share"], 3),
    }


def full_figures(root: Path) -> dict[str, Any]:
    """Kernels per split and configs in all of a `--scale full` set (`tpu-tiles inspect`)."""
    report = inspect_report.inspect_root(root, progress=False)["splits"]
    return {
        "kernels": [report[s]["kernels"] for s in ("train", "valid", "test")],
        "configs": sum(report[s]["configs"]["total"] for s in ("train", "valid", "test")),
        "train_configs_mean": round(report["train"]["configs"]["mean"], 1),
    }


def _full_met(full: dict[str, Any] | None) -> bool:
    """The real kernel counts per split, and configs within 10% of the real total."""
    return (
        bool(full)
        and tuple(full["kernels"]) == REAL["full_kernels"]
        and (0.9 <= full["configs"] / REAL["full_configs"] <= 1.1)
    )


def _full_sentence(families: dict[str, dict[str, Any]]) -> str:
    """What the real-size row was measured on ('' without `--full` sets)."""
    means = [
        f"{f} {r['full']['train_configs_mean']:,.0f}" for f, r in families.items() if r.get("full")
    ]
    if not means:
        return ""
    return (
        " The real-size row: `benchmarks/synth.py DIR --scale full --family F` sets (seed 0); "
        f"their train kernels hold {', '.join(means)} configs on average "
        f"(real: {REAL['train_configs_mean']:,})."
    )


Target = tuple[str, str, Callable[[dict[str, Any]], Any], Callable[[Any], bool]]


def _model(r: dict[str, Any], model: str, k: str) -> float | None:
    cell = r.get("models", {}).get(model) or r["rankers"].get(model)
    if cell is None:
        return None
    value = cell[k]
    return value[0] if isinstance(value, list) else value


def _ratio_to_ejs(r: dict[str, Any], model: str) -> float | None:
    ejs, other = _model(r, "EarlyJoinSAGE", "top5"), _model(r, model, "top5")
    return None if ejs is None or other is None else round(other / ejs, 2)


# (target, the real figure, value of a family's results, whether the value meets it)
TARGETS: list[Target] = [
    ("configs per kernel, train mean 1,500-2,400", "1,946",
     lambda r: r["data"]["train_configs_mean"], lambda v: 1500 <= v <= 2400),
    ("valid kernels with <= 1,000 configs, about 60%", "61% (415 of 676)",
     lambda r: r["data"]["valid_configs_le_1000"], lambda v: 0.5 <= v <= 0.7),
    ("valid kernels with > 9,000 configs, about 2%", "2.1% (14 of 676)",
     lambda r: r["data"]["valid_configs_gt_9000"], lambda v: 0.005 <= v <= 0.04),
    ("configs per kernel 2 to 10,000", "2 to 10,000",
     lambda r: (r["data"]["configs_min"], r["data"]["configs_max"]),
     lambda v: v[0] >= 2 and v[1] <= 10000),
    ("train kernels with < 10 configs, about 1.5%", "1.5% (84 of 5,709)",
     lambda r: r["data"]["train_configs_lt_10"], lambda v: 0.005 <= v <= 0.03),
    ("nodes per kernel, mean 36-47", "40.1 / 46.9 / 36.4",
     lambda r: r["data"]["nodes_mean"], lambda v: 36 <= v <= 47),
    ("edges - nodes per kernel, about 2", "2.0 / 2.7 / 1.2",
     lambda r: r["data"]["edges_minus_nodes"], lambda v: 1 <= v <= 3),
    ("nodes per kernel, at most about 400", "394",
     lambda r: r["data"]["nodes_max"], lambda v: 200 <= v <= 400),
    ("config 0 is the default (runtime = normaliser within 5%)", "every kernel (inferred)",
     lambda r: r["data"]["config0_default"], lambda v: v >= 0.99),
    ("normaliser re-measured: median spread per kernel", "0.03-3.8% between two runs",
     lambda r: r["data"]["normaliser_spread_median"], lambda v: 0.0003 <= v <= 0.1),
    ("runtime / normaliser over all configs, mean 4-6.5", "4.98 train, 5.29 valid",
     lambda r: r["data"]["ratio_mean"], lambda v: 4 <= v <= 6.5),
    ("runtime / normaliser over all configs, std 6-10", "8.20 train, 8.12 valid",
     lambda r: r["data"]["ratio_std"], lambda v: 6 <= v <= 10),
    ("worst / best per kernel, median 4-8", "5.5 (15 fixture kernels)",
     lambda r: r["data"]["worst_over_best_median"], lambda v: v is not None and 4 <= v <= 8),
    ("config 0 the fastest, 1/3 to 2/3 of kernels", "11 of 15 fixture kernels",
     lambda r: r["data"]["config0_fastest"], lambda v: 1 / 3 <= v <= 2 / 3),
    ("duplicate rows with slightly different runtimes", "yes",
     lambda r: (r["data"]["duplicate_share"], r["data"]["duplicate_gap_median"]),
     lambda v: v[0] > 0 and v[1] is not None and 0 < v[1] < 0.05),
    ("train programs: several dozen, uneven", "61 programs, 1-266 kernels",
     lambda r: (r["data"]["train_programs"], *r["data"]["train_program_sizes"]),
     lambda v: v[0] >= 24 and v[3] >= 5 * max(v[2], 1)),
    ("valid programs not in train", "7, none in train",
     lambda r: (r["data"]["valid_programs"], r["data"]["valid_programs_in_train"]),
     lambda v: v[1] == 0),
    ("test ids anonymised (32 hex)", "yes",
     lambda r: r["data"]["test_anonymised"], lambda v: v is True),
    ("EarlyJoinSAGE top-5 error 0.025-0.10", "0.041",
     lambda r: _model(r, "EarlyJoinSAGE", "top5"), lambda v: v is not None and 0.025 <= v <= 0.1),
    ("EarlyJoinSAGE top-1 error 0.08-0.30", "0.117",
     lambda r: _model(r, "EarlyJoinSAGE", "top1"), lambda v: v is not None and 0.08 <= v <= 0.3),
    ("config-only ridge top-5 error >= 2x EarlyJoinSAGE's", "(not published)",
     lambda r: _ratio_to_ejs(r, "config-only ridge"), lambda v: v is not None and v >= 2),
    ("MLP top-5 error >= 2x EarlyJoinSAGE's", "17x (0.708 vs 0.041)",
     lambda r: _ratio_to_ejs(r, "MLP"), lambda v: v is not None and v >= 2),
    ("`--scale full`: the real kernels, configs within 10% of 13.4 million",
     "5,709 / 676 / 844, 13.4 million",
     lambda r: r.get("full"), _full_met),
]  # fmt: skip


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, tuple):
        return " / ".join(_show(v) for v in value)
    if isinstance(value, dict):  # a --scale full set's figures
        kernels = " / ".join(f"{k:,}" for k in value["kernels"])
        return f"{kernels}, {value['configs'] / 1e6:.1f} million"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if 0 < abs(value) < 1 and value != round(value, 2):
            return f"{value:.3f}"
        return f"{value:,.2f}".rstrip("0").rstrip(".")
    return f"{value:,}" if isinstance(value, int) else str(value)


def target_rows(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every target with its real figure and each family's value and verdict."""
    rows = []
    for name, real, value, met in TARGETS:
        row: dict[str, Any] = {"target": name, "real": real, "families": {}}
        for family, r in results.items():
            v = value(r)
            row["families"][family] = {"value": _show(v), "met": bool(met(v))}
        rows.append(row)
    return rows


# --------------------------------------------------------------------------------------
# Output.
# --------------------------------------------------------------------------------------
def _pm(cell: Any) -> str:
    if cell is None:
        return "-"
    if isinstance(cell, list):
        return f"{cell[0]:.3f} +- {cell[1]:.3f}"
    return f"{cell:.3f}"


def markdown(doc: dict[str, Any]) -> str:
    """families.md: the targets table and the rankers table docs/synthetic.md shows."""
    s, fams = doc["settings"], list(doc["families"])
    # Files written before the key existed were all at the suite's budget.
    suite = " (the suite's budget)" if s.get("suite_budget", True) else " (not the suite's budget)"
    lines = [
        f"`{s['command']}`: {s['budget']}{suite}; {s['test']} test kernels "
        f"per family; models trained by `tpu-tiles sweep`, seeds {s['seeds']} (mean +- std), "
        "errors on every config of every validation kernel; random and default: mean of "
        f"{DRAWS} random orders." + _full_sentence(doc["families"]),
        "",
        "| target | real | " + " | ".join(fams) + " |",
        "|---|---|" + "---|" * len(fams),
    ]
    for row in doc["targets"]:
        cells = []
        for f in fams:
            c = row["families"][f]
            cells.append(f"{c['value']} {'(met)' if c['met'] else '(**not met**)'}")
        lines.append(f"| {row['target']} | {row['real']} | " + " | ".join(cells) + " |")
    met = {f: sum(r["families"][f]["met"] for r in doc["targets"]) for f in fams}
    lines += [
        "",
        "Met: " + ", ".join(f"{f} {met[f]}/{len(doc['targets'])}" for f in fams) + ".",
        "",
        "| family | ranker | top-1 error | top-5 error |",
        "|---|---|---|---|",
    ]
    for f, r in doc["families"].items():
        for name, cell in {**r["rankers"], **r.get("models", {})}.items():
            lines.append(f"| {f} | {name} | {_pm(cell['top1'])} | {_pm(cell['top5'])} |")
    lines += [
        "",
        "Real (upstream's baselines on the real validation split, 100 epochs): EarlyJoinSAGE "
        "0.117 / 0.041, MLP 1.496 / 0.708 (top-1 / top-5).",
        *_cross_checks(doc),
    ]
    return "\n".join(lines) + "\n"


def _cross_checks(doc: dict[str, Any]) -> list[str]:
    """Real figures that set no calibration target, beside each family's (files written
    before they existed show none)."""
    fams, fx = doc["families"], doc.get("real_fixture")
    if "output_tile_falls" not in next(iter(fams.values()))["data"]:
        return []
    falls = [_pct(f["data"]["output_tile_falls"]) for f in fams.values()]
    lines = [
        "",
        "Cross-checks against real figures without a target:",
        "",
        "| check | real | " + " | ".join(fams) + " |",
        "|---|---|" + "---|" * len(fams),
        "| train kernels whose runtime falls as the output tile grows (correlation with "
        f"config column {inspect_report.OUTPUT_SUM_COLUMN}, the output bounds' sum, below "
        f"{inspect_report.FALLS_BELOW}) | "
        f"{_pct(REAL['output_tile_falls'])} | " + " | ".join(falls) + " |",
    ]
    if fx:
        ridge = [_pm(f["fixture_ridge"]["top5"]) for f in fams.values()]
        lines.append(
            f"| config-only ridge on the {fx['scored']} real fixture kernels with at least "
            f"{FIXTURE_MIN_CONFIGS} configs ({', '.join(map(str, fx['configs']))}), top-5 error; "
            "real: fitted on the other fixture kernels; families: fitted on their train split | "
            f"{_pm(fx['ridge, other fixture kernels']['top5'])} (random "
            f"{_pm(fx['random']['top5'])}, default {_pm(fx['default']['top5'])}) | "
            + " | ".join(ridge)
            + " |"
        )
    return lines


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    out = Path(a.out)
    if a.markdown_only:
        out.with_suffix(".md").write_text(markdown(json.loads(out.read_text())))
        print(f"wrote {out.with_suffix('.md')}")
        return
    work = Path(a.work)
    roots = make_data(a, work)
    if a.models and not a.no_train:
        train_models(a, roots, work)
    models = model_rows(work, roots, a.models.split(",")) if a.models else {}
    fixture = fixture_kernels(Path(a.fixture)) if a.fixture else None
    results = {}
    for family, root in roots.items():
        ridge = train_ridge(root)
        results[family] = {
            "summary": synthetic.FAMILIES[family].summary,
            "data": data_figures(root),
            "rankers": rankers(root, ridge),
            "models": models.get(family, {}),
        }
        if family in a.full:
            results[family]["full"] = full_figures(Path(a.full[family]))
        if fixture:
            results[family]["fixture_ridge"] = fixture_ridge(ridge, fixture)
    settings = {
        "command": " ".join(["python benchmarks/families.py", *argv]),
        **{k: getattr(a, k) for k in ("train", "valid", "test", "data_seed", "seeds", "epochs")},
        "early_stop": a.early_stop,
        "budget": budget_text(a),
        "suite_budget": any(all(getattr(a, k) == b[k] for k in b) for b in BUDGETS.values()),
        "models": a.models,
        "full": a.full,
    }
    doc = {"settings": settings, "real": REAL, "families": results}
    if fixture:
        doc["real_fixture"] = fixture_rankers(fixture)
    doc["targets"] = target_rows(results)
    with safe.atomic_path(out) as tmp:
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(doc))
    print(out.with_suffix(".md").read_text())
    print(f"wrote {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
