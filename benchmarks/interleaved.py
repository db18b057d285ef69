"""Ours against upstream in one process, their turns interleaved (by hand).

    python benchmarks/interleaved.py --data DATA --upstream UPSTREAM --work WORK [--rounds 5]

`benchmarks/fullscale.py` runs each side in its own process, one after the other. On a
shared or virtual machine the wall clock of one process can be half again that of the same
work a minute later (CPU seconds move less). This benchmark takes turns instead: in one
process, both sides' data loaded, one model per side built from the same `models.py` with
the same seed, each round runs

* one training epoch each: upstream's input pipeline (as `train_lib.train` builds it) and
  Keras `fit`, against `data.training_batches` and our trainer's loop, upstream's flags;
* validation on every config of every valid kernel each: upstream's
  `metrics.top_error_performance` over eager `forward` calls, against
  `scoring.score_split`,

the order of the two sides swapped every round, so a slow minute of the machine falls on
both. The first round also traces, and is left out of the figures. Writes
`benchmarks/results/interleaved.{json,md}`.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from pathlib import Path
from typing import Callable

import numpy as np
from fullscale import RESULTS, now, upstream_copy  # this folder, as a script runs

SIDES = ("upstream", "ours")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="data root with train/ valid/ test/")
    p.add_argument("--upstream", required=True, help="a checkout of upstream's tpu_graphs")
    p.add_argument("--work", required=True, help="scratch: upstream's copy and both caches")
    p.add_argument("--rounds", type=int, default=5, help="rounds after the first (tracing) one")
    p.add_argument("--model", default="EarlyJoinSAGE", help="a model of our models.py")
    p.add_argument("--out", default=str(RESULTS / "interleaved"), help="results, no suffix")
    a = p.parse_args(argv)
    if a.rounds < 2:
        p.error(f"--rounds must be at least 2, got {a.rounds}")
    for flag in ("data", "upstream"):
        if not Path(getattr(a, flag)).is_dir():
            p.error(f"--{flag} {getattr(a, flag)} is not a directory")
    return a


def _timed(run: Callable[[int], object], round_: int) -> tuple[float, float]:
    """(wall, CPU) seconds of `run(round_)`."""
    start = now()
    run(round_)
    end = now()
    return end[0] - start[0], end[1] - start[1]


def measure(a: argparse.Namespace) -> dict:
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(upstream_copy(Path(a.upstream), None, work)))
    import tensorflow as tf
    import tensorflow_gnn as tfgnn
    from absl import flags
    from tpu_graphs.baselines.tiles import data as up_data
    from tpu_graphs.baselines.tiles import metrics as up_metrics
    from tpu_graphs.baselines.tiles import models, train_lib

    from tpu_tiles_models import data, ranking, scoring, train
    from tpu_tiles_models.train_args import TrainArgs

    flags.FLAGS(["interleaved"])  # upstream's data module reads an absl flag
    args = TrainArgs(model=a.model)  # upstream's defaults, as both trainers run them
    parts = up_data.get_npz_dataset(
        a.data, min_train_configs=args.configs, cache_dir=str(work / "cache_upstream")
    )
    ours = data.load_dataset(a.data, cache_dir=str(work / "cache_ours"), progress=False)
    steps = int((ours.train.config_counts() >= args.configs).sum()) // args.batch

    def build() -> tf.keras.Model:
        tf.keras.utils.set_random_seed(args.seed)
        model = getattr(models, a.model)(args.configs, parts.num_ops)
        model.forward(data.kernel_graph(ours.train, 0, ours.stats), ours.train.num_configs(0))
        return model

    up_model, our_model = build(), build()
    up_model.compile(
        loss=up_metrics.CombinedLoss(up_metrics.parse_loss_str(args.losses)),
        optimizer=tf.keras.optimizers.Adam(args.lr, clipnorm=args.clip_norm),
        metrics=[ranking.OrderedPairAccuracy()],
    )
    up_batches = (
        parts.train.get_graph_tensors_dataset(args.configs)
        .shuffle(5000, reshuffle_each_iteration=True)
        .batch(args.batch, drop_remainder=True)
        .map(tfgnn.GraphTensor.merge_batch_to_components)
        .map(
            functools.partial(
                train_lib._graph_and_label, batch_size=args.batch, num_configs=args.configs
            )
        )
    )
    loop = train._Loop(our_model, args, steps * (a.rounds + 1), tf.distribute.get_strategy())
    scorer = scoring.kernel_scorer(our_model)

    def our_epoch(seed: int) -> None:
        batches = data.training_batches(
            ours.train, ours.stats, num_configs=args.configs, batch_size=args.batch, seed=seed
        ).take(steps)
        loop.run(batches, train=True, progress=False, desc="", total=steps)

    work_items = {
        "epoch": {
            "upstream": lambda r: up_model.fit(up_batches, epochs=1, verbose=0),
            "ours": lambda r: our_epoch(args.seed + r),
        },
        "validation": {
            "upstream": lambda r: up_metrics.top_error_performance(
                parts.validation.get_graph_tensors_dataset(), up_model.forward
            ),
            "ours": lambda r: scoring.score_split(
                our_model, ours.valid, ours.stats, scorer=scorer, progress=False
            ),
        },
    }
    laps: dict = {w: {s: [] for s in SIDES} for w in work_items}
    for r in range(a.rounds + 1):
        order = SIDES if r % 2 == 0 else SIDES[::-1]
        for what, runs in work_items.items():
            for side in order:
                wall, cpu = _timed(runs[side], r)
                laps[what][side].append([wall, cpu])
                print(f"round {r + 1} {what} {side}: {wall:.2f} s, CPU {cpu:.2f} s", flush=True)
    return dict(
        model=a.model,
        rounds=a.rounds,
        kernels={s.name: len(s) for s in (ours.train, ours.valid)},
        valid_configs=int(ours.valid.config_counts().sum()),
        train_steps=steps,
        cpus=os.cpu_count(),
        load_start=os.getloadavg()[0],
        laps=laps,
    )


def _stats(laps: list[list[float]]) -> dict[str, float]:
    """Mean, std and median of wall and CPU seconds, the tracing round left out."""
    kept = np.asarray(laps[1:])
    return {
        f"{k}_{stat}": float(f(kept[:, i]))
        for i, k in enumerate(("wall", "cpu"))
        for stat, f in (("mean", np.mean), ("std", np.std), ("median", np.median))
    }


def markdown(r: dict) -> str:
    rows = [
        "# Interleaved: ours against upstream in one process",
        "",
        f"`{r['command']}` ({r['model']}; {r['kernels']['train']} train kernels, "
        f"{r['train_steps']} steps an epoch; {r['kernels']['valid']} valid kernels, "
        f"{r['valid_configs']:,} configs; {r['cpus']} CPU cores, load average "
        f"{r['load_start']:.1f} at the start)",
        "",
        f"Mean +- std (median) over rounds 2-{r['rounds'] + 1}; ratio = upstream / ours "
        "(above 1: ours faster), of the means.",
        "",
        "| work | ours, wall | upstream, wall | ratio | ours, CPU | upstream, CPU | CPU ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    names = {
        "epoch": "one training epoch (the train pass: neither side validates or saves)",
        "validation": "validation, every config of every valid kernel",
    }
    for what, laps in r["laps"].items():
        o, u = _stats(laps["ours"]), _stats(laps["upstream"])
        cells = [names[what]]
        for k in ("wall", "cpu"):
            for s in (o, u):
                mean, std, median = (s[f"{k}_{stat}"] for stat in ("mean", "std", "median"))
                cells.append(f"{mean:.2f} +- {std:.2f} ({median:.2f}) s")
            cells.append(f"{u[f'{k}_mean'] / o[f'{k}_mean']:.2f}x")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    command = " ".join(["python benchmarks/interleaved.py", *argv])
    results = {"command": command, **measure(a)}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(markdown(results), encoding="utf-8")
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
