"""benchmarks/protocol.py's statistics and decision rule on fixed numbers: the paired
per-kernel difference, the bootstrap interval over draws and kernels, and the rule that changes
a default (the protocol itself trains by hand)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.bench

PROTOCOL = Path(__file__).resolve().parents[2] / "benchmarks" / "protocol.py"


@pytest.fixture(scope="module")
def protocol():
    spec = importlib.util.spec_from_file_location("protocol", PROTOCOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules["protocol"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_paired_difference_averages_seeds_then_pairs_kernels(protocol):
    arm = {0: {0: np.array([0.1, 0.2]), 1: np.array([0.3, 0.2])}, 1: {0: np.array([0.0])}}
    ref = {0: {0: np.array([0.2, 0.2]), 1: np.array([0.1, 0.4]), 2: np.array([9.0, 9.0])}}
    diffs = protocol.paired_differences(arm, ref)
    # Draw 1 has no reference; seed 2 has no arm run: both left out.
    assert list(diffs) == [0]
    np.testing.assert_allclose(diffs[0], [0.2 - 0.15, 0.2 - 0.3])
    assert protocol.mean_over(diffs) == pytest.approx(-0.025)
    with pytest.raises(ValueError, match="2 kernels against 3"):
        protocol.paired_differences({0: {0: np.zeros(2)}}, {0: {0: np.zeros(3)}})


def test_the_bootstrap_interval_over_draws_and_kernels(protocol):
    # Constant differences: no spread, the interval is the point.
    assert protocol.bootstrap({0: np.full(5, 0.02), 1: np.full(7, 0.02)}) == pytest.approx(
        (0.02, 0.02)
    )
    # One draw of kernels 0 and 1: a resampled mean is 0, 1/2 or 1 with odds 1/4, 1/2, 1/4,
    # so the 90% interval runs from 0 to 1, and a 40% one is the middle value alone.
    assert protocol.bootstrap({0: np.array([0.0, 1.0])}) == (0.0, 1.0)
    assert protocol.bootstrap({0: np.array([0.0, 1.0])}, level=0.4) == (0.5, 0.5)
    # Two draws, each constant: only resampling the draws spreads the mean (0, 1/2 or 1).
    assert protocol.bootstrap({0: np.zeros(3), 1: np.ones(3)}) == (0.0, 1.0)
    # Seeded: the same numbers give the same interval; a wider level a wider one.
    rng = np.random.default_rng(3)
    diffs = {0: rng.normal(-0.01, 0.05, 300), 1: rng.normal(-0.02, 0.05, 300)}
    assert protocol.bootstrap(diffs) == protocol.bootstrap(diffs)
    lo, hi = protocol.bootstrap(diffs)
    lo99, hi99 = protocol.bootstrap(diffs, level=0.99)
    assert lo99 <= lo < protocol.mean_over(diffs) < hi <= hi99


def _c(protocol, family, column, ref, low, high, arm="new"):
    return protocol.Comparison(arm, family, column, ref, (low + high) / 2, low, high, 2, 600)


def test_the_decision_rule(protocol):
    c = lambda *a, **k: _c(protocol, *a, **k)  # noqa: E731
    ok = [
        c("archetype", "top5", 0.10, -0.03, -0.01),
        c("archetype-shuffled", "top5", 0.12, -0.02, -0.001),
        # Margins: top-5 10% of the reference's (0.005 here), top-1 +0.003 where
        # config 0 is the compiler's default.
        c("alt", "top5", 0.05, -0.01, 0.005),
        c("alt", "top1", 0.14, -0.01, 0.003),
        c("alt-shuffled", "top5", 0.20, -0.01, 0.019),
        # No top-1 margin where config 0 is not the default (archetype, shuffled copies).
        c("archetype", "top1", 0.3, 0.0, 0.05),
        c("alt-shuffled", "top1", 0.5, 0.0, 0.05),
    ]
    assert protocol.decide(ok) == {"new": "CHANGE"}
    worse = [
        ok[0],
        c("archetype-shuffled", "top5", 0.12, -0.02, 0.001),  # the interval holds 0
        c("alt", "top5", 0.05, -0.01, 0.0051),
        c("alt", "top1", 0.14, -0.01, 0.0031),
    ]
    (verdict,) = protocol.decide(worse).values()
    assert verdict == (
        "KEEP: top-5 on archetype-shuffled not lower (interval -0.0200 to +0.0010); "
        "top5 on alt may be worse by +0.0051 (margin 0.0050); "
        "top1 on alt may be worse by +0.0031 (margin 0.0030)"
    )
    (missing,) = protocol.decide([ok[0]]).values()
    assert missing == "KEEP: no top-5 comparison on archetype-shuffled"


def test_the_verdict_table_says_when_an_interval_does_not_tell(protocol):
    cs = [
        _c(protocol, "archetype", "top5", 0.1, -0.02, 0.01),
        _c(protocol, "archetype-shuffled", "top5", 0.1, -0.02, -0.01),
        _c(protocol, "fusion", "top5", 0.05, 0.001, 0.009),
    ]
    lines = protocol.verdict_table(cs, "bare32")
    assert lines[2] == (
        "| new | archetype | top5 | 0.1000 | -0.0050 | -0.0200 to +0.0100 | 0.0100 "
        "| does not tell |"
    )
    assert lines[3].endswith("| -0.0200 to -0.0100 | 0.0100 | lower |")
    assert lines[4].endswith("| 0.0050 | higher; may be worse than the margin |")
    assert lines[-1].startswith("- new as the default (against bare32): KEEP: top-5 on archetype")


def test_the_heldout_split_is_the_test_split_with_its_runtimes(protocol, tmp_path):
    from tpu_tiles_models import synthetic

    root = tmp_path / "roofline"
    synthetic.generate(
        root, train=2, valid=2, test=3, seed=4, max_configs=20, family="roofline", progress=False
    )
    heldout = protocol.write_heldout(root, "roofline", seed=4, kernels=5, max_configs=20)
    assert heldout == tmp_path / "roofline.heldout"
    made = sorted(p.name for p in (heldout / "test").glob("*.npz"))
    shipped = sorted(p.name for p in (root / "test").glob("*.npz"))
    assert len(made) == 5 and set(shipped) <= set(made)
    for name in made:
        with np.load(heldout / "test" / name) as z:
            assert np.all(z["config_runtime"] > 0)  # labelled
            if name in shipped:
                with np.load(root / "test" / name) as t:
                    assert not np.any(t["config_runtime"])  # the data set's test: zeros
                    for key in ("config_feat", "node_feat", "config_runtime_normalizers"):
                        np.testing.assert_array_equal(z[key], t[key])
    # Kept when present; made with other flags than the data set's, refused.
    assert protocol.write_heldout(root, "roofline", seed=4, kernels=5, max_configs=20) == heldout
    shutil.rmtree(heldout)
    with pytest.raises(RuntimeError, match="not the kernel the generator makes again"):
        protocol.write_heldout(root, "roofline", seed=4, kernels=5, max_configs=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["roofline"]  # nothing half-made


def test_one_run_of_the_protocol_end_to_end(protocol, tmp_path):
    """A child trains one arm with its held-out curve and writes every figure the tables read."""
    import json

    from tpu_tiles_models import synthetic

    root = tmp_path / "roofline"
    made = dict(seed=4, max_configs=12, family="roofline", progress=False)
    synthetic.generate(root, train=6, valid=4, test=2, **made)
    heldout = protocol.write_heldout(root, "roofline", seed=4, kernels=5, max_configs=12)
    a = protocol.parse_args(["--work", str(tmp_path / "w"), "--epochs", "2"])
    args = dict(protocol.point_args(a, "geo32", root, 0, tmp_path / "w"), batch=2)
    out = protocol.score_path(tmp_path / "w", "geo32", "roofline", 4, 0)
    spec = dict(args=args, heldout=str(heldout), curve_every=1, out=str(out))
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    protocol.child(str(tmp_path / "spec.json"))
    result = json.loads(out.read_text())
    assert len(result["tile_ids"]) == len(result["top5"]) == len(result["top1_default"]) == 5
    assert [c["epoch"] for c in result["curve"]] == [1, 2]
    assert all(0.0 <= e < 100.0 for e in result["top5"] + result["top1"] + result["top5_scores"])
    assert len(result["epoch_cpu_seconds"]) == 2 and result["steps_per_epoch"] >= 1
    # The weight-averaged candidates' pick, ranked by its own rule, on the same kernels.
    assert len(result["top1_averaged"]) == len(result["top5_averaged"]) == 5
    scores = {("geo32", "roofline", 4, 0): result}
    (line,) = protocol.averaged_table(scores)[2:]
    assert line.startswith("| geo32 | roofline | ") and line.count("|") == 8
    # The noise-free floor: each kernel ranked by the generator's own runtimes, never worse
    # than the compiler's pick, and the pick's share of that gap.
    floor = protocol.floor_errors("roofline", 4, heldout)
    assert sorted(floor) == sorted(result["tile_ids"])
    assert min(floor.values()) >= 0.0
    assert np.mean(list(floor.values())) <= np.mean(result["top1_default"])
    (row,) = protocol.floor_table(scores, {("roofline", 4): root})[2:]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:3] == ["geo32", "roofline", "1"]
    pick, compiler, fl = map(float, cells[3:6])
    assert pick == round(np.mean(result["top1"]), 4)
    assert compiler == round(np.mean(result["top1_default"]), 4)
    assert fl == round(np.mean(list(floor.values())), 4)


def test_the_summary_gives_each_arm_its_intervals_cost_and_verdict(protocol):
    """The few lines the docs include: the reference's error, then per arm its paired top-5
    difference on each family and copy, its CPU over the reference's and the rule's word."""
    rng = np.random.default_rng(0)
    scores = {}
    for family in ("archetype", "archetype-shuffled"):
        for draw in (0, 1):
            base = rng.uniform(0.1, 0.2, size=300)
            for arm, shift, cpu in (("bare32", 0.0, 1.0), ("w48geo", -0.05, 1.5)):
                scores[arm, family, draw, 0] = dict(
                    top5=(base + shift).tolist(),
                    top1=(2 * base).tolist(),
                    epochs=2,
                    epoch_cpu_seconds=[cpu, cpu],
                )
    a = protocol.parse_args(["--work", "w", "--arms", "bare32,w48geo", "--name", "p"])
    lines = protocol.summary_table(a, scores).splitlines()
    assert "(2 draws, training seeds [0]; 90% interval)" in lines[0]
    assert "(../benchmarks/results/p.md)" in lines[0]
    assert lines[2] == "| arm | archetype | archetype-shuffled | CPU / bare32's | verdict |"
    assert lines[4].startswith("| bare32 | 0.1") and lines[4].endswith("| 1.00 | the default |")
    # A shift of -0.05 on every kernel: the interval is the point, and both primary cells win.
    assert lines[5] == (
        "| w48geo | -0.050 (-0.050 to -0.050) | -0.050 (-0.050 to -0.050) | 1.50 | CHANGE |"
    )
