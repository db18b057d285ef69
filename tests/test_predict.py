"""tiles_gen_predictions_csv.py and predict.predict_to_csv on models from our trainer."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import tiny_args, tiny_cli, write_run

from tpu_tiles_models import cli, data, export, kaggle, kernel_files, run_file, train

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tiles_gen_predictions_csv.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("tiles_gen_predictions_csv", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


script = _load_script()


@pytest.fixture(scope="module")
def without_margin(short_test_root, tmp_path_factory) -> export.TrainResult:
    """A tiny MLP without config 0's margin, whose ranking leaves config 0 out of some top 5s
    (a tiny model's fitted margin puts config 0 first nearly everywhere)."""
    kwargs = '{"hidden_dim": 8, "mlp_layers": 1, "default_margin": false}'
    out = tmp_path_factory.mktemp("without_margin")
    return train.train(tiny_args(short_test_root, out, model="MLP", model_kwargs_json=kwargs))


def _run_info(result: export.TrainResult) -> dict:
    return json.loads(gzip.decompress(result.run_file.read_bytes()))


def _predict(model_dir: Path, root: Path, out: Path, capsys) -> tuple[int, str, str]:
    """Runs the script's main in-process; returns (exit code, stdout, stderr)."""
    code = script.main(
        ["--dir", str(model_dir), "--data_root", str(root), "--cache_dir=", "--out", str(out)]
        + ["--no_progress"]
    )
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _config_counts(root: Path) -> dict[str, int]:
    """Configs per test kernel, in the order the rows are written (directory order)."""
    counts = {}
    for path in kernel_files.split_files(root, "test"):
        with np.load(path) as npz:
            counts[kernel_files.tile_id_of(path)] = len(npz["config_feat"])
    return counts


def _expected_top5(run_info: dict, counts: dict[str, int]) -> dict[str, list[int]]:
    """The trainer's upstream-style top 10, cut to 5 and padded by the distinct rule."""
    expected = {}
    for tile_id, ranks in run_info["test_predictions"].items():
        n = counts[tile_id]
        expected[kaggle.TILE_PREFIX + tile_id] = kaggle.pad_top_k(ranks[: min(n, 5)], n, 5)
    return expected


def test_csv_matches_trainer_test_predictions(
    mlp_run, short_test_root, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # not an upstream root: the package's models.py
    out = tmp_path / "preds.csv"
    code, stdout, stderr = _predict(mlp_run.model_dir, short_test_root, out, capsys)
    assert (code, stderr) == (0, "")
    assert f"wrote {out} (6 kernels" in stdout and "tpu_tiles_models' models.py" in stdout

    text = out.read_text()
    lines = text.split("\n")
    assert lines[0] == "ID,TopConfigs" and not text.endswith("\n")
    counts = _config_counts(short_test_root)
    assert [line.split(",")[0] for line in lines[1:]] == [kaggle.TILE_PREFIX + t for t in counts]
    predictions = kaggle.read_predictions_csv(out)
    kaggle.validate_predictions(predictions, predictions, source=str(out))
    assert predictions == _expected_top5(_run_info(mlp_run), counts)
    # The short kernels list their real configs first, then distinct indices past the end.
    short = {n: predictions[kaggle.TILE_PREFIX + t] for t, n in counts.items() if n < 5}
    assert short[1] == [0, 1, 2, 3, 4]
    assert sorted(short[3][:3]) == [0, 1, 2] and short[3][3:] == [3, 4]


def test_top_k_flag(mlp_run, short_test_root, tmp_path, capsys):
    out = tmp_path / "top2.csv"
    code = script.main(
        ["--dir", str(mlp_run.model_dir), f"--data_root={short_test_root}", "--cache_dir="]
        + ["--out", str(out), "--top_k", "2", "--no_progress"]
    )
    capsys.readouterr()
    assert code == 0
    run_info = _run_info(mlp_run)
    counts = _config_counts(short_test_root)
    got = kaggle.read_predictions_csv(out)
    for tile_id, ranks in run_info["test_predictions"].items():
        n = counts[tile_id]
        assert got[kaggle.TILE_PREFIX + tile_id] == kaggle.pad_top_k(ranks[: min(n, 2)], n, 2)


def test_keep_default_follows_the_model_unless_told(
    without_margin, short_test_root, tmp_path, capsys
):
    """`auto` follows the model's own rule (its gate, which training set from the run's
    validation choice; the run file's record does not override it), as the course script
    ranks; `yes` and `no` override it."""
    chosen = _run_info(without_margin)[run_file.EXTRAS_KEY][run_file.KEEP_DEFAULT_KEY]["chosen"]
    edited = _run_info(without_margin)  # a run file that says the opposite
    edited[run_file.EXTRAS_KEY][run_file.KEEP_DEFAULT_KEY]["chosen"] = not chosen
    out_dir = tmp_path / "edited"
    shutil.copytree(without_margin.model_dir, out_dir / without_margin.model_dir.name)
    write_run(out_dir, edited)

    def predict(model_dir: Path, mode: str | None) -> dict[str, list[int]]:
        out = tmp_path / f"{model_dir.parent.name}_{mode}.csv"
        flag = [f"--keep_default={mode}"] if mode else []
        argv = ["predict", "--dir", str(model_dir), "--data_root", str(short_test_root)]
        assert cli.main([*argv, "--out", str(out), "--no_progress", *flag]) == 0
        capsys.readouterr()
        return kaggle.read_predictions_csv(out)

    plain = predict(without_margin.model_dir, "no")
    kept = {k: v if 0 in v else [*v[:4], 0] for k, v in plain.items()}
    assert any(0 not in v for v in plain.values()), "no kernel where keeping config 0 matters"
    assert predict(without_margin.model_dir, "yes") == kept
    assert predict(without_margin.model_dir, None) == (kept if chosen else plain)
    assert predict(out_dir / without_margin.model_dir.name, None) == (kept if chosen else plain)
    out = tmp_path / "script_yes.csv"  # the prediction script takes the same flag
    argv = [
        "--dir",
        str(without_margin.model_dir),
        "--data_root",
        str(short_test_root),
        "--cache_dir=",
    ]
    assert script.main([*argv, "--out", str(out), "--keep_default=yes", "--no_progress"]) == 0
    capsys.readouterr()
    assert kaggle.read_predictions_csv(out) == kept
    code = cli.main(["predict", "--dir", str(without_margin.model_dir), "--keep_default=maybe"])
    assert code == 2 and "--keep_default must be one of auto, yes, no" in capsys.readouterr().err


def _copy_model(result: export.TrainResult, out_dir: Path, **arg_changes) -> Path:
    """A copy of the model dir whose run file has `arg_changes` (renamed to their hash)."""
    run_info = _run_info(result)
    run_info["args"].update(arg_changes)
    out_dir.mkdir()
    model_dir = out_dir / f"model_{run_file.run_info_hash(run_info)}"
    shutil.copytree(result.model_dir, model_dir)
    write_run(out_dir, run_info)
    return model_dir


def _one_line_error(capsys_result: tuple[int, str, str]) -> str:
    code, _, stderr = capsys_result
    assert code == 2
    assert stderr.startswith("tiles_gen_predictions_csv.py: error: ")
    assert stderr.count("\n") == 1
    return stderr


def test_missing_run_file(mlp_run, short_test_root, tmp_path, capsys):
    model_dir = tmp_path / mlp_run.model_dir.name
    shutil.copytree(mlp_run.model_dir, model_dir)
    err = _one_line_error(_predict(model_dir, short_test_root, tmp_path / "p.csv", capsys))
    assert f"{tmp_path / mlp_run.run_file.name} not found" in err
    assert "needs its run file beside it" in err
    assert not (tmp_path / "p.csv").exists()


def test_missing_model_dir(short_test_root, tmp_path, capsys):
    err = _one_line_error(
        _predict(tmp_path / "model_abc", short_test_root, tmp_path / "p.csv", capsys)
    )
    assert "no such model directory" in err


def test_model_class_not_in_models_py(mlp_run, short_test_root, tmp_path, capsys):
    model_dir = _copy_model(mlp_run, tmp_path / "out", model="NoSuchModel")
    err = _one_line_error(_predict(model_dir, short_test_root, tmp_path / "p.csv", capsys))
    assert "unknown model 'NoSuchModel'" in err and "known: " in err and "MLP" in err


@pytest.mark.parametrize("which", ["mlp_run", "residual_run"])
def test_weights_from_the_checkpoint_are_the_course_copys(
    which, mlp_run, residual_run, short_test_root
):
    """`TrainedRun.build` reads the saved variables from the checkpoint (no SavedModel load):
    the very values of the course's in-order copy from `tf.keras.models.load_model`. (Both
    runs are named as arguments: tests/conftest.py then puts it with the others that use
    them, where they are trained once.)"""
    from tpu_tiles_models import runs

    result = {"mlp_run": mlp_run, "residual_run": residual_run}[which]
    run = runs.TrainedRun.open(result.model_dir)
    model, dataset = run.load(short_test_root, progress=False)
    assert "saved_model" not in vars(run)  # the SavedModel was not loaded
    course = run.build(dataset.test, dataset.stats)
    runs.copy_variables(course, run.saved_model, origin="test")
    assert len(model.trainable_variables) == len(course.trainable_variables) > 0
    for ours, theirs in zip(model.trainable_variables, course.trainable_variables):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_variable_shape_mismatch(mlp_run, short_test_root, tmp_path, capsys):
    kwargs = json.dumps({"hidden_dim": 16, "mlp_layers": 1})
    model_dir = _copy_model(mlp_run, tmp_path / "out", model_kwargs_json=kwargs)
    err = _one_line_error(_predict(model_dir, short_test_root, tmp_path / "p.csv", capsys))
    assert "has shape" in err and "saved but" in err and "rebuilt" in err


def test_bad_top_k(mlp_run, short_test_root, capsys):
    with pytest.raises(SystemExit) as info:
        script.main(["--dir", str(mlp_run.model_dir), "--top_k", "0"])
    assert info.value.code == 2
    assert "--top_k must be at least 1" in capsys.readouterr().err


def test_upstream_root_detection(tmp_path):
    root = tmp_path / "root"
    (root / "tpu_graphs/baselines/tiles").mkdir(parents=True)
    (root / "tpu_graphs/baselines/tiles/models.py").write_text("")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert script.upstream_root(script_dir=root, cwd=elsewhere) == root.resolve()
    assert script.upstream_root(script_dir=elsewhere, cwd=root) == root.resolve()
    assert script.upstream_root(script_dir=elsewhere, cwd=elsewhere) is None


# ---------------------------------------------------------------------------------------------
# The script as users run it: a subprocess, in an upstream checkout and standalone
# ---------------------------------------------------------------------------------------------


def _run_script(
    script_path: Path, cwd: Path, *args: str, python_flags: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run(
        [sys.executable, *python_flags, str(script_path), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _fake_upstream(root: Path) -> Path:
    """A tpu_graphs checkout with our models.py swapped in and the script copied to its root."""
    tiles = root / "tpu_graphs" / "baselines" / "tiles"
    tiles.mkdir(parents=True)
    shutil.copy(REPO / "models.py", tiles / "models.py")
    shutil.copy(SCRIPT, root / SCRIPT.name)
    return root


def _train_subset(root: Path, subset: Path) -> Path:
    """A copy of the tree `root` with only its first 5 train kernels (like --toy_data)."""
    shutil.copytree(root, subset)
    for path in sorted((subset / "train").glob("*.npz"))[5:]:
        path.unlink()
    return subset


@pytest.fixture(scope="module")
def scripts(short_test_root, tmp_path_factory) -> dict[str, Any]:
    """The script as users run it: a tiny MLP that `tpu-tiles train` trained on 5 train
    kernels of a copy of `short_test_root` ranks all of that copy's test kernels, from an
    upstream checkout, from one whose models.py lacks MLP, and standalone with a --cache_dir."""
    tmp = tmp_path_factory.mktemp("scripts")
    out, data_root = tmp / "out", short_test_root
    subset = _train_subset(data_root, tmp / "subset")
    if cli.main(tiny_cli(subset, out)) != 0:
        raise RuntimeError("training failed")
    (model_dir,) = out.glob("model_*")
    model, data = ["--dir", str(model_dir)], ["--data_root", str(data_root)]
    checkout = _fake_upstream(tmp / "checkout")
    in_root = _run_script(
        checkout / SCRIPT.name, checkout, *model, *data, "--cache_dir", "", "--no_progress"
    )
    no_mlp = _fake_upstream(tmp / "no_mlp")
    models = no_mlp / "tpu_graphs/baselines/tiles/models.py"
    models.write_text(models.read_text() + "\ndel MLP\n")
    without = _run_script(
        no_mlp / SCRIPT.name,
        no_mlp,
        f"--dir={model_dir}",
        f"--data_root={data_root}",
        "--cache_dir=",
    )
    alone = tmp / "standalone"
    alone.mkdir()
    cache = ["--cache_dir", str(alone / "cache")]
    standalone = _run_script(SCRIPT, alone, *model, *data, *cache, "--no_progress")
    return dict(
        model_dir=model_dir,
        data_root=data_root,
        subset=subset,
        in_root=(in_root, checkout),
        without_mlp=(without, models),
        standalone=(standalone, alone),
    )


def _expected_from(job: dict[str, Any]) -> dict[str, list[int]]:
    """The `scripts` training's test predictions, as the script writes them."""
    run_info = json.loads(gzip.decompress(run_file.run_file_for(job["model_dir"]).read_bytes()))
    return _expected_top5(run_info, _config_counts(job["data_root"]))


@pytest.mark.slow
def test_model_from_train_subset_predicts_on_full_data(scripts):
    """Trained on 5 train kernels (like --toy_data): its stored statistics make it reload."""
    data_root, subset = scripts["data_root"], scripts["subset"]
    full_stats = data.load_dataset(data_root, min_train_configs=4, progress=False).stats
    sub_stats = data.load_dataset(subset, min_train_configs=4, progress=False).stats
    # Otherwise the test would not show anything: the course procedure would fit other widths.
    assert (sub_stats.node_width, sub_stats.config_width, sub_stats.num_ops) != (
        full_stats.node_width,
        full_stats.config_width,
        full_stats.num_ops,
    )
    proc, alone = scripts["standalone"]  # the package's models.py, as in-process
    assert (proc.returncode, proc.stderr) == (0, "")
    out = alone / "predictions_model_output.csv"
    assert kaggle.read_predictions_csv(out) == _expected_from(scripts)


@pytest.mark.slow
def test_script_in_upstream_root(scripts):
    proc, checkout = scripts["in_root"]
    assert proc.returncode == 0, proc.stderr
    models = checkout.resolve() / "tpu_graphs/baselines/tiles/models.py"
    assert f"models from {models}" in proc.stdout
    out = checkout / "predictions_model_output.csv"
    assert kaggle.read_predictions_csv(out) == _expected_from(scripts)


@pytest.mark.slow
def test_script_uses_the_checkouts_models_py(scripts):
    """The checkout's models.py, not ours, defines the classes: one without MLP fails."""
    proc, models = scripts["without_mlp"]
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"tiles_gen_predictions_csv.py: error: unknown model 'MLP' in {models.resolve()}"
        )
    )


@pytest.mark.slow
def test_script_standalone(scripts):
    proc, alone = scripts["standalone"]
    assert proc.returncode == 0, proc.stderr
    assert "tpu_tiles_models' models.py" in proc.stdout
    assert any((alone / "cache").iterdir())  # --cache_dir is honoured
    assert kaggle.read_predictions_csv(alone / "predictions_model_output.csv") == (
        _expected_from(scripts)
    )


@pytest.mark.slow
def test_script_without_the_package(tmp_path):
    """-S hides site-packages (and the editable install); the copy sits away from the repo."""
    copy = tmp_path / SCRIPT.name
    shutil.copy(SCRIPT, copy)
    proc = _run_script(copy, tmp_path, "--dir", "model_x", python_flags=("-S",))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "tpu_tiles_models package is not installed" in proc.stderr
    assert "pip install" in proc.stderr and "tpu-tiles-models" in proc.stderr
    assert not (tmp_path / "predictions_model_output.csv").exists()


def _forged_copy(result: export.TrainResult, out_dir: Path, args_kwargs: dict, recorded: dict):
    """A copy of the run whose args' model_kwargs_json is `args_kwargs` (renamed to its hash)
    and whose recorded keywords (outside the hash) are updated with `recorded`."""
    run_info = _run_info(result)
    run_info["args"]["model_kwargs_json"] = json.dumps(args_kwargs)
    run_info[run_file.EXTRAS_KEY][run_file.MODEL_KWARGS_KEY].update(recorded)
    out_dir.mkdir()
    model_dir = out_dir / f"model_{run_file.run_info_hash(run_info)}"
    shutil.copytree(result.model_dir, model_dir)
    return model_dir, write_run(out_dir, run_info)


@pytest.mark.parametrize("command", ["predict", "evaluate"])
@pytest.mark.parametrize(
    "args_kwargs, recorded",
    [
        ({"hidden_dim": 10**7, "mlp_layers": 1}, {}),  # in the hash: a hand-made run
        ({"mlp_layers": 1}, {"hidden_dim": 10**7}),  # recorded only: `bundle` refuses it
    ],
)
def test_a_run_file_whose_sizes_are_not_its_models_fails_before_building(
    command, args_kwargs, recorded, mlp_run, short_test_root, tmp_path, capsys
):
    """A run file whose keywords say 10^7 wide beside a model saved 8 wide: before, `predict`
    allocated for 45 s and then ran out of memory; now every command that rebuilds a run
    refuses it as the first variable is declared."""
    model_dir, forged = _forged_copy(mlp_run, tmp_path / "out", args_kwargs, recorded)
    argv = {
        "predict": ["predict", "--dir", str(model_dir), "--out", str(tmp_path / "p.csv")],
        "evaluate": ["evaluate", "--dirs", str(model_dir)],
    }[command]
    code = cli.main([*argv, "--data_root", str(short_test_root), "--cache_dir=", "--no_progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert re.fullmatch(
        re.escape(f"tpu-tiles {command}: error: {forged}: its model keywords {{")
        + '.*"hidden_dim": 10000000, .*'
        + re.escape("} build MLP with a variable of shape [")
        + r"\d+"
        + re.escape(
            f", 10000000], larger than any saved in {model_dir} (largest [128, 32]): the run "
            "file or the data's feature widths are not the ones it was trained with; copy the "
            "model_<hash> folder and its run file again from the training --out_dir"
        ),
        err.strip(),
    ), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
