"""`tpu-tiles sweep` vs the same points as sequential `tpu-tiles train` runs.

Run by hand (not a test); about 5 minutes on 2 CPU cores:

    .venv/bin/python benchmarks/sweep_bench.py [--work DIR] [--points 8]

1. Generates a small synthetic tile:xla set (100 train kernels) into `--work`.
2. Sequential: each point as its own `tpu-tiles train <the point's flags>` process, one after
   the other (what a shell loop does).
3. Sweep: `tpu-tiles sweep` over the same grid with its defaults (multi-processing
   DirectRunner, `--num_workers` = cores, a child process per point), then again with one
   worker, which isolates the sweep's own cost: (sweep with 1 worker - sequential) / points.
4. Checks that each point's validation errors match its sequential twin (same flags but the
   output folder, so the same training).

Writes `benchmarks/results/sweep_bench.json` and `.md`, with the load average (`uptime`)
before and after: other jobs on the same cores make every figure slower.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tpu_tiles_models import run_file, synthetic
from tpu_tiles_models.sweep import grid as grids
from tpu_tiles_models.train_args import TrainArgs

RESULTS = Path(__file__).resolve().parent / "results"
TPU_TILES = [sys.executable, "-m", "tpu_tiles_models.cli"]
GRID = "lr=1e-3,2e-3 seed=0,1,2,3"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", default="/tmp/sweep_bench", help="data and outputs go here")
    p.add_argument("--grid", default=GRID, help="the points (default: 8)")
    p.add_argument("--train", type=int, default=100, help="synthetic train kernels")
    p.add_argument(
        "--flags",
        default='--model=MLP --model_kwargs_json={"hidden_dim":32} --epochs=2 --early_stop=0 '
        "--configs=16 --batch=8",
        help="train flags of every point",
    )
    return p.parse_args(argv)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def timed(cmd: list[str], log: Path) -> float:
    """Wall seconds of `cmd` (output to `log`); fails loudly if it fails."""
    start = time.perf_counter()
    with open(log, "ab") as out:
        subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=True)
    return time.perf_counter() - start


def cpu_seconds() -> float:
    """User + system CPU seconds of every finished child process so far (with theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(result: dict, name: str, run) -> None:
    """`result[name + "_s"]` wall and `result[name + "_cpu_s"]` CPU seconds of `run()`."""
    cpu = cpu_seconds()
    result[f"{name}_s"] = run()
    result[f"{name}_cpu_s"] = cpu_seconds() - cpu
    print(
        f"{name}: {result[f'{name}_s']:.1f} s wall, {result[f'{name}_cpu_s']:.1f} s CPU", flush=True
    )


def points(grid: str, base: TrainArgs, out: Path) -> list[grids.Point]:
    """The grid's points as a sweep into `out` makes them (flags, results_csv, TensorBoard)."""
    base = base.replace(out_dir=str(out), tensorboard=str(out / "tensorboard"), no_progress=True)
    return grids.expand(grids.parse_grid(grid), base)


def sequential(plan: list[grids.Point], log: Path) -> float:
    """Each point as `tpu-tiles train <its flags>`, one process after the other."""
    start = time.perf_counter()
    for point in plan:
        timed([*TPU_TILES, "train", *point.args.to_argv()], log)
    return time.perf_counter() - start


def val_errors(point: grids.Point) -> dict:
    """The point's validation errors, from its run file."""
    info = json.loads(
        gzip.decompress(Path(run_file.run_file_path(point.args.out_dir, point.hash)).read_bytes())
    )
    return info["final_error"]["val"]


def point_walls(out: Path) -> list[float]:
    """Seconds each point's child process took, from the sweep's outcome records."""
    records = [json.loads(p.read_text()) for p in (out / "sweep" / "points").glob("*.json")]
    return sorted(r["wall_s"] for r in records)


def main(argv: list[str] | None = None) -> dict:
    a = parse_args(argv)
    work = Path(a.work)
    shutil.rmtree(work, ignore_errors=True)
    data, log = work / "data", work / "bench.log"
    synthetic.generate(data, train=a.train, valid=20, test=10, seed=0, progress=False)
    flags = [*a.flags.split(), f"--data_root={data}", "--cache_dir="]
    base = TrainArgs.from_argv(flags)
    plan = points(a.grid, base, work / "seq")
    cores = len(os.sched_getaffinity(0))
    result: dict = dict(points=len(plan), cores=cores, grid=a.grid, flags=flags)
    result["uptime_before"] = uptime()
    print(f"{len(plan)} points: sequential, sweep ({cores} workers), sweep (1 worker)", flush=True)
    measure(result, "sequential", lambda: sequential(plan, log))
    sweep_cmd = [*TPU_TILES, "sweep", "--grid", a.grid, *flags]
    measure(result, "sweep", lambda: timed([*sweep_cmd, "--out_dir", str(work / "sweep")], log))
    result["sweep_point_s"] = point_walls(work / "sweep")
    one = [*sweep_cmd, "--out_dir", str(work / "sweep1"), "--num_workers=1"]
    measure(result, "sweep_1worker", lambda: timed(one, log))
    result["uptime_after"] = uptime()
    n = len(plan)
    result["speedup"] = result["sequential_s"] / result["sweep_s"]
    result["overhead_per_point_s"] = (result["sweep_1worker_s"] - result["sequential_s"]) / n
    cpu = result["sweep_1worker_cpu_s"] - result["sequential_cpu_s"]
    result["overhead_cpu_per_point_s"] = cpu / n
    result["max_val_error_diff"] = max_diff(a.grid, base, work)
    write(result)
    return result


def max_diff(grid: str, base: TrainArgs, work: Path) -> float:
    """Largest |difference| of a validation error between a sweep point and its twin."""
    diffs = []
    seq = [val_errors(p) for p in points(grid, base, work / "seq")]
    for out in ("sweep", "sweep1"):
        for twin, point in zip(seq, points(grid, base, work / out)):
            other = val_errors(point)
            diffs += [abs(twin[k] - other[k]) for k in twin]
    return max(diffs)


def write(result: dict) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "sweep_bench.json").write_text(json.dumps(result, indent=1) + "\n")
    r, n = result, result["points"]
    rows = [
        (f"{n} x sequential `tpu-tiles train`", "sequential"),
        (f"`tpu-tiles sweep` ({r['cores']} workers, default)", "sweep"),
        ("`tpu-tiles sweep --num_workers 1`", "sweep_1worker"),
    ]
    lines = [
        "# sweep_bench",
        "",
        f'{n} points (`--grid "{r["grid"]}"`, flags `{" ".join(r["flags"][:-2])}`) on '
        f"{r['cores']} cores, synthetic data (`benchmarks/sweep_bench.py`).",
        "",
        "| run | wall s | CPU s |",
        "|---|---|---|",
        *(f"| {label} | {r[k + '_s']:.1f} | {r[k + '_cpu_s']:.1f} |" for label, k in rows),
        "",
        f"Speed-up of the sweep over the sequential runs: **{r['speedup']:.2f}x**. The sweep's "
        f"own cost per point (1 worker minus sequential, divided by {n}): "
        f"**{r['overhead_per_point_s']:+.2f} s** wall, {r['overhead_cpu_per_point_s']:+.2f} s "
        "CPU. Seconds per point inside the default sweep (child process, from its records): "
        + ", ".join(f"{s:.1f}" for s in r["sweep_point_s"])
        + ". Largest difference of a validation error between a sweep point and its "
        f"sequential twin: {r['max_val_error_diff']:.3g}.",
        "",
        f"Load before: `{r['uptime_before']}`; after: `{r['uptime_after']}`.",
    ]
    md = "\n".join(lines) + "\n"
    (RESULTS / "sweep_bench.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
