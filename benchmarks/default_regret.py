"""Where the compiler's pick loses, and whether a kernel's features say where, run by hand.

The single pick beats config 0 (the compiler's default) only on kernels where config 0 is slow,
so a model must know where those are. Per family and finished suite run, on every config of
every validation kernel:

- `default`: config 0's top-1 error; `half`: how few kernels hold half of it;
- `either`: per kernel the better of config 0 and the model's first other config (the bound
  of any rule choosing between them, as `pick_bound.py`); `rule`: the run's rule as a run
  trained today fits it (`margin.KeepDefault`: config 0's margin cross-fitted on the
  validation kernels, or config 0 first everywhere);
- `margin bound`: the best a margin for config 0 (the rule) could do, its threshold on that
  preference (below) fitted on the very kernels it is scored on: an optimistic bound;
- `gap AUC`: how well the model's own preference, `score(config 0) - score(its first other)`,
  tells the kernels where config 0 is slow (`SLOW`: a top-1 error above 0.2) from the rest
  (0.5: not at all; 1: perfectly);
- `ridge rho`: the Spearman correlation, on the validation kernels, of config 0's log slowdown
  `log(runtime_0 / min runtime)` with a ridge fitted on the train kernels' kernel-level
  features (`kernel_features`: node features pooled, config 0's own and its place among the
  kernel's configs); data only, the same for every run of a family;
- `switch`: config 0, except on the share of kernels the ridge ranks slowest, where the
  model's first other config is picked; the share, one of `SHARES`, fitted on four folds of
  the validation kernels and applied to the fifth (as the rule's margin), so out of sample.

A `margin bound` near `default` means no margin cashes in the model's preference; a `switch` no
lower than `default`, that the kernel's features do not say where config 0 is slow either.

    python benchmarks/default_regret.py --work /tmp/suite --budget small   # after the suite

Writes `benchmarks/results/<name>.json` (one row per run) and `<name>.md` (mean +- std over
seeds per family and model).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from pick_bound import _write, kernel_errors  # one kernel's picks; a results file whole
from suite import BUDGETS, RESULTS, family_roots, finished_runs, label_of, mean_std, seed_list

from tpu_tiles_models import margin, scoring, synthetic

SLOW = 0.2  # config 0's top-1 error above which a kernel counts as one where it is slow
SHARES = (0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3)  # of kernels `switch` may move off config 0
FOLDS = 5
ALPHAS = (1.0, 10.0, 100.0, 1000.0)  # ridge penalties tried (on standardised features)
COLUMNS = ("default", "half", "either", "rule", "margin_bound", "gap_auc", "rho", "switch")
HEADERS = (
    "default",
    "kernels holding half",
    "either",
    "rule",
    "margin bound",
    "gap AUC",
    "ridge rho",
    "switch",
)


def kernel_features(path: Path) -> tuple[np.ndarray, float]:
    """One kernel file -> (features `[2 * node_dim + 2 * config_dim + 2]`, config 0's log
    slowdown). Features: mean and max over nodes of `log(1 + |node feature|)`; config 0's
    `log(1 + |config feature|)`; per config column, the share of the kernel's configs below
    config 0 minus the share above; log node and config counts."""
    with np.load(path) as d:
        nodes = np.log1p(np.abs(d["node_feat"].astype(np.float64)))
        configs = np.log1p(np.abs(d["config_feat"].astype(np.float64)))
        runtimes = d["config_runtime"].astype(np.float64)
    place = (configs < configs[:1]).mean(0) - (configs > configs[:1]).mean(0)
    counts = [np.log(len(nodes)), np.log(len(runtimes))]
    x = np.concatenate([nodes.mean(0), nodes.max(0), configs[0], place, counts])
    return x, float(np.log(runtimes[0] / runtimes.min()))


def _ridge(x: np.ndarray, y: np.ndarray, alpha: float):
    """A ridge on standardised columns (constant ones dropped): a predict function."""
    mean, std = x.mean(0), x.std(0)
    keep = std > 1e-9
    z = (x[:, keep] - mean[keep]) / std[keep]
    w = np.linalg.solve(z.T @ z + alpha * np.eye(z.shape[1]), z.T @ (y - y.mean()))
    return lambda new: ((new[:, keep] - mean[keep]) / std[keep]) @ w + y.mean()


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def fit_regret(x: np.ndarray, y: np.ndarray, folds: int = FOLDS):
    """The ridge of `ALPHAS` whose out-of-fold Spearman on (`x`, `y`) is highest, refitted on
    all of them: a predict function."""
    fold = np.arange(len(y)) % folds

    def held_out(alpha: float) -> float:
        pred = np.empty(len(y))
        for k in range(folds):
            pred[fold == k] = _ridge(x[fold != k], y[fold != k], alpha)(x[fold == k])
        return _spearman(pred, y)

    return _ridge(x, y, max(ALPHAS, key=held_out))


def auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """Chance that a positive scores above a negative (ties count half); NaN without both."""
    pos, neg = scores[positive], scores[~positive]
    if not len(pos) or not len(neg):
        return float("nan")
    above = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
    return float(above)


def switch_error(predicted: np.ndarray, default: np.ndarray, other: np.ndarray) -> float:
    """Mean top-1 error of config 0, except the kernels with the highest `predicted` slowdown,
    which take the model's first other config; their share fitted on the other folds."""

    def error(rows: np.ndarray, share: float) -> np.ndarray:
        if not share:
            return default[rows]
        cut = np.quantile(predicted, 1.0 - share)
        return np.where(predicted[rows] >= cut, other[rows], default[rows])

    fold = np.arange(len(default)) % FOLDS
    picked = np.empty(len(default))
    for k in range(FOLDS):
        inside, outside = np.flatnonzero(fold != k), np.flatnonzero(fold == k)
        share = min(SHARES, key=lambda s: float(error(inside, s).mean()))
        picked[outside] = error(outside, share)
    return float(picked.mean())


def margin_bound(gap: np.ndarray, default: np.ndarray, other: np.ndarray) -> float:
    """The lowest mean top-1 error of config 0 except where `gap` (`score(config 0) -
    score(first other)`) reaches a threshold, there the first other: over every threshold,
    chosen on these kernels (in sample)."""
    thresholds = np.append(np.sort(gap), np.inf)
    return float(min(np.where(gap >= t, other, default).mean() for t in thresholds))


def half_holders(errors: np.ndarray) -> int:
    """How few kernels hold half of the summed `errors`."""
    ordered = np.sort(errors)[::-1]
    return int(np.searchsorted(np.cumsum(ordered), 0.5 * ordered.sum()) + 1)


def family_regret(root: Path) -> dict[str, float]:
    """`{valid file name: predicted log slowdown of config 0}` from the train kernels' ridge."""
    train = sorted((root / "train").glob("*.npz"))
    valid = sorted((root / "valid").glob("*.npz"))
    xt, yt = map(np.array, zip(*(kernel_features(f) for f in train)))
    xv, _ = map(np.array, zip(*(kernel_features(f) for f in valid)))
    return dict(zip((f.name for f in valid), fit_regret(xt, yt)(xv)))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", required=True, help="the suite's --work (its data and runs)")
    p.add_argument("--budget", choices=sorted(BUDGETS), default="full", help="the suite's")
    p.add_argument("--families", default=",".join(synthetic.FAMILIES))
    p.add_argument("--models", default="ResidualSAGE", help="the suite's model labels")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--data_seed", type=int, default=0, help="the suite's")
    p.add_argument("--score_candidates", type=int, default=3, help="the suite's (its default)")
    p.add_argument("--out", default=str(RESULTS), help="where the results files go")
    p.add_argument("--name", default="default_regret", help="the results files' name")
    return p.parse_args(argv)


def _fail(message: str) -> None:
    """One line on standard error, exit 2 (bad input, as the `tpu-tiles` commands)."""
    print(f"default_regret: {message}", file=sys.stderr)
    sys.exit(2)


def measure(a: argparse.Namespace) -> list[dict]:
    """One row per finished upstream-recipe run asked for."""
    work = Path(a.work)
    for flag, value in BUDGETS[a.budget].items():
        if flag != "data_seed":
            setattr(a, flag, value)
    roots = family_roots(a, work)
    missing = [f for f, root in roots.items() if not (root / "valid").is_dir()]
    if missing:
        _fail(f"no data for {', '.join(missing)} under {work}: run benchmarks/suite.py there first")
    budget = {k: getattr(a, k) for k in ("epochs", "early_stop", "score_candidates")}
    labels, seeds = a.models.split(","), set(seed_list(a.seeds))
    predicted, rows = {}, []
    for family, run in finished_runs(work, roots, budget):
        args = run.train_args
        label = label_of(args.model, run.model_kwargs)
        if label not in labels or args.run_id != "upstream" or args.seed not in seeds:
            continue
        print(f"{family} {label} seed {args.seed}", flush=True)
        if family not in predicted:
            predicted[family] = family_regret(roots[family])
        model, dataset = run.load(
            args.data_root, split="valid", cache_dir=str(work / "cache"), progress=False
        )
        model.set_default_margin(0.0)  # the model's own preference, not its rule's
        scored = scoring.score_split(model, dataset.valid, dataset.stats, progress=False)
        names = [Path(f).name for f in dataset.valid.files]
        errors = [kernel_errors(s.scores, s.runtimes) for s in scored]
        default = np.array([e["default"] for e in errors])
        other = np.array([e["other"] for e in errors])
        gap = np.array([s.scores[0] - np.min(s.scores[1:]) for s in scored])
        slowdown = np.array([predicted[family][n] for n in names])
        rule = margin.KeepDefault.measure(scoring.pairs(scored), None, fit_margin=True).rule[1]
        rows.append(
            dict(
                family=family,
                model=label,
                seed=args.seed,
                default=float(default.mean()),
                half=half_holders(default),
                either=float(np.minimum(default, other).mean()),
                rule=float(rule),
                margin_bound=margin_bound(gap, default, other),
                gap_auc=auc(gap, default > SLOW),
                rho=_spearman(slowdown, np.log1p(default)),
                switch=switch_error(slowdown, default, other),
            )
        )
    return sorted(rows, key=lambda r: (r["family"], r["model"], r["seed"]))


def markdown(rows: list[dict], command: str) -> str:
    """Per family and model, each column's mean +- std over seeds."""
    groups = defaultdict(list)
    for r in rows:
        groups[(r["family"], r["model"])].append(r)
    lines = [
        f"`{command}`",
        "",
        "Top-1 error on every config of every validation kernel, mean +- std over seeds (how "
        "many runs: after the model). default: config 0, the compiler's pick; kernels holding "
        "half: how few validation kernels hold half of its error; either: per kernel the "
        "better of config 0 and the model's first other config; rule: the run's rule as "
        "fitted today; margin bound: the best a margin for config 0 could do, its threshold "
        "fitted on these same kernels (optimistic); gap AUC: how well score(config 0) - "
        "score(first other) tells the kernels "
        f"where config 0's top-1 error is above {SLOW} from the rest (0.5: not at all); ridge "
        "rho: Spearman correlation of config 0's slowdown with a ridge on kernel-level "
        "features fitted on the train kernels; switch: config 0 except on the share of kernels "
        "the ridge ranks slowest, which take the model's first other (share fitted on four "
        "folds of the validation kernels, applied to the fifth).",
        "",
        "| family | model | " + " | ".join(HEADERS) + " |",
        "|---|---|" + "---|" * len(HEADERS),
    ]
    for (family, model), runs in sorted(groups.items()):
        cells = []
        for column in COLUMNS:
            mean, std = mean_std([r[column] for r in runs])
            digits = 0 if column == "half" else 2 if column in ("gap_auc", "rho") else 4
            same = column in ("default", "half", "rho")  # data only: one value per family
            cells.append(f"{mean:.{digits}f}" if same else f"{mean:.{digits}f} +- {std:.{digits}f}")
        lines.append(f"| {family} | {model} ({len(runs)}) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    rows = measure(a)
    if not rows:
        _fail(f"no finished upstream runs of {a.models} under {a.work}: run the suite first")
    command = (
        f"python benchmarks/default_regret.py --work {Path(a.work).name} --budget {a.budget} "
        f"--families {a.families} --models {a.models} --seeds {a.seeds} "
        f"--score_candidates {a.score_candidates}"
        + (f" --data_seed {a.data_seed}" if a.data_seed else "")
        + (f" --name {a.name}" if a.name != "default_regret" else "")
    )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    _write(out / f"{a.name}.json", json.dumps(dict(command=command, rows=rows), indent=1) + "\n")
    _write(out / f"{a.name}.md", markdown(rows, command))
    print((out / f"{a.name}.md").read_text())


if __name__ == "__main__":
    main()
