"""The rule a run would choose today, beside the one its run file recorded: the suite's runs
rescored on their validation kernels after a change to `margin.choose`.

Each run's model scores every config of every validation kernel with its margin off; then
`margin.KeepDefault.measure` chooses the rule as training does (`fit_margin`), and its
errors are set beside the run file's `val_rule`. Nothing is trained.

    python benchmarks/rule_rescore.py --runs WORK/runs --name rule_rescore_small
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from tpu_tiles_models import margin, scoring
from tpu_tiles_models.runs import TrainedRun

RESULTS = Path(__file__).resolve().parent / "results"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", required=True, help="a sweep's runs folder (the suite's WORK/runs)")
    p.add_argument("--run_id", default="upstream", help="only runs of this recipe")
    p.add_argument("--name", default="rule_rescore", help="results file: <name>.md and .json")
    p.add_argument("--out", default=str(RESULTS))
    return p.parse_args(argv)


def rescore(run: TrainedRun) -> dict:
    """One run's recorded rule and today's, on its validation kernels."""
    ta = run.train_args
    model, ds = run.load(ta.data_root, split="valid", progress=False)
    model.set_default_margin(0.0)
    scored = scoring.score_split(model, ds.valid, ds.stats, progress=False)
    now = margin.KeepDefault.measure(scoring.pairs(scored), None, fit_margin=True)
    then = run.extras["keep_default"]
    return dict(
        family=Path(ta.data_root).name.split("_")[0],
        model="geometry" if "tile_geometry" in ta.model_kwargs_json else "bare",
        seed=ta.seed,
        default=float(np.mean([s.runtimes[0] / s.runtimes.min() - 1.0 for s in scored])),
        then1=then["val_rule"]["1"],
        then5=then["val_rule"]["5"],
        now1=now.rule[1],
        now5=now.rule[5],
        always=now.margin >= margin.ALWAYS,
    )


def write_table(rows: list[dict], a: argparse.Namespace, path: Path) -> None:
    """Mean +- std over seeds per family and model."""
    lines = [
        f"`python benchmarks/rule_rescore.py --runs WORK/runs --run_id {a.run_id} --name {a.name}`",
        "",
        "Validation errors (every config of every valid kernel) of each run's rule: as its run "
        "file recorded it (then) and as `margin.choose` chooses it now (now: config 0 first on "
        "every kernel where that has the lowest top-1 error). default: config 0's top-1 error. "
        "Mean +- std over seeds; always: the seeds whose rule is now config 0 first everywhere.",
        "",
        "| family | model | default | top-1, then | top-1, now | top-5, then | top-5, now "
        "| always |",
        "|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["family"], r["model"]), []).append(r)
    for (family, model), rs in sorted(groups.items()):
        cells = [f"{rs[0]['default']:.4f}"]
        for k in ("then1", "now1", "then5", "now5"):
            v = np.array([r[k] for r in rs])
            cells.append(f"{v.mean():.4f} +- {v.std():.4f}")
        cells.append(f"{sum(r['always'] for r in rs)}/{len(rs)}")
        lines.append(f"| {family} | {model} | " + " | ".join(cells) + " |")
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    rows = []
    for model_dir in sorted(Path(a.runs).glob("model_*")):
        run = TrainedRun.open(model_dir)
        if run.train_args.run_id == a.run_id:
            rows.append(rescore(run))
            print(json.dumps(rows[-1]), flush=True)
    out = Path(a.out)
    (out / f"{a.name}.json").write_text(json.dumps(rows, indent=1) + "\n")
    write_table(rows, a, out / f"{a.name}.md")


if __name__ == "__main__":
    main()
