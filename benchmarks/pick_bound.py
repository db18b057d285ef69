"""How far any rule on top of a trained model can take its single pick, run by hand.

A default-aware ranking chooses, per kernel, between config 0 (the compiler's default) and the
model's first other config: a margin for config 0 (the suite's `+rule` rows) only moves where
that choice falls. So no such rule beats the per-kernel better of the two, which this script
measures on the suite's finished runs (every config of every validation kernel):

- `default`: config 0's top-1 error (the compiler's pick);
- `rule`: the run's own top-1 error by its rule, cross-fitted (its run file, as the suite);
- `other`: the model's first config other than config 0;
- `either`: the better of config 0 and `other` in each kernel, the bound on any such rule;
- `best other`: the truly fastest config other than config 0 (a perfect ranking's reach);
- `best of 10 others`: the fastest of the model's 10 first configs other than config 0 (how
  fine the model's order of the other configs is).

A `rule` near `either` means the rule is not what holds the pick back; an `either` above the
target means only a better ranking of the other configs can reach it.

    python benchmarks/pick_bound.py --work /tmp/suite     # the suite's --work, after the suite
    python benchmarks/pick_bound.py --work /tmp/suite --tabulate   # the table from the json

Writes `benchmarks/results/<name>.json` (one row per run) and `<name>.md` (mean +- std over seeds
per family, model and recipe, and the ratio of each mean to the family's `default`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

# benchmarks/suite.py, beside this script: its data sets, runs and labels are the ones measured.
# Importing it registers the benchmark families (alt, fusion, inference).
from suite import (
    BUDGET,
    RESULTS,
    RULE,
    family_roots,
    finished_runs,
    label_of,
    mean_std,
    seed_list,
)

from tpu_tiles_models import metrics, scoring, synthetic
from tpu_tiles_models.metrics import DEFAULT_CONFIG
from tpu_tiles_models.run_file import KEEP_DEFAULT_KEY

# The columns, in the table's order; `rule` comes from the run file, the others from scores
# (`other10` absent from results files written before it: '-').
COLUMNS = ("default", "rule", "other", "either", "best_other", "other10")
HEADERS = (
    "default",
    "rule",
    "model's first other",
    "better of the two",
    "best other",
    "best of 10 others",
)
OTHERS = 10  # `other10`: the best of the model's first this many other configs


def kernel_errors(scores: np.ndarray, runtimes: np.ndarray) -> dict[str, float]:
    """One kernel's top-1 errors (`metrics.kernel_top_k_error`) of `COLUMNS`' picks but
    `rule`. `scores`, `runtimes`: `[num_configs]`, lower score = ranked faster. A kernel with
    one config has no other: its `other` is config 0."""
    runtimes = np.asarray(runtimes, np.float64)
    if len(runtimes) == 1:
        return dict.fromkeys((c for c in COLUMNS if c != "rule"), 0.0)

    def top1(ranking: np.ndarray, default_place: float, k: int = 1) -> float:
        ranking = np.array(ranking, np.float64)
        ranking[DEFAULT_CONFIG] = default_place
        return metrics.kernel_top_k_error(runtimes, ranking, k)

    default, other = top1(scores, -np.inf), top1(scores, np.inf)
    return dict(
        default=default,
        other=other,
        either=min(default, other),
        best_other=top1(runtimes, np.inf),
        other10=top1(scores, np.inf, min(OTHERS, len(runtimes) - 1)),
    )


def split_errors(scored: list[scoring.Scored]) -> dict[str, float]:
    """Means over the kernels of `kernel_errors` (each kernel weighs the same, as the suite)."""
    per_kernel = [kernel_errors(s.scores, s.runtimes) for s in scored]
    return {k: statistics.fmean(e[k] for e in per_kernel) for k in per_kernel[0]}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", required=True, help="the suite's --work (its data and runs)")
    p.add_argument("--families", default=",".join(synthetic.FAMILIES))
    p.add_argument("--models", default="ResidualSAGE", help="the suite's model labels")
    p.add_argument("--recipes", default="upstream", help="the suite's recipes")
    p.add_argument("--seeds", default="0,1,2")
    for flag in ("train", "valid", "test", "data_seed", "max_configs", "epochs", "early_stop"):
        p.add_argument(f"--{flag}", type=int, default=BUDGET[flag], help="the suite's")
    p.add_argument("--score_candidates", type=int, default=3, help="the suite's (its default)")
    p.add_argument("--out", default=str(RESULTS), help="where the results files go")
    p.add_argument("--name", default="pick_bound", help="the results files' name")
    p.add_argument(
        "--tabulate", action="store_true", help="score nothing: the table from <name>.json"
    )
    return p.parse_args(argv)


def _fail(message: str) -> None:
    """One line on standard error, exit 2 (bad input, as the `tpu-tiles` commands)."""
    print(f"pick_bound: {message}", file=sys.stderr)
    sys.exit(2)


def measure(a: argparse.Namespace) -> list[dict]:
    """One row per finished run asked for: its family, label, recipe, seed and errors."""
    work = Path(a.work)
    roots = family_roots(a, work)
    missing = [f for f, root in roots.items() if not (root / "valid").is_dir()]
    if missing:
        _fail(f"no data for {', '.join(missing)} under {work}: run benchmarks/suite.py there first")
    budget = {k: getattr(a, k) for k in ("epochs", "early_stop", "score_candidates")}
    labels, recipes, seeds = a.models.split(","), a.recipes.split(","), set(seed_list(a.seeds))
    rows = []
    for family, run in finished_runs(work, roots, budget):
        args = run.train_args
        label = label_of(args.model, run.model_kwargs)
        if label not in labels or args.run_id not in recipes or args.seed not in seeds:
            continue
        print(f"{family} {label} {args.run_id} seed {args.seed}", flush=True)
        # The sweep's cache (suite.py's --cache_dir): each split is read once, not once a run.
        model, dataset = run.load(
            args.data_root, split="valid", cache_dir=str(work / "cache"), progress=False
        )
        scored = scoring.score_split(model, dataset.valid, dataset.stats, progress=False)
        record = run.extras.get(KEEP_DEFAULT_KEY) or {}
        rule = record.get("val_rule", run.val_errors)["1"]
        errors = split_errors(scored)
        rows.append(
            dict(family=family, model=label, recipe=args.run_id, seed=args.seed, rule=rule)
            | {k: round(v, 5) for k, v in errors.items()}
        )
    return sorted(rows, key=lambda r: (r["family"], r["model"], r["recipe"], r["seed"]))


def markdown(rows: list[dict], command: str) -> str:
    """The table: per family, model and recipe, each column's mean +- std over seeds and its
    ratio to the family's `default` (the same on every run: its kernels are the family's)."""
    groups = defaultdict(list)
    for r in rows:
        groups[(r["family"], r["model"], r["recipe"])].append(r)
    lines = [
        f"`{command}`",
        "",
        "Top-1 error on every config of every validation kernel, mean +- std over seeds (how "
        "many runs: after the recipe), then the mean's ratio to the family's `default`. "
        "default: config 0, the compiler's pick; rule: the run's own pick by its "
        f"rule, cross-fitted (the suite's `{RULE}` row); model's first other: the config other "
        "than config 0 that the model ranks first; better of the two: per kernel, the better "
        "of config 0 and that one, the best any rule choosing between them can do; best "
        "other: the truly fastest config other than config 0; best of 10 others: the fastest "
        f"of the model's {OTHERS} first configs other than config 0 ('-': not measured then).",
        "",
        "| family | model | recipe | " + " | ".join(HEADERS) + " |",
        "|---|---|---|" + "---|" * len(HEADERS),
    ]
    for (family, model, recipe), runs in sorted(groups.items()):
        base = statistics.fmean(r["default"] for r in runs)
        cells = []
        for column in COLUMNS:
            if any(column not in r for r in runs):
                cells.append("-")
                continue
            mean, std = mean_std([r[column] for r in runs])
            ratio = f" ({mean / base:.2f}x)" if base > 0 else ""
            cells.append(
                f"{mean:.3f}{ratio}"
                if column in ("default", "best_other")
                else f"{mean:.3f} +- {std:.3f}{ratio}"
            )
        lines.append(f"| {family} | {model} | {recipe} ({len(runs)}) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> None:
    """`text` into `path` whole: written beside it, then renamed over it."""
    staging = path.with_name(f".{path.name}.tmp")
    staging.write_text(text)
    staging.replace(path)


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    out = Path(a.out)
    path = out / f"{a.name}.json"
    if a.tabulate:
        if not path.is_file():
            _fail(f"no results file {path}: run without --tabulate first")
        saved = json.loads(path.read_text())
        rows, command = saved["rows"], saved["command"]
    else:
        rows = measure(a)
        if not rows:
            _fail(f"no finished runs of {a.models} ({a.recipes}) under {a.work}: run the suite")
        command = (
            f"python benchmarks/pick_bound.py --work {Path(a.work).name} --families "
            f"{a.families} --models {a.models} --recipes {a.recipes} --seeds {a.seeds} "
            f"--epochs {a.epochs} --score_candidates {a.score_candidates}"
            # The data's budget flags where they are not the suite's full budget's.
            + "".join(
                f" --{k} {getattr(a, k)}"
                for k in ("train", "valid", "test", "data_seed", "max_configs", "early_stop")
                if getattr(a, k) != BUDGET[k]
            )
            + (f" --name {a.name}" if a.name != "pick_bound" else "")
        )
        out.mkdir(parents=True, exist_ok=True)
        _write(path, json.dumps(dict(command=command, rows=rows), indent=1) + "\n")
    _write(out / f"{a.name}.md", markdown(rows, command))
    print((out / f"{a.name}.md").read_text())


if __name__ == "__main__":
    main()
