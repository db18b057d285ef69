"""benchmarks/families.py's cross-checks on upstream's real fixture: reading it, and the
leave-one-kernel-out ridge (the benchmark itself runs by hand)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import load_benchmark


@pytest.fixture(scope="module")
def families():
    return load_benchmark("families")


def _run(tile: float, ns: float, *, default=False, error=False) -> dict:
    row = [0.0] * 24
    row[8] = row[14] = float(tile)
    return {
        "config_feat_24": row,
        "compute_time_ns": float(ns),
        "is_default": default,
        "error": error,
    }


def _fixture(path: Path, kernels: list[list[dict]], normalisers: list[float]) -> Path:
    pairs = enumerate(zip(kernels, normalisers))
    doc = {
        "kernels": [{"name": f"k{i}", "normalizer_default_ns": n, "runs": r} for i, (r, n) in pairs]
    }
    path.write_text(json.dumps(doc))
    return path


def test_fixture_kernels_put_the_default_first_and_drop_failed_runs(families, tmp_path):
    runs = [_run(2, 50), _run(4, 40, default=True), _run(8, 0, error=True), _run(1, 1), _run(3, 60)]
    ((cfg, ratio),) = families.fixture_kernels(_fixture(tmp_path / "f.json", [runs], [40.0]))
    assert cfg[:, 14].tolist() == [4, 2, 3]  # the default, then file order; failed runs out
    np.testing.assert_allclose(ratio, [1.0, 50 / 40, 60 / 40])


def test_leave_one_out_ridge_learns_a_rule_shared_by_the_kernels(families, tmp_path):
    # In every kernel a bigger output tile is faster, whatever its scale: a config-only rule.
    rng = np.random.default_rng(0)
    kernels = []
    for k in range(6):
        tiles = rng.permutation(np.arange(1, 9)) * (k + 1)
        kernels.append([_run(t, 1000.0 / t, default=i == 0) for i, t in enumerate(tiles)])
    kernels.append([_run(1, 5.0, default=True), _run(2, 3.0)])  # too few configs to score
    fixture = families.fixture_kernels(
        _fixture(
            tmp_path / "f.json", kernels, [1000.0 / k[0]["config_feat_24"][14] for k in kernels]
        )
    )
    out = families.fixture_rankers(fixture)
    assert (out["kernels"], out["scored"], out["configs"]) == (7, 6, [8] * 6)
    assert out["ridge, other fixture kernels"]["top1"] == 0.0
    assert out["random"]["top1"] > 0.1 and out["default"]["top1"] > 0.1
