"""benchmarks/rerank_pilot.py's own logic (it runs by hand): which configs it keeps as a
kernel's candidates and the table it writes from its results."""

from __future__ import annotations

import argparse

import numpy as np
from conftest import load_benchmark

rerank = load_benchmark("rerank_pilot")


def test_candidates_are_config_0_then_the_first_stages_best_others_in_its_order():
    scores = np.array([0.5, 3.0, -1.0, 0.2, -1.0, 9.0])  # ties keep file order
    np.testing.assert_array_equal(rerank.candidates(scores, 3), [0, 2, 4, 3])
    np.testing.assert_array_equal(rerank.candidates(scores, 10), [0, 2, 4, 3, 1, 5])


def test_the_table_gives_mean_and_std_over_seeds_and_a_dash_where_an_old_file_has_no_column(
    tmp_path,
):
    rows = [
        dict(family="roofline", seed=s, stage1="bare", default=0.05, first=f, second=0.1, perfect=0)
        for s, f in ((0, 0.02), (1, 0.04))
    ]
    rows = [dict(r, first_rule=0.03, second_rule=0.05) for r in rows]
    rows.append(dict(family="inference", seed=0, stage1="bare", default=0.06, first=0.06,
                     second=0.06, perfect=0.01))  # fmt: skip
    args = argparse.Namespace(
        top=15, model_kwargs_json="{}", epochs=30, early_stop=20, folds=2, second_flags=""
    )
    rerank.write_table(rows, args, tmp_path / "t.md")
    text = (tmp_path / "t.md").read_text()
    assert (
        "| roofline | bare | 0,1 | 0.0500 +- 0.0000 | 0.0300 +- 0.0100 | 0.0300 +- 0.0000 "
        "| 0.1000 +- 0.0000 | 0.0500 +- 0.0000 | 0.0000 +- 0.0000 |" in text
    )
    assert "| inference | bare | 0 | 0.0600 +- 0.0000 | 0.0600 +- 0.0000 | - |" in text
    assert "--top 15" in text and "--folds 2" in text and "out of fold" in text


def test_the_rule_keeps_config_0_within_the_margin_fitted_on_the_other_folds_where_it_pays():
    # Ten kernels: config 0 is 10% slow and the model's other pick is the fastest where the
    # gap is large (2.0), but 50% slow where the gap is small (0.1): a margin between the two
    # gaps, fitted on the other folds, switches on the large gaps alone.
    large = (np.array([1.1, 1.0, 1.3]), np.array([2.0, 0.0, 1.0]))
    small = (np.array([1.1, 1.5, 1.3]), np.array([0.1, 0.0, 1.0]))
    kernels = [large if i % 2 else small for i in range(10)]
    assert rerank.rule_picks(kernels) == [0, 1] * 5
    # Where no margin beats the scores' own picks (every other pick the fastest), those stay.
    assert rerank.rule_picks([large] * 10) == [1] * 10


def test_link_split_links_only_the_named_files_to_their_source(tmp_path):
    source = tmp_path / "src"
    (source / "train").mkdir(parents=True)
    for i in range(5):
        (source / "train" / f"k{i}.npz").write_bytes(b"x")
    names = sorted(f.name for f in (source / "train").glob("*.npz"))
    rerank.link_split(source / "train", tmp_path / "fold0" / "train", names[1::2])
    linked = sorted(f.name for f in (tmp_path / "fold0" / "train").iterdir())
    assert linked == ["k1.npz", "k3.npz"]
    assert (tmp_path / "fold0" / "train" / "k1.npz").read_bytes() == b"x"
