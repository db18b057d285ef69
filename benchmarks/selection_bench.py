"""Does choosing the epoch by a validation sample cost score? (issue 22; run by hand)

    python benchmarks/selection_bench.py --data DATA --work WORK [--models EarlyJoinSAGE,...]
        [--seeds 0,1,2] [--epochs 40]

Each training (`tpu-tiles train` with upstream's default flags, `--score_sample=1`, no early
stop, in its own process) scores every config of every validation kernel after every epoch;
the per-kernel top-5 errors are kept. From them, offline, for each way of choosing:

- **full** (our trainer before `--score_sample`): the best epoch by the score on every
  kernel, stopping after `--early_stop` (20) epochs without gain;
- **sample F, K candidates** (the default since): the score on a stratified sample of a
  fraction F of the kernels (`scoring.stratified_sample`, 10 sample seeds) chooses when to
  stop and the K best epochs, which are then compared on every kernel;

the Kaggle-form score on every kernel of the epoch it keeps, and its loss against the full
choice. The cost of a sample pass is its share of nodes x configs, the model's work.

Writes `benchmarks/results/selection.{json,md}`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
FRACTIONS = (0.1, 0.2, 0.3)
CANDIDATES = (1, 3)
SAMPLE_SEEDS = range(10)
EARLY_STOP = 20


def child(spec: dict) -> dict:
    """One training; every epoch's per-kernel top-5 errors on every validation kernel."""
    from tpu_tiles_models import metrics, scoring, train
    from tpu_tiles_models.train_args import TrainArgs

    epochs: list[list[float]] = []
    score_split = scoring.score_split

    def recording(*args, desc: str = "scoring", **kwargs):
        scored = score_split(*args, desc=desc, **kwargs)
        if desc == "valid" and kwargs.get("kernels") is None:
            epochs.append([metrics.kernel_top_k_error(s.runtimes, s.scores, 5) for s in scored])
        return scored

    scoring.score_split = recording
    start = time.perf_counter()
    result = train.train(TrainArgs.from_argv(spec["argv"]))
    return dict(errors=epochs, seconds=time.perf_counter() - start, model_dir=str(result.model_dir))


def _early_stopped(scores: np.ndarray) -> int:
    """The last epoch a run choosing by `scores` trains (upstream's early-stop rule)."""
    best = 0
    for epoch, score in enumerate(scores):
        if score > scores[best]:
            best = epoch
        if epoch - best >= EARLY_STOP:
            return epoch
    return len(scores) - 1


def choices(errors: np.ndarray, split, fractions=FRACTIONS) -> dict:
    """Full score of the epoch each policy keeps. `errors`: [epochs, kernels] top-5 errors."""
    from tpu_tiles_models import scoring

    full = 1 - errors.mean(axis=1)
    stop = _early_stopped(full)
    out = {"full": float(full[: stop + 1].max()), "best_any_epoch": float(full.max())}
    work = split.config_counts() * np.diff(split.node_offsets)
    for fraction in fractions:
        for k in CANDIDATES:
            kept, costs = [], []
            for seed in SAMPLE_SEEDS:
                sample = scoring.stratified_sample(split, fraction, seed=seed)
                idx = list(sample.indices)
                estimate = 1 - np.average(errors[:, idx], axis=1, weights=sample.weights)
                last = _early_stopped(estimate)
                ranked = sorted(range(last + 1), key=lambda e: (-estimate[e], e))[:k]
                kept.append(float(full[ranked].max()))
                costs.append(work[idx].sum() / work.sum())
            out[f"sample {fraction:g}, {k} candidate(s)"] = dict(
                mean=float(np.mean(kept)), worst=float(np.min(kept)), cost=float(np.mean(costs))
            )
    return out


def markdown(command: str, runs: list[dict]) -> str:
    policies = [k for k in runs[0]["choices"] if k not in ("full", "best_any_epoch")]
    lines = [
        "# Choosing the epoch by a validation sample",
        "",
        f"`{command}`",
        "",
        "Kaggle-form score (1 - top-5 error) on every config of every validation kernel of the "
        "epoch each policy keeps, as the loss against choosing by that score itself (full; "
        f"early stop {EARLY_STOP} either way); mean and worst over 10 samples for each "
        "training. Cost: a sample pass's share of a full pass (nodes x configs).",
        "",
        "| model | seed | epochs | full | best of any epoch | " + " | ".join(policies) + " |",
        "|---|---|---|---|---|" + "---|" * len(policies),
    ]
    for r in runs:
        c = r["choices"]
        cells = [
            f"{c['full'] - c[p]['mean']:+.4f} / {c['full'] - c[p]['worst']:+.4f}" for p in policies
        ]
        lines.append(
            f"| {r['model']} | {r['seed']} | {r['epochs']} | {c['full']:.4f} | "
            f"{c['best_any_epoch']:.4f} | " + " | ".join(cells) + " |"
        )
    means = [
        np.mean([r["choices"]["full"] - r["choices"][p]["mean"] for r in runs]) for p in policies
    ]
    costs = [np.mean([r["choices"][p]["cost"] for r in runs]) for p in policies]
    lines.append("| mean loss | | | | | " + " | ".join(f"{m:+.4f}" for m in means) + " |")
    lines.append("| cost of a pass | | | | | " + " | ".join(f"{c:.2f}" for c in costs) + " |")
    lines += [
        "",
        "Loss = full choice's score - the policy's (mean / worst over the samples; "
        "negative: the sample's choice scored higher).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=False)
    p.add_argument("--work", required=False)
    p.add_argument("--models", default="EarlyJoinSAGE,ResidualSAGE")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--out", default=str(RESULTS / "selection"))
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        spec = json.loads(Path(a.child).read_text())
        Path(spec["result"]).write_text(json.dumps(child(spec)))
        return
    from tpu_tiles_models import data

    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    valid = data.load_split(a.data, "valid", cache_dir=str(work / "cache"), progress=False)
    runs = []
    for model in a.models.split(","):
        for seed in (int(s) for s in a.seeds.split(",")):
            name = f"{model}_{seed}"
            result = work / f"{name}.json"
            if not result.is_file():
                train_argv = [
                    f"--model={model}",
                    f"--seed={seed}",
                    f"--epochs={a.epochs}",
                    "--early_stop=0",
                    "--score_sample=1",
                    f"--data_root={a.data}",
                    f"--cache_dir={work / 'cache'}",
                    f"--out_dir={work / name}",
                    "--no_progress",
                ]
                spec_path = work / f"{name}.spec.json"
                spec_path.write_text(json.dumps(dict(argv=train_argv, result=str(result))))
                print(f"[{time.strftime('%H:%M:%S')}] {name} ...", flush=True)
                with open(work / f"{name}.log", "w") as log:
                    subprocess.run(
                        [sys.executable, __file__, "--child", str(spec_path)],
                        check=True,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
            r = json.loads(result.read_text())
            errors = np.asarray(r["errors"])
            runs.append(
                dict(
                    model=model,
                    seed=seed,
                    epochs=len(errors),
                    seconds=r["seconds"],
                    choices=choices(errors, valid),
                )
            )
    command = " ".join(["python benchmarks/selection_bench.py", *(argv or sys.argv[1:])])
    out = Path(a.out)
    out.with_suffix(".json").write_text(json.dumps(dict(command=command, runs=runs), indent=1))
    text = markdown(command, runs)
    out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    main()
