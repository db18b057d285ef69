"""benchmarks/config_bottleneck.py's own logic on hand-made kernels (it runs by hand): the
per-dimension features of a hand-worked kernel, its errors, the ridges, the table written from
a results file and the one line for bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import load_benchmark

from tpu_tiles_models.synthetic.features import COL_ELEM_TYPE, COL_IS_ROOT, COL_LAYOUT, COL_SHAPE


@pytest.fixture(scope="module")
def bottleneck():
    return load_benchmark("config_bottleneck")


def hand_kernel() -> dict[str, np.ndarray]:
    """A parameter feeding an f32 add of shape (10, 300), the root, laid out with dim 1 minor
    (granules 8 x 128): 2 x 3 units of output. Two configs: output bounds (1, 2) with kernel
    bound 3, and (2, 5), whose 5 is past the 3 units of dim 1."""
    node_feat = np.zeros((2, 140), np.float32)
    for i in range(2):
        node_feat[i, COL_SHAPE : COL_SHAPE + 2] = (10, 300)
        node_feat[i, COL_SHAPE + 6 : COL_SHAPE + 8] = (310, 3000)  # sum, product
        node_feat[i, COL_ELEM_TYPE + 11] = 1  # f32
        node_feat[i, COL_LAYOUT : COL_LAYOUT + 2] = (1, 0)  # minor_to_major
    node_feat[1, COL_IS_ROOT] = 1
    config_feat = np.zeros((2, 24), np.float32)
    config_feat[0, [0, 8, 9]] = (3, 1, 2)
    config_feat[1, [8, 9]] = (2, 5)
    return dict(
        node_feat=node_feat,
        node_opcode=np.array([63, 2], np.int32),  # parameter, add
        edge_index=np.array([[1, 0]], np.int32),
        config_feat=config_feat,
    )


def test_the_output_is_read_slot_by_slot_from_its_minor_dim(bottleneck):
    k = hand_kernel()
    columns, shape, granule, elem_bytes = bottleneck.output_geometry(
        k["node_feat"], k["node_opcode"], k["edge_index"]
    )
    assert columns.tolist() == [9, 8, 10, 11, 12, 13]  # dim 1's bound first, then dim 0's
    assert shape.tolist() == [300, 10, 1, 1, 1, 1]
    assert granule.tolist() == [128, 8, 1, 1, 1, 1]
    assert elem_bytes == 4


def test_the_features_of_a_hand_worked_kernel(bottleneck):
    k = hand_kernel()
    geometry = bottleneck.output_geometry(k["node_feat"], k["node_opcode"], k["edge_index"])
    f = bottleneck.perdim_features(k["config_feat"], *geometry)
    assert f.shape == (2, 3 * 6 + 4 + 12)
    tiles, waste, ratio, whole, bounds = f[:, :6], f[:, 6:12], f[:, 12:18], f[:, 18:22], f[:, 22:]
    # Config 0: dim 1, 2 of 3 units of 128 -> 2 tiles of 256 over 300; dim 0, 1 of 2 units of
    # 8 -> 2 tiles of 8 over 10. A tile of 256 x 8 f32 elements: 8 KiB, 4 of them.
    assert np.exp(tiles[0]) == pytest.approx([2, 2, 1, 1, 1, 1])
    assert waste[0] == pytest.approx([2 * 256 / 300 - 1, 2 * 8 / 10 - 1, 0, 0, 0, 0])
    assert ratio[0] == pytest.approx([math.log(256 / 300), math.log(8 / 10), 0, 0, 0, 0])
    assert whole[0] == pytest.approx(
        [math.log(4), (512 / 300) * 1.6 - 1, math.log(2048), math.log(8192)]
    )
    assert bounds[0] == pytest.approx([math.log(4)] + [0] * 11)
    # Config 1: dim 1's bound 5 counts as its 3 units (one tile of 384); dim 0, one of 16.
    assert np.exp(tiles[1]) == pytest.approx([1, 1, 1, 1, 1, 1])
    assert waste[1] == pytest.approx([384 / 300 - 1, 16 / 10 - 1, 0, 0, 0, 0])
    assert whole[1] == pytest.approx(
        [0, (384 / 300) * 1.6 - 1, math.log(384 * 16), math.log(384 * 16 * 4)]
    )
    designs = bottleneck.designs(k)
    assert {name: d.shape for name, d in designs.items()} == dict(
        raw=(2, 48), perdim=(2, 68), both=(2, 116)
    )
    assert designs["perdim"][:, 34:] == pytest.approx(f**2)


def test_the_errors_of_one_kernel(bottleneck):
    # Runtime / normaliser of six configs; the fastest is config 2 (1.0).
    ratios = np.array([1.2, 2.0, 1.0, 1.5, 1.1, 3.0])
    # Ranked first: config 3 (1.5); config 2 is in the top 5.
    assert bottleneck.kernel_errors(ratios, np.array([5.0, 1, 4, 0, 2, 3])) == pytest.approx(
        {1: 0.5, 5: 0.0}
    )
    # Config 2 ranked last: the best of the top 5 is config 4 (1.1).
    assert bottleneck.kernel_errors(ratios, np.array([0.0, 1, 9, 3, 2, 4])) == pytest.approx(
        {1: 0.2, 5: 0.1}
    )
    # `default`: config 0 first, then random; its top-1 is config 0's alone.
    errors = bottleneck.default_errors([ratios, np.array([1.0, 2.0])])
    assert errors[1] == pytest.approx((0.2 + 0.0) / 2)
    assert bottleneck.mean_errors([{1: 0.5, 5: 0.0}, {1: 0.1, 5: 0.2}]) == pytest.approx(
        {1: 0.3, 5: 0.1}
    )


def test_the_pooled_ridge_ranks_an_exact_relation_in_every_kernel(bottleneck):
    # log runtime = 2 x0 - x1 + a per-kernel offset the ridge never sees (centred per kernel).
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(n, 2)) for n in (5, 40, 7)]
    ys = [x @ [2.0, -1.0] + offset for x, offset in zip(xs, (3.0, -8.0, 0.5))]
    model = bottleneck.fit_ridge(xs, ys, alpha=0.0)
    for x, y in zip(xs, ys):
        pred = bottleneck.predict(model, x)
        assert pred - pred.mean() == pytest.approx(y - y.mean())


def test_the_own_kernel_ridge_puts_its_folds_on_one_scale(bottleneck):
    # Out-of-fold scores of an exact relation are the runtimes' logs themselves: each fold
    # gets its intercept, so configs of the two folds compare.
    x = np.random.default_rng(1).normal(size=(30, 3))
    y = x @ [1.0, -0.5, 0.25] + 4.0
    scores = bottleneck.own_kernel_scores(x, y)
    assert scores == pytest.approx(y, abs=0.05)  # OWN_ALPHA shrinks them a little
    assert np.argsort(scores)[:3].tolist() == np.argsort(y)[:3].tolist()
    # Too few configs to split: file order.
    assert bottleneck.own_kernel_scores(x[:3], y[:3]).tolist() == [0.0, 0.0, 0.0]


RANKERS = ("default", "floor", "raw", "perdim", "both", "own_raw", "own_perdim", "own_both")


def _row(family, split, seed, **errors):
    """A results row: every ranker's error 0.01 but those given."""
    row = dict(family=family, seed=seed, split=split, kernels=100, configs=210.0 + seed)
    for name in RANKERS:
        for k in (1, 5):
            row[f"{name}_top{k}"] = errors.get(name, 0.01)
    if family.endswith("-shuffled"):
        row = {k: v for k, v in row.items() if not k.startswith("default_")}
    return row


def test_the_table_comes_from_the_results_file(bottleneck, tmp_path):
    assert bottleneck.RANKERS == RANKERS  # the columns of the rows below
    rows = [
        _row("alt", "valid", 0, default=0.10, floor=0.00, raw=0.20, perdim=0.06),
        _row("alt", "valid", 1, default=0.14, floor=0.02, raw=0.30, perdim=0.04),
        _row("alt-shuffled", "valid", 0),
    ]
    (tmp_path / "bottleneck.json").write_text(json.dumps(dict(command="cmd", rows=rows)))
    bottleneck.main(["--out", str(tmp_path), "--tabulate"])
    table = (tmp_path / "bottleneck.md").read_text()
    assert table.startswith("`cmd`\n")
    assert (
        "| alt | valid | 100 (210) | 0.120 +- 0.028 | 0.010 +- 0.014 | 0.250 +- 0.071 | "
        "0.050 +- 0.014 | 0.010 +- 0.000 | 0.010 +- 0.000 | 0.010 +- 0.000 | 0.010 +- 0.000 |"
    ) in table
    # One seed: no std; no default on a shuffled copy.
    assert "| alt-shuffled | valid | 100 (210) | - | 0.010 | 0.010 |" in table
    # Gap shares: (0.12 - 0.25) / (0.12 - 0.01) and (0.12 - 0.05) / 0.11.
    assert "| alt | -1.18 | 0.64 | 1.00 | 1.00 | 1.00 | 1.00 |" in table


def test_tabulating_needs_the_results_file(bottleneck, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        bottleneck.main(["--out", str(tmp_path), "--tabulate"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        f"bottleneck: no results file {tmp_path / 'bottleneck.json'}: run without --tabulate "
        "first\n"
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "--work is required to score (the data sets are made and kept there)"),
        (
            ["--work", "w", "--families", "alt,nope"],
            "--families: no family nope; use some of roofline,alt,fusion,inference,archetype",
        ),
        (
            ["--work", "w", "--seeds", "0,x"],
            "--seeds: give data seeds as integers, e.g. 0,1,2 (got '0,x')",
        ),
        (
            ["--work", "w", "--valid", "0"],
            "--train, --valid and --test need at least 1 kernel, --max_configs 0 or more",
        ),
    ],
)
def test_bad_flags_are_one_line_before_any_work(bottleneck, tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        bottleneck.main([*argv, "--out", str(tmp_path)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == f"bottleneck: {message}\n"
    assert not list(tmp_path.iterdir())  # nothing made, nothing written
