"""benchmarks/suite.py's own logic, on hand-made cells (the suite itself runs by hand): which
runs go on the shuffled copies, and the verdicts on the candidate."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
from conftest import load_benchmark


@pytest.fixture(scope="module")
def suite():
    return load_benchmark("suite")


def test_position_blind_baselines_skip_the_shuffled_copies(suite, tmp_path):
    roots = {"alt": tmp_path / "a", "alt-shuffled": tmp_path / "s"}
    a = argparse.Namespace(
        models="EarlyJoinSAGE,ResidualSAGE,ResidualSAGE:first", recipes="upstream", seeds="0,1"
    )
    grids = json.loads(suite.grid_file(a, roots, tmp_path).read_text())
    roots_of = {(g["model"][0], g["model_kwargs_json"][0]): g["data_root"] for g in grids}
    assert roots_of[("EarlyJoinSAGE", "{}")] == [str(roots["alt"])]
    assert roots_of[("ResidualSAGE", "{}")] == [str(r) for r in roots.values()]
    first = json.dumps(suite.VARIANTS["ResidualSAGE:first"][1], sort_keys=True)
    assert roots_of[("ResidualSAGE", first)] == [str(r) for r in roots.values()]


def _cell(family, model, top1, top5, std=0.01, cpu=100.0, recipe="upstream"):
    return dict(
        family=family,
        model=model,
        recipe=recipe,
        seeds=3,
        top1=(top1, std),
        top5=(top5, std),
        top10=(top5, std),
        score=(1 - top5, std),
        seconds=cpu,
        cpu_seconds=cpu,
    )


def test_the_verdicts_on_the_candidate(suite):
    c = "R+rule"
    cells = [
        _cell("alt", "EarlyJoinSAGE", 0.30, 0.10, cpu=50),
        _cell("alt", c, 0.08, 0.04, cpu=90),
        _cell("alt", "R", 0.13, 0.03, cpu=90),
        _cell("alt-shuffled", c, 0.50, 0.20),
        _cell("alt-shuffled", "R", 0.51, 0.10),
        _cell("alt", "default", 0.14, 0.12, std=0.0, recipe="-"),
        _cell("alt", "random", 3.0, 0.9, std=0.0, recipe="-"),
    ]
    lines = suite.verdicts(cells, c)
    assert f"{c} / default top-1 error <= 0.6: alt 0.571 (met) -> met on 1/1" in lines
    assert f"{c} / EarlyJoinSAGE top-5 error <= 0.5: alt 0.400 (met) -> met on 1/1" in lines
    assert (
        f"{c} / EarlyJoinSAGE training CPU seconds <= 2.0: alt 1.800 (met) -> met on 1/1" in lines
    )
    # Beaten by its own plain ranking at top-5 on alt, and on the shuffled copy.
    assert (
        lines[-1] == f"{c} loses by more than one std to: R on alt (top5), R on alt-shuffled (top5)"
    )
    assert (
        "R with its rule vs its own ranking (top5 error): lower on 0/1 families, higher on 1/1"
        in lines
    )


def test_a_recipe_is_judged_at_both_cutoffs_for_the_model_and_its_rule(suite):
    cells = [
        _cell("alt", "R", 0.13, 0.03),
        _cell("alt", "R", 0.10, 0.03, recipe="logmse"),
        _cell("alt", "R+rule", 0.09, 0.03),
        _cell("alt", "R+rule", 0.12, 0.03, recipe="logmse"),
        _cell("alt-shuffled", "R", 0.20, 0.05),
        _cell("alt-shuffled", "R", 0.20, 0.05, recipe="logmse"),
    ]
    lines = suite.verdicts(cells, "R+rule")
    vs = "recipe logmse vs upstream flags on the"
    assert f"R: {vs} families (top1 error): lower on 1/1, higher on 0/1" in lines
    assert f"R: {vs} families (top5 error): lower on 0/1, higher on 0/1" in lines
    assert f"R: {vs} shuffled copies (top1 error): lower on 0/1, higher on 0/1" in lines
    assert f"R+rule: {vs} families (top1 error): lower on 0/1, higher on 1/1" in lines
    assert "R: recipe logmse vs upstream flags: wins on 0/1 families -> reject" in lines


def test_each_run_row_carries_its_top1_over_the_default(suite):
    rows = [dict(family="alt", top1=0.07), dict(family="fusion", top1=0.2)]
    baselines = {("alt", "default"): {1: 0.14, 5: 0.1}, ("fusion", "default"): {1: 0.0, 5: 0.1}}
    out = suite.with_default_ratio(rows, baselines)
    assert [r["top1_vs_default"] for r in out] == [0.5, ""]
    assert "top1_vs_default" in suite.COLUMNS and "top1_vs_default" not in rows[0]


def test_only_the_models_recipes_and_seeds_asked_for_are_tabulated(suite):
    rows = [
        dict(model="R", recipe="upstream", seed=0),
        dict(model="R+rule", recipe="upstream", seed=0),
        dict(model="R", recipe="logmse", seed=0),
        dict(model="E+default", recipe="upstream", seed=0),
        dict(model="R:first", recipe="upstream", seed=0),
        dict(model="R", recipe="upstream", seed=3),
    ]
    kept = suite.asked_for(rows, "R,E", "upstream", "0,1,2")
    assert [r["model"] for r in kept] == ["R", "R+rule", "E+default"]


def test_the_small_budget_presets_the_budget_flags_and_names_its_results(suite):
    full = suite.parse_args(["--work", "w"])
    assert {k: getattr(full, k) for k in suite.BUDGET} == suite.BUDGET
    assert (full.budget, full.name) == ("full", "suite")
    small = suite.parse_args(["--work", "w", "--budget", "small"])
    assert {k: getattr(small, k) for k in suite.BUDGET} == dict(
        train=400, valid=100, test=20, data_seed=0, max_configs=400, epochs=30, early_stop=20
    )
    assert small.name == "suite_small"
    # A flag given still wins over the preset, and so does --name.
    mine = suite.parse_args(["--work", "w", "--budget", "small", "--epochs", "5", "--name", "x"])
    assert (mine.epochs, mine.train, mine.name) == (5, 400, "x")


def test_each_budget_gets_its_own_shuffled_copy(suite, tmp_path):
    """Two budgets under one --work: each shuffled copy is made from its own budget's data
    (it was `<family>-shuffled` for every budget, made once and reused by the other)."""

    def budget(train: int, max_configs: int) -> argparse.Namespace:
        return argparse.Namespace(
            families="roofline",
            train=train,
            valid=2,
            test=1,
            data_seed=0,
            max_configs=max_configs,
            shuffled=True,
        )

    small, large = budget(3, 12), budget(4, 0)
    roots = {}
    for a in (small, large):
        with pytest.warns(suite.synthetic.ValidationSplitWarning):
            roots[a.train] = suite.make_data(a, tmp_path)
    for r in roots.values():
        own, shuffled = r["roofline"], r["roofline-shuffled"]
        names = sorted(p.relative_to(own) for p in own.rglob("*.npz"))
        assert names == sorted(p.relative_to(shuffled) for p in shuffled.rglob("*.npz"))
        for name in names:
            with np.load(own / name) as a, np.load(shuffled / name) as b:
                assert sorted(a["config_runtime"]) == sorted(b["config_runtime"])
    assert len(list(roots[3]["roofline-shuffled"].glob("train/*.npz"))) == 3
    assert len(list(roots[4]["roofline-shuffled"].glob("train/*.npz"))) == 4
    # Named from the same parts as the family's own root.
    assert roots[3]["roofline-shuffled"] == tmp_path / "data" / "roofline_3_2_1_0_cap12-shuffled"
    assert roots[4]["roofline-shuffled"] == tmp_path / "data" / "roofline_4_2_1_0-shuffled"


def test_a_run_trained_through_a_link_to_the_data_counts(suite, tmp_path, monkeypatch):
    """Runs of two `--work` folders, one whose `data` links to the other's, tabulate together."""
    (tmp_path / "a" / "data" / "alt_9").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "data").symlink_to(tmp_path / "a" / "data")
    trained_on = {
        "model_1": tmp_path / "b" / "data" / "alt_9",  # through the link
        "model_2": tmp_path / "a" / "data" / "alt_9",
        "model_3": tmp_path / "a" / "data" / "other",
    }
    for name in trained_on:
        (tmp_path / "b" / "runs" / name).mkdir(parents=True)
    opened = lambda d: argparse.Namespace(  # noqa: E731  (a run's train args, nothing else)
        name=d.name, train_args=argparse.Namespace(data_root=str(trained_on[d.name]))
    )
    monkeypatch.setattr(suite.TrainedRun, "open", opened)
    runs = suite.finished_runs(tmp_path / "b", {"alt": tmp_path / "a" / "data" / "alt_9"})
    assert [(family, run.name) for family, run in runs] == [("alt", "model_1"), ("alt", "model_2")]
