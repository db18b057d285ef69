"""Every fault a user can cause ends in one line, `tpu-tiles <cmd>: error: <what and the fix>`,
exit status 2, found before the work it would waste, naming the flag the user gave, with
nothing left behind (command by command)."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import file_mode, tiny_cli

from tpu_tiles_models import bundle, cli, data, export, registry, runs

ROFS = "(Read-only file system)"


def _one_line(argv: list[str], capsys) -> str:
    """Runs `tpu-tiles <argv>`; asserts exit 2 and one line on stderr, and returns it."""
    code = cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    return err


@pytest.fixture
def no_data(monkeypatch):
    """Reading any data fails the test: the fault must be found before."""

    def refuse(*args, **kwargs):
        raise AssertionError("data was read before the fault was found")

    monkeypatch.setattr(data, "load_dataset", refuse)


# -- train: outputs checked before any data is read ------------------------------------------


@pytest.mark.parametrize("where", ["out_dir", "a new out_dir", "results_csv"])
def test_train_on_a_read_only_disk(where, synth_root, tmp_path, read_only, no_data, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    read_only(ro)
    out, extra = ro, []
    if where == "a new out_dir":
        out = ro / "new" / "out"
    elif where == "results_csv":
        out = tmp_path / "out"
        extra = [f"--results_csv={ro / 'r.csv'}"]
    err = _one_line(tiny_cli(synth_root, out, *extra), capsys)
    flag, path = ("--results_csv", ro / "r.csv") if extra else ("--out_dir", out)
    assert err == (
        f"tpu-tiles train: error: cannot write {flag} {path} {ROFS}; pass another {flag} on a "
        "disk you can write"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["ro"] and not any(ro.iterdir())


def test_train_tensorboard_that_is_a_file(synth_root, tmp_path, no_data, capsys):
    board = tmp_path / "board"
    board.write_text("not a folder")
    err = _one_line(tiny_cli(synth_root, tmp_path / "out", f"--tensorboard={board}"), capsys)
    assert err == f"tpu-tiles train: error: --tensorboard {board} is a file; pass a folder"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["board"]


def test_train_name_too_long(synth_root, tmp_path, no_data, capsys):
    out = tmp_path / ("a" * 300)
    err = _one_line(tiny_cli(synth_root, out), capsys)
    assert err == (
        f"tpu-tiles train: error: cannot write --out_dir {out}: the name "
        "'aaaaaaaaaaaaaaaaaaaa...' is 300 bytes long, more than the 255 its file system "
        "allows; pass another --out_dir with shorter names"
    )


def test_train_models_file_with_a_syntax_error(synth_root, tmp_path, no_data, capsys):
    models = tmp_path / "models.py"
    models.write_text("import math\n\ndef broken(:\n    pass\n")
    err = _one_line(tiny_cli(synth_root, tmp_path / "out", f"--models={models}"), capsys)
    assert err == (
        f"tpu-tiles train: error: {models}, line 3: cannot import it (SyntaxError: invalid "
        "syntax); fix the file or pass another --models"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models.py"]


@pytest.mark.parametrize(
    "tf_config, problem",
    [
        ("{bad", "TF_CONFIG is not valid JSON (Expecting property name enclosed in double"),
        ('["worker"]', "TF_CONFIG needs a 'cluster' and this worker's 'task';"),
        (
            '{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 2}}',
            'TF_CONFIG\'s task {"type": "worker", "index": 2} is not one of its cluster\'s '
            "worker (2);",
        ),
    ],
)
def test_train_malformed_tf_config(
    tf_config, problem, synth_root, tmp_path, no_data, monkeypatch, capsys
):
    monkeypatch.setenv("TF_CONFIG", tf_config)
    err = _one_line(tiny_cli(synth_root, tmp_path / "out", "--strategy=multiworker"), capsys)
    assert err.startswith(f"tpu-tiles train: error: {problem}")
    assert err.endswith("(see docs/multi_gpu.md)") and not (tmp_path / "out").exists()


def test_train_model_too_big_is_refused_before_data(synth_root, tmp_path, no_data, capsys):
    argv = tiny_cli(synth_root, tmp_path / "out", '--model_kwargs_json={"hidden_dim": 99999999999}')
    err = _one_line(argv, capsys)
    assert err.startswith(
        'tpu-tiles train: error: --model_kwargs_json {"hidden_dim": 99999999999} makes MLP '
        "too big to train here: 1.96e+13 parameters or more, about 313.6 TB of memory for "
        "training (weights, gradients, Adam's moments), "
    )
    assert err.endswith(" available; choose smaller sizes") and not any(tmp_path.iterdir())


def test_model_size_limit_counts_every_variable():
    import tensorflow as tf

    with tf.Graph().as_default():
        with registry.parameter_limit("MLP", "{}", limit_bytes=4 * 4 * 100):
            tf.Variable(tf.zeros([10, 10]), shape=[10, 10])  # exactly 100 floats: fits
        with pytest.raises(registry.FlagError, match=r"makes MLP too big to train here: 101"):
            with registry.parameter_limit("MLP", "{}", limit_bytes=4 * 4 * 100):
                tf.Variable(tf.zeros([101]), shape=[101])


def test_failed_train_removes_the_parents_it_made(tmp_path, capsys):
    err = _one_line(tiny_cli(tmp_path / "no_data", tmp_path / "new" / "a" / "out"), capsys)
    assert "split directory not found" in err and not any(tmp_path.iterdir())


def test_configs_beyond_every_kernel_names_the_flag(synth_root, tmp_path, capsys):
    err = _one_line(tiny_cli(synth_root, tmp_path / "out", "--configs=5000"), capsys)
    assert err == (
        f"tpu-tiles train: error: {synth_root / 'train'}: no kernel has --configs=5000 configs "
        "(the most is 48); lower --configs, the configs sampled per kernel in training"
    )
    assert not (tmp_path / "out").exists()


def test_too_little_space_is_found_before_training(synth_root, tmp_path, monkeypatch, capsys):
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage._replace(free=1000))
    out = tmp_path / "out"
    code = cli.main(tiny_cli(synth_root, out))
    captured = capsys.readouterr()
    assert code == 2 and "epoch" not in captured.out
    assert captured.err.strip() == (
        f"tpu-tiles train: error: cannot write --out_dir {out}: about 16.8 MB needed, 1.0 KB "
        "free on its disk; free some space or pass another --out_dir"
    )
    assert not out.exists()


def test_disk_full_during_the_save(mlp_run, tmp_path, monkeypatch):
    import tensorflow as tf

    def full(self, *args, **kwargs):
        raise tf.errors.ResourceExhaustedError(None, None, "model/variables: No space left")

    monkeypatch.setattr(type(mlp_run.model), "save", full)
    with pytest.raises(export.files.WriteError) as err:
        export.save_model(mlp_run.model, tmp_path / "model_x")
    assert str(err.value).startswith(
        f"cannot write --out_dir {tmp_path}: saving model_x (about 16.8 MB) failed with "
    )
    assert str(err.value).endswith(
        "free on its disk (ResourceExhaustedError: model/variables: No space left); free some "
        "space or pass another --out_dir"
    )
    assert not any(tmp_path.iterdir())


# -- a model dir without or with truncated variables ----------------------------------------


def _damaged(run, tmp_path: Path, how: str) -> Path:
    """A copy of `run`'s model dir and run file, its variables removed or cut short."""
    model_dir = tmp_path / "damaged" / run.model_dir.name
    shutil.copytree(run.model_dir, model_dir)
    shutil.copy(run.run_file, model_dir.parent)
    if how == "without":
        shutil.rmtree(model_dir / "variables")
    else:
        shard = next((model_dir / "variables").glob("variables.data-*"))
        shard.write_bytes(shard.read_bytes()[:100])
    return model_dir


def _damage_message(model_dir: Path, how: str) -> str:
    fix = "copy the whole model_<hash> folder again from the training --out_dir"
    if how == "without":
        return f"{model_dir}: no variables/variables.index in it, so its weights are missing; {fix}"
    return (
        f"{model_dir}: its variables are truncated or corrupt (IndexError: Read less bytes than "
        f"requested); {fix}"
    )


@pytest.mark.parametrize("how", ["without", "truncated"])
@pytest.mark.parametrize("command", ["predict", "evaluate", "ensemble", "bundle", "script"])
def test_damaged_model_dir(command, how, mlp_seeds, short_test_root, tmp_path, capsys):
    run = mlp_seeds[0]
    model_dir = _damaged(run, tmp_path, how)
    root = str(short_test_root)
    argv = {
        "predict": ["predict", "--dir", str(model_dir), "--data_root", root, "--out"],
        "evaluate": ["evaluate", "--dirs", str(model_dir), "--data_root", root, "--json"],
        "ensemble": ["ensemble", "--dirs", f"{mlp_seeds[1].model_dir},{model_dir}", "--out_dir"],
        "bundle": ["bundle", "--dir", str(model_dir), "--out"],
        "script": ["--dir", str(model_dir), "--data_root", root, "--cache_dir", "", "--out"],
    }[command] + [str(tmp_path / "out")]
    if command == "ensemble":
        argv += ["--data_root", root]
    if command == "script":
        import tiles_gen_predictions_csv as script

        assert script.main(argv) == 2
        err = capsys.readouterr().err.strip()
        prog = "tiles_gen_predictions_csv.py"
    else:
        err = _one_line(argv, capsys)
        prog = f"tpu-tiles {command}"
    assert err == f"{prog}: error: {_damage_message(model_dir, how)}"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("how", ["without", "truncated"])
def test_check_names_the_damaged_variables_not_an_io_device(
    how, mlp_run, short_test_root, tmp_path
):
    made = bundle.make_bundle(mlp_run.model_dir, tmp_path / "handin")
    model_dir = made / mlp_run.model_dir.name
    if how == "without":
        shutil.rmtree(model_dir / "variables")
    else:
        shard = next((model_dir / "variables").glob("variables.data-*"))
        shard.write_bytes(shard.read_bytes()[:100])
    report = bundle.check_bundle(made, short_test_root, progress=False)
    expected = (
        ("files present", f"{model_dir.name}/ has no variables/variables.index (its weights)")
        if how == "without"
        else ("saved model loads", _damage_message(model_dir, how))
    )
    assert [(r.name, r.detail) for r in report.failures()] == [expected]
    assert "experimental_io_device" not in report.table()


# -- other commands: found before the work, named by their flag -----------------------------


def test_evaluate_json_folder_is_refused_before_evaluating(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(runs.TrainedRun, "open", lambda *a, **k: pytest.fail("evaluated"))
    err = _one_line(["evaluate", "--dirs", "model_x", "--json", str(tmp_path)], capsys)
    assert err == (
        f"tpu-tiles evaluate: error: --json {tmp_path} is a folder; pass the path of a file to "
        "write"
    )


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--epochs", "0"], "--epochs must be at least 1, got 0"),
        (["--train", "0"], "--train must be at least 1, got 0"),
    ],
)
def test_demo_checks_its_flags_before_writing(flags, message, tmp_path, capsys):
    err = _one_line(["demo", "--out", str(tmp_path / "demo"), "--no_progress", *flags], capsys)
    assert err.startswith(f"tpu-tiles demo: error: {message}")
    assert not any(tmp_path.iterdir())


def test_demo_out_that_is_a_file(tmp_path, capsys):
    out = tmp_path / "demo"
    out.write_text("x")
    err = _one_line(["demo", "--out", str(out)], capsys)
    assert err == f"tpu-tiles demo: error: --out {out} is a file; pass a folder"


def test_synth_on_a_read_only_disk(tmp_path, read_only, capsys):
    read_only(tmp_path)
    out = tmp_path / "data"
    err = _one_line(["synth", str(out), "--train", "3", "--no_progress"], capsys)
    assert err == (
        f"tpu-tiles synth: error: cannot write OUT {out} {ROFS}; pass another OUT on a disk "
        "you can write"
    )
    assert not any(tmp_path.iterdir())


def test_bundle_on_a_read_only_disk(mlp_run, tmp_path, read_only, capsys):
    read_only(tmp_path)
    out = tmp_path / "handin"
    err = _one_line(["bundle", "--dir", str(mlp_run.model_dir), "--out", str(out)], capsys)
    assert err == (
        f"tpu-tiles bundle: error: cannot write --out {out} {ROFS}; pass another --out on a "
        "disk you can write"
    )
    assert not any(tmp_path.iterdir())


def test_bundle_copies_with_the_permissions_the_umask_gives(mlp_run, tmp_path, umask):
    """As `cp -r` (not `cp -p`): the model's files as readable as any other copy."""
    model_dir = tmp_path / "run" / mlp_run.model_dir.name
    shutil.copytree(mlp_run.model_dir, model_dir)
    shutil.copy(mlp_run.run_file, model_dir.parent)
    for path in (model_dir, *model_dir.rglob("*")):
        path.chmod(0o777 if path.is_dir() else 0o666)
    out = bundle.make_bundle(model_dir, tmp_path / "handin")
    copied = [out / model_dir.name, *(out / model_dir.name).rglob("*")]
    assert {p.name: file_mode(p) for p in copied if p.is_dir()} == {
        model_dir.name: 0o755,
        "variables": 0o755,
        "assets": 0o755,
    }
    assert {file_mode(p) for p in copied if p.is_file()} == {0o644}


def test_every_commands_outputs_are_tried_before_any_work(tmp_path, read_only, capsys):
    """`safe.claim`, which every command calls first, tries each output's folder:
    `kaggle` reads nothing before it says its --out cannot be written."""
    ro = tmp_path / "ro"
    ro.mkdir()
    read_only(ro)
    missing = str(tmp_path / "none.csv")  # never read: the output is checked first
    argv = ["kaggle", "--sample", missing, "--inputcsv", missing, "--out", str(ro / "k.csv")]
    assert _one_line(argv, capsys) == (
        f"tpu-tiles kaggle: error: cannot write --out {ro / 'k.csv'} {ROFS}; pass another "
        "--out on a disk you can write"
    )


def test_sweep_read_only_out_dir_names_the_flag(synth_root, tmp_path, read_only, capsys):
    read_only(tmp_path)
    out = tmp_path / "sweep"
    argv = ["sweep", "--grid", "lr=1e-3,2e-3", "--out_dir", str(out)]
    err = _one_line([*argv, f"--data_root={synth_root}", "--model=MLP"], capsys)
    assert err == (
        f"tpu-tiles sweep: error: cannot write --out_dir {out} {ROFS}; pass another --out_dir "
        "on a disk you can write"
    )


@pytest.mark.parametrize(
    "grid, message",
    [
        ("", "--grid is empty; pass a .yaml/.json grid file or an inline spec, e.g. --grid "),
        (
            "lr=loguniform(1e-3)",
            "--grid: lr=loguniform(1e-3): a range takes two bounds, low and high, e.g. "
            "loguniform(1e-4,1e-2)",
        ),
        ("batch=logint(4)", "--grid: batch=logint(4): a range takes two bounds, low and high"),
    ],
)
def test_sweep_grid_messages(grid, message, tmp_path, capsys):
    err = _one_line(["sweep", "--grid", grid, "--out_dir", str(tmp_path / "s")], capsys)
    assert err.startswith(f"tpu-tiles sweep: error: {message}")
    assert not any(tmp_path.iterdir())


# -- issue 48: messages that name what is there -----------------------------------------------

PIPE = "a named pipe (FIFO)"


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["kaggle", "--sample", "{fifo}", "--inputcsv", "{csv}", "--out", "{tmp}/k.csv"],
            f"sample submission file {{fifo}} is {PIPE}; pass the CSV file itself",
        ),
        (
            ["kaggle", "--sample", "{csv}", "--inputcsv", "{fifo}", "--out", "{tmp}/k.csv"],
            f"predictions file {{fifo}} is {PIPE}; pass the CSV file itself",
        ),
        (
            ["synth", "{tmp}/d", "--test_ids_from", "{fifo}"],
            f"--test_ids_from {{fifo}}: cannot read it ({PIPE}, not a file); give the "
            "competition's sample_submission.csv",
        ),
        (
            ["demo", "--sample", "{fifo}", "--out", "{tmp}/demo"],
            f"--sample {{fifo}}: {PIPE}, not a file; pass the competition's CSV or leave it out",
        ),
        (
            ["predict", "--dir", "{model}", "--models", "{fifo}", "--out", "{tmp}/p.csv"],
            f"{{fifo}}: {PIPE}, not a models.py; pass --models <models.py or upstream root>",
        ),
    ],
)
def test_a_named_pipe_is_not_called_missing_nor_waited_on(argv, message, mlp_run, tmp_path, capsys):
    """A FIFO where a file is read was "not found" (kaggle, --models, demo --sample), or was
    opened and waited on forever (synth --test_ids_from): one line saying what it is."""
    fifo, csv = tmp_path / "fifo", tmp_path / "s.csv"
    os.mkfifo(fifo)
    csv.write_text("ID,TopConfigs\ntile:xla:a,0;1\n")
    fill = dict(fifo=fifo, csv=csv, tmp=tmp_path, model=mlp_run.model_dir)
    err = _one_line([a.format(**fill) for a in argv], capsys)
    assert err == f"tpu-tiles {argv[0]}: error: {message.format(**fill)}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "s.csv"]


def test_a_file_size_limit_is_not_called_a_full_disk(tmp_path):
    """Under `ulimit -f` a write fails with EFBIG, which said "free some space" with the disk
    nearly empty: the message names the limit (synth's kernels, install's copies)."""
    (tmp_path / "up" / "tpu_graphs/baselines/tiles").mkdir(parents=True)
    (tmp_path / "up" / "tiles_train.py").write_text("# upstream trainer\n")

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (10_000, 10_000))

    for other, argv in (("OUT", ["synth", "d", "--no_progress"]), ("path", ["install", "up"])):
        done = subprocess.run(
            [sys.executable, "-m", "tpu_tiles_models.cli", *argv],
            cwd=tmp_path,
            env=dict(os.environ, PYTHONPATH=str(Path(cli.__file__).parents[1])),
            preexec_fn=small_files,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
        assert done.stderr.endswith(
            "(File too large); this process may write files of at most 10.0 KB (ulimit -f); "
            f"raise that limit, or pass another {other}\n"
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["up"]


def test_a_replaced_class_is_not_called_unknown(tmp_path):
    models = tmp_path / "models.py"
    models.write_text("ResidualSAGE = None\n\nclass MLP:\n    def forward(self):\n        pass\n")
    module = registry.load_models_module(models)
    with pytest.raises(registry.FlagError) as err:
        registry.model_class("ResidualSAGE", module)
    assert str(err.value) == (
        f"'ResidualSAGE' in {models} is not a model class (a class with a forward method); "
        "known: MLP"
    )


@pytest.fixture
def own_root(synth_root, tmp_path) -> Path:
    """A copy of the tiny synthetic tree, to spoil."""
    root = tmp_path / "data"
    shutil.copytree(synth_root, root)
    return root


def test_test_file_whose_name_no_csv_can_hold(own_root):
    root = own_root
    first = next((root / "test").glob("*.npz"))
    bad = first.rename(first.with_name("a,b;c.npz"))
    with pytest.raises(data.DataError) as err:
        data.load_split(root, "test", progress=False)
    assert str(err.value) == (
        f"{bad}: its tile id holds ',', ';', which split a CSV row, so no predictions CSV can "
        "name it; rename the file (test files keep Kaggle's tile ids)"
    )


def test_opcodes_beyond_the_vocabulary_name_the_file(own_root):
    root = own_root
    path = next((root / "train").glob("*.npz"))
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["node_opcode"][0] = 201
    np.savez(path, **arrays)
    with pytest.raises(data.DataError) as err:
        data.load_split(root, "train", skip_hint="train with --skip_bad", progress=False)
    assert str(err.value) == (
        f"{path}: node_opcode 201 is outside 0..127, the HLO opcode ids models embed "
        "(TpuGraphs' run 0..120); re-download the file or delete it (or train with --skip_bad)"
    )


# -- ensembles --------------------------------------------------------------------------------


@pytest.mark.parametrize("twice", [False, True])
def test_ensemble_needs_two_different_runs(twice, mlp_run, short_test_root, tmp_path, capsys):
    dirs = f"{mlp_run.model_dir},{mlp_run.model_dir}" if twice else str(mlp_run.model_dir)
    root = str(short_test_root)
    err = _one_line(
        ["ensemble", "--dirs", dirs, "--out_dir", str(tmp_path), "--data_root", root], capsys
    )
    fix = (
        f"--dirs names {mlp_run.model_dir} twice; an ensemble needs different runs"
        if twice
        else f"--dirs names one run ({mlp_run.model_dir}); an ensemble needs at least two, e.g. "
        "--dirs model_<h1>,model_<h2>"
    )
    assert err == f"tpu-tiles ensemble: error: {fix}" and not any(tmp_path.iterdir())


def test_ensemble_of_an_ensemble_names_its_members(mlp_seeds, short_test_root, tmp_path, capsys):
    first, second, pair = mlp_seeds
    dirs = f"{first.model_dir},{pair.model_dir}"
    argv = [
        "ensemble",
        "--dirs",
        dirs,
        "--out_dir",
        str(tmp_path),
        "--data_root",
        str(short_test_root),
    ]
    err = _one_line(argv, capsys)
    assert err == (
        f"tpu-tiles ensemble: error: {pair.model_dir} is itself an ensemble; pass its members "
        f"instead ({first.model_dir}, {second.model_dir})"
    )


def test_ensemble_takes_results_csv(tmp_path, monkeypatch, capsys):
    """The flag its messages name, as `train` has it (the write itself: the `mlp_seeds`
    ensemble in test_ensemble, which passes it on)."""
    from tpu_tiles_models import ensemble

    given = {}
    monkeypatch.setattr(ensemble, "build_ensemble", lambda *a, **k: given.update(k))
    csv = str(tmp_path / "e.csv")
    assert cli.main(["ensemble", "--dirs", "a,b", "--results_csv", csv]) == 0
    assert given["results_csv"] == csv
    with pytest.raises(SystemExit):
        cli.main(["ensemble", "--help"])
    assert "--results_csv RESULTS_CSV" in capsys.readouterr().out


def test_kwargs_of_a_run_file_are_not_called_a_flag(mlp_run, tmp_path):
    from tpu_tiles_models.runs import TrainedRun

    run = TrainedRun.open(mlp_run.model_dir)
    run.info["args"]["model_kwargs_json"] = json.dumps({"hidden_dim": 8, "nope": 1})
    ds = data.load_dataset(
        run.extras["data_root"], splits=("valid",), stats=run.stats, progress=False
    )
    with pytest.raises(registry.FlagError) as err:
        run.build(ds.valid, ds.stats)
    assert str(err.value).startswith(f"the model_kwargs_json of {run.run_file} does not fit MLP:")


# -- the cache on a full disk: a one-line warning, and loading goes on -----------------------


@pytest.mark.parametrize("errno_name", ["ENOSPC", "EROFS"])
def test_cache_that_cannot_be_written_is_a_warning(errno_name, synth_root, tmp_path, monkeypatch):
    """Loading goes on without it; no temp file, no "Exception ignored in ZipFile.__del__"."""
    import errno
    import gc
    import os
    import sys

    from tpu_tiles_models import cache as cache_format

    write, code = cache_format.write, getattr(errno, errno_name)

    def fail_midway(out, arrays, meta):
        out.write(b"PK half a cache")
        raise OSError(code, os.strerror(code))

    unraisable = []
    monkeypatch.setattr(cache_format, "write", fail_midway)
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    cache = tmp_path / "cache"
    with pytest.warns(UserWarning) as caught:
        split = data.load_split(synth_root, "valid", cache_dir=cache, progress=False)
    gc.collect()
    assert len(split) == 8 and unraisable == [] and not cache.exists()
    fix = "free some space" if errno_name == "ENOSPC" else "pass another --cache_dir on a disk"
    (message,) = [str(w.message) for w in caught]
    assert message.startswith(f"cannot write --cache_dir {cache}/tiles-valid-")
    assert f"({os.strerror(code)}); {fix}" in message
    assert message.endswith("; loaded without caching")
    monkeypatch.setattr(cache_format, "write", write)
    data.load_split(synth_root, "valid", cache_dir=cache, progress=False)  # written now
    assert len(list(cache.iterdir())) == 1


# -- what Beam's worker processes print as they start ----------------------------------------


def test_beam_workers_start_up_lines_are_left_out(capfd):
    """`sweep` and `synth` start Beam's local workers, which log their start before they read
    the pipeline's log level: those lines are dropped, every other line still shows."""
    import subprocess
    import sys
    import threading

    from tpu_tiles_models import pipelines

    worker = (
        "import logging, sys\n"
        "logging.warning('apitools not found, and bigquery client libraries are not available')\n"
        "logging.getLogger().setLevel(logging.INFO)\n"
        "logging.getLogger('__main__').info('Logging handler created.')\n"
        "print('Traceback: a real failure', file=sys.stderr)\n"
    )
    with pipelines.quiet_workers():
        subprocess.run([sys.executable, "-c", worker], check=True)
    for thread in threading.enumerate():  # the filter ends once the worker's stderr closes
        if thread.name == "stderr-filter":
            thread.join(10)
    print("after", file=sys.stderr)
    err = capfd.readouterr().err
    assert err.splitlines()[-2:] == ["Traceback: a real failure", "after"]
    assert "apitools" not in err and "Logging handler" not in err
