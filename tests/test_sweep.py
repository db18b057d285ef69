"""`tpu-tiles sweep`: grids, points with train's hash, resume, failures, leaderboard"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gzip
import json
import os
import shlex
import shutil
import signal
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from tpu_tiles_models import cli, ensemble, files, pipelines, run_file, sweep
from tpu_tiles_models.errors import FlagError
from tpu_tiles_models.sweep import grid as grids
from tpu_tiles_models.sweep.leaderboard import leaderboard_row
from tpu_tiles_models.train_args import TrainArgs

TINY = [
    "--model=MLP",
    '--model_kwargs_json={"hidden_dim": 8}',
    "--epochs=1",
    "--configs=4",
    "--batch=4",
    "--early_stop=0",
    "--cache_dir=",
    "--score_configs=0",  # every config each epoch: the one epoch's val_score is the run's
]
# Sweeps train in this process (no Beam worker process, no child per point): TensorFlow is
# imported and warm here already, and the other core is left to the suite's subprocesses.
# Only the failed-point test, whose point is process isolation, starts processes: one
# worker of the default multi-processing DirectRunner, and a child per point.
FAST = ["--isolation=none", "--num_workers=1", "--direct_running_mode=in_memory"]
# Two points, one group over seeds: each point is a training (about 10 s).
GRID = "lr=1e-3 seed=0,1"


def _sweep(out: Path | str, data: Path, grid: str, *extra: str) -> sweep.SweepSummary:
    parser = argparse.ArgumentParser()
    sweep.add_flags(parser)
    argv = ["--grid", grid, "--out_dir", str(out), *extra, *TINY, f"--data_root={data}"]
    a, rest = parser.parse_known_args(argv)
    return sweep.run(sweep.SweepArgs.from_namespace(a, rest))


def _csv_rows(out: Path) -> list[dict]:
    with open(out / "sweep.csv", newline="") as f:
        return list(csv.DictReader(f))


def _run_info(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


@pytest.fixture(scope="module")
def first(synth_root, tmp_path_factory):
    """A 2-point sweep, and a snapshot of what it wrote (later tests add to its out_dir)."""
    out = tmp_path_factory.mktemp("sweep")
    summary = _sweep(out, synth_root, GRID, *FAST)
    return dict(
        out=out,
        summary=summary,
        rows=_csv_rows(out),
        md=(out / "sweep.md").read_text(),
        names=sorted(p.name for p in out.iterdir()),
    )


def test_two_points_write_two_complete_runs_and_a_two_row_leaderboard(first):
    out, summary = first["out"], first["summary"]
    assert (summary.trained, summary.skipped, summary.failed) == (2, 0, [])
    assert [r["status"] for r in first["rows"]] == ["ok"] * 2
    assert [r["rank"] for r in first["rows"]] == ["1", "2"]
    scores = [float(r["score"]) for r in first["rows"]]
    assert scores == sorted(scores, reverse=True)
    assert {(r["lr"], r["seed"]) for r in first["rows"]} == {("0.001", "0"), ("0.001", "1")}
    for row in first["rows"]:
        info = _run_info(out / f"run_{row['hash']}.jsonz")
        assert (out / f"model_{row['hash']}" / "saved_model.pb").is_file()
        assert float(row["score"]) == pytest.approx(1 - info["final_error"]["val"]["5"])
        assert float(row["top1_error"]) == info["final_error"]["val"]["1"]
        assert row["epochs"] == "1"
    assert sum(n.startswith("run_") for n in first["names"]) == 2


def test_a_point_is_the_single_run_with_its_flags(first):
    """The leaderboard's flags, parsed as `tpu-tiles train` parses them, give the same args
    and the same upstream hash; the run file stores exactly the point's options."""
    out = first["out"]
    for row in first["rows"]:
        args = TrainArgs.from_argv(shlex.split(row["flags"]))
        assert args.hash() == row["hash"]
        assert args.results_csv == str(out / f"results_{row['key']}.csv")
        stored = _run_info(out / f"run_{row['hash']}.jsonz")["tpu_tiles"]["train_args"]
        assert stored == args.to_dict()
        assert Path(args.results_csv).read_text().startswith("ID,TopConfigs")


def test_leaderboard_groups_seeds_and_draws(first):
    rows, md = first["rows"], first["md"]
    assert "## Mean +- std over seeds" in md
    scores = [float(r["score"]) for r in rows]
    mean = sum(scores) / 2
    std = abs(scores[0] - scores[1]) / 2**0.5  # sample std of two
    assert f"| 0.001 | 2 | {mean:.4f} +- {std:.4f} |" in md
    assert (first["out"] / "sweep.png").read_bytes()[:4] == b"\x89PNG"


def _summaries(path: Path) -> dict[str, list]:
    """{tag: [hparams plugin data or scalar value, ...]} of one events file."""
    import tensorflow as tf
    from tensorboard.plugins.hparams import plugin_data_pb2

    found: dict[str, list] = {}
    for event in tf.compat.v1.train.summary_iterator(str(path)):
        for value in event.summary.value:
            meta = value.metadata.plugin_data
            if meta.plugin_name == "hparams":
                item = plugin_data_pb2.HParamsPluginData.FromString(meta.content)
            else:
                item = float(tf.make_ndarray(value.tensor))
            found.setdefault(value.tag, []).append(item)
    return found


def test_tensorboard_has_the_hparams_experiment_and_each_runs_session(first):
    tb = first["out"] / "tensorboard"
    (root,) = tb.glob("*.sweep_hparams")
    (experiment,) = _summaries(root)["_hparams_/experiment"]
    assert [h.name for h in experiment.experiment.hparam_infos] == ["lr", "seed"]
    assert "final/score" in [m.name.tag for m in experiment.experiment.metric_infos]
    for row in first["rows"]:
        run = tb / f"run_{row['hash']}"
        (ours,) = run.glob("*.sweep_hparams")
        (trainer,) = [p for p in run.iterdir() if p != ours]  # the per-epoch scalars
        # The epoch's score is the model's own ranking; the leaderboard's, its rule's.
        own = _run_info(first["out"] / f"run_{row['hash']}.jsonz")["tpu_tiles"]["keep_default"]
        assert _summaries(trainer)["val_score"] == [pytest.approx(1 - own["val"]["5"], rel=1e-5)]
        session = _summaries(ours)
        start = session["_hparams_/session_start_info"][0].session_start_info
        assert start.hparams["lr"].number_value == float(row["lr"])
        assert start.group_name == row["key"]
        assert session["final/score"] == [pytest.approx(float(row["score"]))]
    plan = json.loads((first["out"] / "sweep" / "plan.json").read_text())
    assert {p["key"] for p in plan["points"]} == {r["key"] for r in first["rows"]}


def test_dry_run_lists_the_points_and_trains_nothing(first, synth_root, capsys):
    summary = _sweep(first["out"], synth_root, "lr=1e-3,2e-3 seed=0,1,2", *FAST, "--dry_run")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("sweep: 6 points, 2 already complete (skipped), 4 to train")
    assert sorted(line.split()[0] for line in lines[1:]) == ["done"] * 2 + ["todo"] * 4
    assert (summary.trained, summary.skipped) == (0, 2)
    assert len(list(first["out"].glob("run_*.jsonz"))) == 2


def test_resume_does_not_depend_on_how_out_dir_is_spelled(
    first, synth_root, tmp_path, capsys, monkeypatch
):
    """Issue 48, defect 5: `./SW/`, `SW/../SW` or a link to SW is the same --out_dir, so the
    same points are found complete; a rerun through the link trains none and its
    leaderboard still lists them all."""
    out = first["out"]
    link = tmp_path / "link"
    link.symlink_to(out)
    monkeypatch.chdir(out.parent)
    for spelled in (f"./{out.name}/", f"{out.name}/../{out.name}", str(link)):
        summary = _sweep(spelled, synth_root, GRID, *FAST, "--dry_run")
        assert (summary.trained, summary.skipped) == (0, 2), spelled
    capsys.readouterr()
    summary = _sweep(str(link), synth_root, GRID, *FAST)
    assert (summary.trained, summary.skipped, summary.failed) == (0, 2, [])
    assert f"2 already complete (skipped), 0 to train; out_dir {out}\n" in capsys.readouterr().out
    assert sorted(r["hash"] for r in _csv_rows(out)) == sorted(r["hash"] for r in first["rows"])
    assert sorted(p.name for p in out.iterdir()) == first["names"]


@pytest.mark.slow
def test_rerun_after_a_killed_point_trains_only_that_point(first, synth_root, capsys, monkeypatch):
    out = first["out"]
    victim = first["rows"][1]
    others = {
        r["hash"]: (out / f"run_{r['hash']}.jsonz").stat().st_mtime_ns
        for r in first["rows"]
        if r is not victim
    }
    (out / f"run_{victim['hash']}.jsonz").unlink()  # killed before its run file was written
    calls = _fake_ensemble(monkeypatch, out / "ensemble_top2")
    capsys.readouterr()
    summary = _sweep(out, synth_root, GRID, *FAST, "--ensemble_top=2")
    assert (summary.trained, summary.skipped, summary.failed) == (1, 1, [])
    assert "2 points, 1 already complete (skipped), 1 to train" in capsys.readouterr().out
    assert {h: (out / f"run_{h}.jsonz").stat().st_mtime_ns for h in others} == others
    assert (out / f"run_{victim['hash']}.jsonz").is_file()
    assert [r["status"] for r in _csv_rows(out)] == ["ok"] * 2
    assert not [p for p in out.iterdir() if p.name.startswith(".")]
    # --ensemble_top 2: ensemble.build_ensemble gets the two best points' model dirs.
    best = [str(out / f"model_{r.point.hash}") for r in summary.rows[:2]]
    assert calls == [(best, str(out / "ensemble_top2"), str(synth_root), None)]
    ensemble = summary.ensemble
    assert ensemble["members"] == [r.point.key for r in summary.rows[:2]]
    assert ensemble["score"] == pytest.approx(0.75) and ensemble["error"] == ""
    assert (
        "## Ensemble of the 2 best points\n\nscore 0.7500 (top-1 err 0.9000"
        in (out / "sweep.md").read_text()
    )


@pytest.mark.slow
def test_rerun_trains_again_a_point_whose_model_dir_is_gone(first, synth_root, capsys):
    """Defect 4: resume checks the whole run, not the run file alone (what else a whole run
    needs: test_nothing_lost): a point whose model dir is gone is trained again, its run file
    removed first, the others skipped; then every point is whole."""
    out = first["out"]
    gone = first["rows"][0]["hash"]
    files.remove(out / f"model_{gone}")
    capsys.readouterr()
    summary = _sweep(out, synth_root, GRID, *FAST)
    assert (summary.trained, summary.skipped, summary.failed) == (1, 1, [])
    assert "2 points, 1 already complete (skipped), 1 to train" in capsys.readouterr().out
    assert all(run_file.completed_run(out, r["hash"]) for r in first["rows"])
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def _fake_ensemble(monkeypatch, target: Path) -> list[tuple]:
    """Stands in for `ensemble.build_ensemble` (tested in test_ensemble.py); records calls."""
    calls = []

    def build_ensemble(model_dirs, out_dir, *, data_root, cache_dir, progress):
        calls.append((model_dirs, out_dir, data_root, cache_dir))
        run_file = target / "run_e.jsonz"
        return SimpleNamespace(
            model_dir=target / "model_e",
            run_file=run_file,
            results_csv=None,
            val_errors={1: 0.9, 5: 0.25, 10: 0.1},
        )

    monkeypatch.setattr(ensemble, "build_ensemble", build_ensemble)
    return calls


def _kill_the_training_of(seed: int, done: threading.Event) -> threading.Thread:
    """A watcher that kills (SIGKILL, as the kernel's out-of-memory killer does) the training
    process of the point with `seed` as soon as one of this test's workers starts it."""

    def watch() -> None:
        while not done.wait(0.05):
            for pid in pipelines._descendants(os.getpid()):
                with contextlib.suppress(OSError, ValueError, KeyError):
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
                    spec = argv[argv.index(sweep.pipeline.CHILD) + 1]
                    if json.loads(Path(spec).read_text())["seed"] == seed:
                        os.kill(pid, signal.SIGKILL)
                        return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_failed_and_killed_points_are_recorded_and_the_others_go_on(first, synth_root, tmp_path):
    """Why each point trains in a child process of its worker (`--isolation process`, the
    default): a point's training process killed outright (here SIGKILL, as out of memory) is
    that point's failure, not the worker's, which goes on to the next point (trained in the
    worker, the kill would take the worker down with every point left on it). A bad kwarg
    fails in its own child too; the point already complete is skipped; the exit is a
    SweepFailed naming the points; the leaderboard has all three."""
    out = first["out"]
    grid = tmp_path / "grid.json"
    grid.write_text(
        json.dumps(
            [
                {"lr": 1e-3, "seed": 0, "model_kwargs_json": [{"hidden_dim": 8}, {"bogus": 1}]},
                {"lr": 1e-3, "seed": 7},
            ]
        )
    )
    extra = ["--isolation=process", "--num_workers=1"]  # the default multi-processing runner
    done = threading.Event()
    watcher = _kill_the_training_of(7, done)
    try:
        with pytest.raises(sweep.SweepFailed, match=r"2 of 3 points not ok: \w{16} ") as e:
            _sweep(out, synth_root, str(grid), *extra)
    finally:
        done.set()
        watcher.join()
    summary = e.value.summary
    assert (summary.trained, summary.skipped) == (0, 1)
    failed = {r.point.values["seed"]: r for r in summary.failed}
    assert failed[0].status == "failed" and "does not fit MLP" in failed[0].error
    log = out / "sweep" / "logs" / f"{failed[7].point.key}.log"
    assert failed[7].error == (
        f"the training process was killed by SIGKILL (out of memory?); see {log}"
    )
    for row in failed.values():
        assert not (out / f"model_{row.point.hash}").exists()
        assert (out / "sweep" / "logs" / f"{row.point.key}.log").exists()
    assert "does not fit MLP" in log.with_name(f"{failed[0].point.key}.log").read_text()
    rows = _csv_rows(out)
    assert [r["status"] for r in rows] == ["ok", "failed", "failed"]


# The sweep's bookkeeping, valid JSON of another shape -> what the one line says of it.
RECORDS = {
    "point_a_list": ("sweep/points/{key}.json", "[1, 2]", "its content is a list, not an object"),
    "point_without_status": ("sweep/points/{key}.json", '{"error": ""}', "it has no 'status'"),
    "point_wall_s_a_string": (
        "sweep/points/{key}.json",
        '{"status": "ok", "error": "", "wall_s": "9 s"}',
        "'wall_s' is a string, not a number or null",
    ),
    "ensemble_a_list": (
        "ensemble_top2/sweep_ensemble.json",
        "[1]",
        "its content is a list, not an object",
    ),
}


@pytest.mark.parametrize("case", sorted(RECORDS))
def test_bookkeeping_of_another_shape_is_one_line(case, first, synth_root, capsys, monkeypatch):
    """Before: an AttributeError or TypeError from the next sweep."""
    out = first["out"]
    where, text, problem = RECORDS[case]
    record = out / where.format(key=first["rows"][0]["key"])
    kept = record.read_bytes() if record.exists() else None
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(text)
    leaderboard = (out / "sweep.csv").read_bytes()
    _fake_ensemble(monkeypatch, out / "ensemble_top2")
    argv = ["sweep", "--grid", GRID, "--out_dir", str(out), "--ensemble_top=2", *FAST, *TINY]
    try:
        code = cli.main([*argv, f"--data_root={synth_root}"])
    finally:
        record.write_bytes(kept) if kept is not None else record.unlink()
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == (
        f"tpu-tiles sweep: error: {record}: {problem}; it is the sweep's bookkeeping: delete it "
        "and rerun the sweep"
    )
    assert (out / "sweep.csv").read_bytes() == leaderboard


# -- issue 58: a sweep's records name their files inside their own folder ------------------


def _ensembles(monkeypatch) -> None:
    """`ensemble.build_ensemble` writing a stand-in ensemble (a model dir, run file, results
    CSV) into its folder, named by its members; `run_file.whole_run`: the model dir is there."""

    def build_ensemble(model_dirs, out_dir, *, data_root, cache_dir, progress):
        name = "_".join(os.path.basename(d)[len("model_") :] for d in model_dirs)
        made = SimpleNamespace(
            model_dir=Path(out_dir, f"model_{name}"),
            run_file=Path(out_dir, f"run_{name}.jsonz"),
            results_csv=Path(out_dir, f"results_{name}.csv"),
            val_errors={1: 0.5, 5: 0.25, 10: 0.1},
        )
        made.model_dir.mkdir(parents=True)
        made.run_file.write_bytes(b"run")
        made.results_csv.write_text("csv")
        return made

    monkeypatch.setattr(ensemble, "build_ensemble", build_ensemble)
    monkeypatch.setattr(run_file, "whole_run", lambda model_dir: os.path.isdir(model_dir) or None)


def _best(*hashes: str) -> list[SimpleNamespace]:
    """Ranked ok rows of points with these hashes (their keys too)."""
    return [SimpleNamespace(ok=True, point=SimpleNamespace(key=h, hash=h)) for h in hashes]


BASE = SimpleNamespace(data_root="data", cache_dir="")


def test_a_copied_sweep_never_reaches_back_into_the_original(tmp_path, monkeypatch):
    """Defect 2 as reported: `cp -a SW SW2`, then a sweep into SW2 whose best points differ
    deleted SW's ensemble (its model dir, run file and results CSV), which SW2's record named
    by absolute path; and with the same best points it took SW's ensemble for SW2's. Now the
    record names them inside its own folder: SW2 replaces and reuses its own copies only."""
    _ensembles(monkeypatch)
    sw, sw2 = tmp_path / "SW", tmp_path / "SW2"
    first = sweep._ensemble(_best("a", "b"), 2, str(sw), BASE)
    target = sw / "ensemble_top2"
    assert first["dir"] == str(target / "model_a_b")
    record = json.loads((target / "sweep_ensemble.json").read_text())
    assert [record[k] for k in ("dir", "run_file", "results_csv")] == [
        "model_a_b",
        "run_a_b.jsonz",
        "results_a_b.csv",
    ]
    original = sorted(os.listdir(target))
    shutil.copytree(sw, sw2, symlinks=True)
    again = sweep._ensemble(_best("a", "b"), 2, str(sw2), BASE)  # reused: SW2's own copy
    assert again["dir"] == str(sw2 / "ensemble_top2" / "model_a_b")
    other = sweep._ensemble(_best("a", "c"), 2, str(sw2), BASE)  # replaced: in SW2 only
    assert other["dir"] == str(sw2 / "ensemble_top2" / "model_a_c")
    assert sorted(os.listdir(target)) == original
    assert sorted(os.listdir(sw2 / "ensemble_top2")) == [
        "model_a_c",
        "results_a_c.csv",
        "run_a_c.jsonz",
        "sweep_ensemble.json",
    ]


@pytest.mark.parametrize("key, name", [("dir", "{victim}"), ("run_file", "../../victim/x")])
def test_an_ensemble_record_naming_a_file_outside_its_folder_is_one_line(
    key, name, tmp_path, monkeypatch
):
    """Defect 2, forged (or written by an earlier version, with absolute paths): the record
    is refused in one line and nothing outside its folder is removed (before: `victim`, a
    folder outside --out_dir, was deleted whole)."""
    _ensembles(monkeypatch)
    victim = tmp_path / "victim"
    (victim / "x").mkdir(parents=True)
    sweep._ensemble(_best("a", "b"), 2, str(tmp_path / "SW"), BASE)
    record = tmp_path / "SW" / "ensemble_top2" / "sweep_ensemble.json"
    name = name.format(victim=victim)
    record.write_text(json.dumps(dict(json.loads(record.read_text()), **{key: name})))
    with pytest.raises(files.OutsideError) as err:
        sweep._ensemble(_best("a", "c"), 2, str(tmp_path / "SW"), BASE)
    why = (
        f"is an absolute path, not a name in {record.parent}"
        if name.startswith("/")
        else f"climbs out of {record.parent} with '..'"
    )
    assert str(err.value) == (
        f"{record}: {key!r} {name!r} {why}; it is the sweep's bookkeeping: delete it and rerun "
        "the sweep"
    )
    assert (victim / "x").is_dir()


@pytest.mark.parametrize("spec, bad", [("uniform(nan,1)", "nan"), ("loguniform(1e-4,inf)", "inf")])
def test_a_range_bound_that_is_not_a_finite_number_is_named(spec, bad, tmp_path, capsys):
    """Before: "need low <= high" for uniform(nan,1), and inf drawn as a learning rate."""
    out = tmp_path / "sw"
    argv = ["sweep", "--grid", f"lr={spec}", "--random=2", "--out_dir", str(out)]
    assert cli.main([*argv, "--dry_run"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"tpu-tiles sweep: error: --grid: lr={spec}: {bad} is "
        "not a finite number; give two finite bounds"
    )
    assert not out.exists()


# -- grids ----------------------------------------------------------------------------------


def test_inline_grid_round_trips_and_matches_yaml_and_json(tmp_path):
    spec = (
        "model=ResidualSAGE,EarlyJoinSAGE learning_rate=1e-3,0.002 seed=0,1,2 "
        "losses='ListMLELoss:1,MSE:0.02','PairwiseHingeLoss:1,MSE:0.02' "
        'model_kwargs_json={"hidden_dim": 8},{} kwargs.pooling="sum",\'"x y"\' '
        "toy_data=true,false configs=int(4,32)"
    )
    (grid,) = grids.parse_grid(spec)
    assert [a.name for a in grid.axes][:3] == ["model", "lr", "seed"]
    assert grid.axes[1].values == (0.001, 0.002)
    assert grid.axes[3].values == ("ListMLELoss:1,MSE:0.02", "PairwiseHingeLoss:1,MSE:0.02")
    assert grid.axes[4].values == ('{"hidden_dim": 8}', "{}")
    assert grid.axes[5].values == ("sum", "x y")
    assert grid.axes[6].values == (True, False)
    assert grid.axes[7].range == grids.Range("int", 4, 32)
    content = {
        "model": ["ResidualSAGE", "EarlyJoinSAGE"],
        "learning_rate": ["1e-3", 0.002],
        "seed": [0, 1, 2],
        "losses": ["ListMLELoss:1,MSE:0.02", "PairwiseHingeLoss:1,MSE:0.02"],
        "model_kwargs_json": [{"hidden_dim": 8}, {}],
        "kwargs.pooling": ["sum", "x y"],
        "toy_data": [True, False],
        "configs": "int(4,32)",
    }
    (tmp_path / "g.json").write_text(json.dumps(content))
    import yaml

    (tmp_path / "g.yaml").write_text(yaml.safe_dump(content, sort_keys=False))
    assert grids.parse_grid(str(tmp_path / "g.json")) == [grid]
    assert grids.parse_grid(str(tmp_path / "g.yaml")) == [grid]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("lrr=1e-3", "unknown flag 'lrr'"),
        ("lr=1e-3,,2e-3", "an empty value"),
        ("lr=1e-3 lr=2e-3", "lr given twice"),
        ("out_dir=a,b", "out_dir is set by the sweep"),
        ("lr=abc", "--lr takes float"),
        ("epochs=uniform(1,3)", r"integer flag; use int\(1,3\)"),
        ("lr=loguniform(0,1)", "low > 0"),
        ('model_kwargs_json={"a":1', "unbalanced"),
        ("lr", "--grid lr: no such file"),  # no "=": a file's name
    ],
)
def test_bad_grids_are_one_line_flag_errors(spec, message):
    with pytest.raises(FlagError, match=message):
        grids.parse_grid(spec)


def test_ranges_need_random_and_bad_points_are_refused():
    base = TrainArgs(out_dir="/o")
    with pytest.raises(FlagError, match=r"lr is a range; add --random N"):
        grids.expand(grids.parse_grid("lr=loguniform(1e-4,1e-2)"), base)
    with pytest.raises(FlagError, match=r"--grid point lr=-1: --lr must be positive"):
        grids.expand(grids.parse_grid("lr=-1"), base)


def test_random_draws_are_reproducible_in_range_and_crossed_with_seeds():
    (grid,) = grids.parse_grid("lr=loguniform(1e-4,1e-2) kwargs.hidden_dim=logint(8,64) seed=0,1")
    base = TrainArgs(out_dir="/o", model_kwargs_json='{"num_layers": 2}')
    points = grids.expand([grid], base, random_points=5, random_seed=3)
    assert len(points) == 10
    assert [p.key for p in points] == [
        p.key for p in grids.expand([grid], base, random_points=5, random_seed=3)
    ]
    assert [p.values["seed"] for p in points] == [0, 1] * 5
    for p in points:
        assert 1e-4 <= p.args.lr <= 1e-2 and float(f"{p.args.lr:.4g}") == p.args.lr
        kwargs = json.loads(p.args.model_kwargs_json)
        assert kwargs["num_layers"] == 2 and 8 <= kwargs["hidden_dim"] <= 64
    other = grids.expand([grid], base, random_points=5, random_seed=4)
    assert [p.args.lr for p in other] != [p.args.lr for p in points]


def test_points_have_distinct_stable_hashes_and_results_csv():
    base = TrainArgs(out_dir="/o")
    points = grids.expand(grids.parse_grid("seed=0,1,0"), base)
    assert len(points) == 2  # the repeated seed is one point
    assert points[0].hash != points[1].hash  # upstream's hash lacks seed; results_csv has it
    assert points[0].args.results_csv == f"/o/results_{points[0].key}.csv"
    again = grids.make_point(base.replace(cache_dir="/elsewhere"), {"seed": 0})
    assert again.hash == points[0].hash  # where the cache lives is not part of a point


# -- flags and options ----------------------------------------------------------------------


def test_extra_flags_split_into_train_flags_and_beam_options():
    argv = [
        "--model",
        "MLP",
        "--toy_data",
        "--noskip_bad",
        "--lr=2e-3",
        "--project",
        "p",
        "--temp_location=gs://b/t",
        "--save_main_session",
        "--seed",
        "3",
    ]
    train, beam = sweep.split_argv(argv)
    assert train == ["--model", "MLP", "--toy_data", "--noskip_bad", "--lr=2e-3", "--seed", "3"]
    assert beam == ["--project", "p", "--temp_location=gs://b/t", "--save_main_session"]
    with pytest.raises(FlagError, match="unknown flag --lrr: neither a `tpu-tiles train` flag"):
        sweep.split_argv(["--lrr=1"])
    with pytest.raises(FlagError, match="unexpected argument 'x'"):
        sweep.split_argv(["x"])
    with pytest.raises(FlagError, match="Beam pipeline option: argument --direct_running_mode"):
        sweep.split_argv(["--direct_running_mode=bogus"])


def test_direct_runner_defaults_to_multi_processing_on_every_core():
    a = argparse.Namespace(runner="DirectRunner", num_workers=None)
    options = sweep.pipeline.pipeline_options(a, []).get_all_options()
    assert options["direct_running_mode"] == "multi_processing"
    assert options["direct_num_workers"] == len(os.sched_getaffinity(0))
    a.num_workers = 3
    options = sweep.pipeline.pipeline_options(
        a, ["--direct_running_mode=in_memory"]
    ).get_all_options()
    assert (options["direct_running_mode"], options["direct_num_workers"]) == ("in_memory", 3)
    a = argparse.Namespace(runner="FlinkRunner", num_workers=4)
    options = sweep.pipeline.pipeline_options(a, ["--flink_master=h:8081"]).get_all_options()
    assert (options["runner"], options["num_workers"], options["flink_master"]) == (
        "FlinkRunner",
        4,
        "h:8081",
    )


def test_dask_runner_is_named_short_and_trains_one_point_a_task():
    """`--runner DaskRunner` (Beam knows it only by its module path) with Dask's own options
    passed on; one point a task, where Beam's default puts 128 elements in each."""
    pytest.importorskip("distributed", reason="the dask extra: pip install -e '.[dask]'")
    from apache_beam.runners.dask.dask_runner import DaskOptions

    train, beam = sweep.split_argv(["--dask_client_address", "127.0.0.1:8786", "--seed=1"])
    assert (train, beam) == (["--seed=1"], ["--dask_client_address", "127.0.0.1:8786"])
    sweep.pipeline.check_runner("DaskRunner")
    a = argparse.Namespace(runner="DaskRunner", num_workers=None)
    options = sweep.pipeline.pipeline_options(a, beam)
    dask = options.view_as(DaskOptions)
    assert (dask.address, dask.partition_size, dask.npartitions) == ("127.0.0.1:8786", 1, None)
    assert options.get_all_options()["runner"] == "apache_beam.runners.dask.dask_runner.DaskRunner"
    dask = sweep.pipeline.pipeline_options(a, ["--dask_npartitions=3"]).view_as(DaskOptions)
    assert (dask.partition_size, dask.npartitions) == (None, 3)


def test_unknown_runner_and_sweep_level_mistakes_are_flag_errors(tmp_path):
    with pytest.raises(FlagError, match="--runner Nope: not a Beam runner"):
        sweep.pipeline.check_runner("Nope")
    with pytest.raises(FlagError, match="--results_csv is named per point"):
        sweep.base_args(["--results_csv=x.csv"], str(tmp_path))
    with pytest.raises(FlagError, match=r"--grid .*missing.yaml: no such file"):
        grids.parse_grid(str(tmp_path / "missing.yaml"))


# -- pieces ---------------------------------------------------------------------------------


def test_non_finite_loss_makes_a_nan_row_and_a_missing_run_a_not_run_row():
    point = grids.make_point(TrainArgs(out_dir="/o"), {"seed": 0})
    info = {
        "final_error": {"val": {"1": 0.5, "5": 0.2, "10": 0.1}},
        "train_curve": {"epoch": [0, 1], "train_loss": [1.0, float("nan")], "val_opa": [0.6, 0.7]},
        "tpu_tiles": {"best_epoch": 0, "epoch_seconds": [1.5, 2.0]},
    }
    row = leaderboard_row(point, info, {"status": "ok", "wall_s": 9.0})
    assert (row.status, row.score, row.opa, row.train_s, row.wall_s) == ("nan", 0.8, 0.6, 3.5, 9.0)
    assert "non-finite training loss at epoch 1" in row.error
    assert leaderboard_row(point, None, None).status == "not run"


def test_a_points_key_outlives_options_added_and_removed_after_it():
    """A sweep started before an option existed resumes after it is added, and after it is
    removed: this key was taken before `--head_configs` and `--head_share` existed, which
    left it out at their defaults and are gone now, and with `--score_sample` and
    `--pad_configs`, gone too."""
    args = TrainArgs(
        model="ResidualSAGE", epochs=40, out_dir="/runs", data_root="/data/alt", seed=2
    )
    assert grids.point_key(args) == "26dd1c5458ec80cb"
