"""Does choosing the epoch by a validation sample cost score? (run by hand)

    python benchmarks/selection_bench.py --data DATA --work WORK [--models EarlyJoinSAGE,...]
        [--seeds 0,1,2] [--epochs 40]

Each training (`tpu-tiles train` with upstream's default flags, no early stop, in its own
process) scores every config of every validation kernel after every epoch,
and the scores are kept. From them, offline, for each way of choosing:

- **full** (our trainer before it sampled): the best epoch by the score on every config of
  every kernel, stopping after `--early_stop` (20) epochs without gain;
- **sample F, M configs, K candidates**: the score on a stratified sample of a fraction F of
  the kernels (`stratified_sample`, 10 sample seeds; the trainer's `--score_sample` until this
  verdict removed it), on at most M configs of each (evenly spread in file order, as
  `--score_configs` takes them), chooses when to stop and the K best epochs, which are then
  compared on every config of every kernel (as `--score_configs` and `--score_candidates` do);

the Kaggle-form score on every config of every kernel of the epoch it keeps, and its loss
against the full choice. The cost of a sample pass is its share of nodes x configs, the
model's work, beside the number of kernels it scores (each also costs a fixed overhead).

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
# (fraction of kernels, at most this many configs of each or None, candidates)
POLICIES = [
    (f, m, k)
    for f in (0.1, 0.2, 0.3, 1.0)
    for m in (None, 128, 64, 32)
    for k in (3,)
    if (f, m) != (1.0, None)
] + [(0.2, None, 1), (1.0, 64, 1)]
SAMPLE_SEEDS = range(10)
EARLY_STOP = 20


def child(spec: dict) -> dict:
    """One training; every epoch's scores of every config of every validation kernel."""
    from tpu_tiles_models import scoring, train
    from tpu_tiles_models.train_args import TrainArgs

    epochs: list[np.ndarray] = []
    score_split = scoring.score_split

    def recording(*args, desc: str = "scoring", **kwargs):
        scored = score_split(*args, desc=desc, **kwargs)
        if desc == "valid" and kwargs.get("kernels") is None and not kwargs.get("max_configs"):
            epochs.append(np.concatenate([s.scores for s in scored]).astype(np.float32))
        return scored

    scoring.score_split = recording
    start = time.perf_counter()
    result = train.train(TrainArgs.from_argv(spec["argv"]))
    np.save(spec["scores"], np.stack(epochs))
    return dict(seconds=time.perf_counter() - start, model_dir=str(result.model_dir))


def _early_stopped(scores: np.ndarray) -> int:
    """The last epoch a run choosing by `scores` trains (upstream's early-stop rule)."""
    best = 0
    for epoch, score in enumerate(scores):
        if score > scores[best]:
            best = epoch
        if epoch - best >= EARLY_STOP:
            return epoch
    return len(scores) - 1


def kernel_errors(scores: np.ndarray, split, max_configs: int | None) -> np.ndarray:
    """[epochs, kernels] top-5 errors on (at most `max_configs` spread) configs of each kernel."""
    from tpu_tiles_models import data, metrics

    offsets, runtimes = (
        split.config_offsets,
        data._runtime_ratios(split.config_runtime, split.config_runtime_normalizers),
    )
    out = np.empty((len(scores), len(split.tile_ids)))
    for k in range(len(split.tile_ids)):
        rows = data._pick_configs(int(offsets[k]), int(offsets[k + 1]), -1, None, max_configs)
        for e in range(len(scores)):
            out[e, k] = metrics.kernel_top_k_error(runtimes[rows], scores[e, rows], 5)
    return out


def stratified_sample(split, fraction: float, *, seed: int) -> tuple[list[int], np.ndarray]:
    """About `fraction` of `split`'s kernels (all if that is 1 or the strata are too small) and
    each one's weight. Strata: one program's kernels with 2-9, 10-99, 100-999 or 1000+
    configs, each drawn `round(fraction * size)` times (at least once) at weight
    `size / drawn`: weighted means estimate the split's without bias."""
    from tpu_tiles_models.kernel_files import benchmark_of

    counts = split.config_counts()
    everything = list(range(len(counts))), np.ones(len(counts))
    if fraction >= 1:
        return everything
    sizes = np.minimum(np.floor(np.log10(np.maximum(counts, 1))), 3)
    strata: dict[tuple[str, int], list[int]] = {}
    for i, (tile_id, size) in enumerate(zip(split.tile_ids, sizes)):
        strata.setdefault((benchmark_of(tile_id), int(size)), []).append(i)
    rng = np.random.default_rng(seed)
    chosen: dict[int, float] = {}
    for key in sorted(strata):
        members = strata[key]
        take = max(1, round(fraction * len(members)))
        for i in rng.choice(members, size=take, replace=False):
            chosen[int(i)] = len(members) / take
    if len(chosen) == len(counts):  # every stratum too small to sample
        return everything
    indices = sorted(chosen)
    return indices, np.array([chosen[i] for i in indices])


def choices(scores: np.ndarray, split) -> dict:
    """Full score of the epoch each policy keeps, from `scores` [epochs, configs]."""
    errors = {m: kernel_errors(scores, split, m) for m in {m for _, m, _ in POLICIES} | {None}}
    full = 1 - errors[None].mean(axis=1)
    stop = _early_stopped(full)
    out = {"full": float(full[: stop + 1].max()), "best_any_epoch": float(full.max())}
    nodes, counts = np.diff(split.node_offsets), split.config_counts()
    for fraction, m, k in POLICIES:
        work = nodes * (counts if m is None else np.minimum(counts, m))
        kept, costs, kernels = [], [], []
        for seed in SAMPLE_SEEDS:
            idx, weights = stratified_sample(split, fraction, seed=seed)
            estimate = 1 - np.average(errors[m][:, idx], axis=1, weights=weights)
            last = _early_stopped(estimate)
            ranked = sorted(range(last + 1), key=lambda e: (-estimate[e], e))[:k]
            kept.append(float(full[ranked].max()))
            costs.append(work[idx].sum() / (nodes * counts).sum())
            kernels.append(len(idx))
        out[_name(fraction, m, k)] = dict(
            mean=float(np.mean(kept)),
            worst=float(np.min(kept)),
            cost=float(np.mean(costs)),
            kernels=float(np.mean(kernels)),
        )
    return out


def _name(fraction: float, m: int | None, k: int) -> str:
    configs = "all configs" if m is None else f"{m} configs"
    return f"{fraction:g} of kernels, {configs}, {k} candidate(s)"


def markdown(command: str, runs: list[dict]) -> str:
    policies = [_name(*p) for p in POLICIES]
    lines = [
        "# Choosing the epoch by a validation sample",
        "",
        f"`{command}`",
        "",
        "Each policy's loss of Kaggle-form score (1 - top-5 error, on every config of every "
        "validation kernel) against choosing by that score itself (full: "
        + ", ".join(f"{r['model']} seed {r['seed']} {r['choices']['full']:.4f}" for r in runs)
        + f"; early stop {EARLY_STOP} either way), mean over 10 samples per training, and "
        "the worst of all; a pass's cost as its share of a full pass's work (nodes x "
        "configs) and the kernels it scores.",
        "",
        "| policy | mean loss | worst loss | "
        + " | ".join(f"{r['model']} {r['seed']}" for r in runs)
        + " | cost | kernels |",
        "|---|---|---|" + "---|" * len(runs) + "---|---|",
    ]
    for p in policies:
        losses = [r["choices"]["full"] - r["choices"][p]["mean"] for r in runs]
        worst = max(r["choices"]["full"] - r["choices"][p]["worst"] for r in runs)
        cost = np.mean([r["choices"][p]["cost"] for r in runs])
        kernels = np.mean([r["choices"][p]["kernels"] for r in runs])
        lines.append(
            f"| {p} | {np.mean(losses):+.4f} | {worst:+.4f} | "
            + " | ".join(f"{x:+.4f}" for x in losses)
            + f" | {cost:.3f} | {kernels:.0f} |"
        )
    lines += ["", "Loss: negative when the policy's choice scored higher than the full choice."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=False)
    p.add_argument("--work", required=False)
    p.add_argument("--models", default="EarlyJoinSAGE,ResidualSAGE")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--runs", default="", help="MODEL_SEED,...: these instead of models x seeds")
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
    pairs = [(m, int(s)) for m in a.models.split(",") for s in a.seeds.split(",")]
    if a.runs:
        pairs = [
            (name.rsplit("_", 1)[0], int(name.rsplit("_", 1)[1])) for name in a.runs.split(",")
        ]
    for model, seed in pairs:
        name = f"{model}_{seed}"
        result = work / f"{name}.json"
        if not result.is_file():
            train_argv = [
                f"--model={model}",
                f"--seed={seed}",
                f"--epochs={a.epochs}",
                "--early_stop=0",
                "--score_configs=0",
                f"--data_root={a.data}",
                f"--cache_dir={work / 'cache'}",
                f"--out_dir={work / name}",
                "--no_progress",
            ]
            spec_path = work / f"{name}.spec.json"
            spec = dict(argv=train_argv, result=str(result), scores=str(work / f"{name}.npy"))
            spec_path.write_text(json.dumps(spec))
            print(f"[{time.strftime('%H:%M:%S')}] {name} ...", flush=True)
            with open(work / f"{name}.log", "w") as log:
                subprocess.run(
                    [sys.executable, __file__, "--child", str(spec_path)],
                    check=True,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
        r = json.loads(result.read_text())
        scores = np.load(work / f"{name}.npy")
        runs.append(
            dict(
                model=model,
                seed=seed,
                epochs=len(scores),
                seconds=r["seconds"],
                choices=choices(scores, valid),
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
