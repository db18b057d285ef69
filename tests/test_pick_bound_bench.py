"""benchmarks/pick_bound.py's own logic on hand-made kernels (the benchmark runs by hand): the
picks it measures, their means and the table written from its results file."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
from conftest import load_benchmark


@pytest.fixture(scope="module")
def pick_bound():
    return load_benchmark("pick_bound")


def test_each_pick_of_one_kernel(pick_bound):
    # Config 0 takes 1.2; the model ranks config 3 (1.5) first among the others; config 2 (1.0)
    # is the fastest.
    errors = pick_bound.kernel_errors(np.array([0.0, 0.5, 0.9, 0.1]), [1.2, 2.0, 1.0, 1.5])
    expected = dict(default=0.2, other=0.5, either=0.2, best_other=0.0, other10=0.0)
    assert errors == pytest.approx(expected)
    # The model's first other is the fastest: the better of the two is it, not config 0.
    errors = pick_bound.kernel_errors(np.array([0.0, 0.5, -1.0, 0.1]), [1.2, 2.0, 1.0, 1.5])
    expected = dict(default=0.2, other=0.0, either=0.0, best_other=0.0, other10=0.0)
    assert errors == pytest.approx(expected)


def test_the_best_of_ten_others_reads_the_models_ten_first_only(pick_bound):
    # Configs 1..11 take 1.1 + j / 100, config 12 the fastest (1.0); the model ranks them in
    # index order, so its 10 first others are configs 1..10 and config 12 is not among them:
    # the best of its 10 first others is config 1 (1.11).
    runtimes = [1.5] + [1.1 + j / 100 for j in range(1, 12)] + [1.0]
    errors = pick_bound.kernel_errors(np.arange(13, dtype=float), runtimes)
    assert errors["other10"] == pytest.approx(0.11)
    assert errors["other"] == pytest.approx(0.11) and errors["best_other"] == 0.0


def test_a_kernel_with_one_config_has_no_other(pick_bound):
    errors = pick_bound.kernel_errors(np.array([3.0]), [2.5])
    assert errors == dict(default=0.0, other=0.0, either=0.0, best_other=0.0, other10=0.0)


def test_the_means_weigh_every_kernel_alike(pick_bound):
    from tpu_tiles_models.scoring import Scored

    scored = [
        Scored("a", np.array([0.0, 1.0]), np.array([2.0, 1.0])),  # default 1.0 slower, other best
        Scored("b", np.array([0.0, 1.0, 2.0]), np.array([1.0, 1.5, 3.0])),  # default best
    ]
    means = pick_bound.split_errors(scored)
    expected = dict(default=0.5, other=0.25, either=0.0, best_other=0.25, other10=0.25)
    assert means == pytest.approx(expected)


def test_the_table_comes_from_the_results_file(pick_bound, tmp_path):
    rows = [
        dict(
            family="alt",
            model="ResidualSAGE",
            recipe="upstream",
            seed=s,
            rule=r,
            default=0.1,
            other=o,
            either=e,
            best_other=0.02,
        )
        for s, r, o, e in ((0, 0.08, 0.3, 0.05), (1, 0.06, 0.2, 0.03))
    ]
    (tmp_path / "pick_bound.json").write_text(json.dumps(dict(command="cmd", rows=rows)))
    pick_bound.main(["--work", str(tmp_path), "--out", str(tmp_path), "--tabulate"])
    table = (tmp_path / "pick_bound.md").read_text()
    assert table.startswith("`cmd`\n")
    assert (
        "| alt | ResidualSAGE | upstream (2) | 0.100 (1.00x) | 0.070 +- 0.014 (0.70x) | "
        "0.250 +- 0.071 (2.50x) | 0.040 +- 0.014 (0.40x) | 0.020 (0.20x) | - |"
    ) in table  # a results file from before the best of 10 others: '-' in its column


def test_it_asks_for_the_suite_first_where_there_is_no_data(pick_bound, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        pick_bound.measure(pick_bound.parse_args(["--work", str(tmp_path), "--families", "alt"]))
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        f"pick_bound: no data for alt under {tmp_path}: run benchmarks/suite.py there first\n"
    )


def test_tabulating_needs_the_results_file(pick_bound, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        pick_bound.main(["--work", str(tmp_path), "--out", str(tmp_path), "--tabulate"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        f"pick_bound: no results file {tmp_path / 'pick_bound.json'}: run without --tabulate "
        "first\n"
    )


def test_the_roots_are_the_suites(pick_bound, tmp_path):
    a = argparse.Namespace(
        families="alt,fusion",
        train=10,
        valid=5,
        test=2,
        data_seed=0,
        max_configs=0,
        shuffled=True,
    )
    roots = pick_bound.family_roots(a, tmp_path)
    assert roots == {
        "alt": tmp_path / "data" / "alt_10_5_2_0",
        "alt-shuffled": tmp_path / "data" / "alt_10_5_2_0-shuffled",
        "fusion": tmp_path / "data" / "fusion_10_5_2_0",
        "fusion-shuffled": tmp_path / "data" / "fusion_10_5_2_0-shuffled",
    }
