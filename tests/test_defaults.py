"""One home for the defaults every command shares (`tpu_tiles_models.defaults`): each command
and the drop-in prediction script read the same data root, cache and out dir."""

from __future__ import annotations

import argparse

import pytest

from tpu_tiles_models import cli, defaults
from tpu_tiles_models.train_args import TrainArgs

DATA_COMMANDS = ("predict", "evaluate", "check", "ensemble")


@pytest.fixture
def roots(tmp_path, monkeypatch):
    """The home and Kaggle data roots moved under tmp_path (neither exists yet)."""
    home, kaggle = tmp_path / "home" / "xla", tmp_path / "kaggle" / "xla"
    monkeypatch.setattr(defaults, "DATA_ROOTS", (str(home), str(kaggle)))
    return home, kaggle


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = cli.build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _command_defaults(name: str) -> dict:
    return {a.dest: a.default for a in _subparser(name)._actions}


@pytest.mark.parametrize("present, expected", [((), 0), ((0,), 0), ((1,), 1), ((0, 1), 0)], ids=str)
def test_the_data_root_is_the_first_that_exists(present, expected, roots):
    for i in present:
        roots[i].mkdir(parents=True)
    want = str(roots[expected])
    assert defaults.data_root() == want
    assert TrainArgs().data_root == want
    for name in DATA_COMMANDS:
        assert _command_defaults(name)["data_root"] == want
    import tiles_gen_predictions_csv as script

    assert script.parse_args(["--dir", "d"]).data_root == want


def test_every_command_shares_the_cache_and_out_dir():
    for name in DATA_COMMANDS:
        assert _command_defaults(name)["cache_dir"] == defaults.CACHE_DIR
    assert _command_defaults("ensemble")["out_dir"] == defaults.OUT_DIR
    assert TrainArgs().cache_dir == defaults.CACHE_DIR
    assert TrainArgs().out_dir == defaults.OUT_DIR
    import tiles_gen_predictions_csv as script

    assert script.parse_args(["--dir", "d"]).cache_dir == defaults.CACHE_DIR
    assert defaults.DATA_ROOTS[0] == defaults.HOME_DATA_ROOT == "~/data/tpugraphs/npz/tile/xla"
    assert defaults.KAGGLE_DATA_ROOT == (
        "/kaggle/input/predict-ai-model-runtime/npz_all/npz/tile/xla"
    )


def test_a_default_data_root_stays_out_of_the_hash(roots):
    """The run's hash is upstream's when every option of ours is at its default, wherever
    that default data root is."""
    roots[1].mkdir(parents=True)
    assert "data_root" not in TrainArgs().resolved(now_ms=1).identity()
