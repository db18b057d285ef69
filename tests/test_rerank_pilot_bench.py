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


def test_the_table_gives_mean_and_std_over_seeds(tmp_path):
    rows = [
        dict(family="roofline", seed=s, stage1="bare", default=0.05, first=f, second=0.1, perfect=0)
        for s, f in ((0, 0.02), (1, 0.04))
    ]
    args = argparse.Namespace(top=15, model_kwargs_json="{}", epochs=30, early_stop=20)
    rerank.write_table(rows, args, tmp_path / "t.md")
    text = (tmp_path / "t.md").read_text()
    assert (
        "| roofline | bare | 0,1 | 0.0500 +- 0.0000 | 0.0300 +- 0.0100 | 0.1000 +- 0.0000 |" in text
    )
    assert "--top 15" in text
