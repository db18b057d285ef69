"""Shared fixtures: small synthetic TpuGraphs-format data sets and tiny trained runs, made once
per session by whichever pytest-xdist worker asks first and read by every worker (training is
the slow part of the suite), and the test tiers (pytest.ini's markers)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

import numpy as np
import pytest

import tpu_tiles_models  # noqa: F401  (before any TensorFlow: it makes tf.keras Keras 2)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
# Test kernels of `short_test_root` cut to fewer configs than the top 5 (padding rule).
SHORT_KERNELS = {0: 3, 1: 1}
# The shared ResidualSAGE run leaves out cross-config attention: the tests that use it are about
# runs, not the architecture (test_models and the demo cover attention), and it halves tracing.
TINY_RESIDUAL = '{"hidden_dim": 8, "num_layers": 1, "config_attention": false}'
TINY_MLP = '{"hidden_dim": 8, "mlp_layers": 1}'


def load_benchmark(name: str) -> ModuleType:
    """`benchmarks/<name>.py` as the module `name`, registered in `sys.modules` (dataclasses
    look their module up there); the benchmarks folder is on `sys.path` while it loads, since
    a benchmark imports `suite.py` from beside it."""
    folder = REPO / "benchmarks"
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(folder))
    return module


def benchmark_families() -> ModuleType:
    """benchmarks/lib/synth_families, imported by its name as the benchmark scripts import it
    (once: importing it registers `alt`, `fusion` and `inference` with the generator)."""
    folder = str(REPO / "benchmarks" / "lib")
    sys.path.insert(0, folder)
    try:
        return importlib.import_module("synth_families")
    finally:
        sys.path.remove(folder)


def _session_folder(tmp_path_factory) -> Path:
    """The folder every process of this test session can read: with pytest-xdist the parent of
    the worker's base temp (xdist's documented recipe for session data), else the base temp."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive flock on `path` for the block: the other workers wait for it."""
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def made_once(tmp_path_factory, name: str, make: Callable[[Path], Any]) -> tuple[Path, Any]:
    """`<session folder>/<name>/`, filled by `make(folder)` in the first process of the session
    that asks, under a file lock (the others wait, then read it); and what `make` returned
    (JSON), the same in every process. A process that failed midway leaves no `.done`, so the
    next one starts the folder again."""
    shared = _session_folder(tmp_path_factory)
    folder, done = shared / name, shared / f"{name}.done"
    with _locked(shared / f"{name}.lock"):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            done.write_text(json.dumps(make(folder)))
        return folder, json.loads(done.read_text())


@pytest.fixture(scope="session")
def synth_root(tmp_path_factory) -> Path:
    """The tiny synthetic tile:xla tree, {train,valid,test}/*.npz with zero test runtimes,
    shared read-only."""
    from tpu_tiles_models import synthetic

    def make(root: Path) -> None:
        with warnings.catch_warnings():  # 8 valid kernels: too few for upstream's trainer
            warnings.simplefilter("ignore", synthetic.ValidationSplitWarning)
            synthetic.generate(
                root, train=24, valid=8, test=6, seed=0, max_configs=48, progress=False
            )

    return made_once(tmp_path_factory, "synth", make)[0]


def truncate_configs(path: Path, keep: int) -> None:
    """Rewrites one npz keeping its first `keep` configs."""
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    for key in ("config_feat", "config_runtime", "config_runtime_normalizers"):
        arrays[key] = arrays[key][:keep]
    np.savez(path, **arrays)


@pytest.fixture(scope="session")
def short_test_root(synth_root, tmp_path_factory) -> Path:
    """synth_root with two test kernels cut to 3 and 1 configs."""

    def make(root: Path) -> None:
        shutil.copytree(synth_root, root, dirs_exist_ok=True)
        test_files = sorted((root / "test").glob("*.npz"))
        for i, keep in SHORT_KERNELS.items():
            truncate_configs(test_files[i], keep)

    return made_once(tmp_path_factory, "short_test", make)[0]


def tiny_args(data_root: Path, out_dir: Path, **changes):
    """TrainArgs for a tiny, fast run on `data_root` (4 configs x 4 kernels, no cache)."""
    from tpu_tiles_models.train_args import TrainArgs

    base = dict(
        data_root=str(data_root),
        out_dir=str(out_dir),
        cache_dir="",
        configs=4,
        batch=4,
        epochs=1,
        early_stop=0,
        no_progress=True,
    )
    return TrainArgs(**{**base, **changes})


def write_hand_made_run(out_dir: Path, args, stats, **extras) -> Path:
    """Writes the run file our trainer would write for `args` (resolved TrainArgs) trained on
    data of `stats`, for a run made by hand (no training); `extras` join its `tpu_tiles` key.
    Returns the run file's path."""
    from tpu_tiles_models import run_file

    info = {
        "train_curve": {"epoch": [0]},
        "final_error": {"val": {"1": 0.5, "5": 0.2, "10": 0.1}},
        "args": args.upstream_args(),
        run_file.EXTRAS_KEY: {
            "version": "0.0",
            "feature_stats": stats.to_json(),
            "train_args": args.to_dict(),
            run_file.IDENTITY_KEY: args.identity(),
            **extras,
        },
    }
    return write_run(out_dir, info)


def write_run(out_dir: str | Path, run_info: dict) -> Path | str:
    """Writes `run_info` as `export.finish` writes a run file (`run_file.run_bytes`, named by
    its hash); returns its path (a string if remote)."""
    from tpu_tiles_models import files, run_file, safe

    path = run_file.run_file_path(out_dir, run_file.run_info_hash(run_info))
    safe.write_bytes(path, run_file.run_bytes(run_info))
    return path if files.is_remote(path) else Path(path)


def tiny_cli(data_root: Path, out_dir: Path, *extra: str) -> list[str]:
    """`tpu-tiles train` argv for a tiny MLP run on `data_root` (4 configs x 4 kernels)."""
    return [
        "train",
        "--model=MLP",
        f"--model_kwargs_json={TINY_MLP}",
        f"--data_root={data_root}",
        "--cache_dir=",
        f"--out_dir={out_dir}",
        "--configs=4",
        "--batch=4",
        "--epochs=1",
        "--no_progress",
        *extra,
    ]


def _places(result) -> list[str | None]:
    """What `_reopened` needs of a TrainResult to open it again: its three paths."""
    csv = str(result.results_csv) if result.results_csv else None
    return [str(result.model_dir), str(result.run_file), csv]


def _reopened(model_dir: str, run_path: str, results_csv: str | None):
    """The TrainResult of a finished run, from its files: its arguments and validation errors
    as the run file records them, its model rebuilt the course's way (`TrainedRun.load`). Every
    worker reads the shared runs this way, the one that trained them too, so that no test sees
    the trainer's in-memory model on one worker and a rebuilt one on the other."""
    from tpu_tiles_models import data, run_file, runs
    from tpu_tiles_models.export import TrainResult
    from tpu_tiles_models.train_args import TrainArgs

    info = run_file.read_run(model_dir)
    args = TrainArgs.from_dict(info[run_file.EXTRAS_KEY]["train_args"])
    errors = {int(k): v for k, v in info["final_error"]["val"].items()}
    model, ds = runs.TrainedRun.open(model_dir).load(args.data_root, split="valid", progress=False)
    # Keras saves only a model called like a training batch, as the trained one was: one
    # kernel with `configs` sampled configs.
    largest, rng = int(ds.valid.config_counts().argmax()), np.random.default_rng(0)
    model(data.kernel_graph(ds.valid, largest, ds.stats, num_configs=args.configs, rng=rng))
    csv = Path(results_csv) if results_csv else None
    return TrainResult(args, Path(model_dir), Path(run_path), csv, errors, model)


@pytest.fixture(scope="session")
def residual_run(synth_root, tmp_path_factory):
    """A tiny ResidualSAGE without attention, 2 epochs on synth_root (its own out_dir)."""
    from tpu_tiles_models import train

    def make(out: Path) -> list[str | None]:
        kwargs = dict(model="ResidualSAGE", model_kwargs_json=TINY_RESIDUAL, epochs=2)
        return _places(train.train(tiny_args(synth_root, out, **kwargs)))

    return _reopened(*made_once(tmp_path_factory, "residual_run", make)[1])


@pytest.fixture(scope="session")
def mlp_seeds(short_test_root, tmp_path_factory) -> list:
    """Two tiny MLPs (seeds 0 and 1), 1 epoch on short_test_root, and their ensemble, all in
    one out_dir, each with its own `--results_csv`. Seed 0 is `mlp_run`. Read-only, like every
    shared run: tests on other workers read it at the same time."""
    from tpu_tiles_models import ensemble, train

    def make(out: Path) -> list[list[str | None]]:
        args = tiny_args(short_test_root, out, model="MLP", model_kwargs_json=TINY_MLP)
        runs = [
            train.train(args.replace(seed=s, results_csv=str(out / f"results_seed{s}.csv")))
            for s in (0, 1)
        ]
        made = ensemble.build_ensemble(
            [r.model_dir for r in runs],
            out,
            data_root=args.data_root,
            cache_dir=args.cache_dir or None,
            results_csv=str(out / "results_ensemble.csv"),
            progress=False,
        )
        return [_places(r) for r in [*runs, made]]

    return [_reopened(*p) for p in made_once(tmp_path_factory, "mlp_seeds", make)[1]]


@pytest.fixture(scope="session")
def mlp_run(mlp_seeds):
    """A tiny MLP, 1 epoch on short_test_root: seed 0 of `mlp_seeds`."""
    return mlp_seeds[0]


@pytest.fixture
def umask():
    """Sets the process umask to 0o022 for one test and yields `os.umask` to change it;
    the old mask is restored after."""
    old = os.umask(0o022)
    yield os.umask
    os.umask(old)


def dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def as_dead(path: Path) -> Path:
    """`path`, a hidden file of this process, renamed as if a killed process had left it."""
    host, pid, rand = path.name.rsplit(".", 2)[1].split("-")
    assert int(pid) == os.getpid()
    dead = path.with_name(path.name.replace(f"{host}-{pid}-", f"{host}-{dead_pid()}-"))
    path.rename(dead)
    return dead


@pytest.fixture
def read_only(monkeypatch):
    """`read_only(folder)` makes `folder` act as if on a read-only disk for this process:
    creating a file or a folder in it fails with EROFS. (The tests run as root, which
    permission bits do not stop, so the calls are patched instead.)"""
    frozen: list[Path] = []
    real_open, real_mkdir = os.open, os.mkdir

    def inside(path) -> bool:
        path = Path(os.path.abspath(os.fsdecode(path)))
        return any(path == f or f in path.parents for f in frozen)

    def refuse(path):
        return OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))

    def open_(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and inside(path):
            raise refuse(path)
        return real_open(path, flags, *args, **kwargs)

    def mkdir(path, *args, **kwargs):
        if inside(path):
            raise refuse(path)
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "mkdir", mkdir)
    return lambda folder: frozen.append(Path(os.path.abspath(folder)))


def file_mode(path: Path) -> int:
    """A file's permission bits, e.g. 0o644."""
    return stat.S_IMODE(path.stat().st_mode)


# models.py of `upstream_checkout`: what install must back up and restore byte for byte.
UPSTREAM_MODELS = b"# upstream models.py\nclass EarlyJoinSAGE: ...\n"


@pytest.fixture
def upstream_checkout(tmp_path) -> Path:
    """A fake upstream tpu_graphs checkout: tiles_train.py and the tiles package with its
    models.py (`UPSTREAM_MODELS`) and data.py."""
    root = tmp_path / "tpu_graphs_checkout"
    tiles = root / "tpu_graphs" / "baselines" / "tiles"
    tiles.mkdir(parents=True)
    (root / "tiles_train.py").write_text("# upstream trainer\n")
    (tiles / "models.py").write_bytes(UPSTREAM_MODELS)
    (tiles / "data.py").write_text("# upstream data\n")
    return root


@pytest.fixture(scope="session")
def sample_submission() -> Path:
    """The competition's real sample_submission.csv (never committed to this repo)."""
    path = SHARED_DATA / "sample_submission.csv"
    if not path.exists():
        pytest.skip(f"{path} not found (it lives in shared/data beside the checkout)")
    return path


# ---------------------------------------------------------------------------------------------
# Tiers and workers (pytest.ini: `-n auto --dist loadfile -m "not slow and not bench"`)
# ---------------------------------------------------------------------------------------------
# A test file is one work unit (its module fixtures are made once); the shared runs above are
# made once for all workers. More workers than this mostly add TensorFlow imports.
MAX_WORKERS = 8
BENCHMARK_TESTS = Path(__file__).resolve().parent / "benchmarks"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker per core this process may run on, at most MAX_WORKERS."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cores or 1, MAX_WORKERS))


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under tests/benchmarks/ is in the `bench` tier."""
    for item in items:
        if BENCHMARK_TESTS in item.path.parents:
            item.add_marker(pytest.mark.bench)
