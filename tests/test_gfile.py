"""Remote paths (tf.io.gfile): training, reopening and sweeping with data and output on
`ram://`, TensorFlow's in-memory file system, standing in for `gs://`."""

from __future__ import annotations

import csv
import gzip
import io
import json
import tempfile

import numpy as np
import pytest
from conftest import TINY_MLP, tiny_args

from tpu_tiles_models import cli, data, export, files, run_file, runs, safe, scoring, sweep, train
from tpu_tiles_models.errors import FlagError
from tpu_tiles_models.runs import TrainedRun
from tpu_tiles_models.sweep.grid import make_point

RAM = "ram://test_gfile"
SWEEP_OUT = f"{RAM}/sweep"
# ram:// lives in its process: one worker runs this module (tests/conftest.py groups by file).


def _tree(url: str) -> list[str]:
    """Every file under `url`, relative to it, sorted."""
    import tensorflow as tf

    found = []
    for top, _, names in tf.io.gfile.walk(url):
        found += [f"{top}/{n}"[len(url) + 1 :] for n in names]
    return sorted(found)


@pytest.fixture(scope="module")
def ram_root(synth_root) -> str:
    """synth_root copied onto ram://."""
    root = f"{RAM}/data"
    files.copy_tree(synth_root, root)
    return root


@pytest.fixture(scope="module")
def remote_run(ram_root) -> export.TrainResult:
    """A tiny MLP trained from ram:// data into a ram:// out_dir and TensorBoard: the point
    lr=1e-3 of the sweep below, which then trains only its other point."""
    args = tiny_args(ram_root, SWEEP_OUT, model="MLP", model_kwargs_json=TINY_MLP)
    args = args.replace(tensorboard=f"{SWEEP_OUT}/tensorboard")
    return train.train(make_point(args, {"lr": 1e-3}).args)


def test_remote_files_round_trip_and_fail_in_one_line(tmp_path):
    safe.write_bytes(f"{RAM}/f/a.bin", b"abc")
    assert files.read_bytes(f"{RAM}/f/a.bin") == b"abc"
    assert files.size_and_mtime(f"{RAM}/f/a.bin")[0] == 3
    assert files.glob(f"{RAM}/f/*.bin") == [f"{RAM}/f/a.bin"]
    (tmp_path / "t" / "sub").mkdir(parents=True)
    (tmp_path / "t" / "sub" / "x").write_bytes(b"x")
    files.copy_tree(tmp_path / "t", f"{RAM}/f/tree")
    files.copy_tree(f"{RAM}/f/tree", tmp_path / "back")
    assert (tmp_path / "back" / "sub" / "x").read_bytes() == b"x"
    files.remove(f"{RAM}/f")
    assert not files.exists(f"{RAM}/f/a.bin") and not files.exists(f"{RAM}/f/tree/sub/x")
    with pytest.raises(FileNotFoundError, match="ram://test_gfile/f/a.bin"):
        files.read_bytes(f"{RAM}/f/a.bin")
    safe.write_bytes(f"{RAM}/g/a.bin", b"")
    with pytest.raises(files.WriteError, match=r"^--out ram://test_gfile/g is a folder"):
        safe.claim([safe.Output(f"{RAM}/g", "--out")])
    with pytest.raises(FlagError, match=r"^--models gs://b/models.py: must be a local path"):
        files.require_local("gs://b/models.py", flag="--models")


def test_remote_data_and_cache_load_the_same_arrays(synth_root, ram_root):
    local = data.load_split(synth_root, "valid", progress=False)
    cache = f"{RAM}/cache"
    remote = data.load_split(ram_root, "valid", cache_dir=cache, progress=False)
    assert len(files.glob(f"{cache}/tiles-valid-*.cache")) == 1
    cached = data.load_split(ram_root, "valid", cache_dir=cache, progress=False)
    for split in (remote, cached):
        assert sorted(split.tile_ids) == sorted(local.tile_ids)
        for tile in local.tile_ids:
            i, j = local.tile_ids.index(tile), split.tile_ids.index(tile)
            a = local.config_feat[local.config_offsets[i] : local.config_offsets[i + 1]]
            b = split.config_feat[split.config_offsets[j] : split.config_offsets[j + 1]]
            np.testing.assert_array_equal(a, b)
    assert all(f.startswith(f"{ram_root}/valid/") for f in cached.files)


def test_training_writes_its_artifacts_to_the_remote_out_dir(remote_run):
    h = remote_run.args.hash()
    out = SWEEP_OUT
    assert remote_run.model_dir == f"{out}/model_{h}"
    assert remote_run.run_file == f"{out}/run_{h}.jsonz"
    assert remote_run.results_csv == remote_run.args.results_csv
    names = _tree(out)
    assert f"model_{h}/saved_model.pb" in names and f"train_curve_{h}.png" in names
    assert not [n for n in names if n.rsplit("/", 1)[-1].startswith(".")]  # no temp left
    info = json.loads(gzip.decompress(files.read_bytes(remote_run.run_file)))
    rows = list(csv.reader(io.StringIO(files.read_bytes(remote_run.results_csv).decode())))
    assert rows[0] == ["ID", "TopConfigs"] and len(rows) == 1 + len(info["test_predictions"])
    assert info["tpu_tiles"]["data_root"] == f"{RAM}/data"
    assert files.glob(f"{out}/tensorboard/run_{h}/events.out.tfevents.*")


def test_a_reopened_remote_run_scores_like_its_local_copy(remote_run, ram_root, tmp_path):
    local_dir = tmp_path / files.basename(remote_run.model_dir)
    files.copy_tree(remote_run.model_dir, local_dir)
    local_run = run_file.run_file_for(local_dir)
    local_run.write_bytes(files.read_bytes(remote_run.run_file))
    scores = []
    for where in (remote_run.model_dir, local_dir):
        run = TrainedRun.open(where)
        model, ds = run.load(ram_root, split="test", progress=False)
        scores.append(scoring.score_split(model, ds.test, ds.stats, progress=False))
    assert [s.tile_id for s in scores[0]] == [s.tile_id for s in scores[1]]
    for remote, local in zip(*scores):
        np.testing.assert_array_equal(remote.scores, local.scores)
    saved = json.loads(gzip.decompress(files.read_bytes(remote_run.run_file)))
    keep = TrainedRun.open(remote_run.model_dir).keep_default  # the stored ranking follows it
    for s in scores[0]:  # the reopened model is the one that ranked the test split
        top = scoring.upstream_top(s.scores, 10, keep_default=keep)
        assert saved["test_predictions"][s.tile_id] == top


def test_the_remote_model_dir_loads_back_with_its_weights(remote_run):
    saved, trained = runs.load_saved_model(remote_run.model_dir), remote_run.model
    assert len(saved.trainable_variables) == len(trained.trainable_variables)
    for a, b in zip(saved.trainable_variables, trained.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.slow
def test_a_failed_end_of_training_leaves_nothing_remote_or_staged(
    remote_run, ram_root, tmp_path, monkeypatch
):
    """The run fails after its model dir and results CSV were copied, before the run file."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where staging folders go
    stats = TrainedRun.open(remote_run.model_dir).stats
    ds = data.load_dataset(ram_root, splits=("valid", "test"), stats=stats, progress=False)
    out = f"{RAM}/failed"
    args = remote_run.args.replace(out_dir=out, results_csv=f"{out}/results.csv")

    put = files.put_file

    def boom(src, url, **kwargs):
        if files.basename(url).startswith("run_"):
            assert _tree(out)  # the model dir and the CSV are there by now
            raise RuntimeError("disk full")
        put(src, url, **kwargs)

    monkeypatch.setattr(files, "put_file", boom)
    empty = dict(epoch=[], train_loss=[], train_opa=[], val_loss=[], val_opa=[])
    with pytest.raises(RuntimeError, match="disk full"):
        with export.writing_into(args) as artifacts:
            final = scoring.final_scores(remote_run.model, ds, test_mode=args.test_mode)
            export.finish(
                args,
                remote_run.model,
                ds.stats,
                final=final,
                curve=empty,
                extras={},
                artifacts=artifacts,
            )
    assert _tree(out) == [] and list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_two_point_sweep_on_remote_paths_writes_its_leaderboard_and_runs(remote_run, ram_root):
    out = SWEEP_OUT
    argv = ["sweep", "--grid", "lr=1e-3,2e-3", "--out_dir", out, f"--data_root={ram_root}"]
    argv += ["--isolation=none", "--num_workers=1", "--direct_running_mode=in_memory"]
    argv += ["--model=MLP", f"--model_kwargs_json={TINY_MLP}", "--epochs=1", "--configs=4"]
    argv += ["--batch=4", "--early_stop=0", "--cache_dir="]
    summary = sweep.run(sweep.SweepArgs.from_namespace(*cli.build_parser().parse_known_args(argv)))
    assert (summary.trained, summary.skipped) == (1, 1)  # lr=1e-3 is remote_run
    assert [r.status for r in summary.rows] == ["ok", "ok"]
    rows = list(csv.DictReader(io.StringIO(files.read_bytes(f"{out}/sweep.csv").decode())))
    assert sorted(r["lr"] for r in rows) == ["0.001", "0.002"]
    assert files.read_bytes(f"{out}/sweep.png")[:4] == b"\x89PNG"
    assert "| rank |" in files.read_bytes(f"{out}/sweep.md").decode()
    for r in summary.rows:
        assert files.isfile(run_file.run_file_path(out, r.point.hash))
        assert files.isfile(f"{run_file.model_dir_path(out, r.point.hash)}/saved_model.pb")
        assert files.isfile(r.point.args.results_csv)
        assert files.glob(f"{out}/tensorboard/run_{r.point.hash}/*.sweep_hparams")
    assert files.glob(f"{out}/sweep/points/*.json") and files.isfile(f"{out}/sweep/plan.json")
