"""Full-scale rehearsal (issues 14, 22): ours vs upstream's `tiles_train.py` on a full-size set.

Run by hand (not a test), on a data set generated once:

    python benchmarks/synth.py DATA --scale full --family fusion \\
        --test_ids_from sample_submission.csv
    python benchmarks/fullscale.py --data DATA --upstream UPSTREAM --course COURSE \\
        --work WORK [--fraction 0.1] [--epochs 1]

`UPSTREAM` is an upstream `tpu_graphs` checkout, copied to `WORK/upstream` with our
`models.py` in place of `tpu_graphs/baselines/tiles/models.py` (the checkout itself is not
touched); `COURSE` holds the course's `tiles_gen_predictions_csv.py`. `--fraction F` uses the
first F of each split (by file name), linked into `WORK/data_<F>`, so both sides read the same
kernels. Every measurement runs in its own process; the parent takes each child's wall and
CPU time and peak RSS (`wait4`), and inside a child each phase's wall and CPU seconds and
peak RSS are taken, the peak from `VmHWM` reset at the phase's start
(`/proc/self/clear_refs`), so it counts what the process held before the phase plus what the
phase added. Ratios are given on wall and on CPU seconds: on a machine shared with other
jobs the wall clock moves with their load; a goal is met when both say so.

1. First load, npz to cache (cold cache), then the same load again from the cache: ours
   (`data.load_dataset` with a cache dir) and upstream's (`data.get_npz_dataset`).
2. A whole training run with the same flags (upstream's defaults, `--epochs N`): `tpu-tiles train`
   (EarlyJoinSAGE, and ResidualSAGE with the recommended flags) and upstream's `tiles_train.py`
   (EarlyJoinSAGE), both unchanged and timed from outside: per-epoch train pass and validation
   (ours: also every config of its sample of the validation kernels), the passes over every config
   of every validation kernel (upstream's final validation; ours, choosing among the candidate
   epochs), the test ranking, the saves. The whole default run (100 epochs) is extrapolated from
   them: load and build, the first epoch as measured, 99 more at the pace of the later ones
   (upstream's without the saves it makes at a new best, which only favours upstream), then the end
   phases as measured.
3. Test prediction with each side's trained EarlyJoinSAGE: `tpu-tiles predict` and the
   course's `tiles_gen_predictions_csv.py` run from the upstream copy.
4. `tpu-tiles predict` on one 10,000-config kernel of at least 400 nodes (the largest graph of
   the data set, grown to 400 nodes if smaller).

Writes `benchmarks/results/fullscale.json` (every figure) and `fullscale.md` (the goals
table README shows; `python benchmarks/update_readme.py` copies it in).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
SPLITS = ("train", "valid", "test")
COURSE_SCRIPT = "tiles_gen_predictions_csv.py"
BIG_CONFIGS = 10_000
BIG_NODES = 400
GIB = 1024.0  # MiB per GiB
# The goals.
BIG_RSS_GOAL_GIB = 2.0
VALIDATION_SPEEDUP_GOAL = 5.0
PREDICT_SPEEDUP_GOAL = 5.0
CACHE_GOAL = 1.5  # ours at most this many times upstream's
DEFAULT_EPOCHS = 100  # upstream's --epochs: the whole default run, extrapolated
# The phases after the epochs, in each whole run.
OURS_END = [
    "choose among candidates (every config)",
    "final validation (every config)",
    "test ranking",
    "save",
]
UPSTREAM_END = ["final validation (every config)", "after validation", "test ranking", "save"]
SIDES = ("ours", "upstream")
MODELS = ("EarlyJoinSAGE", "ResidualSAGE")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", help="a `tpu-tiles synth --scale full` data set")
    p.add_argument("--upstream", help="upstream tpu_graphs checkout (read only)")
    p.add_argument("--course", help="folder holding the course's tiles_gen_predictions_csv.py")
    p.add_argument("--work", help="scratch folder: data subset, upstream copy, caches, runs")
    p.add_argument("--fraction", type=float, default=1.0, help="first F of each split")
    p.add_argument("--epochs", type=int, default=1, help="training epochs (both trainers)")
    p.add_argument(
        "--no_full_load",
        dest="full_load",
        action="store_false",
        help="with --fraction < 1, skip timing the loads of the whole data set too",
    )
    p.add_argument("--out", default=str(RESULTS / "fullscale"), help="results path stem")
    p.add_argument("--note", default="", help="a sentence added under the table")
    p.add_argument(
        "--from_json", default="", help="rewrite the tables from an earlier run's JSON only"
    )
    # Internal: one measurement in a child process.
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    p.add_argument("--spec", default="", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if not a.child and not a.from_json:
        missing = [f"--{k}" for k in ("data", "upstream", "course", "work") if not getattr(a, k)]
        if missing:
            p.error(f"{', '.join(missing)} required")
        if not 0 < a.fraction <= 1:
            p.error(f"--fraction must be in (0, 1], got {a.fraction}")
        if a.epochs < 1:
            p.error(f"--epochs must be at least 1, got {a.epochs}")
    return a


# ----------------------------------------------------------------------------------------
# Memory and phases (inside a child)
# ----------------------------------------------------------------------------------------


def _status_mb(key: str) -> float:
    """A `/proc/self/status` figure (VmHWM, VmRSS) in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


def _reset_peak() -> None:
    """Linux: '5' to clear_refs sets VmHWM to the current RSS."""
    Path("/proc/self/clear_refs").write_text("5")


def now() -> tuple[float, float]:
    """(wall, CPU) seconds; CPU is this process's, all threads: on a machine shared with
    other jobs it moves less with their load than the wall clock does."""
    return time.perf_counter(), time.process_time()


def _lap(laps: dict[str, list[float]], name: str, start: tuple[float, float]) -> None:
    """Appends the wall and CPU seconds since `start` to `laps[name]`, `laps[name_cpu]`."""
    wall, cpu = now()
    laps.setdefault(name, []).append(wall - start[0])
    laps.setdefault(f"{name}_cpu", []).append(cpu - start[1])


def _mark(laps: dict[str, list], name: str = "epoch_marks") -> None:
    """Appends the (wall, CPU) clock to `laps[name]`: epoch boundaries."""
    laps.setdefault(name, []).append(list(now()))


class Phases:
    """Wall and CPU seconds and peak RSS of consecutive phases of this process.

    `enter(name)` closes the current phase and starts `name`; a name entered again adds to
    its seconds and keeps the larger peak.
    """

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, float]] = {}
        self.current = ""
        self.start = (0.0, 0.0)

    def enter(self, name: str) -> None:
        self.close()
        _reset_peak()
        self.current, self.start = name, now()

    def close(self) -> None:
        if not self.current:
            return
        (wall, cpu), peak = now(), _status_mb("VmHWM")
        row = self.rows.setdefault(
            self.current, {"seconds": 0.0, "cpu_seconds": 0.0, "peak_rss_mb": 0.0}
        )
        row["seconds"] += wall - self.start[0]
        row["cpu_seconds"] += cpu - self.start[1]
        row["peak_rss_mb"] = max(row["peak_rss_mb"], peak)
        self.current = ""


def _timed_calls(owner: Any, name: str, laps: dict[str, list[float]], lap: str) -> None:
    """Replaces `owner.name` by a wrapper adding each call's seconds to `laps` (`_lap`)."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        start = now()
        try:
            return original(*args, **kwargs)
        finally:
            _lap(laps, lap, start)

    setattr(owner, name, wrapper)


def _phase_calls(owner: Any, name: str, phases: Phases, during: str, after: str) -> None:
    """Replaces `owner.name` by a wrapper that enters phase `during` for each call and phase
    `after` when it returns."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        phases.enter(during)
        try:
            return original(*args, **kwargs)
        finally:
            phases.enter(after)

    setattr(owner, name, wrapper)


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# ----------------------------------------------------------------------------------------
# Children: ours
# ----------------------------------------------------------------------------------------


def child_ours_load(spec: dict) -> dict:
    """Cold load (npz to cache) and warm load (from the cache) with `data.load_dataset`."""
    from tpu_tiles_models import data

    cache = Path(spec["cache"])
    shutil.rmtree(cache, ignore_errors=True)
    phases = Phases()
    kwargs = dict(min_train_configs=spec["configs"], cache_dir=str(cache), progress=False)
    phases.enter("first load (npz to cache)")
    ds = data.load_dataset(spec["root"], **kwargs)
    phases.enter("load from cache")
    data.load_dataset(spec["root"], **kwargs)
    phases.close()
    return dict(phases=phases.rows, cache_bytes=_dir_bytes(cache), data=_describe(ds))


def _describe(ds) -> dict:
    """Kernels, configs, the largest config count and graph of each split."""
    out = {}
    for name in SPLITS:
        split = getattr(ds, name)
        counts = split.config_counts()
        nodes = _nodes_per_kernel(split)
        out[name] = dict(
            kernels=len(split),
            configs=int(counts.sum()),
            max_configs=int(counts.max()),
            over_6000=int((counts > 6000).sum()),
            max_nodes=int(max(nodes)),
        )
    return out


def _nodes_per_kernel(split) -> list[int]:
    offsets = split.node_offsets
    return [int(b - a) for a, b in zip(offsets[:-1], offsets[1:])]


def child_ours_train(spec: dict) -> dict:
    """`tpu-tiles train` in this process, each phase timed from outside the trainer."""
    from tpu_tiles_models import export, scoring
    from tpu_tiles_models import train as trainer
    from tpu_tiles_models.train_args import TrainArgs

    phases = Phases()
    phases.enter("load and build")
    laps: dict[str, list[float]] = {}
    run = trainer._Loop.run

    def loop_run(self, ds, *, train: bool, **kwargs):
        if phases.current == "load and build":
            phases.enter("epochs")
        if train:
            _mark(laps)
        start = now()
        try:
            return run(self, ds, train=train, **kwargs)
        finally:
            _lap(laps, "train_pass" if train else "sampled_valid", start)

    trainer._Loop.run = loop_run
    val_score = trainer._val_score

    def timed_val_score(*args, **kwargs):
        start = now()
        try:
            return val_score(*args, **kwargs)
        finally:
            # Each epoch's sample, then (choosing among candidates, or in finish) full passes.
            _lap(laps, "epoch_scoring" if phases.current == "epochs" else "full_pass", start)

    trainer._val_score = timed_val_score

    def end_of_epochs(name: str) -> None:
        if phases.current == "epochs":
            _mark(laps)
        phases.enter(name)

    choose = trainer._choose

    def timed_choose(*args, **kwargs):
        end_of_epochs("choose among candidates (every config)")
        return choose(*args, **kwargs)

    trainer._choose = timed_choose
    finish = export.finish

    def timed_finish(*args, **kwargs):
        end_of_epochs("final validation (every config)")
        return finish(*args, **kwargs)

    export.finish = timed_finish
    score_split = scoring.score_split

    def timed_score_split(*args, desc: str = "scoring", **kwargs):
        if desc == "test":
            phases.enter("test ranking")
        try:
            return score_split(*args, desc=desc, **kwargs)
        finally:
            if desc == "test":
                phases.enter("save")

    scoring.score_split = timed_score_split
    result = trainer.train(TrainArgs.from_argv(spec["argv"]))
    phases.close()
    from tpu_tiles_models.runs import TrainedRun

    extras = TrainedRun.open(result.model_dir).extras
    return dict(
        phases=phases.rows,
        laps=laps,
        epoch_seconds=extras.get("epoch_seconds", []),
        model_dir=str(result.model_dir),
        val_errors={str(k): v for k, v in result.val_errors.items()},
        sample_kernels=extras.get("val_score_kernels"),
        candidate_scores=extras.get("candidate_scores"),
    )


def child_ours_predict(spec: dict) -> dict:
    """`tpu-tiles predict` in this process: reload, test ranking, CSV."""
    from tpu_tiles_models import cli, scoring

    phases = Phases()
    phases.enter("reload model and data")
    _phase_calls(scoring, "score_split", phases, "test ranking", "write csv")
    code = cli.main(["predict", *spec["argv"]])
    phases.close()
    if code:
        raise SystemExit(f"tpu-tiles predict exited {code}")
    return dict(phases=phases.rows)


# ----------------------------------------------------------------------------------------
# Children: upstream (its own modules from the copy, unchanged, timed from outside)
# ----------------------------------------------------------------------------------------


def _upstream_modules(root: str) -> dict[str, Any]:
    sys.path.insert(0, root)
    from tpu_graphs.baselines.tiles import data, metrics, train_lib

    return dict(data=data, metrics=metrics, train_lib=train_lib)


def _parse_absl(argv: list[str]) -> None:
    from absl import flags

    flags.FLAGS(argv)


def child_upstream_load(spec: dict) -> dict:
    """Cold and warm `get_npz_dataset` (upstream's cache)."""
    mods = _upstream_modules(spec["upstream"])
    _parse_absl(["fullscale"])
    cache = Path(spec["cache"])
    shutil.rmtree(cache, ignore_errors=True)
    phases = Phases()
    load = mods["data"].get_npz_dataset
    phases.enter("first load (npz to cache)")
    with _stdout_to_stderr():
        load(spec["root"], min_train_configs=spec["configs"], cache_dir=str(cache))
        phases.enter("load from cache")
        load(spec["root"], min_train_configs=spec["configs"], cache_dir=str(cache))
    phases.close()
    return dict(phases=phases.rows, cache_bytes=_dir_bytes(cache))


@contextlib.contextmanager
def _stdout_to_stderr():
    """Upstream prints progress on stdout; the child's stdout is its JSON result."""
    saved = sys.stdout
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = saved


class _FitTimer:
    """A Keras callback: seconds of each epoch's train pass and validation pass."""

    def __init__(self, laps: dict[str, list[float]]):
        import tensorflow as tf

        class Timer(tf.keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                self.start = now()

            def on_test_begin(self, logs=None):
                _lap(laps, "train_pass", self.start)
                self.test_start = now()

            def on_test_end(self, logs=None):
                _lap(laps, "sampled_valid", self.test_start)

        self.callback = Timer()


def child_upstream_train(spec: dict) -> dict:
    """Upstream's `tiles_train.py` main, unchanged, with its phases timed from outside."""
    import tensorflow as tf
    from absl import app

    mods = _upstream_modules(spec["upstream"])
    script = _load_script(Path(spec["upstream"]) / "tiles_train.py", "upstream_tiles_train")
    train_lib, metrics, data = mods["train_lib"], mods["metrics"], mods["data"]
    phases = Phases()
    laps: dict[str, list[float]] = {}
    phases.enter("load and build")
    fit = tf.keras.Model.fit

    def timed_fit(self, *args, **kwargs):
        if phases.current == "load and build":
            phases.enter("epochs")
        kwargs["callbacks"] = [*kwargs.get("callbacks", []), _FitTimer(laps).callback]
        _mark(laps)
        start = now()
        try:
            return fit(self, *args, **kwargs)
        finally:
            _lap(laps, "fit", start)

    tf.keras.Model.fit = timed_fit
    _timed_calls(data, "get_npz_dataset", laps, "load")
    _timed_calls(train_lib, "save_model", laps, "save")
    top_errors = metrics.top_error_performance

    def timed_top_errors(*args, **kwargs):
        _mark(laps)
        phases.enter("final validation (every config)")
        out = top_errors(*args, **kwargs)
        phases.enter("after validation")
        return out

    metrics.top_error_performance = timed_top_errors
    _phase_calls(train_lib, "rank_config_indices", phases, "test ranking", "save")
    with _stdout_to_stderr():
        try:
            app.run(script.main, argv=["tiles_train.py", *spec["argv"]])
        except SystemExit as e:
            if e.code:
                raise
    phases.close()
    out_dir = Path(spec["out_dir"])
    model_dirs = sorted(p for p in out_dir.glob("model_*") if p.is_dir())
    return dict(phases=phases.rows, laps=laps, model_dir=str(model_dirs[-1]))


def child_course_predict(spec: dict) -> dict:
    """The course's `tiles_gen_predictions_csv.py` main from the upstream copy, timed."""
    from absl import app

    mods = _upstream_modules(spec["upstream"])
    script = _load_script(Path(spec["upstream"]) / COURSE_SCRIPT, "course_predictions")
    train_lib = mods["train_lib"]
    phases = Phases()
    phases.enter("reload model and data")
    _phase_calls(train_lib, "rank_config_indices", phases, "test ranking", "write csv")
    os.chdir(spec["cwd"])  # it writes predictions_model_output.csv here
    with _stdout_to_stderr():
        try:
            app.run(script.main, argv=[COURSE_SCRIPT, *spec["argv"]])
        except SystemExit as e:
            if e.code:
                raise
    phases.close()
    return dict(phases=phases.rows)


def _load_script(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHILDREN: dict[str, Callable[[dict], dict]] = {
    "ours_load": child_ours_load,
    "ours_train": child_ours_train,
    "ours_predict": child_ours_predict,
    "upstream_load": child_upstream_load,
    "upstream_train": child_upstream_train,
    "course_predict": child_course_predict,
}


def child_main(a: argparse.Namespace) -> None:
    spec = json.loads(Path(a.spec).read_text())
    result = CHILDREN[a.child](spec)
    Path(spec["result"]).write_text(json.dumps(result))


# ----------------------------------------------------------------------------------------
# Parent: preparing the inputs
# ----------------------------------------------------------------------------------------


def subset(data: Path, fraction: float, work: Path) -> tuple[Path, dict[str, int]]:
    """`work/data_<F>/{split}/` linking the first `fraction` of each split's files."""
    root = work / f"data_{fraction:g}"
    counts = {}
    for split in SPLITS:
        files = sorted((data / split).glob("*.npz"))
        keep = files[: max(1, math.ceil(fraction * len(files)))]
        folder = root / split
        if folder.is_dir() and len(list(folder.glob("*.npz"))) != len(keep):
            shutil.rmtree(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for path in keep:
            link, target = folder / path.name, path.resolve()
            if link.is_symlink() and link.resolve() != target:
                link.unlink()  # left by a run on another data set
            if not link.is_symlink():
                link.symlink_to(target)
        counts[split] = len(keep)
    return root, counts


def upstream_copy(upstream: Path, course: Path | None, work: Path) -> Path:
    """`work/upstream`: upstream's tree with our models.py (and the course's script, given
    `course`) in it."""
    root = work / "upstream"
    if not root.is_dir():
        shutil.copytree(upstream, root, ignore=shutil.ignore_patterns(".git", "__pycache__"))
    shutil.copyfile(REPO / "models.py", root / "tpu_graphs" / "baselines" / "tiles" / "models.py")
    if course is not None:
        shutil.copyfile(course / COURSE_SCRIPT, root / COURSE_SCRIPT)
    return root


def _grown(graph: dict, nodes: int) -> dict:
    """`graph`'s node arrays and edges, grown to at least `nodes` nodes by appending a copy of
    its first nodes (with the edges among them) whose first node consumes node 0's output."""
    n = len(graph["node_opcode"])
    if n >= nodes:
        return graph
    extra = nodes - n
    edges = graph["edge_index"]
    inner = edges[(edges < extra).all(axis=1)] + n
    link = np.array([[n, 0]], edges.dtype)
    return dict(
        node_feat=np.concatenate([graph["node_feat"], graph["node_feat"][:extra]]),
        node_opcode=np.concatenate([graph["node_opcode"], graph["node_opcode"][:extra]]),
        edge_index=np.concatenate([edges, inner, link]),
    )


def big_kernel(data: Path, work: Path) -> tuple[Path, dict[str, int]]:
    """`work/big/test/`: one test kernel of `BIG_CONFIGS` configs and at least `BIG_NODES`
    nodes: the largest graph of `data` (`_grown` if smaller).

    The configs are the first rows of the kernel with the most configs, tiled to
    `BIG_CONFIGS`; their runtimes are zeros, as in a test split. Scoring cost does not depend
    on which tiles the rows describe.
    """
    paths = sorted(p for split in SPLITS for p in (data / split).glob("*.npz"))
    nodes, configs = {}, {}
    for path in paths:
        with np.load(path) as d:
            nodes[path] = len(d["node_opcode"])
            configs[path] = len(d["config_runtime"])
    graph_path = max(paths, key=lambda p: nodes[p])
    config_path = max(paths, key=lambda p: configs[p])
    with np.load(graph_path) as g, np.load(config_path) as c:
        rows = np.resize(c["config_feat"], (BIG_CONFIGS, c["config_feat"].shape[1]))
        arrays = _grown({k: g[k] for k in ("node_feat", "node_opcode", "edge_index")}, BIG_NODES)
        norm = np.resize(c["config_runtime_normalizers"], BIG_CONFIGS)
    arrays.update(
        config_feat=rows.astype(np.float32),
        config_runtime=np.zeros(BIG_CONFIGS, np.int64),
        config_runtime_normalizers=norm.astype(np.int64),
    )
    root = work / "big"
    (root / "test").mkdir(parents=True, exist_ok=True)
    for old in (root / "test").glob("*.npz"):
        old.unlink()
    np.savez(root / "test" / "ffffffffffffffffffffffffffffffff.npz", **arrays)
    return root, dict(
        nodes=len(arrays["node_opcode"]),
        configs=BIG_CONFIGS,
        largest_graph=nodes[graph_path],
        source=configs[config_path],
    )


# ----------------------------------------------------------------------------------------
# Parent: running the children
# ----------------------------------------------------------------------------------------


def run_child(name: str, kind: str, spec: dict, work: Path, *, may_fail: bool = False) -> dict:
    """Runs one measurement in a fresh process; its result plus wall seconds and peak RSS.

    A child that fails raises, or with `may_fail` gives `{"error": its last log line}`.
    """
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    spec = dict(spec, result=str(logs / f"{name}.json"))
    spec_path = logs / f"{name}.spec.json"
    spec_path.write_text(json.dumps(spec))
    Path(spec["result"]).unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--child", kind, "--spec", str(spec_path)]
    print(f"[{time.strftime('%H:%M:%S')}] {name} ...", flush=True)
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    with open(logs / f"{name}.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode:
        log_path = logs / f"{name}.log"
        if may_fail:
            last = log_path.read_text(errors="replace").strip().splitlines()[-1]
            print(f"    failed: {last}", flush=True)
            return dict(error=last, log=str(log_path), wall_s=wall)
        raise RuntimeError(f"{name} failed (exit {proc.returncode}); see {log_path}")
    result = json.loads(Path(spec["result"]).read_text())
    result.update(
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        process_peak_rss_mb=usage.ru_maxrss / 1024,
        load_average=[load_before, os.getloadavg()[0]],
    )
    print(f"    {wall:.1f} s, peak RSS {usage.ru_maxrss / 1024:.0f} MiB", flush=True)
    return result


def train_flags(epochs: int) -> list[str]:
    """The flags both trainers get: upstream's defaults, but `--epochs`."""
    return [f"--epochs={epochs}"]


def measure(a: argparse.Namespace) -> dict:
    work = Path(a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    root, counts = subset(Path(a.data).resolve(), a.fraction, work)
    upstream = upstream_copy(Path(a.upstream), Path(a.course), work)
    configs = 10  # upstream's --configs default: train kernels with fewer are left out
    caches = {"ours": str(work / "cache_ours"), "upstream": str(work / "cache_upstream")}
    whole = {split: len(list((Path(a.data) / split).glob("*.npz"))) for split in SPLITS}
    r: dict[str, Any] = dict(counts=counts, whole=whole, root=str(root), load_start=os.getloadavg())
    common = dict(root=str(root), configs=configs, upstream=str(upstream))

    if a.fraction < 1 and a.full_load:
        whole = dict(common, root=str(Path(a.data).resolve()))
        for side in ("ours", "upstream"):
            cache = str(work / f"cache_{side}_whole")
            r[f"{side}_load_full"] = run_child(
                f"{side}_load_full", f"{side}_load", dict(whole, cache=cache), work
            )
            shutil.rmtree(cache, ignore_errors=True)
    r["ours_load"] = run_child("ours_load", "ours_load", dict(common, cache=caches["ours"]), work)
    r["upstream_load"] = run_child(
        "upstream_load", "upstream_load", dict(common, cache=caches["upstream"]), work
    )
    for model in ("EarlyJoinSAGE", "ResidualSAGE"):
        out = work / f"runs_ours_{model}"
        shutil.rmtree(out, ignore_errors=True)
        argv = [
            f"--model={model}",  # the recommended ResidualSAGE by its name (class defaults)
            f"--data_root={root}",
            f"--cache_dir={caches['ours']}",
            f"--out_dir={out}",
            "--no_progress",
            *train_flags(a.epochs),
        ]
        r[f"ours_train_{model}"] = run_child(
            f"ours_train_{model}", "ours_train", dict(common, argv=argv), work
        )
    out = work / "runs_upstream_EarlyJoinSAGE"
    shutil.rmtree(out, ignore_errors=True)
    argv = [
        "--model=EarlyJoinSAGE",
        f"--data_root={root}",
        f"--cache_dir={caches['upstream']}",
        f"--out_dir={out}",
        *train_flags(a.epochs),
    ]
    r["upstream_train_EarlyJoinSAGE"] = run_child(
        "upstream_train_EarlyJoinSAGE",
        "upstream_train",
        dict(common, argv=argv, out_dir=str(out)),
        work,
    )
    ours_model = r["ours_train_EarlyJoinSAGE"]["model_dir"]
    argv = ["--dir", ours_model, "--data_root", str(root), "--cache_dir", caches["ours"]]
    argv += ["--out", str(work / "predictions_ours.csv"), "--no_progress"]
    r["ours_predict"] = run_child("ours_predict", "ours_predict", dict(common, argv=argv), work)
    up_model = r["upstream_train_EarlyJoinSAGE"]["model_dir"]
    cwd = work / "course_predict"
    cwd.mkdir(exist_ok=True)
    argv = [f"--dir={up_model}", f"--data_root={root}", f"--cache_dir={caches['upstream']}"]
    r["course_predict"] = run_child(
        "course_predict",
        "course_predict",
        dict(common, argv=argv, cwd=str(cwd)),
        work,
        may_fail=True,
    )
    big_root, r["big_kernel"] = big_kernel(root, work)
    for model in ("EarlyJoinSAGE", "ResidualSAGE"):
        model_dir = r[f"ours_train_{model}"]["model_dir"]
        argv = ["--dir", model_dir, "--data_root", str(big_root), "--no_progress"]
        argv += ["--out", str(work / f"predictions_big_{model}.csv")]
        r[f"big_predict_{model}"] = run_child(
            f"big_predict_{model}", "ours_predict", dict(common, argv=argv), work
        )
    r["load_end"] = os.getloadavg()
    return r


# ----------------------------------------------------------------------------------------
# Parent: the report
# ----------------------------------------------------------------------------------------


def _phase(r: dict, key: str, phase: str, field: str = "seconds") -> float:
    return r[key]["phases"][phase][field]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


class _Rows:
    """The goals table's rows: what, goal, ours, upstream, unit, ratios (upstream / ours)."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(
        self,
        what: str,
        ours,
        upstream=None,
        unit: str = "s",
        *,
        goal: str = "",
        at_least: float | None = None,
        cpu: tuple | None = None,
    ) -> None:
        """One row; with `at_least`, met means ratio >= it (on wall and, given, CPU seconds)."""
        ratio = upstream / ours if upstream is not None else None
        cpu_ratio = cpu[1] / cpu[0] if cpu is not None else None
        met = None
        if at_least is not None and ratio is not None:
            met = _verdict(ratio >= at_least, None if cpu_ratio is None else cpu_ratio >= at_least)
        self.rows.append(
            dict(
                what=what,
                goal=goal,
                ours=ours,
                upstream=upstream,
                unit=unit,
                ratio=ratio,
                cpu_ratio=cpu_ratio,
                met=met,
            )
        )

    def limit(self, what: str, ours: float, upstream: float | None, unit: str, most: float) -> None:
        """A row whose goal is `ours <= most`."""
        ratio = upstream / ours if upstream is not None else None
        self.rows.append(
            dict(
                what=what,
                goal=f"<= {most:g} {unit}",
                ours=ours,
                upstream=upstream,
                unit=unit,
                ratio=ratio,
                cpu_ratio=None,
                met="yes" if ours <= most else "**no**",
            )
        )


def _verdict(wall_ok: bool, cpu_ok: bool | None) -> str:
    if cpu_ok is None or wall_ok == cpu_ok:
        return "yes" if wall_ok else "**no**"
    return f"wall {'yes' if wall_ok else 'no'}, CPU {'yes' if cpu_ok else 'no'}"


def _steady(values: list[float]) -> float:
    """Mean seconds of the epochs after the first (which also traces), or of the only one."""
    return _mean(values[1:] if len(values) > 1 else values)


def _which_epochs(epochs: int) -> str:
    if epochs <= 2:
        return "one epoch, tracing included" if epochs == 1 else "the second epoch"
    return f"mean of epochs 2-{epochs}"


def _epoch_laps(marks: list[list[float]]) -> tuple[float, float]:
    """`_steady` (wall, CPU) seconds between consecutive epoch marks."""
    laps = [[b[i] - a[i] for a, b in zip(marks[:-1], marks[1:])] for i in (0, 1)]
    return _steady(laps[0]), _steady(laps[1])


def _wall_cpu(r: dict, key: str, phase: str) -> tuple[float, float]:
    row = r[key]["phases"][phase]
    return row["seconds"], row["cpu_seconds"]


def _whole_run(r: dict, key: str, epoch: tuple[float, float], end: list[str]) -> tuple:
    """(wall, CPU) seconds of a `DEFAULT_EPOCHS` run extrapolated from this one: load and
    build, the first epoch as measured (it traces), the others at `epoch`'s steady pace, then
    the phases `end` as measured."""
    marks = r[key]["laps"]["epoch_marks"]
    first = [marks[1][i] - marks[0][i] for i in (0, 1)]
    load = _wall_cpu(r, key, "load and build")
    tail = [sum(_wall_cpu(r, key, phase)[i] for phase in end) for i in (0, 1)]
    return tuple(load[i] + first[i] + (DEFAULT_EPOCHS - 1) * epoch[i] + tail[i] for i in (0, 1))


def goals(r: dict) -> list[dict]:
    """The goals table (see `_Rows`), from a run's results."""
    t = _Rows()
    first, cached = "first load (npz to cache)", "load from cache"
    for suffix, where in (("_full", ", whole data set"), ("", "")):
        if f"ours_load{suffix}" not in r:
            continue
        (o, oc), (u, uc) = (_wall_cpu(r, f"{s}_load{suffix}", first) for s in SIDES)
        t.add(
            f"first load, npz to cache{where}",
            o,
            u,
            goal="no slower than upstream",
            at_least=1.0,
            cpu=(oc, uc),
        )
        (o, oc), (u, uc) = (_wall_cpu(r, f"{s}_load{suffix}", cached) for s in SIDES)
        t.add(f"later load, from the cache{where}", o, u, cpu=(oc, uc))
        o, u = (r[f"{s}_load{suffix}"]["cache_bytes"] / 2**20 for s in SIDES)
        t.add(
            f"cache size{where}",
            o,
            u,
            "MiB",
            goal=f"<= {CACHE_GOAL:g}x upstream's",
            at_least=1 / CACHE_GOAL,
        )
        o, u = (r[f"{s}_load{suffix}"]["process_peak_rss_mb"] / GIB for s in SIDES)
        t.add(f"load process, peak RSS{where}", o, u, "GiB")

    ours, up = r["ours_train_EarlyJoinSAGE"]["laps"], r["upstream_train_EarlyJoinSAGE"]["laps"]
    which = _which_epochs(r["epochs"])
    o, oc = (
        _steady([a + b for a, b in zip(ours[f"train_pass{c}"], ours[f"sampled_valid{c}"])])
        for c in ("", "_cpu")
    )
    up_fit = _steady(up["fit"]), _steady(up["fit_cpu"])
    t.add(
        f"EarlyJoinSAGE train pass + sampled validation ({which})",
        o,
        up_fit[0],
        cpu=(oc, up_fit[1]),
    )
    ours_epoch = _epoch_laps(ours["epoch_marks"])
    t.add(
        f"EarlyJoinSAGE epoch as our trainer runs it, vs upstream's without its saves ({which})",
        ours_epoch[0],
        up_fit[0],
        goal="no slower than upstream",
        at_least=1.0,
        cpu=(ours_epoch[1], up_fit[1]),
    )
    up_epoch = _epoch_laps(up["epoch_marks"])
    t.add(
        f"EarlyJoinSAGE epoch as each trainer runs it ({which})",
        ours_epoch[0],
        up_epoch[0],
        cpu=(ours_epoch[1], up_epoch[1]),
    )
    o, _ = _epoch_laps(r["ours_train_ResidualSAGE"]["laps"]["epoch_marks"])
    t.add(f"ResidualSAGE epoch as our trainer runs it ({which})", o)
    o, oc = _whole_run(r, "ours_train_EarlyJoinSAGE", ours_epoch, OURS_END)
    u, uc = _whole_run(r, "upstream_train_EarlyJoinSAGE", up_fit, UPSTREAM_END)
    t.add(
        f"EarlyJoinSAGE whole default run ({DEFAULT_EPOCHS} epochs), extrapolated",
        o,
        u,
        goal="shorter than upstream's",
        at_least=1.0,
        cpu=(oc, uc),
    )
    # Ours: a pass over every config of every valid kernel (the candidates' rescoring);
    # upstream's: its final validation, the same work.
    o, oc = _mean(ours["full_pass"]), _mean(ours["full_pass_cpu"])
    u, uc = _wall_cpu(r, "upstream_train_EarlyJoinSAGE", "final validation (every config)")
    t.add(
        "validation, every config of every valid kernel (EarlyJoinSAGE)",
        o,
        u,
        goal=f">= {VALIDATION_SPEEDUP_GOAL:g}x faster",
        at_least=VALIDATION_SPEEDUP_GOAL,
        cpu=(oc, uc),
    )
    up_rank = _wall_cpu(r, "upstream_train_EarlyJoinSAGE", "test ranking")
    o, oc = _wall_cpu(r, "ours_train_EarlyJoinSAGE", "test ranking")
    t.add("test ranking in the trainer (EarlyJoinSAGE)", o, up_rank[0], cpu=(oc, up_rank[1]))
    o, oc = _wall_cpu(r, "ours_predict", "test ranking")
    t.add(
        "test ranking: `tpu-tiles predict` vs `tiles_train.py`'s",
        o,
        up_rank[0],
        cpu=(oc, up_rank[1]),
    )
    course = r["course_predict"]
    o, oc = r["ours_predict"]["wall_s"], r["ours_predict"]["cpu_s"]
    if "error" in course:
        t.add("test prediction, whole command (course script: failed, below)", o)
    else:
        t.add(
            "test prediction, whole command: `tpu-tiles predict` vs course script",
            o,
            course["wall_s"],
            goal=f">= {PREDICT_SPEEDUP_GOAL:g}x faster",
            at_least=PREDICT_SPEEDUP_GOAL,
            cpu=(oc, course["cpu_s"]),
        )
    for model in MODELS:
        peak = r[f"ours_train_{model}"]["process_peak_rss_mb"] / GIB
        key = f"upstream_train_{model}"
        if key in r:
            up_peak = r[key]["process_peak_rss_mb"] / GIB
            t.add(
                f"whole training run, peak RSS ({model})",
                peak,
                up_peak,
                "GiB",
                goal="no higher than upstream's",
                at_least=1.0,
            )
        else:
            t.add(f"whole training run, peak RSS ({model})", peak, None, "GiB")
    big = r["big_kernel"]
    for model in MODELS:
        peak = r[f"big_predict_{model}"]["process_peak_rss_mb"] / GIB
        what = f"`tpu-tiles predict`, one {big['configs']}-config {big['nodes']}-node kernel"
        t.limit(f"{what}, peak RSS ({model})", peak, None, "GiB", BIG_RSS_GOAL_GIB)
    return t.rows


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    digits = 2 if unit == "GiB" or value < 10 else 1
    return f"{value:.{digits}f} {unit}"


def _data_line(d: dict, files: dict[str, int]) -> str:
    """'N train (M kept) / N valid / N test kernels (configs, largest, over 6000, nodes)'."""
    configs = sum(s["configs"] for s in d.values())
    return (
        f"{files['train']} train ({d['train']['kernels']} with >= 10 configs, which both "
        f"trainers keep) / {d['valid']['kernels']} valid / {d['test']['kernels']} test kernels "
        f"({configs} configs loaded, at most "
        f"{max(s['max_configs'] for s in d.values())} per kernel, "
        f"{sum(s['over_6000'] for s in d.values())} kernels over 6000; graphs up to "
        f"{max(s['max_nodes'] for s in d.values())} nodes)"
    )


def markdown(a: argparse.Namespace, r: dict, command: str) -> str:
    whole = ""
    if "ours_load_full" in r:
        whole = f" The whole data set: {_data_line(r['ours_load_full']['data'], r['whole'])}."
    fraction = "all" if a.fraction == 1 else f"the first {a.fraction:g}"
    lines = [
        "# Full-scale rehearsal",
        "",
        f"`{command}`",
        "",
        f"**Fraction {a.fraction:g}**: {fraction} of each split of the `--data` set, "
        f"{_data_line(r['ours_load']['data'], r['counts'])}.{whole} {a.epochs} epoch(s), otherwise "
        f"upstream's default flags for both trainers; {os.cpu_count()} CPU cores shared with "
        f"other jobs (load average {r['load_start'][0]:.1f} at the start, "
        f"{r['load_end'][0]:.1f} at the end; {r['total_wall_s'] / 60:.0f} minutes in all). "
        "Ratio = upstream / ours (above 1: ours faster or smaller), on wall seconds and on "
        "the process's CPU seconds (less sensitive to the other jobs' load).",
        "",
        "| measure | goal | ours | upstream | ratio | CPU-time ratio | met? |",
        "|---|---|---|---|---|---|---|",
    ]
    for g in goals(r):
        ratio, cpu = (f"{g[k]:.2f}x" if g[k] is not None else "-" for k in ("ratio", "cpu_ratio"))
        lines.append(
            f"| {g['what']} | {g['goal'] or '-'} | {_fmt(g['ours'], g['unit'])} | "
            f"{_fmt(g['upstream'], g['unit'])} | {ratio} | {cpu} | {g['met'] or '-'} |"
        )
    lines += ["", *phase_table(r)]
    if a.note:
        lines += ["", a.note]
    return "\n".join(lines) + "\n"


PROCESSES = (
    ("ours_load_full", "ours: `data.load_dataset`, whole data set"),
    ("upstream_load_full", "upstream: `data.get_npz_dataset`, whole data set"),
    ("ours_load", "ours: `data.load_dataset`"),
    ("upstream_load", "upstream: `data.get_npz_dataset`"),
    ("ours_train_EarlyJoinSAGE", "ours: `tpu-tiles train --model=EarlyJoinSAGE`"),
    ("upstream_train_EarlyJoinSAGE", "upstream: `tiles_train.py --model=EarlyJoinSAGE`"),
    ("ours_train_ResidualSAGE", "ours: `tpu-tiles train --model=ResidualSAGE` (recommended flags)"),
    ("ours_predict", "ours: `tpu-tiles predict` (EarlyJoinSAGE)"),
    ("course_predict", "course: `tiles_gen_predictions_csv.py` (EarlyJoinSAGE)"),
    ("big_predict_EarlyJoinSAGE", "ours: `tpu-tiles predict`, one big kernel (EarlyJoinSAGE)"),
    ("big_predict_ResidualSAGE", "ours: `tpu-tiles predict`, one big kernel (ResidualSAGE)"),
)


def phase_table(r: dict) -> list[str]:
    """Every process: wall and peak RSS, then each phase's seconds and peak RSS."""
    lines = [
        "Each process (load average before / after it), and its phases (phase peak: the "
        "highest RSS while the phase ran):",
        "",
        "| process | phase | seconds | CPU seconds | peak RSS, MiB |",
        "|---|---|---|---|---|",
    ]
    for key, title in PROCESSES:
        if key not in r:
            continue
        p = r[key]
        if "error" in p:
            lines.append(
                f"| {title} | failed after {p['wall_s']:.1f} s: `{p['error']}` | - | - | - |"
            )
            continue
        before, after = p["load_average"]
        lines.append(
            f"| {title} (load {before:.1f} / {after:.1f}) | whole process | {p['wall_s']:.1f} | "
            f"{p['cpu_s']:.1f} | {p['process_peak_rss_mb']:.0f} |"
        )
        for phase, v in p["phases"].items():
            lines.append(
                f"| | {phase} | {v['seconds']:.1f} | {v['cpu_seconds']:.1f} | "
                f"{v['peak_rss_mb']:.0f} |"
            )
    return lines


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    if a.child:
        child_main(a)
        return
    if a.from_json:
        r = json.loads(Path(a.from_json).read_text())
        command, a.fraction, a.epochs = r["command"], r["fraction"], r["epochs"]
    else:
        command = " ".join(["python benchmarks/fullscale.py", *(argv or sys.argv[1:])])
        start = time.perf_counter()
        r = measure(a)
        r["total_wall_s"] = time.perf_counter() - start
        r["command"], r["fraction"], r["epochs"] = command, a.fraction, a.epochs
    r["goals"] = goals(r)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(r, indent=1) + "\n")
    text = markdown(a, r, command)
    out.with_suffix(".md").write_text(text)
    print(text)
    print(
        f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')} "
        f"({r['total_wall_s']:.0f} s in all)"
    )


if __name__ == "__main__":
    main()
