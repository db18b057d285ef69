"""Quality and speed of every model class on a fixed synthetic set (run by hand, not a test).

Trains each class with upstream's default flags (10 configs x 10 kernels per step, lr 1e-3,
clipnorm 1e-3, ListMLE + 0.02 MSE) for a fixed number of epochs, then reports validation
top-1/5/10 error, the Kaggle-form score (1 - top-5 error), OPA, seconds per epoch, and the
time and peak memory of `forward` on one 6000-config, 400-node kernel. Each model runs in its
own process so that peak memory is its own.

    python benchmarks/models_bench.py --data /tmp/bench_data --epochs 10 \
        --models ResidualSAGE,EarlyJoinSAGE --family roofline
"""

from __future__ import annotations

import argparse
import json
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _one(model: str, data_root: str, epochs: int, kwargs: str, extra: str, out: str) -> dict:
    """Trains one model in this process; returns its row of the table."""
    import tensorflow as tf

    from tpu_tiles_models import data, metrics, scoring, train
    from tpu_tiles_models.train_args import TrainArgs

    argv = [
        "--model",
        model,
        "--model_kwargs_json",
        kwargs,
        "--data_root",
        data_root,
        "--cache_dir",
        "",
        "--out_dir",
        out,
        "--epochs",
        str(epochs),
        "--early_stop",
        "0",
        "--results_csv",
        str(Path(out) / "results.csv"),
        "--no_progress",
        *shlex.split(extra),
    ]
    result = train.train(TrainArgs.from_argv(argv))
    run = json.loads(__import__("gzip").decompress(result.run_file.read_bytes()))
    seconds = run["tpu_tiles"]["epoch_seconds"]
    ds = data.load_dataset(
        data_root,
        splits=("valid",),
        stats=data.FeatureStats.from_json(run["tpu_tiles"]["feature_stats"]),
        progress=False,
    )
    scored = scoring.score_split(result.model, ds.valid, ds.stats, progress=False)
    opa = float(
        np.mean([metrics.ordered_pair_accuracy(s.runtimes[:500], s.scores[:500]) for s in scored])
    )

    # One big kernel: 400 nodes, 6000 configs (random features; only time and memory count).
    graph = _big_kernel(ds.stats)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    scorer = scoring.kernel_scorer(result.model)
    scorer(iter(tf.data.Dataset.from_tensors(graph)))
    first = time.perf_counter() - start
    start = time.perf_counter()
    scorer(iter(tf.data.Dataset.from_tensors(graph)))
    forward_s = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    errors = result.val_errors
    return dict(
        model=model,
        top1=errors[1],
        top5=errors[5],
        top10=errors[10],
        score=metrics.kaggle_score(errors[5]),
        opa=opa,
        epoch_s=float(np.median(seconds[1:] if len(seconds) > 1 else seconds)),
        first_epoch_s=seconds[0],
        forward_6000_s=forward_s,
        forward_first_s=first,
        peak_rss_mb=peak / 1024,
        rss_before_big_mb=before / 1024,
    )


def _big_kernel(stats):
    """A 400-node, 6000-config one-kernel GraphTensor in the upstream schema."""
    from tpu_tiles_models import data

    rng = np.random.default_rng(0)
    n, e, c = 400, 700, 6000
    producers = rng.integers(0, n - 1, size=e)
    consumers = np.minimum(producers + rng.integers(1, 20, size=e), n - 1)
    split = data.Split(
        name="bench",
        tile_ids=["big"],
        files=["big.npz"],
        node_feat=rng.random((n, data.NODE_FEAT_DIM), dtype=np.float32),
        node_opcode=rng.integers(1, 120, size=n).astype(np.int32),
        edge_index=np.stack([consumers, producers], 1).astype(np.int32),
        config_feat=rng.random((c, data.CONFIG_FEAT_DIM), dtype=np.float32) * 64,
        config_runtime=rng.random(c) + 1,
        config_runtime_normalizers=np.ones(c),
        node_offsets=np.array([0, n]),
        edge_offsets=np.array([0, e]),
        config_offsets=np.array([0, c]),
    )
    return data.kernel_graph(split, 0, stats)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="/tmp/tpu_tiles_bench_data")
    p.add_argument("--family", default="roofline")
    p.add_argument("--train", type=int, default=400)
    p.add_argument("--valid", type=int, default=80)
    p.add_argument("--max_configs", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--models", default="ResidualSAGE,ResidualSAGEPlain,EarlyJoinSAGE,MLP")
    p.add_argument("--kwargs", default="{}", help="model_kwargs_json for every model")
    p.add_argument("--extra", default="", help="more `tpu-tiles train` flags, e.g. '--configs 32'")
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--json", default="", help="also write the rows here")
    a = p.parse_args()
    if a.one:
        with tempfile.TemporaryDirectory() as out:
            row = _one(a.one, a.data, a.epochs, a.kwargs, a.extra, out)
            print("ROW " + json.dumps(row), flush=True)
        return
    if not Path(a.data, "train").is_dir():
        sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))  # synth_families alone
        import synth_families  # noqa: F401  (the benchmark families)

        from tpu_tiles_models import synthetic

        synthetic.generate(
            a.data,
            train=a.train,
            valid=a.valid,
            test=10,
            seed=123,
            max_configs=a.max_configs,
            family=a.family,
        )
    rows = []
    for model in a.models.split(","):
        cmd = [
            sys.executable,
            __file__,
            "--one",
            model,
            "--data",
            a.data,
            "--epochs",
            str(a.epochs),
            "--kwargs",
            a.kwargs,
            "--extra",
            a.extra,
        ]
        out = subprocess.run(cmd, capture_output=True, text=True)
        row = [line[4:] for line in out.stdout.splitlines() if line.startswith("ROW ")]
        if not row:
            print(f"{model} failed:\n{out.stderr[-3000:]}", file=sys.stderr)
            continue
        rows.append(json.loads(row[0]))
        print(_table(rows[-1:], header=len(rows) == 1), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


def _table(rows: list[dict], header: bool = True) -> str:
    cols = (
        "model",
        "top1",
        "top5",
        "top10",
        "score",
        "opa",
        "epoch_s",
        "forward_6000_s",
        "peak_rss_mb",
    )
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)] if header else []
    for r in rows:
        cells = [r[c] if isinstance(r[c], str) else f"{r[c]:.3f}" for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
