"""Shared fixtures: small synthetic TpuGraphs-format data sets and tiny trained runs, made once
per session and shared read-only by the test files (training is the slow part of the suite),
and how the tests are shared out between two workers."""

from __future__ import annotations

import errno
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType

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


@pytest.fixture(scope="session")
def synth_root(tmp_path_factory) -> Path:
    """The tiny synthetic tile:xla tree, {train,valid,test}/*.npz with zero test runtimes,
    shared read-only."""
    from tpu_tiles_models import synthetic

    root = tmp_path_factory.mktemp("synth")
    with warnings.catch_warnings():  # 8 valid kernels: too few for upstream's trainer, on purpose
        warnings.simplefilter("ignore", synthetic.ValidationSplitWarning)
        synthetic.generate(root, train=24, valid=8, test=6, seed=0, max_configs=48, progress=False)
    return root


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
    root = tmp_path_factory.mktemp("short_test")
    shutil.copytree(synth_root, root, dirs_exist_ok=True)
    test_files = sorted((root / "test").glob("*.npz"))
    for i, keep in SHORT_KERNELS.items():
        truncate_configs(test_files[i], keep)
    return root


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


@pytest.fixture(scope="session")
def residual_run(synth_root, tmp_path_factory):
    """A tiny ResidualSAGE without attention, 2 epochs on synth_root (its own out_dir)."""
    from tpu_tiles_models import train

    out = tmp_path_factory.mktemp("residual_run")
    return train.train(
        tiny_args(synth_root, out, model="ResidualSAGE", model_kwargs_json=TINY_RESIDUAL, epochs=2)
    )


@pytest.fixture(scope="session")
def mlp_seeds(short_test_root, tmp_path_factory) -> list:
    """`train --seeds=0,1 --ensemble`: two tiny MLPs, 1 epoch on short_test_root, and their
    ensemble, all in one out_dir (`--results_csv` is given, so each seed's gets a suffix).
    Seed 0 is `mlp_run`; test_train reruns seed 1 in place, so no other test reads seed 1."""
    from tpu_tiles_models import ensemble

    out = tmp_path_factory.mktemp("mlp_seeds")
    args = tiny_args(short_test_root, out, model="MLP", model_kwargs_json=TINY_MLP)
    return ensemble.train_seeds(
        args.replace(results_csv=str(out / "results.csv")), [0, 1], ensemble=True
    )


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
# Two workers (pytest-xdist: `-n 2 --dist loadgroup --no-loadscope-reorder` in pytest.ini)
# ---------------------------------------------------------------------------------------------
# Training is the slow part, and a worker makes a module fixture again whenever it comes back
# to that module. So a test file is one work unit (group), every test that uses the shared
# trained runs is in one more ("trained_runs": trained once), an `xdist_group` mark joins tests
# of several files. The longest units are handed out first, so that no long one is left for
# the end: "trained_runs", then those that hold a `slow` test, then the rest in file order.

SHARED_RUNS = {"residual_run", "mlp_seeds"}
SHARED_GROUP = "trained_runs"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: one of the slowest tests; handed out first")


def _group(item: pytest.Item) -> str:
    mark = item.get_closest_marker("xdist_group")
    if mark:
        return mark.args[0]
    return SHARED_GROUP if SHARED_RUNS & set(item.fixturenames) else item.path.stem


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):
        return  # one process: file order keeps each module's tests together
    groups = {item: _group(item) for item in items}
    slow = {groups[item] for item in items if item.get_closest_marker("slow")}
    first = {}
    for index, item in enumerate(items):
        first.setdefault(groups[item], index)
        item.add_marker(pytest.mark.xdist_group(groups[item]))
    # Each unit's tests together and in file order (a stable sort).
    rank = {SHARED_GROUP: 0, **{group: 1 for group in slow - {SHARED_GROUP}}}
    items.sort(key=lambda item: (rank.get(groups[item], 2), first[groups[item]]))


@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_naming_groups(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    """xdist 3.8 tells its scheduler a test's group by renaming it `<nodeid>@<group>`, through
    an attribute pytest 9 no longer reads (pytest-xdist#1386): the groups were ignored and
    every test handed out alone. The same name, through the structured id pytest 9 reads."""
    if not getattr(config.option, "loadgroup", False) or not hasattr(config, "workerinput"):
        return
    for item in items:
        if "@" not in item.nodeid and hasattr(item, "_id"):
            from _pytest.nodeid import NodeId  # pytest >= 9

            item._id = NodeId.parse(
                f"{item.nodeid}@{item.get_closest_marker('xdist_group').args[0]}"
            )
