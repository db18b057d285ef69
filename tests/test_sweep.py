"""`tpu-tiles sweep`: grids, points with train's hash, resume, failures, leaderboard"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

from tpu_tiles_models import ensemble, export, files, sweep
from tpu_tiles_models.errors import FlagError
from tpu_tiles_models.sweep import options, pipeline, store
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
GRID = "lr=1e-3,2e-3 seed=0,1"
# One worker runs this module: its tests build on one 4-point sweep.
pytestmark = pytest.mark.xdist_group("sweep")


def _sweep(out: Path, data: Path, grid: str, *extra: str) -> sweep.SweepSummary:
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
    """A 4-point sweep, and a snapshot of what it wrote (later tests add to its out_dir)."""
    out = tmp_path_factory.mktemp("sweep")
    summary = _sweep(out, synth_root, GRID, *FAST)
    return dict(
        out=out,
        summary=summary,
        rows=_csv_rows(out),
        md=(out / "sweep.md").read_text(),
        names=sorted(p.name for p in out.iterdir()),
    )


def test_four_points_write_four_complete_runs_and_a_four_row_leaderboard(first):
    out, summary = first["out"], first["summary"]
    assert (summary.trained, summary.skipped, summary.failed) == (4, 0, [])
    assert [r["status"] for r in first["rows"]] == ["ok"] * 4
    assert [r["rank"] for r in first["rows"]] == ["1", "2", "3", "4"]
    scores = [float(r["score"]) for r in first["rows"]]
    assert scores == sorted(scores, reverse=True)
    assert {(r["lr"], r["seed"]) for r in first["rows"]} == {
        ("0.001", "0"),
        ("0.001", "1"),
        ("0.002", "0"),
        ("0.002", "1"),
    }
    for row in first["rows"]:
        info = _run_info(out / f"run_{row['hash']}.jsonz")
        assert (out / f"model_{row['hash']}" / "saved_model.pb").is_file()
        assert float(row["score"]) == pytest.approx(1 - info["final_error"]["val"]["5"])
        assert float(row["top1_error"]) == info["final_error"]["val"]["1"]
        assert row["epochs"] == "1"
    assert sum(n.startswith("run_") for n in first["names"]) == 4


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
    for lr in ("0.001", "0.002"):
        scores = [float(r["score"]) for r in rows if r["lr"] == lr]
        mean = sum(scores) / 2
        std = abs(scores[0] - scores[1]) / 2**0.5  # sample std of two
        assert f"| {lr} | 2 | {mean:.4f} +- {std:.4f} |" in md
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
        assert _summaries(trainer)["val_score"] == [pytest.approx(float(row["score"]), rel=1e-5)]
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
    assert lines[0].startswith("sweep: 6 points, 4 already complete (skipped), 2 to train")
    assert sorted(line.split()[0] for line in lines[1:]) == ["done"] * 4 + ["todo"] * 2
    assert (summary.trained, summary.skipped) == (0, 4)
    assert len(list(first["out"].glob("run_*.jsonz"))) == 4


def test_rerun_after_a_killed_point_trains_only_that_point(first, synth_root, capsys, monkeypatch):
    out = first["out"]
    victim = first["rows"][2]
    others = {
        r["hash"]: (out / f"run_{r['hash']}.jsonz").stat().st_mtime_ns
        for r in first["rows"]
        if r is not victim
    }
    (out / f"run_{victim['hash']}.jsonz").unlink()  # killed before its run file was written
    calls = _fake_ensemble(monkeypatch, out / "ensemble_top2")
    capsys.readouterr()
    summary = _sweep(out, synth_root, GRID, *FAST, "--ensemble_top=2")
    assert (summary.trained, summary.skipped, summary.failed) == (1, 3, [])
    assert "4 points, 3 already complete (skipped), 1 to train" in capsys.readouterr().out
    assert {h: (out / f"run_{h}.jsonz").stat().st_mtime_ns for h in others} == others
    assert (out / f"run_{victim['hash']}.jsonz").is_file()
    assert [r["status"] for r in _csv_rows(out)] == ["ok"] * 4
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


def test_rerun_trains_again_a_point_whose_model_dir_is_gone(first, synth_root, capsys):
    """Defect 4: resume checks the whole run, not the run file alone (what else a whole run
    needs: test_nothing_lost): a point whose model dir is gone is trained again, its run file
    removed first, the others skipped; then every point is whole."""
    out = first["out"]
    gone = first["rows"][1]["hash"]
    files.remove(out / f"model_{gone}")
    capsys.readouterr()
    summary = _sweep(out, synth_root, GRID, *FAST)
    assert (summary.trained, summary.skipped, summary.failed) == (1, 3, [])
    assert "4 points, 3 already complete (skipped), 1 to train" in capsys.readouterr().out
    assert all(export.completed_run(out, r["hash"]) for r in first["rows"])
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


def test_failed_point_is_recorded_and_the_others_go_on(first, synth_root):
    """A bad kwarg fails in its own child process; the other point (already complete) is
    skipped; the exit is a SweepFailed naming the point; the leaderboard has both."""
    out = first["out"]
    grid = 'lr=1e-3 seed=0 model_kwargs_json={"hidden_dim": 8},{"bogus": 1}'
    extra = ["--isolation=process", "--num_workers=1"]  # the default multi-processing runner
    with pytest.raises(sweep.SweepFailed, match=r"1 of 2 points not ok: \w{16} .*bogus") as e:
        _sweep(out, synth_root, grid, *extra)
    summary = e.value.summary
    assert (summary.trained, summary.skipped) == (0, 1)
    failed = summary.failed[0]
    assert failed.status == "failed" and "does not fit MLP" in failed.error
    assert not (out / f"model_{failed.point.hash}").exists()
    assert (out / "sweep" / "logs" / f"{failed.point.key}.log").read_text()
    rows = _csv_rows(out)
    assert [r["status"] for r in rows] == ["ok", "failed"]
    assert "does not fit MLP" in rows[1]["error"]


# -- grids ----------------------------------------------------------------------------------


def test_inline_grid_round_trips_and_matches_yaml_and_json(tmp_path):
    spec = (
        "model=ResidualSAGE,EarlyJoinSAGE learning_rate=1e-3,0.002 seed=0,1,2 "
        "losses='ListMLELoss:1,MSE:0.02','FastFirstListMLE:1,MSE:0.02' "
        'model_kwargs_json={"hidden_dim": 8},{} kwargs.pooling="sum",\'"x y"\' '
        "toy_data=true,false configs=int(4,32)"
    )
    grid = sweep.parse_inline(spec)
    assert [a.name for a in grid.axes][:3] == ["model", "lr", "seed"]
    assert grid.axes[1].values == (0.001, 0.002)
    assert grid.axes[3].values == ("ListMLELoss:1,MSE:0.02", "FastFirstListMLE:1,MSE:0.02")
    assert grid.axes[4].values == ('{"hidden_dim": 8}', "{}")
    assert grid.axes[5].values == ("sum", "x y")
    assert grid.axes[6].values == (True, False)
    assert grid.axes[7].range == sweep.Range("int", 4, 32)
    assert sweep.parse_inline(sweep.format_grid(grid)) == grid
    content = {
        "model": ["ResidualSAGE", "EarlyJoinSAGE"],
        "learning_rate": ["1e-3", 0.002],
        "seed": [0, 1, 2],
        "losses": ["ListMLELoss:1,MSE:0.02", "FastFirstListMLE:1,MSE:0.02"],
        "model_kwargs_json": [{"hidden_dim": 8}, {}],
        "kwargs.pooling": ["sum", "x y"],
        "toy_data": [True, False],
        "configs": "int(4,32)",
    }
    (tmp_path / "g.json").write_text(json.dumps(content))
    import yaml

    (tmp_path / "g.yaml").write_text(yaml.safe_dump(content, sort_keys=False))
    assert sweep.parse_grid(str(tmp_path / "g.json")) == [grid]
    assert sweep.parse_grid(str(tmp_path / "g.yaml")) == [grid]


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
        ("lr", "not name=values"),
    ],
)
def test_bad_grids_are_one_line_flag_errors(spec, message):
    with pytest.raises(FlagError, match=message):
        sweep.parse_inline(spec)


def test_ranges_need_random_and_bad_points_are_refused():
    base = TrainArgs(out_dir="/o")
    with pytest.raises(FlagError, match=r"lr is a range; add --random N"):
        sweep.expand([sweep.parse_inline("lr=loguniform(1e-4,1e-2)")], base)
    with pytest.raises(FlagError, match=r"--grid point lr=-1: --lr must be positive"):
        sweep.expand([sweep.parse_inline("lr=-1")], base)


def test_random_draws_are_reproducible_in_range_and_crossed_with_seeds():
    grid = sweep.parse_inline("lr=loguniform(1e-4,1e-2) kwargs.hidden_dim=logint(8,64) seed=0,1")
    base = TrainArgs(out_dir="/o", model_kwargs_json='{"num_layers": 2}')
    points = sweep.expand([grid], base, random_points=5, random_seed=3)
    assert len(points) == 10
    assert [p.key for p in points] == [
        p.key for p in sweep.expand([grid], base, random_points=5, random_seed=3)
    ]
    assert [p.values["seed"] for p in points] == [0, 1] * 5
    for p in points:
        assert 1e-4 <= p.args.lr <= 1e-2 and float(f"{p.args.lr:.4g}") == p.args.lr
        kwargs = json.loads(p.args.model_kwargs_json)
        assert kwargs["num_layers"] == 2 and 8 <= kwargs["hidden_dim"] <= 64
    other = sweep.expand([grid], base, random_points=5, random_seed=4)
    assert [p.args.lr for p in other] != [p.args.lr for p in points]


def test_points_have_distinct_stable_hashes_and_results_csv():
    base = TrainArgs(out_dir="/o")
    points = sweep.expand([sweep.parse_inline("seed=0,1,0")], base)
    assert len(points) == 2  # the repeated seed is one point
    assert points[0].hash != points[1].hash  # upstream's hash lacks seed; results_csv has it
    assert points[0].args.results_csv == f"/o/results_{points[0].key}.csv"
    again = sweep.make_point(base.replace(cache_dir="/elsewhere"), {"seed": 0})
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
    options = sweep.pipeline_options(a, []).get_all_options()
    assert options["direct_running_mode"] == "multi_processing"
    assert options["direct_num_workers"] == len(os.sched_getaffinity(0))
    a.num_workers = 3
    options = sweep.pipeline_options(a, ["--direct_running_mode=in_memory"]).get_all_options()
    assert (options["direct_running_mode"], options["direct_num_workers"]) == ("in_memory", 3)
    a = argparse.Namespace(runner="FlinkRunner", num_workers=4)
    options = sweep.pipeline_options(a, ["--flink_master=h:8081"]).get_all_options()
    assert (options["runner"], options["num_workers"], options["flink_master"]) == (
        "FlinkRunner",
        4,
        "h:8081",
    )


def test_unknown_runner_and_sweep_level_mistakes_are_flag_errors(tmp_path):
    with pytest.raises(FlagError, match="--runner Nope: not a Beam runner"):
        pipeline.check_runner("Nope")
    with pytest.raises(FlagError, match="--results_csv is named per point"):
        options.base_args(["--results_csv=x.csv"], str(tmp_path))
    with pytest.raises(FlagError, match=r"--grid .*missing.yaml: no such file"):
        sweep.parse_grid(str(tmp_path / "missing.yaml"))


# -- pieces ---------------------------------------------------------------------------------


def test_non_finite_loss_makes_a_nan_row_and_a_missing_run_a_not_run_row():
    point = sweep.make_point(TrainArgs(out_dir="/o"), {"seed": 0})
    info = {
        "final_error": {"val": {"1": 0.5, "5": 0.2, "10": 0.1}},
        "train_curve": {"epoch": [0, 1], "train_loss": [1.0, float("nan")], "val_opa": [0.6, 0.7]},
        "tpu_tiles": {"best_epoch": 0, "epoch_seconds": [1.5, 2.0]},
    }
    row = sweep.leaderboard_row(point, info, {"status": "ok", "wall_s": 9.0})
    assert (row.status, row.score, row.opa, row.train_s, row.wall_s) == ("nan", 0.8, 0.6, 3.5, 9.0)
    assert "non-finite training loss at epoch 1" in row.error
    assert sweep.leaderboard_row(point, None, None).status == "not run"


def test_remote_paths_go_through_gfile():
    root = "ram://sweep_test"
    store.write_json(f"{root}/points/a.json", {"x": 1})
    assert store.read_json(f"{root}/points/a.json") == {"x": 1}
    assert files.glob(f"{root}/points/*.json") == [f"{root}/points/a.json"]
    files.remove(f"{root}/points")
    assert store.read_bytes(f"{root}/points/a.json") is None


def test_a_points_key_outlives_options_added_and_removed_after_it():
    """A sweep started before an option existed resumes after it is added, and after it is
    removed: this key was taken before `--head_configs` and `--head_share` existed, which
    left it out at their defaults (`ADDED_FLAGS`) and are gone now."""
    from tpu_tiles_models.sweep.points import point_key
    from tpu_tiles_models.train_args import TrainArgs

    args = TrainArgs(
        model="ResidualSAGE", epochs=40, out_dir="/runs", data_root="/data/alt", seed=2
    )
    assert point_key(args) == "26dd1c5458ec80cb"
