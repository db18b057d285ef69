"""Faults a new user's fuzzing found, each stopped at its cause in one line and exit status 2:
NaN models and runs, flags that make no sense (non-finite, duplicated, empty), a `sys.exit()`
in a models.py, an unusable saved_model.pb, a message offering a flag its command lacks, and
unknown flags; and a read-only cache, which only warns."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, tiny_cli

from tpu_tiles_models import cli, formats, kaggle

ROFS = "(Read-only file system)"
NAN_FIX = (
    "its weights or its run file's feature statistics are not finite (a run whose loss "
    "diverged?); train it again"
)


def _one_line(argv: list[str], capsys) -> str:
    """Runs `tpu-tiles <argv>`; asserts exit 2 and one line on stderr, and returns it."""
    code = cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    return err


def _copy_run(model_dir: Path, run_file: Path, into: Path) -> Path:
    """A copy of a trained run (model dir and run file) in `into`; returns its model dir."""
    into.mkdir(parents=True, exist_ok=True)
    shutil.copytree(model_dir, into / model_dir.name)
    shutil.copy(run_file, into / run_file.name)
    return into / model_dir.name


def _hand_in(model_dir: Path, into: Path) -> Path:
    """A hand-in folder made by hand (as `bundle` would, without its checks): our models.py,
    the model dir and its run file."""
    into.mkdir()
    shutil.copy(REPO / "models.py", into / "models.py")
    shutil.copytree(model_dir, into / model_dir.name)
    run_file = model_dir.parent / formats.run_file_name(formats.run_hash(model_dir.name))
    shutil.copy(run_file, into / run_file.name)
    return into


def _models_file(folder: Path, body: str) -> Path:
    """A models.py that subclasses our models (loaded by path) with `body` after it."""
    path = folder / "their_models.py"
    path.write_text(
        "import importlib.util\nimport sys\n\n"
        "_spec = importlib.util.spec_from_file_location(\n"
        f'    "base_of_theirs", r"{REPO / "models.py"}"\n'
        ")\n"
        "_ours = importlib.util.module_from_spec(_spec)\n"
        "_spec.loader.exec_module(_ours)\n\n\n" + body
    )
    return path


# -- a NaN model never passes as a model ------------------------------------------------------


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--lr=inf", "--lr must be positive and finite, got inf"),
        ("--lr=nan", "--lr must be positive and finite, got nan"),
        ("--clip_norm=inf", "--clip_norm must be positive and finite, got inf"),
        ("--clip_norm=1e309", "--clip_norm must be positive and finite, got inf"),
        (
            "--losses=ListMLELoss:nan",
            "--losses: weight of 'ListMLELoss' must be a finite number of at least 0, got 'nan' "
            "in 'ListMLELoss:nan'",
        ),
        (
            "--losses=ListMLELoss:1,MSE:inf",
            "--losses: weight of 'MSE' must be a finite number of at least 0, got 'inf' in "
            "'ListMLELoss:1,MSE:inf'",
        ),
        (
            "--losses=ListMLELoss:1e309",
            "--losses: weight of 'ListMLELoss' must be a finite number of at least 0, got "
            "'1e309' in 'ListMLELoss:1e309'",
        ),
        (
            "--losses=ListMLELoss:1e308,MSE:1e308",
            "--losses: the weights in 'ListMLELoss:1e308,MSE:1e308' sum past a float's range; "
            "scale them",
        ),
    ],
)
def test_non_finite_training_flags_are_flag_errors(flag, message, tmp_path, capsys):
    # A data root that does not exist: the flag is refused before any data is looked for.
    err = _one_line(tiny_cli(tmp_path / "no_data", tmp_path / "out", flag), capsys)
    assert err == f"tpu-tiles train: error: {message}"
    assert list(tmp_path.iterdir()) == []


def test_a_diverged_loss_stops_training_in_one_line(synth_root, tmp_path, capsys):
    """A model whose loss is NaN from the first step: before, the run was written with a
    validation error far better than a real model's (NaN scores keep file order, and
    config 0 is the compiler's default)."""
    models = _models_file(
        tmp_path,
        "class NaNMLP(_ours.MLP):\n"
        "    def head(self, h):\n"
        '        return super().head(h) * float("nan")\n',
    )
    out = tmp_path / "out"
    argv = [*tiny_cli(synth_root, out), "--model=NaNMLP", f"--models={models}"]
    err = _one_line(argv, capsys)
    assert err == (
        "tpu-tiles train: error: training loss is nan at epoch 0: the model diverged and its "
        "weights are lost; lower --lr or --clip_norm, or check --losses and --model_kwargs_json"
    )
    assert not out.exists()


@pytest.fixture(scope="module")
def nan_stats_run(mlp_run, tmp_path_factory) -> Path:
    """A copy of `mlp_run` whose run file's feature statistics are NaN (its model dir)."""
    model_dir = _copy_run(mlp_run.model_dir, mlp_run.run_file, tmp_path_factory.mktemp("nan_stats"))
    run_file = model_dir.parent / mlp_run.run_file.name
    info = json.loads(gzip.decompress(run_file.read_bytes()))
    stats = info["tpu_tiles"]["feature_stats"]
    stats["node_min"] = [float("nan")] * len(stats["node_min"])
    run_file.write_bytes(gzip.compress(json.dumps(info).encode()))  # same args: same name
    return model_dir


@pytest.fixture(scope="module")
def nan_weights_run(mlp_run, short_test_root, tmp_path_factory) -> Path:
    """A copy of `mlp_run` whose saved weights are all NaN (as a run that diverged left them
    before training stopped it), saved as training saves (its model dir)."""
    from tpu_tiles_models import data, export, runs

    run = runs.TrainedRun.open(mlp_run.model_dir)
    model, ds = run.load(short_test_root, split="valid", progress=False)
    configs = run.args["configs"]
    rng = np.random.default_rng(0)
    model(data.kernel_graph(ds.valid, 0, ds.stats, num_configs=configs, rng=rng))  # to save it
    for v in model.trainable_variables:
        v.assign(np.full(v.shape, np.nan, v.dtype.as_numpy_dtype))
    out = tmp_path_factory.mktemp("nan_weights")
    export.save_model(model, out / run.model_dir.name)
    shutil.copy(run.run_file, out / run.run_file.name)
    return out / run.model_dir.name


def _reader(command: str, model_dir: Path, other: Path, root: Path, tmp: Path) -> list[str]:
    """`tpu-tiles <command>` argv reading `model_dir` (a hand-in of it for `check`; `other`
    is an ensemble's first member), on `root`, writing into `tmp`."""
    data = ["--data_root", str(root), "--cache_dir", "", "--no_progress"]
    if command == "predict":
        return ["predict", "--dir", str(model_dir), "--out", str(tmp / "p.csv"), *data]
    if command == "evaluate":
        return ["evaluate", "--dirs", str(model_dir), *data]
    if command == "check":
        return ["check", str(_hand_in(model_dir, tmp / "hand_in")), *data]
    if command == "ensemble":
        dirs = f"{other},{model_dir}"
        return ["ensemble", "--dirs", dirs, "--out_dir", str(tmp / "e"), *data]
    assert command == "bundle"
    return ["bundle", "--dir", str(model_dir), "--out", str(tmp / "b")]


@pytest.mark.parametrize("command", ["predict", "evaluate", "check", "ensemble", "bundle"])
def test_a_run_file_with_nan_statistics_is_refused(
    command, nan_stats_run, mlp_run, short_test_root, tmp_path, capsys
):
    argv = _reader(command, nan_stats_run, mlp_run.model_dir, short_test_root, tmp_path)
    folder = tmp_path / "hand_in" if command == "check" else nan_stats_run.parent
    run_file = folder / mlp_run.run_file.name
    err = _one_line(argv, capsys)
    assert err.endswith(
        f"{run_file}: feature statistics hold NaN or infinite minima or maxima; copy it again "
        "from the training --out_dir, or train again"
    ), err
    assert err.startswith(f"tpu-tiles {command}: error: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == (["hand_in"] if command == "check" else [])


@pytest.mark.parametrize("command", ["predict", "evaluate", "check", "ensemble"])
def test_a_model_that_scores_nan_is_refused(
    command, nan_weights_run, mlp_run, short_test_root, tmp_path, capsys
):
    """Its rankings would be 0;1;2;... (file order) and pass `check`'s comparison with the
    same rankings stored at training; a `rank` ensemble would hide it among the others."""
    argv = _reader(command, nan_weights_run, mlp_run.model_dir, short_test_root, tmp_path)
    err = _one_line(argv, capsys)
    who = nan_weights_run.name if command == "check" else str(nan_weights_run)
    assert f"{who} scores " in err and " configs of kernel " in err
    assert err.endswith(f" as nan, so it cannot rank them; {NAN_FIX}"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == (["hand_in"] if command == "check" else [])


def test_check_reports_a_nan_model_in_its_table(nan_weights_run, short_test_root, tmp_path):
    from tpu_tiles_models import bundle

    hand_in = _hand_in(nan_weights_run, tmp_path / "hand_in")
    report = bundle.check_bundle(hand_in, short_test_root, progress=False)
    rows = {r.name: (r.status, r.detail) for r in report.rows}
    assert rows["variables copy"][0] == bundle.PASS
    assert rows["predictions match"][0] == bundle.FAIL
    assert rows["predictions match"][1].startswith(f"{nan_weights_run.name} scores ")
    assert report.table().splitlines()[-1] == "FAILED (1 check(s))"


# -- a sys.exit() in a models.py is the file's fault ---------------------------------------


EXITS = {
    "sys.exit()": "it calls sys.exit()",
    "sys.exit(3)": "it calls sys.exit(3)",
    "raise SystemExit('bye')": "it calls sys.exit('bye')",
}


@pytest.mark.parametrize("command", ["predict", "evaluate", "bundle", "train"])
@pytest.mark.parametrize("statement", sorted(EXITS))
def test_sys_exit_on_import_of_a_models_file(
    command, statement, mlp_run, short_test_root, tmp_path, capsys
):
    models = tmp_path / "models.py"
    models.write_text(f"import sys\n{statement}\n")
    model = str(mlp_run.model_dir)
    root = str(short_test_root)
    argv = {
        "predict": ["predict", "--dir", model, "--data_root", root, "--out"]
        + [str(tmp_path / "p.csv")],
        "evaluate": ["evaluate", "--dirs", model, "--data_root", root],
        "bundle": ["bundle", "--dir", model, "--out", str(tmp_path / "b")],
        "train": tiny_cli(short_test_root, tmp_path / "out"),
    }[command] + [f"--models={models}"]
    err = _one_line(argv, capsys)
    what = f"{models}: cannot import it ({EXITS[statement]}); fix the file or pass another --models"
    assert err.startswith(f"tpu-tiles {command}: error: ") and err.endswith(what), err
    assert [p.name for p in tmp_path.iterdir()] == ["models.py"]


def test_check_of_a_hand_in_whose_models_file_exits(mlp_run, tmp_path, capsys):
    """Before, `check` exited 0 with no output: the hand-in seemed to pass."""
    hand_in = _hand_in(mlp_run.model_dir, tmp_path / "hand_in")
    with open(hand_in / "models.py", "a") as f:
        f.write("\nimport sys\nsys.exit()\n")
    code = cli.main(["check", str(hand_in), "--data_root", str(tmp_path / "none")])
    out, err = capsys.readouterr()
    what = f"{hand_in / 'models.py'}: cannot import it (it calls sys.exit()); fix the file"
    assert code == 2 and f"FAIL  class found    {what}" in out
    assert err.strip() == f"tpu-tiles check: error: {hand_in} failed its check: class found: {what}"


def _predict_or_train(command, mlp_run, data_root, tmp_path, models) -> list[str]:
    """`predict` of mlp_run or a tiny `train`, with `--models=models`."""
    argv = {
        "predict": ["predict", "--dir", str(mlp_run.model_dir), "--data_root"]
        + [str(data_root), "--out", str(tmp_path / "p.csv"), "--no_progress"],
        "train": tiny_cli(data_root, tmp_path / "out"),
    }[command]
    return argv + [f"--models={models}"]


@pytest.mark.parametrize("command", ["predict", "train"])
def test_sys_exit_when_a_model_is_built(command, mlp_run, short_test_root, tmp_path, capsys):
    models = _models_file(
        tmp_path,
        "class MLP(_ours.MLP):\n"
        "    def __init__(self, *args, **kwargs):\n"
        '        sys.exit("not today")\n',
    )
    argv = _predict_or_train(command, mlp_run, short_test_root, tmp_path, models)
    err = _one_line(argv, capsys)
    assert err == (
        f"tpu-tiles {command}: error: {models}: building MLP, it calls sys.exit('not today'); "
        "fix the file"
    )
    assert [p.name for p in tmp_path.iterdir()] == [models.name]


@pytest.mark.parametrize("command", ["predict", "train"])
def test_sys_exit_when_a_model_scores(command, mlp_run, short_test_root, tmp_path, capsys):
    """Anywhere else in a models.py (here `forward`), a `sys.exit()` is one line naming the
    file and line; before, `predict` exited 4 with no word."""
    models = _models_file(
        tmp_path,
        "class MLP(_ours.MLP):\n    def forward(self, graph, num_configs):\n        sys.exit(4)\n",
    )
    line = models.read_text().splitlines().index("        sys.exit(4)") + 1
    argv = _predict_or_train(command, mlp_run, short_test_root, tmp_path, models)
    err = _one_line(argv, capsys)
    assert err == (
        f"tpu-tiles {command}: error: {models}, line {line}: it calls sys.exit(4); fix the file"
    )
    assert [p.name for p in tmp_path.iterdir()] == [models.name]


def test_help_still_exits_0(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["train", "--help"])
    assert stop.value.code == 0 and "--losses" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["predict", "train"])
def test_an_error_in_a_models_files_forward_is_one_line(
    command, mlp_run, short_test_root, tmp_path, capsys
):
    """Any exception a user's models.py raises while it runs names its file and line, as a
    sys.exit() there does; before, a traceback."""
    models = _models_file(
        tmp_path,
        "class MLP(_ours.MLP):\n    def forward(self, graph, num_configs):\n"
        '        raise RuntimeError("not like this")\n',
    )
    line = len(models.read_text().splitlines())
    argv = _predict_or_train(command, mlp_run, short_test_root, tmp_path, models)
    err = _one_line(argv, capsys)
    assert err == (
        f"tpu-tiles {command}: error: {models}, line {line}: RuntimeError: not like this; "
        "fix the file"
    )
    assert [p.name for p in tmp_path.iterdir()] == [models.name]


# -- a models.py's side effects: a global dtype policy, a thread (issue 48) ------------------

MIXED = 'import tensorflow as tf\ntf.keras.mixed_precision.set_global_policy("mixed_float16")\n'


@pytest.mark.parametrize("command", ["predict", "train"])
@pytest.mark.parametrize("when", ["importing it", "building MLP"])
def test_a_models_file_that_sets_mixed_float16_is_one_line(
    when, command, mlp_run, short_test_root, tmp_path, capsys
):
    """Before, `predict` was a traceback from deep in scoring (`check`: one line). The policy
    is put back, so nothing after it (a notebook's next cell) computes in float16."""
    import tensorflow as tf

    body = {
        "importing it": MIXED + "MLP = _ours.MLP\n",
        "building MLP": "class MLP(_ours.MLP):\n    def __init__(self, *args, **kwargs):\n"
        + "".join(f"        {line}\n" for line in MIXED.splitlines())
        + "        super().__init__(*args, **kwargs)\n",
    }[when]
    models = _models_file(tmp_path, body)
    argv = _predict_or_train(command, mlp_run, short_test_root, tmp_path, models)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    other = " or pass another --models" if when == "importing it" else ""
    assert "Traceback" not in err and err.splitlines()[-1] == (
        f"tpu-tiles {command}: error: {models}: {when} sets Keras's global dtype policy to "
        "mixed_float16 (every model, ours too, would then compute in it); models are built and "
        "ranked in float32, as the course's script does: remove the set_global_policy (or "
        f"set_floatx) call{other}"
    )
    assert tf.keras.mixed_precision.global_policy().name == "float32"
    assert [p.name for p in tmp_path.iterdir()] == [models.name]


def test_check_of_a_hand_in_that_sets_float64_fails_in_its_table(mlp_run, tmp_path, capsys):
    hand_in = _hand_in(mlp_run.model_dir, tmp_path / "hand_in")
    with open(hand_in / "models.py", "a") as f:
        f.write('\ntf.keras.backend.set_floatx("float64")\n')
    assert cli.main(["check", str(hand_in), "--data_root", str(tmp_path / "none")]) == 2
    (row,) = [r for r in capsys.readouterr().out.splitlines() if "class found" in r]
    assert row.split() == ["FAIL", "class", "found"] + (
        f"{hand_in / 'models.py'}: importing it sets Keras's global dtype policy to float64 "
        "(every model, ours too, would then compute in it); models are built and ranked in "
        "float32, as the course's script does: remove the set_global_policy (or set_floatx) call"
    ).split(" ")
    import tensorflow as tf

    assert tf.keras.backend.floatx() == "float32"


THREADS = {
    "importing it": "threading.Thread(target=time.sleep, args=(3600,), name='spin').start()\n"
    "MLP = _ours.MLP\n",
    "in forward": "class MLP(_ours.MLP):\n    def forward(self, graph, num_configs):\n"
    "        if not _started:\n"
    "            _started.append(threading.Thread(target=time.sleep, args=(3600,), name='spin'))\n"
    "            _started[0].start()\n"
    "        return super().forward(graph, num_configs)\n",
}


@pytest.mark.slow
@pytest.mark.parametrize("when", sorted(THREADS))
def test_a_thread_a_models_file_starts_does_not_keep_predict_alive(
    when, mlp_run, short_test_root, tmp_path
):
    """Before, `predict` printed "wrote ..." and never exited. (The timeout is a guard
    against that hang, not a timing.)"""
    models = _models_file(
        tmp_path, "import threading\nimport time\n_started = []\n" + THREADS[when]
    )
    out = tmp_path / "p.csv"
    argv = _predict_or_train("predict", mlp_run, short_test_root, tmp_path, models)
    argv[argv.index("--out") + 1] = str(out)
    done = subprocess.run(
        [sys.executable, "-m", "tpu_tiles_models.cli", *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert (done.returncode, done.stdout) == (0, f"wrote {out} (6 kernels)\n")
    assert done.stderr == (
        "tpu-tiles predict: warning: its work done, it stopped 1 thread(s) that this package "
        "did not start (spin; a models.py's?), which would have kept it running\n"
    )
    assert len(kaggle.read_predictions_csv(out)) == 6


# -- degenerate flag values ----------------------------------------------------------------


@pytest.mark.parametrize(
    "flag, message",
    [
        (
            "--losses=ListMLELoss:0",
            "--losses: the weights in 'ListMLELoss:0' sum to 0; give at least one loss a weight "
            "above 0, e.g. ListMLELoss:1",
        ),
        (
            "--losses=ListMLELoss:0,MSE:0.0",
            "--losses: the weights in 'ListMLELoss:0,MSE:0.0' sum to 0; give at least one loss a "
            "weight above 0, e.g. ListMLELoss:1",
        ),
        (
            "--losses=ListMLELoss:-1",
            "--losses: weight of 'ListMLELoss' must be a finite number of at least 0, got '-1' "
            "in 'ListMLELoss:-1'",
        ),
        (
            "--losses=ListMLELoss:2,MSE:-1",
            "--losses: weight of 'MSE' must be a finite number of at least 0, got '-1' in "
            "'ListMLELoss:2,MSE:-1'",
        ),
        (
            "--seeds=0,1",
            "--seeds was removed (the benchmark suite rejected it: "
            "benchmarks/results/ensemble_bench.md); leave it out",
        ),
        ("--seed=-1", "--seed must be in 0..4294967295, got -1"),
    ],
)
def test_degenerate_training_flags_are_flag_errors(flag, message, tmp_path, capsys):
    err = _one_line(tiny_cli(tmp_path / "no_data", tmp_path / "out", flag), capsys)
    assert err == f"tpu-tiles train: error: {message}"
    assert list(tmp_path.iterdir()) == []


def test_a_zero_weight_beside_a_positive_one_is_fine():
    from tpu_tiles_models.train_args import TrainArgs, loss_weights

    assert loss_weights("ListMLELoss:1,MSE:0") == [("ListMLELoss", 1.0), ("MSE", 0.0)]
    assert TrainArgs(losses="ListMLELoss:1,MSE:0").losses == "ListMLELoss:1,MSE:0"


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1"])
def test_inspect_tail_sigmas_must_be_a_finite_positive_number(value, synth_root, capsys):
    err = _one_line(["inspect", str(synth_root), f"--tail_sigmas={value}", "--no_progress"], capsys)
    shown = str(float(value))
    assert (
        err
        == f"tpu-tiles inspect: error: --tail_sigmas must be a finite number above 0, got {shown}"
    )


# -- a cache that cannot be written only warns -----------------------------------------------


@pytest.mark.slow
def test_a_read_only_default_cache_warns_and_training_goes_on(
    synth_root, tmp_path, read_only, monkeypatch, capsys
):
    """README: a cache that cannot be written is a one-line warning, and loading goes on
    (as `predict` already did; `train` refused it)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "matplotlib"))
    read_only(home)
    out = tmp_path / "out"
    argv = [a for a in tiny_cli(synth_root, out) if a != "--cache_dir="]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err and all(
        line.startswith(f"tpu-tiles train: warning: cannot create the folder {home}/")
        and line.endswith(
            f"{ROFS}; pass another --cache_dir on a disk you can write; loaded without caching"
        )
        for line in err
    ), err
    assert len(list(out.glob("model_*"))) == len(list(out.glob("run_*.jsonz"))) == 1
    assert list(home.iterdir()) == []


# -- a bad data file's message offers only what the command has -----------------------------


def _spoil_one(root: Path, split: str) -> Path:
    bad = sorted((root / split).glob("*.npz"))[0]
    bad.write_bytes(bad.read_bytes()[:100])
    return bad


@pytest.mark.parametrize("command", ["evaluate", "train", "check"])
def test_a_bad_file_message_offers_only_the_commands_own_flags(
    command, mlp_run, short_test_root, tmp_path, capsys
):
    root = tmp_path / "data"
    shutil.copytree(short_test_root, root)
    split = {"evaluate": "valid", "train": "train", "check": "test"}[command]
    bad = _spoil_one(root, split)
    argv = {
        "evaluate": ["evaluate", "--dirs", str(mlp_run.model_dir), "--data_root", str(root)],
        "train": tiny_cli(root, tmp_path / "out"),
        "check": ["check", str(_hand_in(mlp_run.model_dir, tmp_path / "hand_in"))]
        + ["--data_root", str(root)],
    }[command] + ["--cache_dir=", "--no_progress"]
    err = _one_line(argv, capsys)
    assert err.startswith(f"tpu-tiles {command}: error: {bad}: not a readable npz file")
    hint = " (or train with --skip_bad)" if command == "train" else ""
    assert err.endswith(f"re-download it or delete it{hint}") or err.endswith(
        f"re-download the file or delete it{hint}"
    ), err
    assert ("--skip_bad" in err) == (command == "train")


# -- numbers are checked in float32, the precision models use ---------------------------------


def _change_npz(path: Path, **changes) -> None:
    """Rewrites the npz `path` with `changes[key](its array)` for each key (float64 where
    the change computes in it: the file keeps a float64 that float32 cannot hold)."""
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    np.savez(path, **{k: changes[k](v) if k in changes else v for k, v in arrays.items()})


def _one_cell(value: float):
    return lambda a: np.where(np.arange(a.size).reshape(a.shape) == 3, value, a.astype(float))


RUNTIMES_ZERO = (
    "has zeros in float32, the precision models use; only the test split may lack runtimes"
)
NOT_FINITE = "has NaN or infinite values in float32, the precision models use"
BEYOND_FLOAT32 = {
    # evaluate: before, every cell of its table was nan (runtime / normalizer 0 / 0)
    "tiny_runtimes": ("valid", dict(config_runtime=lambda a: a * 1e-320), "config_runtime"),
    # train: before, "training loss is nan at epoch 0 ... lower --lr", the wrong cause
    "huge_feature": ("train", dict(node_feat=_one_cell(1e300)), "node_feat"),
    # predict: before, the model was blamed for scoring NaN
    "huge_config": ("test", dict(config_feat=_one_cell(-1e300)), "config_feat"),
    # each float32 alone, their ratio (the label) is not: 1e-60 is 0 in float32
    "tiny_ratio": (
        "valid",
        dict(config_runtime=lambda a: a * 1e-30, config_runtime_normalizers=lambda a: a * 1e30),
        "config_runtime / config_runtime_normalizers",
    ),
}


@pytest.mark.parametrize("case", sorted(BEYOND_FLOAT32))
def test_numbers_beyond_float32_are_refused_naming_the_file_and_member(
    case, mlp_run, short_test_root, tmp_path, capsys
):
    split, changes, member = BEYOND_FLOAT32[case]
    root = tmp_path / "data"
    shutil.copytree(short_test_root, root)
    bad = sorted((root / split).glob("*.npz"))[0]
    _change_npz(bad, **changes)
    out = tmp_path / "out"
    data = ["--cache_dir=", "--no_progress"]
    command, argv = {
        "train": ("train", tiny_cli(root, out)),
        "valid": ("evaluate", ["evaluate", "--dirs", str(mlp_run.model_dir), "--json", str(out)]),
        "test": ("predict", ["predict", "--dir", str(mlp_run.model_dir), "--out", str(out)]),
    }[split]
    if command != "train":
        argv += ["--data_root", str(root)]
    err = _one_line(argv + data, capsys)
    what = RUNTIMES_ZERO if "runtime" in member else NOT_FINITE
    hint = " (or train with --skip_bad)" if command == "train" else ""
    assert err == (
        f"tpu-tiles {command}: error: {bad}: {member} {what}; re-download the file or delete "
        f"it{hint}"
    )
    assert not out.exists()


def test_only_the_known_members_of_an_npz_file_are_read(synth_root, tmp_path, capsys):
    """A member of another name is never decompressed nor parsed: an object array (before:
    the whole file refused) and a member whose bytes are damaged (any read would fail its
    CRC; a 1.2 GB one was a MemoryError) leave the kernels as they were."""
    root = tmp_path / "data"
    shutil.copytree(synth_root, root)
    assert (
        cli.main(["inspect", str(root), "--no_progress", "--json", str(tmp_path / "before.json")])
        == 0
    )
    for path in sorted((root / "valid").glob("*.npz"))[:2]:
        with np.load(path) as npz:
            arrays = {k: npz[k] for k in npz.files}
        notes = np.array([{"by": "hand"}], dtype=object)
        np.savez(path, **arrays, notes=notes, blob=np.zeros(4096, np.uint8))
        raw = bytearray(path.read_bytes())
        at = raw.index(b"blob.npy") + 200  # inside its stored (uncompressed) bytes
        raw[at : at + 8] = b"damaged!"
        path.write_bytes(bytes(raw))
    assert (
        cli.main(["inspect", str(root), "--no_progress", "--json", str(tmp_path / "after.json")])
        == 0
    )
    before, after = ((tmp_path / f"{n}.json").read_text() for n in ("before", "after"))
    assert json.loads(after) == json.loads(before)
    assert capsys.readouterr().err == ""


def _non_utf8(folder: Path) -> Path:
    """A copy of one kernel of `folder` under a name that is not UTF-8."""
    path = Path(os.fsdecode(os.path.join(os.fsencode(folder), b"\xff\xfekernel.npz")))
    shutil.copy(sorted(folder.glob("*.npz"))[0], path)
    return path


def _dangling(folder: Path) -> Path:
    """A link to a kernel file that is not there (moved away)."""
    (folder / "gone.npz").symlink_to(folder / "moved.npz")
    return folder / "gone.npz"


NAMES = {  # what a split's listing holds -> what the one line says of it
    "not_utf8": (_non_utf8, "{shown}: its path is not UTF-8, which no reader opens; rename it"),
    "dangling_link": (
        _dangling,
        "{shown}: a link to {folder}/moved.npz, which does not exist; point it at the kernel's "
        "file or remove it",
    ),
}


@pytest.mark.parametrize("command", ["predict", "train"])
@pytest.mark.parametrize("case", sorted(NAMES))
def test_a_split_entry_no_reader_opens_is_one_line(
    case, command, mlp_run, short_test_root, tmp_path, capsys
):
    """Listed in one place for every command (`kernel_files.split_files`): before, a name
    not in UTF-8 was a UnicodeDecodeError, a dangling link a FileNotFoundError (predict)."""
    root = tmp_path / "data"
    shutil.copytree(short_test_root, root)
    make, message = NAMES[case]
    bad = make(root / "test")
    shown = os.fsencode(bad).decode(errors="backslashreplace")
    out = tmp_path / "out"
    cache = f"--cache_dir={tmp_path / 'cache'}"  # a dangling link once failed its stat there
    argv = {
        "predict": ["predict", "--dir", str(mlp_run.model_dir), "--out", str(out)]
        + ["--data_root", str(root), cache, "--no_progress"],
        "train": tiny_cli(root, out),
    }[command]
    err = _one_line(argv, capsys)
    assert err == f"tpu-tiles {command}: error: " + message.format(
        shown=shown, folder=root / "test"
    )
    assert not out.exists()


def test_a_data_root_whose_path_is_not_utf8_is_one_line(mlp_run, short_test_root, tmp_path, capsys):
    root = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"data\xff")))
    shutil.copytree(short_test_root, root)
    argv = ["predict", "--dir", str(mlp_run.model_dir), "--data_root", str(root)]
    err = _one_line(argv + ["--out", str(tmp_path / "p.csv"), "--cache_dir="], capsys)
    assert err == (
        f"tpu-tiles predict: error: {tmp_path}/data\\xff/test: its path is not UTF-8, which no "
        "reader opens; rename it"
    )


# -- an unusable saved_model.pb is found before any work -------------------------------------


SPOILS = {
    "empty": lambda pb: b"",
    "garbage": lambda pb: bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8)),
    "truncated": lambda pb: pb[: len(pb) // 2],
}


@pytest.mark.parametrize("command", ["predict", "bundle", "evaluate", "check"])
@pytest.mark.parametrize("spoil", sorted(SPOILS))
def test_an_unusable_saved_model_pb_is_one_line(
    spoil, command, mlp_run, short_test_root, tmp_path, capsys
):
    model_dir = _copy_run(mlp_run.model_dir, mlp_run.run_file, tmp_path / "run")
    pb = model_dir / formats.SAVED_MODEL_FILE
    pb.write_bytes(SPOILS[spoil](pb.read_bytes()))
    argv = _reader(command, model_dir, mlp_run.model_dir, short_test_root, tmp_path)
    err = _one_line(argv, capsys)
    if command == "check":
        pb = tmp_path / "hand_in" / model_dir.name / formats.SAVED_MODEL_FILE
    what = {"empty": "empty"}.get(spoil, "not a readable SavedModel (DecodeError: ")
    again = "copy the whole model_<hash> folder again from the training --out_dir"
    assert f"{pb}: {what}" in err and err.endswith(again), err
    assert sorted(p.name for p in tmp_path.iterdir()) == (
        ["hand_in", "run"] if command == "check" else ["run"]
    )


# -- an unknown flag names its subcommand ---------------------------------------------------


REQUIRED = {
    "synth": ["out"],
    "inspect": ["root"],
    "predict": ["--dir", "d"],
    "install": ["root"],
    "evaluate": ["--dirs", "d"],
    "bundle": ["--dir", "d", "--out", "o"],
    "check": ["d"],
    "ensemble": ["--dirs", "a,b"],
}


@pytest.mark.parametrize(
    "command",
    ["synth", "inspect", "predict", "kaggle", "install", "evaluate", "bundle"]
    + ["check", "ensemble", "demo", "models"],
)
def test_an_unknown_flag_is_one_line_naming_the_subcommand(command, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main([command, *REQUIRED.get(command, []), "--nope=1", "extra"])
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert err == (
        f"tpu-tiles {command}: error: unrecognized arguments: --nope=1 extra "
        f"(see tpu-tiles {command} --help)\n"
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["predict"], "tpu-tiles predict: error: the following arguments are required: --dir"),
        (
            ["predict", "--dir", "d", "--top_k", "x"],
            "tpu-tiles predict: error: argument --top_k: invalid int value: 'x'",
        ),
        (["nope"], "tpu-tiles: error: argument command: invalid choice: 'nope'"),
    ],
)
def test_every_argparse_error_is_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and err.startswith(message), err


def test_an_unknown_train_flag_names_train(tmp_path, capsys):
    err = _one_line(tiny_cli(tmp_path / "no_data", tmp_path / "out", "--nope=1"), capsys)
    assert err == (
        "tpu-tiles train: error: Unknown command line flag 'nope' (see tpu-tiles train --help)"
    )


@pytest.mark.parametrize(
    "model, kwargs",
    [("MLP", '{"hidden_activation": "l2_loss"}'), ("ResidualSAGE", '{"activation": "dropout"}')],
)
def test_a_function_that_is_no_activation_is_one_line(model, kwargs, synth_root, tmp_path, capsys):
    """Before: any `tf.nn` callable was taken for an activation, and `l2_loss` or `dropout`
    failed in a traceback once training traced the model."""
    argv = [a for a in tiny_cli(synth_root, tmp_path / "out") if "model" not in a]
    err = _one_line([*argv, f"--model={model}", f"--model_kwargs_json={kwargs}"], capsys)
    name, value = next(iter(json.loads(kwargs).items()))
    assert (
        err.startswith("tpu-tiles train: error: ")
        and f"{name}={value!r} is not an activation" in err
    )
    assert not (tmp_path / "out").exists()
