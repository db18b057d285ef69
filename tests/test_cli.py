"""The `tpu-tiles` front end: demo artifacts, synth, models, and its one-line errors."""

from __future__ import annotations

import csv
import gzip
import json

from tpu_tiles_models import cli, kaggle, registry


def test_models_lists_every_class(capsys):
    assert cli.main(["models"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in registry.MODELS)


def test_synth_writes_the_splits(tmp_path, capsys):
    assert cli.main(["synth", str(tmp_path), "--train", "3", "--valid", "2", "--test", "2"]) == 0
    assert [len(list((tmp_path / s).glob("*.npz"))) for s in ("train", "valid", "test")] == [
        3, 2, 2,
    ]  # fmt: skip
    assert "wrote 7 kernels" in capsys.readouterr().out


def test_demo_writes_every_artifact(tmp_path, capsys):
    out = tmp_path / "demo"
    assert cli.main(["demo", "--out", str(out), "--train", "24", "--epochs", "1",
                     "--no_progress"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    runs = sorted((out / "models").glob("run_*.jsonz"))
    assert len(runs) == 2 and len(list((out / "models").glob("model_*"))) == 2
    models = {json.loads(gzip.decompress(r.read_bytes()))["args"]["model"] for r in runs}
    assert models == {"ResidualSAGE", "EarlyJoinSAGE"}
    assert (out / "evaluation.png").read_bytes()[:4] == b"\x89PNG"
    predictions = kaggle.read_predictions_csv(out / "predictions_model_output.csv")
    assert len(predictions) == 20
    with open(out / "predictions_kaggle.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    tile_rows = {r["ID"]: r["TopConfigs"] for r in rows if r["ID"].startswith("tile:xla:")}
    assert tile_rows == {k: ";".join(map(str, v)) for k, v in predictions.items()}
    assert "overall" in printed and str(out / "predictions_kaggle.csv") in printed


def test_kaggle_without_sample_says_where_to_get_it(tmp_path, capsys):
    sample, predictions, out = (tmp_path / n for n in ("sample_submission.csv", "p.csv", "k.csv"))
    code = cli.main(["kaggle", "--sample", str(sample), "--inputcsv", str(predictions),
                     "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "sample_submission.csv" in err
    assert not out.exists()
