"""benchmarks/rule_rescore.py's table (it runs by hand, on trained runs)."""

from __future__ import annotations

import argparse

from conftest import load_benchmark

rescore = load_benchmark("rule_rescore")


def test_the_table_gives_then_and_now_over_seeds_and_counts_the_always_rules(tmp_path):
    rows = [
        dict(
            family="fusion",
            model="bare",
            seed=s,
            default=0.046,
            then1=t,
            then5=0.008,
            now1=n,
            now5=0.008,
            always=a,
        )  # fmt: skip
        for s, t, n, a in ((0, 0.05, 0.046, True), (1, 0.06, 0.046, True), (2, 0.04, 0.04, False))
    ]
    args = argparse.Namespace(run_id="upstream", name="t")
    rescore.write_table(rows, args, tmp_path / "t.md")
    text = (tmp_path / "t.md").read_text()
    assert (
        "| fusion | bare | 0.0460 | 0.0500 +- 0.0082 | 0.0440 +- 0.0028 | 0.0080 +- 0.0000 "
        "| 0.0080 +- 0.0000 | 2/3 |" in text
    )
    assert text.startswith("`python benchmarks/rule_rescore.py --runs WORK/runs --run_id upstream")
