"""The standalone trainer writes upstream's artifacts, atomically, with upstream's hash."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY_MLP, tiny_args, tiny_cli

from tpu_tiles_models import (
    cli,
    data,
    export,
    margin,
    metrics,
    run_file,
    scoring,
    train,
    train_args,
)

FLAGS = ["--configs", "4", "--batch", "4", "--epochs", "2", "--early_stop", "0", "--no_progress"]


def _run_info(result) -> dict:
    return json.loads(gzip.decompress(result.run_file.read_bytes()))


def test_artifacts_have_upstream_names_and_hash(residual_run):
    info = _run_info(residual_run)
    args = info["args"]
    assert list(args) == list(train_args.UPSTREAM_FIELDS)  # exactly upstream's TrainArgs fields
    # Upstream's md5 of those fields, with the options of ours that are not at their defaults
    # (here only --data_root) as one more key (test_train_args: upstream's alone otherwise).
    identity = info["tpu_tiles"]["identity"]
    assert identity == {"data_root": residual_run.args.data_root}
    hashed = dict(args, tpu_tiles=identity)
    expected = hashlib.md5(json.dumps(hashed, sort_keys=True).encode()).hexdigest()
    assert residual_run.model_dir.name == f"model_{expected}"
    assert residual_run.run_file.name == f"run_{expected}.jsonz"
    assert (residual_run.model_dir / "saved_model.pb").is_file()
    assert (residual_run.model_dir.parent / f"train_curve_{expected}.png").read_bytes()[
        :4
    ] == b"\x89PNG"
    assert not [p for p in residual_run.model_dir.parent.iterdir() if p.name.startswith(".")]


def test_run_file_has_upstream_keys_and_our_extras(residual_run):
    info = _run_info(residual_run)
    assert set(info["train_curve"]) == {"epoch", "train_loss", "train_opa", "val_loss", "val_opa"}
    assert info["train_curve"]["epoch"] == [0, 1]
    assert set(info["final_error"]["val"]) == {"1", "5", "10"}
    assert info["final_error"]["val"]["1"] >= info["final_error"]["val"]["5"] >= 0
    ours = info["tpu_tiles"]
    # Each figure says whether its kernels chose the epoch or the rule (issue 60).
    assert ours["in_sample"]["final_error.val"].startswith("in sample")
    assert ours["in_sample"]["final_error.test"].startswith("out of sample")
    assert len(ours["epoch_seconds"]) == 2 and ours["feature_stats"]["num_ops"] > 1
    assert len(ours["epoch_cpu_seconds"]) == 2 and min(ours["epoch_cpu_seconds"]) > 0
    # The kept weights are the best epoch's (by the sample's score, then on every config),
    # and so is the final validation error.
    best, scores = ours["best_epoch"], ours["val_score"]
    full = {int(e): s for e, s in ours.get("candidate_scores", {str(best): scores[best]}).items()}
    assert sorted(full) == sorted(sorted(range(2), key=lambda e: -scores[e])[: len(full)])
    assert max(full.values()) == full[best]
    own = ours[run_file.KEEP_DEFAULT_KEY]["val"]  # the model's own ranking, before its rule
    assert 1 - own["5"] == pytest.approx(full[best], abs=1e-12)
    # Upstream keeps 10 indices per test kernel, zero-padded.
    assert len(info["test_predictions"]) == 6
    assert all(len(v) == 10 for v in info["test_predictions"].values())


@pytest.mark.slow
def test_sample_scores_choose_candidates_rescored_on_every_config(synth_root, tmp_path):
    """Each epoch scores some of the valid kernels (here upstream's --validate_batches; by
    default a stratified sample, which on 8 kernels would be all of them); the best epochs by
    it are scored on every config at the end, and the best of those is kept and reported.
    Scored by the default key, 1 - top-5 error, reported per candidate."""
    from conftest import TINY_MLP, tiny_args

    from tpu_tiles_models import data, scoring

    args = tiny_args(
        synth_root,
        tmp_path,
        model="MLP",
        model_kwargs_json=TINY_MLP,
        epochs=4,
        validate_batches=1,
        score_candidates=2,
        lr=0.05,
    )
    result = train.train(args)
    ours = _run_info(result)["tpu_tiles"]
    valid = data.load_split(synth_root, "valid", progress=False)
    assert ours["val_score_kernels"] == 4 < len(valid)
    full = {int(e): s for e, s in ours["candidate_scores"].items()}
    assert sorted(full) == sorted(sorted(range(4), key=lambda e: -ours["val_score"][e])[:2])
    assert ours["best_epoch"] == max(full, key=full.get)
    stats = data.FeatureStats.from_json(ours["feature_stats"])
    margin.set_rule(result.model, margin=0.0)  # the candidates were scored before it was fitted
    scored = scoring.score_split(result.model, valid, stats, progress=False)
    errors = metrics.top_k_errors(scoring.pairs(scored))
    assert 1 - errors[5] == pytest.approx(full[ours["best_epoch"]], abs=1e-9)
    own = ours[run_file.KEEP_DEFAULT_KEY]["val"]
    assert {int(k): v for k, v in own.items()} == pytest.approx(errors, abs=1e-9)


def test_validation_chooses_whether_to_keep_config_0(residual_run, synth_root):
    """The validation errors every way, the rule's choices (config 0's margin, then keeping
    it in the top 5 on the ranking with the margin), and a test ranking that follows them."""
    info = _run_info(residual_run)
    record = info["tpu_tiles"][run_file.KEEP_DEFAULT_KEY]
    assert margin.margin_of(residual_run.model) == pytest.approx(record["margin"])
    stats = data.FeatureStats.from_json(info["tpu_tiles"]["feature_stats"])
    valid = data.load_dataset(synth_root, splits=("valid",), stats=stats, progress=False).valid
    scored = scoring.score_split(
        residual_run.model, valid, stats, progress=False
    )  # with the margin
    own = metrics.top_k_errors(scoring.pairs(scored))
    kept = metrics.top_k_errors((s.runtimes, margin.keep_default(s.scores)) for s in scored)
    # The run file's figure is that of the ranking `forward` hands in: the margin, then
    # config 0 kept where chosen.
    figure = kept if record["chosen"] else own
    assert info["final_error"]["val"] == {
        str(k): pytest.approx(v, abs=1e-9) for k, v in figure.items()
    }
    if record["margin"] == 0:
        assert record["val"] == {str(k): pytest.approx(v, abs=1e-9) for k, v in own.items()}
    assert record["val_kept"] == {str(k): pytest.approx(v, abs=1e-9) for k, v in kept.items()}
    assert record["chosen"] == (kept[5] < own[5])
    assert kept[1] == own[1]  # the top 1 stays
    if record["chosen"]:
        assert all(0 in top[:5] for top in info["test_predictions"].values())


def test_results_csv_matches_test_predictions(residual_run):
    info = _run_info(residual_run)
    lines = residual_run.results_csv.read_text().split("\n")
    assert lines[0] == "ID,TopConfigs" and not residual_run.results_csv.read_text().endswith("\n")
    rows = dict(line.split(",") for line in lines[1:])
    assert rows == {
        f"tile:xla:{k}": ";".join(map(str, v)) for k, v in info["test_predictions"].items()
    }


@pytest.mark.slow
def test_a_rerun_is_refused_and_replaces_its_run_only_with_overwrite(
    mlp_seeds, short_test_root, tmp_path
):
    """The same options again (same hash) are refused before any work, the finished run
    untouched; with --overwrite the new run replaces it once finished. Other options (the
    other seed's results_csv) have another hash. (Its own run: the shared ones are read by
    other workers meanwhile.)"""
    assert mlp_seeds[0].model_dir != mlp_seeds[1].model_dir  # results_csv differs: the hash
    args = tiny_args(short_test_root, tmp_path, model="MLP", model_kwargs_json=TINY_MLP)
    first = train.train(args.replace(results_csv=str(tmp_path / "results.csv")))
    before = first.run_file.read_bytes()
    with pytest.raises(export.RunExistsError, match=r"pass --run_id=<tag> .* or --overwrite"):
        train.train(first.args)
    assert first.run_file.read_bytes() == before
    same = train.train(first.args.replace(overwrite=True))
    assert same.model_dir == first.model_dir and (same.model_dir / "saved_model.pb").is_file()
    assert run_file.completed_run(same.model_dir.parent, same.args.hash()) is not None
    assert not [p for p in first.model_dir.parent.iterdir() if p.name.startswith(".")]


def test_interrupted_save_leaves_nothing(residual_run, tmp_path, monkeypatch):
    def interrupted(self, path, *a, **k):
        Path(path).mkdir()
        (Path(path) / "partial").write_text("x")
        raise KeyboardInterrupt

    monkeypatch.setattr(type(residual_run.model), "save", interrupted)
    args = residual_run.args.replace(out_dir=str(tmp_path), results_csv=str(tmp_path / "r.csv"))
    with pytest.raises(KeyboardInterrupt):
        with export.writing_into(args) as artifacts:
            export.save_model(
                residual_run.model, artifacts.stage(run_file.model_dir_path(tmp_path, "h"))
            )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "NoSuchModel"], "unknown model 'NoSuchModel'"),
        (["--model", "MLP", "--model_kwargs_json", "{bad"], "--model_kwargs_json is not valid"),
        (["--model", "MLP", "--model_kwargs_json", '{"nope": 1}'], "does not fit MLP"),
        (["--model", "MLP", "--losses", "Foo:1"], "unknown loss 'Foo'"),
    ],
)
def test_bad_flags_give_one_line(argv, message, synth_root, tmp_path, capsys):
    code = cli.main(
        [
            "train",
            *argv,
            *FLAGS,
            "--data_root",
            str(synth_root),
            "--cache_dir",
            "",
            "--out_dir",
            str(tmp_path),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1


def test_missing_data_dir_gives_one_line(tmp_path, capsys):
    code = cli.main(
        [
            "train",
            "--model",
            "MLP",
            "--data_root",
            str(tmp_path / "none"),
            "--cache_dir",
            "",
            "--out_dir",
            str(tmp_path),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and str(tmp_path / "none") in err and len(err.splitlines()) == 1


def test_epochs_zero_is_a_one_line_error(synth_root, tmp_path, capsys):
    code = cli.main(tiny_cli(synth_root, tmp_path / "out", "--epochs=0"))
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == "tpu-tiles train: error: --epochs must be at least 1, got 0"
    assert not (tmp_path / "out").exists()


def test_failed_training_leaves_no_out_dir(tmp_path, capsys):
    out = tmp_path / "new" / "out"
    code = cli.main(tiny_cli(tmp_path / "no_data", out))
    assert code == 2 and "split directory not found" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()  # the folders the run made go too


@pytest.mark.slow
def test_a_stop_signal_during_the_save_removes_every_artifact(
    synth_root, tmp_path, capsys, monkeypatch
):
    """SIGHUP (the terminal closed) while the model is saved (after the test ranking) is
    Ctrl-C's twin (that one: test_ctrl_c_in_a_real_process_stops_cleanly): nothing left
    behind, one line, 128 + the signal's number. SIGTERM goes through the same handler: a
    real one at random points of a training in test_nothing_lost."""
    save = export.save_model

    def save_then_signal(model, path):
        save(model, path)
        signal.raise_signal(signal.SIGHUP)  # noted by the CLI's handler, acted on after the save

    monkeypatch.setattr(export, "save_model", save_then_signal)
    out = tmp_path / "out"
    assert cli.main(tiny_cli(synth_root, out)) == 128 + signal.SIGHUP
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["tpu-tiles train: stopped by SIGHUP; removed what this run had started"]
    assert not out.exists()


def _cli_process(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    """`tpu-tiles <argv>` in its own process, with text pipes and no stdin."""
    return subprocess.Popen(
        [sys.executable, "-m", "tpu_tiles_models.cli", *argv],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_ctrl_c_in_a_real_process_stops_cleanly(synth_root, tmp_path):
    """SIGINT to a training process once two epochs are done: exit 130 within seconds, one
    line, no artifacts."""
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    argv = tiny_cli(synth_root, out, "--epochs=500")
    proc = _cli_process(argv, env)
    try:
        for line in proc.stdout:  # wait until training runs
            if line.startswith("epoch   1"):
                break
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert stderr.strip() == "tpu-tiles train: interrupted; removed what this run had started"
    assert not out.exists()


@pytest.mark.slow
def test_two_local_workers_write_what_one_run_writes(synth_root, tmp_path):
    """--strategy=multiworker over two CPU processes: the chief writes exactly a single run's
    artifacts (same names and hash), the other worker writes nothing."""
    import portpicker

    cluster = {"worker": [f"localhost:{portpicker.pick_unused_port()}" for _ in range(2)]}
    out = tmp_path / "out"
    argv = tiny_cli(synth_root, out, "--strategy=multiworker", f"--results_csv={out}/r.csv")
    procs = []
    try:
        for index in range(2):
            task = {"cluster": cluster, "task": {"type": "worker", "index": index}}
            env = dict(os.environ, TF_CONFIG=json.dumps(task))
            procs.append(_cli_process(argv, env))
        stderr = [p.communicate(timeout=300)[1] for p in procs]
    finally:
        for p in procs:
            p.kill()
    codes = [p.returncode for p in procs]
    assert codes == [0, 0], stderr[0][-2000:] + stderr[1][-2000:]
    h = train_args.TrainArgs.from_argv(argv[1:]).hash()
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"model_{h}", f"run_{h}.jsonz", "r.csv", f"train_curve_{h}.png"]
    )
    info = json.loads(gzip.decompress((out / f"run_{h}.jsonz").read_bytes()))
    assert info["args"]["model"] == "MLP" and len(info["test_predictions"]) == 6
