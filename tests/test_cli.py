"""The `tpu-tiles` front end: demo artifacts, synth, models, and its one-line errors."""

from __future__ import annotations

import argparse
import contextlib
import csv
import gzip
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from conftest import TINY_MLP

from tpu_tiles_models import cli, kaggle, registry


def test_models_lists_every_class_and_the_recommendation(capsys):
    # The format is pinned in test_recommended.py; the suite's candidate is checked there too.
    assert cli.main(["models"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in registry.MODELS)
    assert "recommended: --model=ResidualSAGE" in out.splitlines()


def test_synth_writes_the_splits(tmp_path, capsys):
    assert cli.main(["synth", str(tmp_path), "--train", "3", "--valid", "2", "--test", "2"]) == 0
    assert [len(list((tmp_path / s).glob("*.npz"))) for s in ("train", "valid", "test")] == [
        3,
        2,
        2,
    ]
    assert "wrote 7 kernels" in capsys.readouterr().out


@pytest.mark.slow
def test_demo_writes_every_artifact(tmp_path):
    """`tpu-tiles demo`, small, in its own process as users run it."""
    out = tmp_path / "demo"
    argv = ["demo", "--out", str(out), "--train", "10", "--epochs", "1", "--no_progress"]
    proc = subprocess.run(
        [sys.executable, "-m", "tpu_tiles_models.cli", *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = proc.stdout
    runs = sorted((out / "models").glob("run_*.jsonz"))
    assert len(runs) == 2 and len(list((out / "models").glob("model_*"))) == 2
    args = [json.loads(gzip.decompress(r.read_bytes()))["args"] for r in runs]
    models = {a["model"]: json.loads(a["model_kwargs_json"]) for a in args}
    # The recommended model and upstream's baseline, by their names alone.
    assert models == {"ResidualSAGE": {}, "EarlyJoinSAGE": {}}
    assert (out / "evaluation.png").read_bytes()[:4] == b"\x89PNG"
    with open(out / "evaluation.csv", newline="") as f:
        evaluation = list(csv.DictReader(f))
    rankings = [
        "random",
        "default",
        "ResidualSAGE",
        "ResidualSAGE+default",
        "EarlyJoinSAGE",
        "EarlyJoinSAGE+default",
    ]
    assert [r["model"] for r in evaluation] == rankings
    for r in evaluation:
        assert float(r["score"]) == pytest.approx(1 - float(r["top5"]), abs=2e-4)
        assert float(r["top1"]) >= float(r["top5"]) >= float(r["top10"]) >= 0
        assert 0 <= float(r["opa"]) <= 1
    # The demo ends with evaluate's table of every ranking: the baselines, the two models with
    # and without config 0 kept.
    table = printed.splitlines()[-6:]
    assert [line.split()[0] for line in table] == rankings
    by_model = {r["model"]: r for r in evaluation}
    for line in table:
        name, top1, top5 = line.split()[:3]
        assert float(top5) == pytest.approx(float(by_model[name]["top5"]), abs=6e-4)
    predictions = kaggle.read_predictions_csv(out / "predictions_model_output.csv")
    assert len(predictions) == 20
    with open(out / "predictions_kaggle.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    tile_rows = {r["ID"]: r["TopConfigs"] for r in rows if r["ID"].startswith("tile:xla:")}
    assert tile_rows == {k: ";".join(map(str, v)) for k, v in predictions.items()}
    assert "overall" in printed and str(out / "predictions_kaggle.csv") in printed


def test_kaggle_without_sample_says_where_to_get_it(tmp_path, capsys):
    sample, predictions, out = (tmp_path / n for n in ("sample_submission.csv", "p.csv", "k.csv"))
    code = cli.main(
        ["kaggle", "--sample", str(sample), "--inputcsv", str(predictions), "--out", str(out)]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "sample_submission.csv" in err
    assert not out.exists()


@pytest.fixture(scope="module")
def truncated_run(residual_run, tmp_path_factory) -> Path:
    """A copy of a trained model whose run file was cut short (an interrupted copy)."""
    out = tmp_path_factory.mktemp("truncated")
    model_dir = out / residual_run.model_dir.name
    shutil.copytree(residual_run.model_dir, model_dir)
    data = residual_run.run_file.read_bytes()
    (out / residual_run.run_file.name).write_bytes(data[: len(data) // 2])
    return model_dir


@pytest.mark.parametrize(
    "command",
    [
        ["predict", "--dir", "{model}", "--data_root", "{data}", "--out", "{tmp}/p.csv"],
        ["evaluate", "--dirs", "{model}", "--data_root", "{data}"],
        ["bundle", "--dir", "{model}", "--out", "{tmp}/bundle"],
    ],
)
def test_truncated_run_file_is_one_line(command, truncated_run, synth_root, tmp_path, capsys):
    argv = [a.format(model=truncated_run, data=synth_root, tmp=tmp_path) for a in command]
    code = cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"tpu-tiles {command[0]}: error: ")
    assert "run file" in err and "truncated or corrupt" in err
    assert list(tmp_path.iterdir()) == []


def test_predict_top_k_zero(residual_run, synth_root, tmp_path, capsys):
    model, out = str(residual_run.model_dir), str(tmp_path / "p.csv")
    code = cli.main(
        ["predict", "--dir", model, "--data_root", str(synth_root), "--top_k", "0", "--out", out]
    )
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "tpu-tiles predict: error: --top_k must be at least 1, got 0"
    )


def test_unknown_flag_of_a_plain_command(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["models", "--nope"])
    assert info.value.code == 2 and "unrecognized arguments: --nope" in capsys.readouterr().err


def test_help_imports_no_tensorflow():
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom tpu_tiles_models import cli\n"
            "cli.build_parser().format_help()\nprint('tensorflow' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.strip() == "False" and proc.stderr == ""


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


@pytest.mark.parametrize("name", sorted(set(_subcommands()) - {"train", "models"}))
def test_help_explains_every_flag_with_its_default(name):
    """`tpu-tiles <cmd> --help`: each flag has a meaning, and its default unless required.
    (`train` prints TrainArgs' own table, tested in test_train_args; `models` has none.)"""
    parser = _subcommands()[name]
    text = " ".join(parser.format_help().split())
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"{name} {action.option_strings or action.dest} has no help"
        helped = " ".join(parser._get_formatter()._expand_help(action).split())
        if action.option_strings and not action.required:
            assert "default" in helped, f"{name} {action.option_strings[0]}: {helped!r}"
        assert helped in text


def test_warnings_print_one_line_without_python_source(monkeypatch, capsys):
    def warn(a):
        warnings.warn("the cache could not be written;\n  loaded without it", stacklevel=2)

    monkeypatch.setattr(cli, "_models", warn)
    assert cli.main(["models"]) == 0
    assert capsys.readouterr().err == (
        "tpu-tiles models: warning: the cache could not be written; loaded without it\n"
    )


# -- closed or broken standard streams (issue 48) ---------------------------------------------


def _in_shell(redirects: str, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """`tpu-tiles <argv> <redirects>` in its own process, as a shell runs it (`>&-`)."""
    return subprocess.run(
        ["sh", "-c", f'exec "$0" "$@" {redirects}', sys.executable, "-m", "tpu_tiles_models.cli"]
        + argv,
        text=True,
        timeout=600,  # a guard against a hang, not a timing
        **kwargs,
    )


@pytest.fixture(scope="module")
def predicted(mlp_run, short_test_root, tmp_path_factory) -> tuple[list[str], bytes]:
    """`predict`'s argv (without --out) for mlp_run, and the CSV it writes."""
    argv = ["predict", "--dir", str(mlp_run.model_dir), "--data_root", str(short_test_root)]
    out = tmp_path_factory.mktemp("predicted") / "p.csv"
    assert cli.main([*argv, "--out", str(out), "--no_progress"]) == 0
    return argv, out.read_bytes()


@pytest.fixture(scope="module")
def merged(tmp_path_factory) -> tuple[list[str], bytes, str]:
    """`kaggle`'s argv (without --out) merging one kernel's ranking into a two-row sample, the
    CSV it writes and what it prints (`{out}` for its path): a command that writes a file and
    starts without TensorFlow. The command line handles closed streams before any command
    runs, the same for each; `predict` (TensorFlow, progress bars) has its own test below."""
    tmp = tmp_path_factory.mktemp("merged")
    tile = "tile:xla:" + "a" * 32
    (tmp / "s.csv").write_text(f"ID,TopConfigs\n{tile},0;1;2;3;4\nlayout:xla:default:x,0;1\n")
    (tmp / "p.csv").write_text(f"ID,TopConfigs\n{tile},4;3;2;1;0")
    argv = ["kaggle", "--sample", str(tmp / "s.csv"), "--inputcsv", str(tmp / "p.csv")]
    out = tmp / "k.csv"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main([*argv, "--out", str(out)]) == 0
    return argv, out.read_bytes(), printed.getvalue().replace(str(out), "{out}")


def _closed_stdout(command: str) -> str:
    return (
        f"tpu-tiles {command}: error: cannot write to standard output (it is closed); the files "
        "it writes are complete; send the output where it can be written\n"
    )


@pytest.mark.parametrize(
    "redirects, code, stdout, stderr",
    [
        (">&-", 2, False, _closed_stdout("kaggle")),
        ("2>&-", 0, True, None),
        ("<&- >&- 2>&-", 2, False, None),  # no file it opens may take their numbers
    ],
)
def test_closed_standard_streams_cost_no_file(redirects, code, stdout, stderr, merged, tmp_path):
    """Before, `>&-` was an AttributeError traceback and `2>&-` exit 1 with no file."""
    argv, csv_bytes, printed = merged
    out = tmp_path / "k.csv"
    pipes = {"stdout": subprocess.PIPE} if stdout else {}
    pipes.update({"stderr": subprocess.PIPE} if stderr else {})
    proc = _in_shell(redirects, [*argv, "--out", str(out)], **pipes)
    assert proc.returncode == code
    assert out.read_bytes() == csv_bytes
    if stdout:
        assert proc.stdout == printed.replace("{out}", str(out))
    if stderr:
        assert proc.stderr == stderr


@pytest.mark.slow
def test_models_with_stdout_closed_is_one_line():
    proc = _in_shell(">&-", ["models"], stderr=subprocess.PIPE)
    assert proc.returncode == 2
    assert proc.stderr == _closed_stdout("models")


@pytest.mark.slow
def test_a_broken_stderr_costs_no_file(predicted, tmp_path):
    """Progress bars into a pipe whose reader has gone (`2>&1 | head` when head has exited):
    the prediction is written all the same, and said on stdout."""
    argv, csv_bytes = predicted
    out = tmp_path / "p.csv"
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "tpu_tiles_models.cli", *argv, "--out", str(out)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=write,
            text=True,
            timeout=600,
        )
    finally:
        os.close(write)
    assert (proc.returncode, proc.stdout) == (0, f"wrote {out} (6 kernels)\n")
    assert out.read_bytes() == csv_bytes


# -- a stopped demo removes what it added (issue 48) ------------------------------------------


def _stop_in_training(monkeypatch, after: int = 0) -> None:
    """Makes the demo's `after`+1-th training stop as SIGTERM would (the ones before finish,
    as tiny MLPs). TensorFlow's op determinism stays off: it would outlast the test."""
    import tensorflow as tf

    from tpu_tiles_models import interrupts, train

    monkeypatch.setattr(tf.config.experimental, "enable_op_determinism", lambda: None)
    real, calls = train.train, []

    def train_then_stop(args):
        calls.append(args.model)
        if len(calls) > after:
            interrupts.note(signal.SIGTERM)
            interrupts.check()
        return real(
            args.replace(model="MLP", model_kwargs_json=TINY_MLP, configs=4, batch=2, epochs=1)
        )

    monkeypatch.setattr(train, "train", train_then_stop)


DEMO_STOPPED = "tpu-tiles demo: stopped by SIGTERM; removed what this run had started"


@pytest.mark.slow
@pytest.mark.parametrize("after", [0, 1])
def test_a_stopped_demo_leaves_no_data(after, monkeypatch, tmp_path, capsys):
    """Before, it said so and left --out/data (34 MB at the defaults); stopped in its second
    training, the run its first one finished goes too."""
    _stop_in_training(monkeypatch, after)
    out = tmp_path / "a" / "demo"
    argv = ["demo", "--out", str(out), "--train", "3", "--no_progress"]
    assert cli.main(argv) == 128 + signal.SIGTERM
    assert capsys.readouterr().err.strip() == DEMO_STOPPED
    assert list(tmp_path.iterdir()) == []


def test_a_stopped_demo_keeps_what_was_in_its_out(monkeypatch, tmp_path, capsys):
    """A rerun into --out that a finished demo's data set and a user's file are in: stopped,
    it removes none of them."""
    out = tmp_path / "demo"
    (out / "data").mkdir(parents=True)
    from tpu_tiles_models import synthetic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", synthetic.ValidationSplitWarning)
        synthetic.generate(out / "data", train=3, valid=2, test=2, seed=0, progress=False)
    (out / "mine.txt").write_text("mine\n")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    _stop_in_training(monkeypatch)
    assert cli.main(["demo", "--out", str(out), "--train", "3", "--no_progress"]) == 143
    assert capsys.readouterr().err.strip() == DEMO_STOPPED
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
