"""`tpu-tiles sweep --runner DaskRunner` on a real Dask cluster: a `dask scheduler` and two
`dask worker` processes on 127.0.0.1, started as a user starts them, a sweep through it from
the command line, and its resume."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, TINY_MLP

pytest.importorskip("distributed", reason="the dask extra: pip install -e '.[dask]'")

DASK = [sys.executable, "-m", "dask"]
ENV = dict(
    os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.getenv("PYTHONPATH")]))
)
START_S = 120  # at most this long for the scheduler and both workers to be up


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> str:
    """A scheduler and two one-thread workers (each its own process group, so that teardown
    ends each whole tree: nanny, worker and a point's child); yields the scheduler's address."""
    tmp = tmp_path_factory.mktemp("dask")
    info = tmp / "scheduler.json"
    procs: list[subprocess.Popen] = []

    def start(*argv: str, log: str) -> None:
        with open(tmp / log, "wb") as out:
            procs.append(
                subprocess.Popen(
                    [*DASK, *argv, "--no-dashboard", "--scheduler-file", str(info)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=ENV,
                    cwd=tmp,
                    start_new_session=True,
                )
            )

    try:
        start("scheduler", "--host", "127.0.0.1", "--port", "0", log="scheduler.log")
        for i in range(2):
            local = str(tmp / f"worker{i}")
            argv = ["--host", "127.0.0.1", "--nthreads", "1", "--local-directory", local]
            start("worker", *argv, log=f"worker{i}.log")
        from distributed import Client

        deadline = time.monotonic() + START_S
        while not info.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        with Client(scheduler_file=str(info), timeout=START_S) as client:
            client.wait_for_workers(2, timeout=max(1.0, deadline - time.monotonic()))
            address = client.scheduler.address.removeprefix("tcp://")  # HOST:PORT
        yield address
    finally:
        for proc in procs:
            with_group(proc, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with_group(proc, signal.SIGKILL)
                proc.wait()


def with_group(proc: subprocess.Popen, signum: int) -> None:
    """`signum` to every process of `proc`'s group (one we started, by its id)."""
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:
        pass


def _sweep(out: Path, data: Path, grid: str, address: str) -> subprocess.CompletedProcess:
    """`tpu-tiles sweep` on the cluster, as a user runs it."""
    argv = ["--grid", grid, "--out_dir", str(out), f"--data_root={data}", "--model=MLP"]
    argv += [f"--model_kwargs_json={TINY_MLP}", "--epochs=1", "--configs=4", "--batch=4"]
    argv += ["--early_stop=0", "--cache_dir=", "--score_configs=0"]
    argv += ["--runner", "DaskRunner", "--dask_client_address", address]
    command = [sys.executable, "-m", "tpu_tiles_models.cli", "sweep", *argv]
    done = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.mark.slow
def test_a_sweep_and_its_resume_run_on_a_dask_cluster(cluster, synth_root, tmp_path):
    """Two points train at once, one on each worker (Beam's DaskRunner would put both in
    one task); rerun with a third point, the two finished ones are skipped, untouched, and
    the leaderboard lists all three."""
    out = tmp_path / "sweep"
    first = _sweep(out, synth_root, "seed=0,1", cluster)
    assert "sweep: 2 points, 0 already complete (skipped), 2 to train" in first.stdout
    records = [json.loads(p.read_text()) for p in (out / "sweep" / "points").glob("*.json")]
    assert sorted(r["status"] for r in records) == ["ok", "ok"]
    assert len({r["pid"] for r in records}) == 2  # the two workers' processes
    runs = {p.name: p.stat().st_mtime_ns for p in out.glob("run_*.jsonz")}
    assert len(runs) == 2

    again = _sweep(out, synth_root, "seed=0,1,2", cluster)
    assert "sweep: 3 points, 2 already complete (skipped), 1 to train" in again.stdout
    assert "sweep: 3 points: 1 trained, 2 skipped (already complete), 0 not ok" in again.stdout
    assert {n: (out / n).stat().st_mtime_ns for n in runs} == runs
    with open(out / "sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["seed"] for r in rows) == ["0", "1", "2"]
    assert [r["status"] for r in rows] == ["ok"] * 3
    assert {f"run_{r['hash']}.jsonz" for r in rows} == {p.name for p in out.glob("run_*.jsonz")}
