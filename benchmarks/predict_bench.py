"""Test-split ranking speed: the course procedure vs `scoring.score_split`, same model.

Run by hand (not a test):

    .venv/bin/python benchmarks/predict_bench.py [--kernels 60] [--max_configs 1000]

1. Generates a synthetic tile:xla set into a temporary folder (or reuses one in `--work`).
2. Builds one model (random weights: speed does not depend on training).
3. Course procedure: one eager `model.forward(graph, n)` per test kernel, `n` a Python int,
   then argsort, as upstream's `rank_config_indices` does (reimplemented here in brief).
4. Ours: `scoring.score_split`, cold (tracing included) and warm (later passes).
   Timings keep the best of `--repeats` passes: CPUs shared with other jobs are noisy.
5. Peak RSS of a fresh process scoring one 6000-config kernel, ours and the course's.
6. The prediction command as a user runs it (`tiles_gen_predictions_csv.py`, a fresh process)
   on an upstream-trained EarlyJoinSAGE (`--command_kernels` test kernels), on a fresh data
   cache and then a warm one; with `--against COMMIT[,COMMIT]`, those commits' scripts too,
   each in a git worktree, all interleaved (`--command_repeats` rounds) and their medians
   shown with the load average, as CPUs shared with other jobs drift.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

# The package before TensorFlow: it makes `tf.keras` Keras 2.
from tpu_tiles_models import data, registry, scoring, synthetic  # noqa: E402

# isort: split
import tensorflow as tf  # noqa: E402

TOP = 5
BIG_CONFIGS = 6000
RESULTS = Path(__file__).resolve().parent / "results"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernels", type=int, default=60, help="test kernels to rank")
    p.add_argument("--max_configs", type=int, default=1000, help="configs per kernel at most")
    p.add_argument("--model", default="ResidualSAGE")
    p.add_argument("--model_kwargs_json", default="{}", help="default: the class defaults")
    p.add_argument("--work", default="", help="folder for the synthetic data (default: temp)")
    p.add_argument("--repeats", type=int, default=2, help="timings keep the best of these")
    p.add_argument("--skip_rss", action="store_true", help="skip the 6000-config RSS runs")
    p.add_argument("--skip_scoring", action="store_true", help="skip steps 3-4 (in process)")
    p.add_argument("--skip_command", action="store_true", help="skip the prediction command")
    p.add_argument("--against", default="", help="commits (comma-separated) to time there too")
    p.add_argument("--command_kernels", type=int, default=400, help="test kernels (command)")
    p.add_argument("--command_configs", type=int, default=40, help="configs per kernel at most")
    p.add_argument("--command_repeats", type=int, default=5, help="rounds, medians reported")
    p.add_argument("--out", default=str(RESULTS / "predict_bench.md"), help="results file")
    # Internal: the RSS child process.
    p.add_argument("--rss_child", default="", help=argparse.SUPPRESS)
    p.add_argument("--method", choices=["ours", "course"], default="ours", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def build_model(args: argparse.Namespace, ds: data.Dataset) -> tf.keras.Model:
    """The model both procedures use, built by one eager forward like the course script.

    The build uses 16 sampled configs so that it does not raise the peak RSS measured later.
    """
    tf.keras.utils.set_random_seed(0)
    model = registry.build_model(args.model, 10, ds.num_ops, args.model_kwargs_json)
    sample = data.kernel_graph(ds.test, 0, ds.stats, num_configs=16)
    model.forward(sample, int(sample.node_sets["config"].sizes[0]))
    return model


def course_rank(model: tf.keras.Model, ds: data.Dataset) -> dict[str, list[int]]:
    """The course procedure: iterate GraphTensors, eager `forward(graph, int n)`, argsort."""
    ranks = {}
    for graph in data.graph_dataset(ds.test, ds.stats):
        n = int(graph.node_sets["config"].sizes[0].numpy())
        order = tf.argsort(tf.squeeze(model.forward(graph, n), 0)).numpy()
        ranks[graph.node_sets["g"]["tile_id"][0].numpy().decode()] = order[:TOP].tolist()
    return ranks


def our_rank(model: tf.keras.Model, ds: data.Dataset, scorer=None) -> dict[str, list[int]]:
    scored = scoring.score_split(model, ds.test, ds.stats, scorer=scorer, progress=False)
    return {s.tile_id: np.argsort(s.scores, kind="stable")[:TOP].tolist() for s in scored}


def timed(fn, *args, repeats: int = 1) -> tuple[float, dict]:
    """(best wall seconds over `repeats` calls, the last result): shared CPUs are noisy."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn(*args)
        best = min(best, time.perf_counter() - start)
    return best, result


def peak_rss_mb() -> float:
    """This process's peak RSS: VmHWM (resettable, see `reset_peak_rss`) or ru_maxrss."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def current_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak_rss() -> None:
    """Linux: '5' to clear_refs resets VmHWM to the current RSS, so the peak is scoring's."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass  # the peak then includes loading


def rss_child(args: argparse.Namespace) -> None:
    """Scores the one test kernel of `--rss_child`; prints peak RSS before/after as JSON."""
    ds = data.load_dataset(args.rss_child, progress=False)
    model = build_model(args, ds)
    process_peak = peak_rss_mb()
    before = current_rss_mb()
    reset_peak_rss()
    fn = our_rank if args.method == "ours" else course_rank
    seconds, _ = timed(fn, model, ds)
    peak = peak_rss_mb()
    print(
        json.dumps(
            dict(
                before_mb=before,
                peak_mb=peak,
                process_peak_mb=max(peak, process_peak),
                seconds=seconds,
            )
        )
    )


def measure_rss(args: argparse.Namespace, root: Path, method: str) -> dict:
    cmd = [sys.executable, __file__, "--rss_child", str(root), "--method", method]
    cmd += ["--model", args.model, "--model_kwargs_json", args.model_kwargs_json]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.rss_child:
        rss_child(args)
        return
    work = Path(args.work or tempfile.mkdtemp(prefix="predict_bench_")).resolve()
    command = " ".join(["python benchmarks/predict_bench.py", *(argv or sys.argv[1:])])
    lines = [f"`{command}` ({os.cpu_count()} cores)"]
    if not args.skip_scoring:
        lines += ["", *_scoring_lines(args, work)]
    if not args.skip_rss:
        lines += ["", *_rss_lines(args, work)]
    if not args.skip_command:
        lines += ["", *_command_lines(args, work)]
    print("\n".join(lines))
    out = Path(args.out)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


def _scoring_lines(args: argparse.Namespace, work: Path) -> list[str]:
    """Steps 1-4: the course procedure and `score_split`, in this process."""
    root = work / f"set_{args.kernels}_{args.max_configs}"
    if not root.exists():
        synthetic.generate(
            root, train=20, valid=4, test=args.kernels, max_configs=args.max_configs, progress=False
        )
    ds = data.load_dataset(root, progress=False)
    model = build_model(args, ds)
    n, configs = len(ds.test), int(ds.test.config_counts().sum())
    lines = [
        f"{args.model} {args.model_kwargs_json}; {n} test kernels, {configs} configs; load "
        f"average {os.getloadavg()[0]:.1f} at the start:",
        "",
    ]
    course_s, course = timed(course_rank, model, ds, repeats=args.repeats)
    scorer = scoring.KernelScorer(model)
    cold_s, ours = timed(our_rank, model, ds, scorer)
    warm_s, _ = timed(our_rank, model, ds, scorer, repeats=args.repeats)
    agree = sum(course[t] == ours[t] for t in course)

    lines += ["| procedure | seconds | kernels/s | speed-up |", "|---|---|---|---|"]
    for name, s in (
        ("course script (eager forward per kernel)", course_s),
        ("ours, cold (tracing included)", cold_s),
        ("ours, warm", warm_s),
    ):
        lines.append(f"| {name} | {s:.2f} | {n / s:.1f} | {course_s / s:.1f}x |")
    return lines + ["", f"Same top-5 on {agree}/{n} kernels."]


def _rss_lines(args: argparse.Namespace, work: Path) -> list[str]:
    """Peak RSS of scoring one 6000-config kernel in a fresh process, ours and the course's."""
    big = work / "big"
    if not big.exists():
        synthetic.generate(
            big,
            train=2,
            valid=1,
            test=1,
            min_configs=BIG_CONFIGS,
            max_configs=BIG_CONFIGS,
            progress=False,
        )
    lines = [
        f"One {BIG_CONFIGS}-config kernel in a fresh process (RSS includes TF, data and model):",
        "",
        "| procedure | peak RSS while scoring, MB | process peak, MB | seconds |",
        "|---|---|---|---|",
    ]
    for method in ("ours", "course"):
        r = measure_rss(args, big, method)
        lines.append(
            f"| {method} | {r['peak_mb']:.0f} | {r['process_peak_mb']:.0f} | {r['seconds']:.2f} |"
        )
    return lines


REPO = Path(__file__).resolve().parent.parent
SCRIPT = "tiles_gen_predictions_csv.py"
# Upstream's models carry no ranking rule: so is the model its trainer hands in.
UPSTREAM_KWARGS = {"keep_default_gate": False, "default_margin": False}


def upstream_run(root: Path, out: Path) -> Path:
    """An EarlyJoinSAGE trained one epoch on `root`, as upstream's trainer leaves it: its run
    file without our extras (so prediction refits the statistics on every split, as for a
    run of upstream's), renamed to that content's hash. Returns its model folder."""
    from tpu_tiles_models import run_file, train
    from tpu_tiles_models.train_args import TrainArgs

    if out.exists():
        return next(out.glob("model_*"))
    trained = out.with_name(out.name + "_ours")
    kwargs = json.dumps(UPSTREAM_KWARGS)
    args = TrainArgs(
        model="EarlyJoinSAGE",
        model_kwargs_json=kwargs,
        epochs=1,
        data_root=str(root),
        out_dir=str(trained),
        cache_dir="",
        no_progress=True,
    )
    result = train.train(args)
    info = run_file.read_run(result.model_dir)
    del info[run_file.EXTRAS_KEY]
    out.mkdir(parents=True)
    h = run_file.run_info_hash(info)  # upstream's run: no extras
    Path(run_file.run_file_path(out, h)).write_bytes(run_file.run_bytes(info))
    model_dir = out / ("model_" + h)
    shutil.copytree(result.model_dir, model_dir)
    shutil.rmtree(trained)
    return model_dir


def _predict_seconds(
    checkout: Path, model_dir: Path, root: Path, cache: Path, out: Path
) -> tuple[float, float]:
    """(wall, CPU) seconds of `checkout`'s prediction command in a fresh process (its own
    package: the script's folder comes first on sys.path). CPU time (user + system, all its
    threads) moves less than wall time with other jobs' load."""
    cmd = [sys.executable, str(checkout / SCRIPT), f"--dir={model_dir}", f"--data_root={root}"]
    cmd += [f"--cache_dir={cache}", f"--out={out}", "--no_progress"]
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(cmd, check=True, cwd=out.parent, capture_output=True)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _command_lines(args: argparse.Namespace, work: Path) -> list[str]:
    """Step 6: the prediction command, fresh and warm cache, here and at `--against`."""
    root = work / f"command_set_{args.command_kernels}_{args.command_configs}"
    if not root.exists():  # as TpuGraphs: 7 train kernels for 1 test, most of them small
        n, configs = args.command_kernels, args.command_configs
        synthetic.generate(root, train=7 * n, valid=n, test=n, max_configs=configs, progress=False)
    model_dir = upstream_run(root, work / f"upstream_run_{root.name}")
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], text=True, capture_output=True
    ).stdout.strip()
    checkouts = {f"this tree ({head})": REPO}
    temp = Path(tempfile.mkdtemp(prefix="predict_bench_old_"))
    git = ["git", "-C", str(REPO)]
    for commit in filter(None, args.against.split(",")):
        checkouts[commit] = temp / commit
        subprocess.run(
            [*git, "worktree", "add", "--detach", str(temp / commit), commit], check=True
        )
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    loads = [os.getloadavg()[0]]
    try:
        for i in range(args.command_repeats):
            for n, (name, checkout) in enumerate(checkouts.items()):
                cache = work / f"cache_{i}_{n}"
                for state in ("fresh", "warm"):
                    out = work / f"predictions_{state}.csv"
                    seconds = _predict_seconds(checkout, model_dir, root, cache, out)
                    times.setdefault((name, state), []).append(seconds)
                shutil.rmtree(cache)
            loads.append(os.getloadavg()[0])
    finally:
        for checkout in list(checkouts.values())[1:]:
            subprocess.run([*git, "worktree", "remove", "--force", str(checkout)], check=True)
        shutil.rmtree(temp)
    kernels = sum(1 for _ in (root / "test").glob("*.npz"))
    lines = [
        f"`{SCRIPT}` on an upstream-trained EarlyJoinSAGE ({kernels} test kernels; all three "
        f"splits loaded, as for upstream's runs), {args.command_repeats} interleaved rounds, "
        f"median (min-max) seconds, wall and CPU (user + system); load average "
        f"{min(loads):.1f}-{max(loads):.1f} (1-minute, sampled between rounds):",
        "",
        "| code | fresh cache, wall | fresh, CPU | warm cache, wall | warm, CPU |",
        "|---|---|---|---|---|",
    ]
    for name in checkouts:
        cells = []
        for state in ("fresh", "warm"):
            for t in zip(*times[(name, state)]):
                cells.append(f"{statistics.median(t):.2f} ({min(t):.2f}-{max(t):.2f})")
        lines.append(f"| {name} | {' | '.join(cells)} |")
    return lines


if __name__ == "__main__":
    main()
