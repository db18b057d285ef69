"""Ensembles of seeds vs their members, on the benchmark suite's runs (by hand).

    python benchmarks/ensemble_bench.py --runs /tmp/suite/runs --out /tmp/ensembles

For every (family, model) of a finished `benchmarks/suite.py` run, builds the ensemble of its
seeds with `tpu-tiles ensemble` (z-scored members, averaged) and compares its validation top-5
error with the members' mean and best. Writes `benchmarks/results/ensemble_bench.md`.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

from tpu_tiles_models import ensemble
from tpu_tiles_models.runs import TrainedRun

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", required=True, help="the suite's runs folder (<work>/runs)")
    p.add_argument("--out", required=True, help="the ensembles' out_dir")
    a = p.parse_args(argv)
    groups = defaultdict(list)
    for model_dir in sorted(Path(a.runs).glob("model_*")):
        run = TrainedRun.open(model_dir)
        args = run.train_args
        groups[(Path(args.data_root).name, args.model, args.data_root)].append(run)
    lines = [
        f"`python benchmarks/ensemble_bench.py --runs {a.runs} --out {a.out}`: validation top-5 "
        "error of each seed run and of the z-score ensemble of all of them (same data).",
        "",
        "| family | model | seeds | members, mean | best member | ensemble |",
        "|---|---|---|---|---|---|",
    ]
    for (family, model, data_root), runs in sorted(groups.items()):
        members = [r.val_errors["5"] for r in runs]
        result = ensemble.build_ensemble(
            [r.model_dir for r in runs],
            Path(a.out) / f"{family}_{model}",
            data_root=data_root,
            progress=False,
        )
        lines.append(
            f"| {family} | {model} | {len(runs)} | {statistics.fmean(members):.3f} | "
            f"{min(members):.3f} | {result.val_errors[5]:.3f} |"
        )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "ensemble_bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
