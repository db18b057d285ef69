"""Shared fixtures: small synthetic TpuGraphs-format data sets and tiny trained runs, made once
per session and shared read-only by the test files (training is the slow part of the suite),
and background jobs: the work of subprocess tests, run beside the in-process tests."""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import subprocess
import tempfile
import warnings
from concurrent import futures
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
# Test kernels of `short_test_root` cut to fewer configs than the top 5 (padding rule).
SHORT_KERNELS = {0: 3, 1: 1}
TINY_RESIDUAL = '{"hidden_dim": 8, "num_layers": 1}'
TINY_MLP = '{"hidden_dim": 8, "mlp_layers": 1}'


def generate_synth(root: Path) -> Path:
    """Writes the tiny synthetic tile:xla tree into `root`: {train,valid,test}/*.npz, test
    runtimes zero."""
    from tpu_tiles_models import synthetic

    with warnings.catch_warnings():  # 8 valid kernels: too few for upstream's trainer, on purpose
        warnings.simplefilter("ignore", synthetic.ValidationSplitWarning)
        synthetic.generate(root, train=24, valid=8, test=6, seed=0, max_configs=48, progress=False)
    return root


@pytest.fixture(scope="session")
def synth_root(tmp_path_factory) -> Path:
    """The tiny synthetic tree (`generate_synth`), shared read-only."""
    return generate_synth(tmp_path_factory.mktemp("synth"))


def truncate_configs(path: Path, keep: int) -> None:
    """Rewrites one npz keeping its first `keep` configs."""
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    for key in ("config_feat", "config_runtime", "config_runtime_normalizers"):
        arrays[key] = arrays[key][:keep]
    np.savez(path, **arrays)


def copy_short_test(source: Path, root: Path) -> Path:
    """Copies the tree `source` into `root`, with two test kernels cut to 3 and 1 configs."""
    shutil.copytree(source, root, dirs_exist_ok=True)
    test_files = sorted((root / "test").glob("*.npz"))
    for i, keep in SHORT_KERNELS.items():
        truncate_configs(test_files[i], keep)
    return root


@pytest.fixture(scope="session")
def short_test_root(synth_root, tmp_path_factory) -> Path:
    """synth_root with two test kernels cut to 3 and 1 configs."""
    return copy_short_test(synth_root, tmp_path_factory.mktemp("short_test"))


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
    """A tiny ResidualSAGE, 2 epochs on synth_root (artifacts in their own out_dir)."""
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


def file_mode(path: Path) -> int:
    """A file's permission bits, e.g. 0o644."""
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(scope="session")
def sample_submission() -> Path:
    """The competition's real sample_submission.csv (never committed to this repo)."""
    path = SHARED_DATA / "sample_submission.csv"
    if not path.exists():
        pytest.skip(f"{path} not found (it lives in shared/data beside the checkout)")
    return path


# ---------------------------------------------------------------------------------------------
# Background jobs
# ---------------------------------------------------------------------------------------------
# The in-process tests keep one core of two busy. A test whose work happens in other processes
# (the demo, two training workers, a SIGINT, the prediction script) is marked
# `@background(job)`: its `job` starts with the session, in a thread that runs the selected
# tests' jobs one after another, and the test itself runs last and checks what the job
# returned (the `job_result` fixture).


@dataclasses.dataclass
class JobDirs:
    """What a job may use: its own empty folder, and copies of `synth_root` and
    `short_test_root` (read-only)."""

    tmp: Path
    data: Path
    short_test: Path


def background(job: Callable[[JobDirs], Any]) -> pytest.MarkDecorator:
    """Marks a test whose work is `job(dirs)`, started with the session (see above)."""
    return pytest.mark.background(job=job)


class _Jobs:
    """The session's background jobs: their thread, results and processes."""

    def __init__(self) -> None:
        self.pool = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="test-job")
        self.results: dict[Callable, futures.Future] = {}
        self.procs: list[subprocess.Popen] = []
        self.closing = False
        self.root = Path(tempfile.mkdtemp(prefix="tpu_tiles_jobs_"))
        self.data = generate_synth(self.root / "synth")
        self.short_test = copy_short_test(self.data, self.root / "short_test")

    def start(self, job: Callable[[JobDirs], Any]) -> None:
        if job not in self.results:
            tmp = Path(tempfile.mkdtemp(prefix=f"{job.__name__}_", dir=self.root))
            self.results[job] = self.pool.submit(job, JobDirs(tmp, self.data, self.short_test))

    def close(self) -> None:
        """Kills what still runs (a session stopped early) and removes the jobs' files."""
        self.closing = True
        for future in self.results.values():
            future.cancel()
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        self.pool.shutdown(wait=True)
        shutil.rmtree(self.root, ignore_errors=True)


_jobs: _Jobs | None = None


def job_popen(argv: list[str], **kwargs) -> subprocess.Popen:
    """`subprocess.Popen` for a job (text pipes, no stdin), killed if the session stops first."""
    if _jobs.closing:
        raise RuntimeError("the session is over")
    pipes = dict(stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc = subprocess.Popen(argv, text=True, **{**pipes, **kwargs})
    _jobs.procs.append(proc)
    return proc


def _job_of(item: pytest.Item) -> Callable | None:
    mark = item.get_closest_marker("background")
    return mark.kwargs["job"] if mark else None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "background(job): the test checks a background job")


@pytest.hookimpl(trylast=True)  # after -k/-m deselection
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests of background jobs go last: their jobs then have the whole session to run."""
    items.sort(key=lambda item: _job_of(item) is not None)  # stable: file order otherwise


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    global _jobs
    jobs = [job for job in map(_job_of, session.items) if job is not None]
    if jobs and not session.config.option.collectonly:
        _jobs = _Jobs()
        for job in jobs:
            _jobs.start(job)


def pytest_sessionfinish() -> None:
    if _jobs is not None:
        _jobs.close()


@pytest.fixture
def job_result(request) -> Any:
    """What the test's `@background` job returned (waits for it; its exception if it failed)."""
    return _jobs.results[_job_of(request.node)].result()
