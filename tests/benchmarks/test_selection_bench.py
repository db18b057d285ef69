"""benchmarks/selection_bench.py's stratified sample of validation kernels (the benchmark
itself runs by hand)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from conftest import load_benchmark


def test_stratified_sample_covers_every_program_and_size_and_weighs_them():
    sample_of = load_benchmark("selection_bench").stratified_sample
    programs = {"a": [3, 5, 50, 5000] * 5, "b": [20] * 30, "c": [2]}
    ids, counts = [], []
    for program, sizes in programs.items():
        ids += [f"{program}_x_{i:04x}" for i in range(len(sizes))]
        counts += sizes
    split = SimpleNamespace(tile_ids=ids, config_counts=lambda: np.array(counts))
    indices, weights = sample_of(split, 0.2, seed=3)
    assert indices == sample_of(split, 0.2, seed=3)[0]  # fixed by its seed
    assert indices != sample_of(split, 0.2, seed=4)[0]
    size_class = np.floor(np.log10(counts))  # 2-9, 10-99, 100-999, 1000+ configs
    strata = [(i[0], c) for i, c in zip(ids, size_class)]
    chosen = [strata[i] for i in indices]
    assert set(chosen) == set(strata)  # each program and size class, at least once
    assert chosen.count(("b", 1)) == 6 and chosen.count(("a", 0)) == 2
    # Weighted, the sample's mean of a per-kernel figure is the whole split's when the figure
    # is constant within each stratum.
    figure = size_class + np.array([ord(i[0]) for i in ids])
    assert np.average(figure[indices], weights=weights) == pytest.approx(figure.mean())
    assert sum(weights) == pytest.approx(len(ids))
    everything, ones = sample_of(split, 1.0, seed=0)
    assert everything == list(range(len(ids))) and (ones == 1).all()
