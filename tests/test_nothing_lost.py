"""Nothing finished is lost: a rerun that fails, is interrupted or killed never
removes or replaces the earlier finished run; outputs never overwrite inputs; what a killed
run leaves is finished or cleaned by the next run into the same place."""

from __future__ import annotations

import errno
import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import as_dead, dead_pid, tiny_cli

from tpu_tiles_models import (
    cli,
    data,
    export,
    files,
    kaggle,
    registry,
    run_file,
    safe,
    scoring,
    synthetic,
)
from tpu_tiles_models.runs import TrainedRun

EMPTY_CURVE = dict(epoch=[], train_loss=[], train_opa=[], val_loss=[], val_opa=[])


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (hidden ones too) by relative path, with its bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def _test_ranking(model_dir: Path, root: Path) -> dict[str, list[int]]:
    """The test split ranked by the model reopened from `model_dir` (the course procedure)."""
    run = TrainedRun.open(model_dir)
    model, ds = run.load(root, split="test", progress=False)
    scored = scoring.score_split(model, ds.test, ds.stats, progress=False)
    keep = run.keep_default  # the stored ranking keeps config 0 if the run's validation chose
    return {
        s.tile_id: scoring.upstream_top(s.scores, kaggle.UPSTREAM_TOP, keep_default=keep)
        for s in scored
    }


def _run_info(run_file: Path) -> dict:
    return json.loads(gzip.decompress(run_file.read_bytes()))


def _assert_whole_and_consistent(out: Path, h: str, root: Path) -> dict:
    """The run `h` in `out` is whole, and its model ranks the test split as its run file says."""
    info = run_file.completed_run(out, h)
    assert info is not None
    assert _test_ranking(out / f"model_{h}", root) == info["test_predictions"]
    return info


# -- a failed or interrupted rerun (in this process, at every step of its save) ---------------


@pytest.fixture(scope="module")
def valid_and_test(mlp_run, short_test_root) -> data.Dataset:
    stats = TrainedRun.open(mlp_run.model_dir).stats
    return data.load_dataset(short_test_root, splits=("valid", "test"), stats=stats, progress=False)


def _finish(args, model, ds, artifacts) -> export.TrainResult:
    """What training does at its end, without training: the final scores, then the writing
    (with the model's resolved kwargs recorded, as training records them)."""
    final = scoring.final_scores(model, ds, test_mode=args.test_mode, progress=False)
    kwargs = registry.resolved_kwargs(
        args.model, registry.parse_model_kwargs(args.model_kwargs_json)
    )
    extras = {run_file.MODEL_KWARGS_KEY: kwargs}
    return export.finish(
        args, model, ds.stats, final=final, curve=EMPTY_CURVE, extras=extras, artifacts=artifacts
    )


@pytest.fixture(scope="module")
def _finished_once(mlp_run, valid_and_test, tmp_path_factory) -> tuple[export.TrainResult, Path]:
    """A finished run of mlp_run's model in its own out_dir, with an explicit --results_csv
    (so a rerun has the same hash): written by `finish`, without training again; and a copy
    of its out_dir to restore before each test."""
    base = tmp_path_factory.mktemp("finished")
    out = base / "out"
    args = mlp_run.args.replace(out_dir=str(out), results_csv=str(out / "res.csv"))
    with export.writing_into(args) as artifacts:
        result = _finish(args, mlp_run.model, valid_and_test, artifacts)
    shutil.copytree(out, base / "copy")
    return result, base


@pytest.fixture
def finished(_finished_once) -> export.TrainResult:
    """`_finished_once`'s run as it was written (its out_dir is part of its hash, so each test
    gets it back at the same path)."""
    result, base = _finished_once
    shutil.rmtree(base / "out")
    shutil.copytree(base / "copy", base / "out")
    return result


def _rerun(finished, model, ds, **changes) -> export.TrainResult:
    args = finished.args.replace(overwrite=True, **changes)
    with export.writing_into(args) as artifacts:
        return _finish(args, model, ds, artifacts)


def _disk_full(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize(
    "where",
    ["results csv", "model save", "run file", "rename 2 of 4", "rename 4 of 4", "run rename"],
)
def test_a_failed_rerun_keeps_the_finished_run_byte_for_byte(
    where, finished, mlp_seeds, valid_and_test, monkeypatch
):
    """Defect 1: a rerun of the same options (--overwrite) that fails anywhere in its save
    (a full disk while writing, or a rename of its commit) leaves the finished run exactly as
    it was, and nothing of its own."""
    out = finished.model_dir.parent
    before = _snapshot(out)
    if where == "results csv":
        monkeypatch.setattr(kaggle, "write_predictions_csv", _disk_full)
    elif where == "model save":
        monkeypatch.setattr(export, "save_model", _disk_full)
    elif where == "run file":
        monkeypatch.setattr(run_file, "run_bytes", _disk_full)
    elif "rename" in where:
        calls, real = [], os.rename
        fail_at = 0 if where == "run rename" else int(where.split()[1])

        def rename(src, dst):  # the commit's renames: model aside, in; CSV aside, in
            calls.append(dst)
            if len(calls) == fail_at:
                _disk_full()
            real(src, dst)

        monkeypatch.setattr(os, "rename", rename)
        if where == "run rename":  # the staged run file onto run_<h>.jsonz, the last step
            replace = os.replace

            def run_file_last(src, dst):
                if Path(dst).name.startswith("run_"):
                    _disk_full()
                replace(src, dst)

            monkeypatch.setattr(os, "replace", run_file_last)
    with pytest.raises(OSError, match="No space left"):
        _rerun(finished, mlp_seeds[1].model, valid_and_test)
    monkeypatch.undo()
    assert _snapshot(out) == before


def test_a_rerun_killed_in_its_commit_is_finished_by_the_next_run(
    finished, mlp_seeds, short_test_root, valid_and_test, monkeypatch
):
    """`kill -9` between two renames of a rerun's commit (its model in place, the old one
    moved aside, the run file not yet): the next run into the folder finds the staged run
    file, whole, and puts the rest in place: the new run is complete and consistent."""
    out, h = finished.model_dir.parent, finished.args.hash()
    old_ranking = _run_info(finished.run_file)["test_predictions"]
    pid = dead_pid()
    monkeypatch.setattr(safe, "new_tag", lambda: f"{safe._HOST}-{pid}-0badc0de")  # its files

    class Killed(BaseException):
        pass

    calls, real = [], os.rename

    def rename(src, dst):
        calls.append(dst)
        if len(calls) == 3:  # the model swapped in, the old CSV not yet moved aside
            raise Killed
        real(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(export.Artifacts, "remove", lambda self: None)  # no cleanup: killed
    with pytest.raises(Killed):
        _rerun(finished, mlp_seeds[1].model, valid_and_test)
    monkeypatch.undo()
    assert any(name.startswith(f".run_{h}.jsonz.") for name in _hidden(out))
    export.recover(out)  # what `writing_into` does first
    assert _hidden(out) == []
    info = _assert_whole_and_consistent(out, h, short_test_root)
    assert info["test_predictions"] != old_ranking  # the new run's (seed 1's model)


def test_a_commit_killed_is_recovered_from_another_working_folder(
    mlp_run, mlp_seeds, short_test_root, valid_and_test, tmp_path, monkeypatch
):
    """Issue 58, defect 6: a run with a relative --out_dir and --results_csv, killed with its
    old CSV moved aside and its new one not yet in place, recovered by a command run from
    another folder: before, the staged CSV was looked for under that folder, and both CSVs
    were deleted. Recovery resolves it from the run's own folder."""
    monkeypatch.chdir(tmp_path)
    args = mlp_run.args.replace(out_dir="out", results_csv="out/res.csv", overwrite=True)
    with export.writing_into(args) as artifacts:
        _finish(args, mlp_run.model, valid_and_test, artifacts)
    out, h = tmp_path / "out", args.hash()
    pid = dead_pid()
    monkeypatch.setattr(safe, "new_tag", lambda: f"{safe._HOST}-{pid}-0badc0de")

    class Killed(BaseException):
        pass

    calls, real = [], os.rename

    def rename(src, dst):  # dead from the second on: no undo either
        calls.append(dst)
        if len(calls) >= 2:  # the old CSV moved aside, the new one not yet in
            raise Killed
        real(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(export.Artifacts, "remove", lambda self: None)  # no cleanup: killed
    with pytest.raises(Killed):
        with export.writing_into(args) as artifacts:
            _finish(args, mlp_seeds[1].model, valid_and_test, artifacts)
    monkeypatch.undo()
    assert not (out / "res.csv").exists()  # the old one under a hidden name, the new staged
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    export.recover(out)
    assert _hidden(out) == [] and list(elsewhere.iterdir()) == []
    # Whole, seen from that other folder too: `completed_run` finds the relative CSV from the
    # run's own folder, as recovery does.
    info = _assert_whole_and_consistent(out, h, short_test_root)
    written = kaggle.read_predictions_csv(out / "res.csv")
    assert written == {f"tile:xla:{k}": v for k, v in info["test_predictions"].items()}


def test_a_killed_runs_half_save_is_removed_and_a_running_ones_kept(finished, tmp_path):
    """Defect 5: what a killed run left before its commit (its hidden model folder and CSV)
    goes with the next run into the folder; a running process's hidden files stay."""
    out = finished.model_dir.parent
    before = _snapshot(out)
    half = safe.hidden_path(out / "model_x")
    (half / "variables").mkdir(parents=True)
    half = as_dead(half)
    csv = safe.hidden_path(out / "res.csv")
    csv.write_text("ID,TopConfigs\n")
    csv = as_dead(csv)
    running = safe.hidden_path(out / "model_y")  # ours: this process is running
    running.mkdir()
    export.recover(out)
    assert _hidden(out) == [running.name] and not half.exists() and not csv.exists()
    running.rmdir()
    assert _snapshot(out) == before


# -- whole runs (the sweep's resume) -----------------------------------------------------------


@pytest.mark.parametrize("damage", ["model dir", "variables data", "results csv", "run file"])
def test_a_run_missing_any_part_is_not_complete(damage, finished):
    """Defect 4: a run is complete only with its run file, a model dir with every part a
    SavedModel loads, and its results CSV."""
    out, h = finished.model_dir.parent, finished.args.hash()
    assert run_file.completed_run(out, h) is not None
    if damage == "model dir":
        files.remove(finished.model_dir)
    elif damage == "variables data":
        next((finished.model_dir / "variables").glob("variables.data-*")).unlink()
    elif damage == "results csv":
        finished.results_csv.unlink()
    else:
        finished.run_file.write_bytes(finished.run_file.read_bytes()[:40])
    assert run_file.completed_run(out, h) is None


# -- outputs against inputs (every command, before any work) -----------------------------------


def _one_line(capsys, code: int) -> str:
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    return err


def test_no_command_writes_over_its_inputs(mlp_run, short_test_root, tmp_path, capsys):
    """Defect 2: each of these exited 0 and destroyed what it wrote over; now each stops in
    one line before any work, and every input is as it was."""
    root, model_dir, run_file = short_test_root, mlp_run.model_dir, mlp_run.run_file
    npz = sorted((root / "test").glob("*.npz"))[0]
    train_npz = sorted((root / "train").glob("*.npz"))[0]
    before = {p: p.read_bytes() for p in (npz, train_npz, run_file)}
    data_flags = [f"--data_root={root}", "--no_progress"]
    cases = [
        (["predict", "--dir", str(model_dir), "--out", str(npz), *data_flags], "test split"),
        (["predict", "--dir", str(model_dir), "--out", str(run_file), *data_flags], "run file"),
        (tiny_cli(root, tmp_path / "o", f"--results_csv={train_npz}"), "train split"),
        (["evaluate", "--dirs", str(model_dir.parent), "--json", str(run_file), *data_flags],
         "run file of --dirs"),
        (["evaluate", "--dirs", str(model_dir), "--png", str(model_dir / "x.png"), *data_flags],
         "model directory of --dirs"),
        (["bundle", "--dir", str(model_dir), "--out", str(model_dir / "b")],
         "model directory of --dir"),
    ]  # fmt: skip
    for argv, what in cases:
        err = _one_line(capsys, cli.main(argv))
        assert what in err and "so pass another --" in err, err
    assert {p: p.read_bytes() for p in before} == before
    assert not (tmp_path / "o").exists() and not (model_dir / "b").exists()


def test_a_second_run_never_takes_the_first_ones_results_csv(mlp_run, capsys):
    """Defect 3: a run that differs only in --seed has its own name, and with the first
    one's --results_csv it is refused before any work (the first run keeps its CSV)."""
    first = mlp_run.args
    other = first.replace(seed=first.seed + 1)
    assert other.hash() != first.hash()
    before = mlp_run.results_csv.read_bytes()
    argv = [f"--{k}" if v is True else f"--{k}={v}" for k, v in other.to_dict().items()]
    err = _one_line(capsys, cli.main(["train", *argv]))
    assert err == (
        f"tpu-tiles train: error: --results_csv {mlp_run.results_csv} is the results CSV that "
        f"{mlp_run.run_file.name} names, part of a finished training run; writing it would "
        "break that run, so pass another --results_csv"
    )
    assert mlp_run.results_csv.read_bytes() == before
    assert not (mlp_run.model_dir.parent / f"model_{other.hash()}").exists()


# -- stop signals ---------------------------------------------------------------------------------


def test_synth_stops_on_sigterm_and_the_next_run_cleans_a_killed_ones_folder(tmp_path, capsys):
    """Defect 5: SIGTERM in `synth` stops it like Ctrl-C (exit 143, the folder as it was);
    the hidden staging folder of a synth killed outright goes with the next synth there."""
    out = tmp_path / "d"
    argv = ["synth", str(out), "--train", "3", "--valid", "1", "--test", "1", "--no_progress"]
    assert cli.main([*argv, "--max_configs", "8"]) == 0
    before = _snapshot(out)
    killed = safe.hidden_path(out / "synth")
    (killed / "train").mkdir(parents=True)
    killed = as_dead(killed)
    real = synthetic.writer._write_npz

    def write_then_sigterm(path, arrays):
        real(path, arrays)
        signal.raise_signal(signal.SIGTERM)  # noted by the command line, acted on after

    synthetic.writer._write_npz = write_then_sigterm
    try:
        code = cli.main([*argv, "--max_configs", "9", "--overwrite", "--seed", "1"])
    finally:
        synthetic.writer._write_npz = real
    assert code == 143
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("stopped by SIGTERM; removed what this run had started")
    )
    assert _snapshot(out) == before  # the killed one's folder went too


@pytest.mark.parametrize("fault", ["sigterm after the model copy", "run file copy fails"])
def test_a_stopped_or_failed_bundle_takes_back_what_it_added(mlp_run, tmp_path, monkeypatch, fault):
    """Defect 5: SIGTERM while `bundle` copies (exit 143) or a failed copy (exit 2): nothing
    of this bundle is left (no models.py without its model, no model without its run file,
    not the folder it made), and a rerun into a finished bundle leaves that bundle byte for
    byte."""
    from tpu_tiles_models import bundle

    out = tmp_path / "hand_in"
    finished = tmp_path / "finished"
    assert cli.main(["bundle", "--dir", str(mlp_run.model_dir), "--out", str(finished)]) == 0
    before = _snapshot(finished)
    if fault == "sigterm after the model copy":
        real_tree = files.copy_tree

        def copy_then_sigterm(src, dst, **kwargs):
            real_tree(src, dst, **kwargs)
            signal.raise_signal(signal.SIGTERM)

        monkeypatch.setattr(bundle.files, "copy_tree", copy_then_sigterm)
        status = 143
    else:
        real_copy = shutil.copyfile

        def run_file_disk_full(src, dst, **kwargs):
            if safe.place_of(Path(dst)).name.startswith("run_"):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
            return real_copy(src, dst, **kwargs)

        monkeypatch.setattr(bundle.shutil, "copyfile", run_file_disk_full)
        status = 2
    assert cli.main(["bundle", "--dir", str(mlp_run.model_dir), "--out", str(out)]) == status
    assert not out.exists()  # the folder it made went too
    # Its exact copies are there: nothing to write, nothing written (issue 48, defect 2).
    assert cli.main(["bundle", "--dir", str(mlp_run.model_dir), "--out", str(finished)]) == 0
    assert _snapshot(finished) == before


# What `_train_process` writes to stderr once the command has returned, with its status.
RETURNED = "cli.main returned"


def _train_process(argv: list[str], *, before: str = "") -> subprocess.Popen:
    """`tpu-tiles <argv>` in its own process (`before`: Python run first, to inject faults);
    once the command returns it writes `RETURNED <status>` to stderr, then exits with it."""
    code = (
        f"{before}\nimport sys\nfrom tpu_tiles_models import cli\nstatus = cli.main({argv!r})\n"
        f"print('{RETURNED}', status, file=sys.stderr, flush=True)\nraise SystemExit(status)"
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="module")
def cli_run(short_test_root, tmp_path_factory) -> tuple[list[str], Path, str]:
    """A finished tiny MLP run made by `tpu-tiles train` with an explicit --results_csv:
    (its argv, its out_dir, its hash)."""
    out = tmp_path_factory.mktemp("cli_run")
    argv = tiny_cli(short_test_root, out, f"--results_csv={out / 'res.csv'}")
    assert cli.main(argv) == 0
    (run_file,) = out.glob("run_*.jsonz")
    return argv, out, run_file.name[len("run_") : -len(".jsonz")]


@pytest.mark.slow
@pytest.mark.xdist_group("cli_run")
def test_sigterm_at_random_points_of_a_rerun_never_loses_the_finished_run(cli_run, short_test_root):
    """Defects 5 and 1: reruns of the same options (--overwrite) sent SIGTERM at random
    times (while Python starts, data loads, it trains or saves) end with 143 and the finished
    run as it was, or 0 and the new run in its place; either way the run in place is whole and
    ranks the test split as its run file says, and no hidden file is left. Killed outright
    (-SIGTERM: the signal came before the command set its handlers, or after it returned and
    put them back, while Python shuts down) it is the run as it was, or the new one if the
    command had returned 0."""
    argv, out, h = cli_run
    rng = random.Random(25)
    for _ in range(2):
        before = _snapshot(out)
        proc = _train_process([*argv, "--overwrite"])
        time.sleep(rng.uniform(2.0, 14.0))
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode in (0, 143, -signal.SIGTERM), stderr[-2000:]
        returned = [line.split()[-1] for line in stderr.splitlines() if line.startswith(RETURNED)]
        if proc.returncode == -signal.SIGTERM:  # before the handlers were set or after them
            assert returned in ([], ["0"]), stderr[-2000:]
        else:
            assert returned == [str(proc.returncode)], stderr[-2000:]
        if proc.returncode == 143:
            last = stderr.strip().splitlines()[-2]  # the command's own last line
            assert last.endswith("stopped by SIGTERM; removed what this run had started")
        if returned != ["0"]:
            assert _snapshot(out) == before
        assert _hidden(out) == []
        _assert_whole_and_consistent(out, h, short_test_root)


@pytest.mark.slow
@pytest.mark.xdist_group("cli_run")
def test_a_rerun_killed_during_its_save_leaves_the_finished_run(cli_run, short_test_root):
    """A rerun of the same options killed outright (SIGKILL: no cleanup) while its model is
    being saved: the finished run is as it was and reloads and ranks as before; its hidden
    half-saved model goes with the next run into the folder, which is refused (the run is
    finished) before any work."""
    argv, out, h = cli_run
    before = _snapshot(out)
    ranking = _test_ranking(out / f"model_{h}", short_test_root)
    kill_in_save = (
        "import os, signal\n"
        "from tpu_tiles_models import export\n"
        "def save(model, path):\n"
        "    model.save(str(path))\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "export.save_model = save\n"
    )
    proc = _train_process([*argv, "--overwrite"], before=kill_in_save)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, stderr[-2000:]
    assert any(name.startswith(f".model_{h}.") for name in _hidden(out))  # what it left
    assert {k: v for k, v in _snapshot(out).items() if not k.startswith(".")} == before
    assert _test_ranking(out / f"model_{h}", short_test_root) == ranking
    assert cli.main(argv) == 2  # refused: the finished run is there; the leftovers went
    assert _snapshot(out) == before
