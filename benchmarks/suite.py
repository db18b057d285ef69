"""The quality benchmark suite: models x recipes x generator families x seeds, run by hand.

Every family gets its own synthetic data set (same sizes, data seed 0); every (model, recipe,
seed) is one full `tpu-tiles train` run on it, all of them one `tpu-tiles sweep` (an Apache
Beam pipeline, resumable: rerunning the command trains only what is missing). Validation is on
every config of every validation kernel (the trainer's final validation). Random ranking on
the same kernels (mean of 20 draws) is the floor; `default` (config 0, the compiler's default,
first, the rest random) is the baseline a user gets for free; `<model>+default` is the model's
ranking with config 0 kept in its top 5 (from each run file's validation record).

`--models` takes model classes (by their defaults; `ResidualSAGE` is the recommended model) and
the variants of `VARIANTS` (a class with keywords, e.g. `ResidualSAGE:first`, its defaults
before they became the recommendation). `--shuffled` also runs every family on
a copy with each kernel's config rows shuffled, so config 0 is not special there: a
default-aware model must not lose to the same model without it on those.

    python benchmarks/suite.py --work /tmp/suite            # docs/choosing.md's figures
    python benchmarks/suite.py --work /tmp/suite --train 60 --valid 20 --epochs 1   # a smoke run
    python benchmarks/suite.py --work /tmp/suite --shuffled \
        --models ResidualSAGE,ResidualSAGE:first
    python benchmarks/suite.py --work /tmp/suite --shuffled --budget small   # suite_small.*

The budget (`BUDGET`, shared with `benchmarks/families.py`, which reuses this script's data sets
and runs when given the same `--work`): 1,000 train / 200 valid kernels per family with the
families' own config counts (no cap), upstream's flags but 40 epochs (upstream's early stop of 20
kept): 4,000 steps of 10 kernels, against about 57,000 for upstream's 100 epochs on the real
5,709 train kernels; scaled so that one run takes minutes on 2 CPU cores. `--budget small`
(`BUDGETS`) is issue 46's small data, where seed variance shows: 400 train / 100 valid kernels,
at most 400 configs each, 30 epochs, the rest as `BUDGET`; its results files are
`suite_small.*` unless `--name` is given.

Writes `benchmarks/results/suite.csv` (one row per run), `suite.md` (mean +- std over seeds per
family, model and recipe, with the selection rule's verdict) and `suite.png` (`--name` names
them otherwise).

The selection rule here is the old one (docs/choosing.md): a recipe or model default became
the recommendation only if it beat the alternative on every family by more than one std
across seeds, on the validation kernels. Its verdicts stand for the results files it wrote
(`suite*.md`); a default now changes by `benchmarks/protocol.py`'s rule (held-out test
kernels, two draws of each family, paired per-kernel intervals), which reuses this script's
data sets and shuffled copies.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))  # synth_families alone
import synth_families  # noqa: F401  (registers alt, fusion, inference)

from tpu_tiles_models import data, metrics, registry, run_file, synthetic
from tpu_tiles_models.evaluate import (
    KEPT,  # a model's rows with config 0 kept in its top 5
    RATIO,  # a row's top-1 error over the default's, as `tpu-tiles evaluate` names it
)
from tpu_tiles_models.runs import TrainedRun

RESULTS = Path(__file__).resolve().parent / "results"
# Recipes: named sets of training flags on top of upstream's defaults. "upstream" is the
# baseline every other recipe must beat on every family. The recipes whose options left the
# package (`fastfirst`, `toplist`, `logmse`, `lambda`, `softmax`, `mle_softmax`, `approxndcg`,
# `zhinge`, and the head draws `head`, `headtop`, `headbest`, `head1pc`) are gone; their
# results stay in benchmarks/results/ (docs/choosing.md), and `--no_train` still tabulates
# their finished runs by name.
RECIPES: dict[str, dict[str, object]] = {
    "upstream": {},
    # Twice upstream's learning rate: whether a model still learning at the last epoch of the
    # small budget gets there in the same steps.
    "lr2x": {"lr": 2e-3},
    # 40 configs per kernel in a step, not 10: each step orders more of a kernel's configs
    # against each other, the fast ones among them, at about the cost of more configs.
    "configs40": {"configs": 40},
}
# Models the suite trains besides the classes themselves: label -> (class, model kwargs). Each
# names every keyword it moves from the class defaults, so that a label means one architecture
# whatever the defaults are (`label_of` compares the resolved keywords). The bare class name is
# its defaults: for ResidualSAGE the recommendation (32 wide, default context, no attention).
_FIRST = registry.EARLIER_DEFAULTS["ResidualSAGE"]  # 48 wide, attention, no default context
VARIANTS: dict[str, tuple[str, dict[str, object]]] = {
    "ResidualSAGE:first": ("ResidualSAGE", dict(_FIRST)),
    "ResidualSAGE:default_context": ("ResidualSAGE", dict(_FIRST, default_context=True)),
    # A third narrower (hidden 32, was 48): cheaper to train, for the training-time target.
    "ResidualSAGE:default_context:hidden32": (
        "ResidualSAGE",
        dict(_FIRST, default_context=True, hidden_dim=32),
    ),
    # Twice as wide (64): whether capacity is what limits its order among the fastest configs.
    "ResidualSAGE:hidden64": ("ResidualSAGE", dict(hidden_dim=64)),
    # Per node and config, how the output tile divides the node's shape (`TileGeometry`).
    "ResidualSAGE:geometry": ("ResidualSAGE", dict(tile_geometry=True)),
}
# The candidate the suite judges: the recommended model by its name alone (its class defaults).
RECOMMENDED = registry.RECOMMENDED_MODEL
SHUFFLED = "-shuffled"  # suffix of a family's copy with its configs shuffled
# Suffix of a model's rows ranked by its own rule: config 0's margin (cross-fitted on the
# validation kernels, so the figure is out of sample) and, where chosen, config 0 kept in the top 5.
RULE = "+rule"
# Models trained on the families only, not on their shuffled copies: upstream's baselines read
# no position, and sample configs uniformly, so a copy with its configs in another order is the
# same task for them (their rows there would differ from the family's only by the draw).
UNSHUFFLED_ONLY = ("EarlyJoinSAGE", "MLP")
BASELINE_ROWS = metrics.BASELINES  # rows that are no trained model
COLUMNS = (
    "family",
    "model",
    "recipe",
    "seed",
    "top1",
    "top5",
    "top10",
    "score",
    "val_opa",
    "epochs",
    "seconds",
    "cpu_seconds",
    "margin",
    RATIO,
)
RANDOM_DRAWS = 20
# The suite's budget (see the module docstring); benchmarks/families.py uses the same.
BUDGET = dict(train=1000, valid=200, test=20, data_seed=0, max_configs=0, epochs=40, early_stop=20)
# `--budget`'s presets: the full budget (the default), and the small data of issue 46, where
# seed variance shows (its results files are named apart: `suite_<budget>.*`).
BUDGETS = {
    "full": BUDGET,
    "small": dict(BUDGET, train=400, valid=100, max_configs=400, epochs=30),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", required=True, help="data, runs and cache go here")
    p.add_argument("--families", default=",".join(synthetic.FAMILIES))
    p.add_argument(
        "--models",
        default=f"EarlyJoinSAGE,MLP,{RECOMMENDED}",
        help=f"model classes and variants ({', '.join(VARIANTS)})",
    )
    p.add_argument("--recipes", default="upstream", help=f"some of {','.join(RECIPES)}")
    p.add_argument("--seeds", default="0,1,2")
    add_budget_flags(p)
    p.add_argument(
        "--shuffled",
        action="store_true",
        help="also every family with each kernel's configs shuffled (config 0 not special)",
    )
    p.add_argument(
        "--candidate",
        default=RECOMMENDED,
        help="the model labels (comma-separated) judged against the suite's targets (vs "
        "EarlyJoinSAGE)",
    )
    p.add_argument("--out", default=str(RESULTS), help="where the results files go")
    p.add_argument(
        "--name",
        help="the results files' name: <name>.csv, .md and .png (default suite, or "
        "suite_<budget> for a --budget other than full)",
    )
    p.add_argument(
        "--budget",
        choices=BUDGETS,
        default="full",
        help="the budget flags' defaults (each flag given still wins): full "
        + ", ".join(f"{k}={v}" for k, v in BUDGET.items())
        + "; small "
        + ", ".join(f"{k}={v}" for k, v in BUDGETS["small"].items() if BUDGET[k] != v),
    )
    budget = p.parse_known_args(argv)[0].budget
    p.set_defaults(name=results_name(budget), **BUDGETS[budget])
    return p.parse_args(argv)


def results_name(budget: str) -> str:
    """The results files' name for a `--budget` when `--name` is not given."""
    return "suite" if budget == "full" else f"suite_{budget}"


def add_budget_flags(p: argparse.ArgumentParser) -> None:
    """The budget's flags, defaulting to `BUDGET` (this script's and families.py's)."""
    b = BUDGET
    p.add_argument("--train", type=int, default=b["train"], help="train kernels per family")
    p.add_argument("--valid", type=int, default=b["valid"], help="valid kernels per family")
    p.add_argument("--test", type=int, default=b["test"], help="test kernels per family")
    p.add_argument("--data_seed", type=int, default=b["data_seed"], help="the data sets' seed")
    p.add_argument(
        "--max_configs", type=int, default=b["max_configs"], help="configs per kernel (0: all)"
    )
    p.add_argument("--epochs", type=int, default=b["epochs"])
    p.add_argument("--early_stop", type=int, default=b["early_stop"], help="0: never")
    p.add_argument("--num_workers", type=int, default=2, help="the sweep's worker processes")
    p.add_argument(
        "--score_candidates",
        type=int,
        default=3,
        help="the trainer's flag: epochs rescored on every config at the end (1: only the best "
        "by the epoch sample; each rescoring is a full validation, on 2 cores about as long as "
        "a run's epochs on the families with many configs)",
    )
    p.add_argument(
        "--no_train",
        action="store_true",
        help="train nothing: tabulate the runs already finished under --work (e.g. after a "
        "default changed, which changes the runs' hashes)",
    )


def budget_text(a: argparse.Namespace) -> str:
    """The budget in words, for the results files."""
    cap = f"at most {a.max_configs}" if a.max_configs else "all their"
    stop = f"early stop {a.early_stop}" if a.early_stop else "no early stop"
    return (
        f"{a.train} train / {a.valid} valid kernels per family ({cap} configs, data seed "
        f"{a.data_seed}), upstream's flags but {a.epochs} epochs ({stop})"
    )


def make_data(a: argparse.Namespace, work: Path) -> dict[str, Path]:
    """One data set per family under `work/data`, and with `--shuffled` (where `a` has it) its
    shuffled copy, reused when present: `{family: data root}`. A root's name holds every
    budget figure its data depend on, a shuffled copy's its family root's: two budgets under
    one `--work` never share (and reuse) one another's data."""
    roots = {}
    for family in a.families.split(","):
        name = f"{family}_{a.train}_{a.valid}_{a.test}_{a.data_seed}"
        name += f"_cap{a.max_configs}" if a.max_configs else ""
        root = roots[family] = work / "data" / name
        if not (root / "test").is_dir():
            start = time.perf_counter()
            synthetic.generate(
                root,
                train=a.train,
                valid=a.valid,
                test=a.test,
                seed=a.data_seed,
                max_configs=a.max_configs or None,
                family=family,
                progress=False,
            )
            print(f"{family}: generated in {time.perf_counter() - start:.0f} s", flush=True)
        if getattr(a, "shuffled", False):
            shuffled = roots[family + SHUFFLED] = work / "data" / (name + SHUFFLED)
            if not (shuffled / "valid").is_dir():
                shuffle_configs(root, shuffled)
    return roots


CONFIG_KEYS = ("config_feat", "config_runtime", "config_runtime_normalizers")


def shuffle_configs(source: Path, target: Path, seed: int = 0) -> None:
    """A copy of the data set `source` whose kernels have their config rows in a seeded random
    order: the same kernels and runtimes, but config 0 is no longer the default."""
    staging = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    for split in ("train", "valid", "test"):
        if not (source / split).is_dir():  # a held-out set holds its test split alone
            continue
        (staging / split).mkdir(parents=True)
        for i, path in enumerate(sorted((source / split).glob("*.npz"))):
            with np.load(path) as npz:
                arrays = {key: npz[key] for key in npz.files}
            order = np.random.default_rng([seed, i, len(split)]).permutation(
                len(arrays["config_runtime"])
            )
            for key in CONFIG_KEYS:
                arrays[key] = arrays[key][order]
            np.savez(staging / split / path.name, **arrays)
    staging.rename(target)


def seed_list(seeds: str) -> list[int]:
    """`--seeds` (`"0,1,2"`) as integers: the grid's and the table's."""
    return [int(s) for s in seeds.split(",")]


def grid_file(a: argparse.Namespace, roots: dict[str, Path], work: Path) -> Path:
    """The sweep's grid: one grid per recipe (its name as `run_id`), crossed with the rest."""
    grids = []
    labels = a.models.split(",")
    classes = [m for m in labels if m not in VARIANTS]
    # One grid per recipe for the classes, and one per recipe and variant (its own kwargs).
    models = [([c], "{}") for c in classes]
    for label in labels:
        if label in VARIANTS:
            cls, kwargs = VARIANTS[label]
            models.append(([cls], json.dumps(kwargs, sort_keys=True)))
    for recipe in a.recipes.split(","):
        for names, kwargs_json in models:
            grid = {name: [value] for name, value in RECIPES[recipe].items()}
            blind = kwargs_json == "{}" and names[0] in UNSHUFFLED_ONLY
            grid.update(
                run_id=[recipe],
                model=names,
                model_kwargs_json=[kwargs_json],
                seed=seed_list(a.seeds),
                data_root=[
                    str(r) for f, r in roots.items() if not (blind and f.endswith(SHUFFLED))
                ],
            )
            grids.append(grid)
    path = work / "grid.json"
    path.write_text(json.dumps(grids, indent=1))
    return path


def run_sweep(a: argparse.Namespace, grid: Path, work: Path) -> None:
    """`tpu-tiles sweep` over the grid; failed points are reported, not fatal here."""
    cmd = [
        sys.executable,
        "-m",
        "tpu_tiles_models.cli",
        "sweep",
        "--grid",
        str(grid),
        "--out_dir",
        str(work / "runs"),
        "--num_workers",
        str(a.num_workers),
        f"--epochs={a.epochs}",
        f"--early_stop={a.early_stop}",
        f"--score_candidates={a.score_candidates}",
        f"--cache_dir={work / 'cache'}",
        "--no_progress",
    ]
    print(" ".join(cmd), flush=True)
    code = subprocess.call(cmd)
    if code:
        print(f"sweep exited {code}; tabulating the runs that finished", flush=True)


def label_of(model: str, model_kwargs: dict) -> str:
    """The `--models` label of a run built with `model_kwargs` (`TrainedRun.model_kwargs`):
    its class name when they are the class defaults, else the variant's with the same
    resolved keywords, else the class name."""
    resolved = registry.resolved_kwargs(model, model_kwargs)
    if resolved == registry.resolved_kwargs(model, {}):
        return model
    for label, (cls, variant_kwargs) in VARIANTS.items():
        if cls == model and resolved == registry.resolved_kwargs(cls, variant_kwargs):
            return label
    return model


def finished_runs(
    work: Path, roots: dict[str, Path], budget: dict[str, object] | None = None
) -> Iterator[tuple[str, TrainedRun]]:
    """(family, run) for each finished run of the sweep under `work` whose data root is one of
    `roots` (`{family: data root}`) and whose training flags match `budget` (the suite's
    `--epochs`, `--early_stop`, `--score_candidates`: a run of another budget in the same
    `--work` is named and left out); unfinished points are named and skipped. Roots compare
    as real paths: a run trained through a link to the same data (a `--work` whose `data`
    links to another's) counts."""
    family_of = {os.path.realpath(r): f for f, r in roots.items()}
    for model_dir in sorted((work / "runs").glob("model_*")):
        try:
            run = TrainedRun.open(model_dir)
        except Exception as e:  # an unfinished point: no run file yet
            print(f"skipping {model_dir.name}: {e}")
            continue
        other = {k: v for k, v in (budget or {}).items() if getattr(run.train_args, k) != v}
        if other:
            print(f"leaving out {model_dir.name}: trained with another budget ({other})")
        elif (real := os.path.realpath(run.train_args.data_root)) in family_of:
            yield family_of[real], run


def collect(
    work: Path, roots: dict[str, Path], budget: dict[str, object] | None = None
) -> list[dict]:
    """One row per finished run, from its run file, and one for the same run with config 0
    kept in its top 5 (its validation record), labelled `<model>+default`."""
    rows = []
    for family, run in finished_runs(work, roots, budget):
        args = run.train_args
        extras = run.extras
        # The model's own ranking: its record's (the run file's `final_error` is its rule's).
        errors = (extras.get(run_file.KEEP_DEFAULT_KEY) or {}).get("val") or run.val_errors
        best = extras.get("best_epoch", -1)
        curve = run.info["train_curve"]
        row = dict(
            family=family,
            model=label_of(args.model, run.model_kwargs),
            recipe=args.run_id,
            seed=args.seed,
            top1=errors["1"],
            top5=errors["5"],
            top10=errors["10"],
            score=1 - errors["5"],
            val_opa=curve["val_opa"][best] if curve["val_opa"] else "",
            epochs=len(curve["epoch"]),
            seconds=round(sum(extras.get("epoch_seconds", [])), 1),
            # The process's CPU seconds over its epochs: the fairer time on a shared machine.
            cpu_seconds=round(sum(extras.get("epoch_cpu_seconds", [])), 1),
            margin="",  # the rule's, on the `+rule` row
        )
        rows.append(row)
        record = extras.get(run_file.KEEP_DEFAULT_KEY)
        if record:
            # The run's own ranking (its rule, honestly estimated) where the run file has it,
            # else (runs before the margin) the ranking with config 0 kept in the top 5.
            suffix, errs = (
                (RULE, record["val_rule"]) if "val_rule" in record else (KEPT, record["val_kept"])
            )
            rows.append(
                dict(
                    row,
                    model=row["model"] + suffix,
                    top1=errs["1"],
                    top5=errs["5"],
                    top10=errs["10"],
                    score=1 - errs["5"],
                    val_opa="",
                    margin=record.get("margin", ""),
                )
            )
    return rows


def baseline_rows(roots: dict[str, Path]) -> dict[tuple[str, str], dict[int, float]]:
    """Mean top-k errors of each baseline (random, default) on each family's valid kernels."""
    out = {}
    for family, root in roots.items():
        valid = data.load_split(root, "valid", progress=False)
        ratio = valid.config_runtime / valid.config_runtime_normalizers
        offsets = valid.config_offsets
        runtimes = [ratio[offsets[i] : offsets[i + 1]] for i in range(len(valid))]
        for baseline in BASELINE_ROWS:
            out[family, baseline] = metrics.baseline_top_k_errors(
                runtimes, baseline, draws=RANDOM_DRAWS
            )
    return out


def with_default_ratio(
    rows: list[dict], baselines: dict[tuple[str, str], dict[int, float]]
) -> list[dict]:
    """`rows` with `RATIO`: each run's top-1 error over its family's `default` row's (below 1,
    its single pick beats the compiler's; empty where that error is 0)."""
    out = []
    for r in rows:
        base = baselines[r["family"], "default"][1]
        out.append({**r, RATIO: round(r["top1"] / base, 4) if base > 0 else ""})
    return out


def asked_for(rows: list[dict], models: str, recipes: str, seeds: str) -> list[dict]:
    """The rows of the `--models`, `--recipes` and `--seeds` asked for (with their rule rows):
    other runs in the same `--work` (another suite's) stay out of this one's table."""
    labels, wanted = models.split(","), recipes.split(",")
    drawn = set(seed_list(seeds))

    def label(model: str) -> str:
        for suffix in (RULE, KEPT):
            model = model.removesuffix(suffix)
        return model

    return [
        r
        for r in rows
        if label(r["model"]) in labels and r["recipe"] in wanted and r["seed"] in drawn
    ]


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample std of `values` (std 0 for one value): a cell over seeds."""
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def summarize(rows: list[dict], baselines: dict[tuple[str, str], dict[int, float]]) -> list[dict]:
    """Mean and std over seeds per (family, model, recipe), then the baselines."""
    groups = defaultdict(list)
    for r in rows:
        groups[(r["family"], r["model"], r["recipe"])].append(r)
    cells = []
    for (family, model, recipe), runs in sorted(groups.items()):
        cell = dict(family=family, model=model, recipe=recipe, seeds=len(runs))
        for column in ("top1", "top5", "top10", "score"):
            cell[column] = mean_std([r[column] for r in runs])
        cell["seconds"] = statistics.fmean(r["seconds"] for r in runs)
        cell["cpu_seconds"] = statistics.fmean(r["cpu_seconds"] for r in runs)
        cells.append(cell)
    for (family, baseline), errors in sorted(baselines.items()):
        cell = dict(family=family, model=baseline, recipe="-", seeds=RANDOM_DRAWS, seconds=0.0)
        cell["cpu_seconds"] = 0.0
        cell.update({f"top{k}": (errors[k], 0.0) for k in metrics.TOP_KS})
        cell["score"] = (1 - errors[5], 0.0)
        cells.append(cell)
    return cells


def verdicts(cells: list[dict], candidate: str = "ResidualSAGE") -> list[str]:
    """The selection rule, spelled out: which comparisons win on every family.

    Shuffled copies (`--shuffled`) count only where a default-aware variant must not lose;
    every other verdict is on the families themselves.
    """
    by = {(c["family"], c["model"], c["recipe"]): c for c in cells}
    everything = sorted({c["family"] for c in cells})
    families = [f for f in everything if not f.endswith(SHUFFLED)]
    shuffled = [f for f in everything if f.endswith(SHUFFLED)]
    lines = []

    def outcomes(a: tuple, b: tuple, among: list[str], column: str = "top5") -> list[int]:
        """Per family: 1 where `a` has the lower error by more than one std, -1 where `b`
        has, 0 otherwise; empty when a cell is missing."""
        out = []
        for f in among:
            x, y = by.get((f, *a)), by.get((f, *b))
            if x is None or y is None:
                return []
            (mx, sx), (my, sy) = x[column], y[column]
            out.append(1 if my - mx > max(sx, sy) else -1 if mx - my > max(sx, sy) else 0)
        return out

    def wins(a: tuple, b: tuple) -> list[bool]:
        return [o == 1 for o in outcomes(a, b, families)]

    recipes = sorted({c["recipe"] for c in cells if c["recipe"] not in ("-", "upstream")})
    models = sorted(
        {c["model"] for c in cells if c["model"] not in BASELINE_ROWS and not _ruled(c["model"])}
    )
    for model in models:
        for recipe in recipes:
            w = wins((model, recipe), (model, "upstream"))
            if w:
                verdict = "ADOPT" if all(w) else "reject"
                lines.append(
                    f"{model}: recipe {recipe} vs upstream flags: wins on "
                    f"{sum(w)}/{len(w)} families -> {verdict}"
                )
            lines += _recipe_lines(model, recipe, outcomes, families, shuffled)
    judged = False
    for label in candidate.split(","):
        w = wins((label, "upstream"), ("EarlyJoinSAGE", "upstream"))
        if w:
            lines.append(
                f"{label} vs EarlyJoinSAGE (upstream flags): wins on {sum(w)}/{len(w)} "
                "families by more than one std"
            )
            lines += targets(by, families, label)
            judged = True
    if judged:
        lines += real_range(by, families)
    for label, (cls, _) in VARIANTS.items():
        for recipe in ["upstream", *recipes]:
            lines += _variant_lines(label, cls, recipe, outcomes, families, shuffled)
    for model in models:
        for suffix, what in ((KEPT, "with config 0 kept in its top 5"), (RULE, "with its rule")):
            for column in ("top5", "top1"):
                o = outcomes((model + suffix, "upstream"), (model, "upstream"), families, column)
                if o:
                    lines.append(
                        f"{model} {what} vs its own ranking ({column} error): lower on "
                        f"{o.count(1)}/{len(o)} families, higher on {o.count(-1)}/{len(o)}"
                    )
    for label in candidate.split(","):
        lines += unbeaten(cells, label, outcomes, everything)
    return lines


def _ruled(model: str) -> bool:
    """Whether a row label is a model's ranked by a rule (`KEPT`, `RULE`)."""
    return model.endswith(KEPT) or model.endswith(RULE)


def unbeaten(cells: list[dict], candidate: str, outcomes, among: list[str]) -> list[str]:
    """The candidate against every other trained row on every family and shuffled copy: where
    one has a lower top-5 or top-1 error by more than one std."""
    others = sorted(
        {c["model"] for c in cells if c["model"] not in BASELINE_ROWS and c["model"] != candidate}
    )
    losses = []
    for other in others:
        for column in ("top5", "top1"):
            for f in among:
                o = outcomes((candidate, "upstream"), (other, "upstream"), [f], column)
                if o == [-1]:
                    losses.append(f"{other} on {f} ({column})")
    if not any(c["model"] == candidate for c in cells):
        return []
    verdict = "none" if not losses else ", ".join(losses)
    return [f"{candidate} loses by more than one std to: {verdict}"]


def _recipe_lines(model, recipe, outcomes, families, shuffled) -> list[str]:
    """A recipe against upstream's flags for one model and its rule, at top-1 and top-5, on
    the families and on the shuffled copies: lower and higher by more than one std."""
    lines = []
    for name in (model, model + RULE):
        for among, where in ((families, "families"), (shuffled, "shuffled copies")):
            for column in ("top1", "top5"):
                o = outcomes((name, recipe), (name, "upstream"), among, column)
                if o:
                    lines.append(
                        f"{name}: recipe {recipe} vs upstream flags on the {where} ({column} "
                        f"error): lower on {o.count(1)}/{len(o)}, higher on {o.count(-1)}/{len(o)}"
                    )
    return lines


def _variant_lines(label, cls, recipe, outcomes, families, shuffled) -> list[str]:
    """A variant against its class: wins on every family, loses on no shuffled copy?"""
    a, b = (label, recipe), (cls, recipe)
    top5, top1 = outcomes(a, b, families), outcomes(a, b, families, "top1")
    if not top5:
        return []
    lines = [
        f"{label} vs {cls} ({recipe} flags) on the families: top-5 error lower on "
        f"{top5.count(1)}/{len(top5)}, higher on {top5.count(-1)}; top-1 error lower on "
        f"{top1.count(1)}/{len(top1)}, higher on {top1.count(-1)}"
    ]
    lost = [o for column in ("top5", "top1") for o in outcomes(a, b, shuffled, column)]
    if shuffled and len(lost) == 2 * len(shuffled):
        lines.append(
            f"{label} vs {cls} ({recipe} flags) on the shuffled copies (config 0 not special): "
            f"higher top-5 or top-1 error on {lost.count(-1)} of {len(lost)} comparisons"
        )
    ok = all(o == 1 for o in top5) and bool(shuffled) and -1 not in lost
    lines.append(f"{label} as {cls}'s default: {'ADOPT' if ok else 'keep it off'}")
    return lines


# The targets for the candidate (mean over seeds, same budget and flags as EarlyJoinSAGE):
# top-5 error at most half EarlyJoinSAGE's, top-1 at most 0.7x, training time at most 2x; and
# EarlyJoinSAGE itself within the real collection's range (a calibration target).
REAL_EJS_TOP5, REAL_EJS_TOP1 = (0.025, 0.10), (0.08, 0.30)
TARGET_TOP5, TARGET_TOP1, TARGET_TIME = 0.5, 0.7, 2.0
# Top-1 error at most this times the `default` row's (the compiler's own pick), on every family
# (not the shuffled copies, where config 0 is no default).
TARGET_DEFAULT_TOP1 = 0.6


def _target_line(what: str, values: dict[str, float], ok) -> str:
    """`what: <family> <value> (met|not met), ... -> met on n/N`."""
    met = [ok(v) for v in values.values()]
    figures = ", ".join(
        f"{f} {v:.3f} ({'met' if m else 'not met'})" for (f, v), m in zip(values.items(), met)
    )
    return f"{what}: {figures} -> met on {sum(met)}/{len(met)}"


def targets(by: dict, families: list[str], candidate: str) -> list[str]:
    """One line per target of the candidate against EarlyJoinSAGE, per family, met or not."""
    cell = lambda f, m: by.get((f, m, "upstream"))  # noqa: E731
    default_top1 = lambda f: by[(f, "default", "-")]["top1"][0]  # noqa: E731
    fams = [f for f in families if cell(f, candidate) and cell(f, "EarlyJoinSAGE")]

    def ratio(column: str, mean: bool = True) -> dict[str, float]:
        value = lambda f, m: cell(f, m)[column][0] if mean else cell(f, m)[column]  # noqa: E731
        return {f: value(f, candidate) / max(value(f, "EarlyJoinSAGE"), 1e-9) for f in fams}

    return [
        _target_line(
            f"{candidate} / EarlyJoinSAGE top-5 error <= {TARGET_TOP5}",
            ratio("top5"),
            lambda v: v <= TARGET_TOP5,
        ),
        _target_line(
            f"{candidate} / EarlyJoinSAGE top-1 error <= {TARGET_TOP1}",
            ratio("top1"),
            lambda v: v <= TARGET_TOP1,
        ),
        _target_line(
            f"{candidate} / default top-1 error <= {TARGET_DEFAULT_TOP1}",
            {f: cell(f, candidate)["top1"][0] / max(default_top1(f), 1e-9) for f in fams},
            lambda v: v <= TARGET_DEFAULT_TOP1,
        ),
        _target_line(
            f"{candidate} / EarlyJoinSAGE training CPU seconds <= {TARGET_TIME}",
            ratio("cpu_seconds", mean=False),
            lambda v: v <= TARGET_TIME,
        ),
    ]


def real_range(by: dict, families: list[str]) -> list[str]:
    """EarlyJoinSAGE's top-5 and top-1 errors against the real validation split's range."""
    ejs = {f: by[(f, "EarlyJoinSAGE", "upstream")] for f in families}
    (l5, h5), (l1, h1) = REAL_EJS_TOP5, REAL_EJS_TOP1
    return [
        _target_line(
            f"EarlyJoinSAGE top-5 error within the real range {l5}-{h5}",
            {f: c["top5"][0] for f, c in ejs.items()},
            lambda v: l5 <= v <= h5,
        ),
        _target_line(
            f"EarlyJoinSAGE top-1 error within the real range {l1}-{h1}",
            {f: c["top1"][0] for f, c in ejs.items()},
            lambda v: l1 <= v <= h1,
        ),
    ]


def write_results(rows: list[dict], cells: list[dict], out: Path, a: argparse.Namespace) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{a.name}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(
            sorted(rows, key=lambda r: (r["family"], r["model"], r["recipe"], r["seed"]))
        )
    (out / f"{a.name}.md").write_text(markdown(cells, a))
    plot(cells, out / f"{a.name}.png")


def markdown(cells: list[dict], a: argparse.Namespace) -> str:
    cmd = (
        f"python benchmarks/suite.py --work {Path(a.work).name} --families {a.families} --models "
        f"{a.models} --recipes {a.recipes} --seeds {a.seeds} --train {a.train} --valid "
        f"{a.valid} --test {a.test} --data_seed {a.data_seed} --max_configs {a.max_configs} "
        f"--epochs {a.epochs} --early_stop {a.early_stop} --score_candidates "
        f"{a.score_candidates} --candidate {a.candidate}"
        + (f" --budget {a.budget}" if a.budget != "full" else "")
        + (" --shuffled" if a.shuffled else "")
        + (" --no_train" if a.no_train else "")
        + (f" --name {a.name}" if a.name != results_name(a.budget) else "")
    )
    lines = [
        f"`{cmd}`",
        "",
        f"{budget_text(a)}, mean +- std over seeds {a.seeds}; errors on every config "
        "of every validation kernel; score = 1 - top-5 error. default: config 0 (the "
        f"compiler's default) first, the rest random; `<model>{RULE}`: the model's ranking by "
        "its own rule, as its `forward` ranks (config 0's margin, cross-fitted on the validation "
        "kernels so that the figure is out of sample, and config 0 kept in the top 5 where "
        f"validation chose it); `<model>{KEPT}` (runs from before the margin): the model's "
        f"ranking with config 0 kept in its top 5; `<family>{SHUFFLED}`: the family with each "
        "kernel's configs shuffled (config 0 not special). s/run: wall seconds of a run's "
        "epochs; CPU s/run: its process's CPU seconds over them (the fairer figure on a "
        "shared machine). top-1 / default: the mean top-1 error over the family's `default` "
        "row's (below 1, the single pick beats the compiler's).",
        "",
        "| family | model | recipe | top-1 err | top-1 / default | top-5 err | top-10 err "
        "| score | s/run | CPU s/run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    default_top1 = {c["family"]: c["top1"][0] for c in cells if c["model"] == "default"}
    for c in cells:
        columns = ("top1", "top5", "top10", "score")
        baseline = c["model"] in BASELINE_ROWS  # a mean over draws, not over trained seeds
        if baseline:
            pm = [f"{c[k][0]:.3f}" for k in columns]
        else:
            pm = [f"{c[k][0]:.3f} +- {c[k][1]:.3f}" for k in columns]
        base = default_top1.get(c["family"])
        pm.insert(1, f"{c['top1'][0] / base:.2f}" if base else "-")
        seconds = "- | -" if baseline else f"{c['seconds']:.0f} | {c['cpu_seconds']:.0f}"
        lines.append(
            f"| {c['family']} | {c['model']} | {c['recipe']} | "
            + " | ".join(pm)
            + f" | {seconds} |"
        )
    lines += ["", *[f"- {v}" for v in verdicts(cells, a.candidate)]]
    return "\n".join(lines) + "\n"


def plot(cells: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = sorted({c["family"] for c in cells})
    # Trained models and the baselines; the "+default" rows are in the table only.
    series = sorted({(c["model"], c["recipe"]) for c in cells if not _ruled(c["model"])})
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(3 + 0.5 * len(series) * len(families), 3.6))
    for j, (model, recipe) in enumerate(series):
        pick = {
            c["family"]: c["top5"] for c in cells if (c["model"], c["recipe"]) == (model, recipe)
        }
        x = [i + (j - (len(series) - 1) / 2) * width for i in range(len(families))]
        ax.bar(
            x,
            [pick.get(f, (np.nan, 0))[0] for f in families],
            width,
            yerr=[pick.get(f, (0, 0))[1] for f in families],
            capsize=3,
            label=model if recipe == "-" else f"{model} ({recipe})",
        )
    ax.set_xticks(range(len(families)), families, rotation=15, fontsize=8)
    ax.set_ylabel("top-5 error (lower is better)")
    ax.set_title("validation top-5 error, mean +- std over seeds")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    roots = make_data(a, work)
    if not a.no_train:
        run_sweep(a, grid_file(a, roots, work), work)
    budget = {k: getattr(a, k) for k in ("epochs", "early_stop", "score_candidates")}
    baselines = baseline_rows(roots)
    rows = asked_for(collect(work, roots, budget), a.models, a.recipes, a.seeds)
    rows = with_default_ratio(rows, baselines)
    cells = summarize(rows, baselines)
    write_results(rows, cells, Path(a.out), a)
    print((Path(a.out) / f"{a.name}.md").read_text())
    print(f"suite done in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
