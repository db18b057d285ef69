"""`tpu-tiles ensemble`: one drop-in model from several runs."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from conftest import write_run

from tpu_tiles_models import cli, ensemble, export, kaggle, scoring
from tpu_tiles_models.runs import TrainedRun


@pytest.fixture(scope="module")
def pair(residual_run, mlp_run, short_test_root, tmp_path_factory) -> export.TrainResult:
    """The ensemble of the two shared tiny runs (same train split, so the same statistics)."""
    out = tmp_path_factory.mktemp("ensemble")
    return ensemble.build_ensemble(
        [residual_run.model_dir, mlp_run.model_dir],
        out,
        data_root=short_test_root,
        progress=False,
    )


def _run_info(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def test_artifacts_name_the_members(pair, residual_run, mlp_run):
    info = _run_info(pair.run_file)
    assert info["args"]["model"] == "Ensemble"
    kwargs = json.loads(info["args"]["model_kwargs_json"])
    assert [m["model"] for m in kwargs["members"]] == ["ResidualSAGE", "MLP"]
    assert kwargs["combine"] == "zscore"
    assert pair.model_dir.name == f"model_{pair.args.hash()}"
    rows = kaggle.read_predictions_csv(pair.results_csv)
    assert len(rows) == len(info["test_predictions"]) == 6
    members = info["tpu_tiles"]["members"]
    assert list(members) == [str(residual_run.model_dir), str(mlp_run.model_dir)]


def test_reloads_by_the_course_procedure(pair, short_test_root):
    """Fresh Ensemble, one forward, in-order copy: the stored test top-10 again."""
    run = TrainedRun.open(pair.model_dir)
    model, ds = run.load(short_test_root, progress=False)
    assert len(model.trainable_variables) == len(pair.model.trainable_variables)
    scored = scoring.score_split(model, ds.test, ds.stats, progress=False)
    stored = run.info["test_predictions"]
    keep = run.keep_default  # the stored ranking follows the run's validation choice
    assert {s.tile_id: scoring.upstream_top(s.scores, 10, keep_default=keep) for s in scored} == (
        stored
    )


def test_members_on_other_data_are_refused(residual_run, synth_root, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    info = _run_info(residual_run.run_file)
    info["tpu_tiles"]["feature_stats"]["num_ops"] += 1
    shutil.copytree(residual_run.model_dir, other / residual_run.model_dir.name)
    write_run(other, info)
    with pytest.raises(ensemble.EnsembleError, match="trained on other data than"):
        ensemble.build_ensemble(
            [residual_run.model_dir, other / residual_run.model_dir.name],
            tmp_path / "out",
            data_root=synth_root,
            progress=False,
        )
    assert not (tmp_path / "out").exists()


def test_cli_refuses_a_dir_without_its_run_file(residual_run, synth_root, tmp_path, capsys):
    lonely = tmp_path / residual_run.model_dir.name
    shutil.copytree(residual_run.model_dir, lonely)
    code = cli.main(
        [
            "ensemble",
            "--dirs",
            f"{residual_run.model_dir},{lonely}",
            "--out_dir",
            str(tmp_path / "out"),
            "--data_root",
            str(synth_root),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "needs its run file beside it" in err


def test_seeds_then_their_ensemble(mlp_seeds):
    """`mlp_seeds`: two seeds' runs, then their ensemble, each with its --results_csv."""
    results = mlp_seeds
    out = results[0].model_dir.parent
    assert [r.args.seed for r in results[:2]] == [0, 1]
    assert results[2].args.model == "Ensemble" and len(list(out.glob("run_*.jsonz"))) == 3
    names = [r.results_csv.name for r in results]
    assert names == ["results_seed0.csv", "results_seed1.csv", "results_ensemble.csv"]
