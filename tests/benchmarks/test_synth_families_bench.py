"""benchmarks/lib/synth_families: the suite's generator families beside the package's `roofline`
(`alt`, `fusion`, `inference`, `archetype`), registered with the generator: each one's output
frozen, the checks every family passes (tests/test_synthetic.py's), and what sets each one
apart."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import test_synthetic as package
from conftest import REPO, benchmark_families
from test_synthetic import _kernels, _tree_digest

from tpu_tiles_models import synthetic
from tpu_tiles_models.synthetic import features

FAMILIES = benchmark_families()
NAMES = [f.name for f in FAMILIES.FAMILIES]
# The families whose config 0 is the compiler's default (`archetype`'s is an ordinary tile,
# and so is `drawn`'s on even data seeds).
DEFAULT_FIRST = [name for name in NAMES if name not in ("archetype", "drawn")]
pytestmark = pytest.mark.filterwarnings("ignore::tpu_tiles_models.synthetic.ValidationSplitWarning")
# As `test_synthetic.FROZEN_DIGESTS` (alt re-frozen with roofline when their runtimes got the
# real spread; inference frozen when it was added), and unchanged by their move out of the
# package.
FROZEN_DIGESTS = {
    "alt": "7a349896b0dc20a6d2effb952d3d5ea3205ddc6c67a77b8ba32a6794a09ce811",
    "fusion": "a05423fe2418babd187e1f57c7d50bf6f20df785a927dc9f4f58781ae9907707",
    "inference": "168d67b2f48cbe62f7478fd88a7aecb48dc57cc059e7a04443eaef97808ef886",
    "archetype": "66da069dcf0bd6e0c51cb45611ada78579ae424b9556e65e1d8dca84e7eccc20",
    "drawn": "bba369f2279ac081b79a71e7101ab650f55d93968afa6f6e68703b686eb72dd7",
}


def test_the_families_are_registered_in_the_suites_order() -> None:
    assert NAMES == ["alt", "fusion", "inference", "archetype", "drawn"] == list(FROZEN_DIGESTS)
    assert list(synthetic.FAMILIES)[:6] == ["roofline", *NAMES]
    assert all(synthetic.get_family(f.name) is f for f in FAMILIES.FAMILIES)


def test_a_child_process_finds_the_families_and_no_benchmark_script(tmp_path: Path) -> None:
    """Importing the families sets PYTHONPATH for the processes a benchmark starts (Beam's
    workers unpickle the families' functions by module name) to their folder alone: a child
    started as the suite starts its sweep (this Python, this environment) imports them, and
    no benchmark script's name shadows a module of that name there (benchmarks/bottleneck.py
    once hid pandas' `bottleneck` and broke TensorFlow's import in a training child)."""
    scripts = sorted(p.stem for p in (REPO / "benchmarks").glob("*.py"))
    assert {"suite", "families", "synth", "journeys"} <= set(scripts)
    child = (
        "import importlib.util, sys\n"
        "import synth_families\n"
        "print(sorted(synth_families.__path__))\n"
        "print([m for m in sys.argv[1:] if importlib.util.find_spec(m) is not None])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child, *scripts], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        repr([str(REPO / "benchmarks" / "lib" / "synth_families")]),
        "[]",
    ]


@pytest.mark.parametrize("family", NAMES)
def test_family_output_is_frozen(tmp_path: Path, family: str) -> None:
    assert package.frozen_digest(tmp_path, family) == FROZEN_DIGESTS[family]


def test_worker_processes_write_what_one_process_writes(tmp_path: Path) -> None:
    """Beam's workers make a benchmark family's kernels too: they import its functions by
    module name (through the PYTHONPATH the package sets), byte for byte the same files."""
    kwargs = dict(train=5, valid=3, test=2, seed=4, max_configs=30, family="fusion", progress=False)
    serial = synthetic.generate(tmp_path / "serial", num_workers=1, **kwargs)
    parallel = synthetic.generate(tmp_path / "parallel", num_workers=2, **kwargs)
    assert (serial["workers"], parallel["workers"]) == (1, 2)
    assert serial["configs"] == parallel["configs"] > 10
    assert _tree_digest(tmp_path / "serial") == _tree_digest(tmp_path / "parallel")


@pytest.fixture(scope="module")
def ranked_roots(tmp_path_factory) -> dict[str, Path]:
    """`test_synthetic.ranked` trees, one per family, `roofline` too."""
    return {
        family: package.ranked(tmp_path_factory.mktemp(f"ranked_{family}"), family)
        for family in ["roofline", *NAMES]
    }


@pytest.mark.parametrize("family", DEFAULT_FIRST)
def test_config_zero_is_the_default(ranked_roots: dict[str, Path], family: str) -> None:
    package.check_config_zero_is_the_default(ranked_roots[family])


# `drawn`'s cost model is its data seed's, which `Family.runtime` is not given (seed 0's):
# `test_drawn_draws_a_core_and_a_log_per_data_seed` checks it with the seed.
@pytest.mark.parametrize("family", [name for name in NAMES if name != "drawn"])
def test_rank_is_predictable_from_features(ranked_roots: dict[str, Path], family: str) -> None:
    package.check_rank_is_predictable_from_features(ranked_roots[family], family)


@pytest.mark.parametrize("family", NAMES)
def test_default_validation_split_feeds_upstream(tmp_path: Path, family: str) -> None:
    package.check_default_validation_split_feeds_upstream(tmp_path, family)


@pytest.fixture(scope="module")
def tiny_roots(tmp_path_factory) -> dict[str, Path]:
    """`test_synthetic.tiny` trees, one per family, `roofline` too."""
    return {
        family: package.tiny(tmp_path_factory.mktemp(f"tiny_{family}"), family)
        for family in ["roofline", *NAMES]
    }


@pytest.mark.parametrize("family", NAMES)
def test_every_family_loads_in_the_data_pipeline(tiny_roots: dict[str, Path], family: str):
    package.check_loads_in_the_data_pipeline(tiny_roots[family])


@pytest.mark.parametrize("family", NAMES)
def test_every_family_is_deterministic_per_seed(
    tmp_path: Path, tiny_roots: dict[str, Path], family: str
) -> None:
    package.check_deterministic_per_seed(tmp_path, tiny_roots[family], family)


def test_families_differ_on_the_same_seed(tiny_roots: dict[str, Path]) -> None:
    assert len({_tree_digest(root) for root in tiny_roots.values()}) == len(tiny_roots) == 6


def test_cost_models_disagree_on_some_kernels(synth_root: Path) -> None:
    same, corr = [], []
    for _, d in _kernels(synth_root, "train"):
        args = (d["node_feat"], d["node_opcode"], d["edge_index"], d["config_feat"])
        a = synthetic.noise_free_runtime(*args, "roofline")
        b = synthetic.noise_free_runtime(*args, "alt")
        if len(a) >= 10:
            same.append(np.argmin(a) == np.argmin(b))
            corr.append(np.corrcoef(np.argsort(np.argsort(a)), np.argsort(np.argsort(b)))[0, 1])
    assert 0.1 <= np.mean(same) <= 0.9  # related but structurally different
    assert np.median(corr) > 0.3


def _matmul(element_bytes: float, *, n: int, k: int, operand_bytes: float | None = None):
    """An `[8192, n] = [8192, k] x [k, n]` matmul (row-major, no epilogue) and every config
    of its option grid: (geometry, `[c, 24]` config features)."""
    from tpu_tiles_models.synthetic import tiling

    geom = synthetic.KernelGeometry(
        kind="dot",
        out_dims=np.array([8192, n]),
        granule=np.array([8, 128]),
        out_bytes=element_bytes,
        vpu_ops=0.0,
        side_elems=np.zeros(0),
        side_bytes=np.zeros(0),
        main_bytes=element_bytes,
        cin=k,
        operand_bytes=k * n * element_bytes if operand_bytes is None else operand_bytes,
    )
    options = tiling.choices(geom, {})
    grid = np.stack(np.meshgrid(*options, indexing="ij"), -1).reshape(-1, len(options))
    return geom, tiling.config_rows(geom, {}, grid.astype(np.float64))


def _inference_times(geom, cfg: np.ndarray, **hw_changes) -> np.ndarray:
    """`inference`'s runtimes of `cfg`, inf where a tile does not fit the scratchpad."""
    from dataclasses import replace

    from tpu_tiles_models.synthetic import tiling

    cost = FAMILIES.inference.COST
    hw = replace(cost.hw, **hw_changes)
    terms = tiling.tile_terms(geom, cfg, hw)
    return np.where(terms["ws"] <= hw.vmem, cost.time(geom, terms, hw), np.inf)


def test_inference_re_reads_from_cmem() -> None:
    # A memory-bound matmul whose rhs (256 KiB) every row tile re-reads: from the 128 MiB
    # CMEM at four times HBM's bandwidth it costs less, on the best tile too.
    geom, cfg = _matmul(2.0, n=128, k=1024)
    cmem, hbm_only = _inference_times(geom, cfg), _inference_times(geom, cfg, cache=0.0)
    fits = np.isfinite(cmem)
    assert fits.sum() >= 50
    assert np.all(cmem[fits] <= 1.01 * hbm_only[fits])  # a single tile pays CMEM's first fill
    assert np.sum(cmem[fits] < 0.92 * hbm_only[fits]) >= 5  # 8% to 19% faster
    assert cmem.min() < 0.96 * hbm_only.min()
    # An rhs larger than CMEM is re-read from HBM either way.
    geom, cfg = _matmul(2.0, n=128, k=1024, operand_bytes=200 * 2**20)
    np.testing.assert_array_equal(
        _inference_times(geom, cfg), _inference_times(geom, cfg, cache=0.0)
    )


def test_inference_f32_is_far_slower_than_bf16() -> None:
    # bf16 is the only fast matmul path: a compute-bound f32 matmul's best tile is 8x slower
    # on the MXUs with twice the bytes, over 6x in all; roofline's and alt's about 3x.
    best = {b: _inference_times(*_matmul(b, n=1024, k=4096)).min() for b in (2.0, 4.0)}
    assert 6.0 < best[4.0] / best[2.0] < 8.0


def test_inference_draws_its_own_mix(ranked_roots: dict[str, Path]) -> None:
    # On the same seed and programs, inference draws fewer convolutions and more matmuls than
    # roofline (the programs' mixes tilted toward an inference graph's), mostly in bf16.
    from tpu_tiles_models.synthetic.features import COL_ELEM_TYPE, ELEM_TYPES

    bf16_column = COL_ELEM_TYPE + ELEM_TYPES["bf16"][0]

    def mix(family: str) -> tuple[Counter, float]:
        """Main-op kinds, and the share of kernels whose first input is bf16."""
        kinds, bf16 = Counter(), []
        for _, d in _kernels(ranked_roots[family], "train"):
            geom = synthetic.kernel_geometry(d["node_feat"], d["node_opcode"], d["edge_index"])
            kinds[geom.kind] += 1
            bf16.append(d["node_feat"][0, bf16_column] == 1)
        return kinds, float(np.mean(bf16))

    (ours, our_bf16), (theirs, their_bf16) = mix("inference"), mix("roofline")
    assert ours["conv"] < 0.8 * theirs["conv"] and ours["dot"] > 1.3 * theirs["dot"]
    assert our_bf16 >= 0.5 > 0.35 >= their_bf16


def _uncapped(factory, family: str, train: int) -> list[dict[str, np.ndarray]]:
    """The train kernels of an uncapped `family` set of `train` kernels (seed 0)."""
    root = factory.mktemp(family)
    synthetic.generate(root, train=train, valid=0, test=0, seed=0, family=family, progress=False)
    return [d for _, d in _kernels(root, "train")]


@pytest.fixture(scope="module")
def archetype_kernels(tmp_path_factory) -> list[dict[str, np.ndarray]]:
    """An uncapped archetype set, for its config counts and config 0."""
    return _uncapped(tmp_path_factory, "archetype", 60)


def test_archetype_logs_12_to_400_configs(
    archetype_kernels: list[dict[str, np.ndarray]], tmp_path: Path
) -> None:
    counts = np.array([len(d["config_feat"]) for d in archetype_kernels])
    assert counts.min() >= 12 and counts.max() <= 400
    assert counts.min() < 20 and counts.max() > 250 and 40 <= np.median(counts) <= 120
    kwargs = dict(train=20, valid=0, test=0, seed=0, max_configs=30, progress=False)
    synthetic.generate(tmp_path, family="archetype", **kwargs)
    capped = [len(d["config_feat"]) for _, d in _kernels(tmp_path, "train")]
    assert max(capped) == 30 and min(capped) >= 12


def test_archetype_config_zero_is_an_ordinary_tile(
    archetype_kernels: list[dict[str, np.ndarray]],
) -> None:
    # Config 0 is drawn like every other tile: as often fast as slow, rarely the fastest,
    # and not the compiler's default that every normaliser re-measures.
    faster, fastest, normaliser = [], [], []
    for d in archetype_kernels:
        rt, norm = d["config_runtime"].astype(np.float64), d["config_runtime_normalizers"]
        faster.append(np.mean(rt < rt[0]))
        fastest.append(rt[0] <= rt.min())
        normaliser.append(abs(rt[0] / norm[0] - 1) < 0.05)
    assert 0.35 <= np.mean(faster) <= 0.65
    assert np.mean(fastest) <= 0.1 and np.mean(normaliser) <= 0.2


def _archetype_matmul(lhs_pad: tuple[int, int]):
    """`_matmul`'s bf16 [8192, 1024] x [1024, 1024] as an `archetype` kernel whose lhs is
    padded to `lhs_pad` ((8, 128) row-major, (128, 8) with its rows minor), and every config
    of its grid: (archetype, `[c, 24]` config features)."""
    arch = FAMILIES.archetype
    geom, cfg = _matmul(2.0, n=1024, k=1024)
    lhs = arch.Operand(np.array([8192, 1024]), np.array(lhs_pad), 2.0, np.array([-1, -1]))
    rhs = arch.Operand(np.array([1024, 1024]), np.array([8, 128]), 2.0, np.array([-1, -1]))
    return arch.Archetype(geom, (lhs, rhs), ()), cfg


def test_archetype_pads_operands_to_8_by_128() -> None:
    row_major, cfg = _archetype_matmul((8, 128))
    rows_minor, _ = _archetype_matmul((128, 8))
    plain, padded = (FAMILIES.archetype.cost(a, cfg)[0] for a in (row_major, rows_minor))
    rows = cfg[:, features.CFG_OUTPUT] * 8  # lhs rows per tile
    # With its rows minor the lhs moves 128 rows per tile whatever the tile holds: the same
    # cost for tiles of 128 rows or more, more for shorter ones (8 rows: 16 times the bytes).
    np.testing.assert_array_equal(padded[rows % 128 == 0], plain[rows % 128 == 0])
    short = rows == 8
    assert np.all(padded >= plain) and np.all(padded[short] > plain[short])
    assert np.median(padded[short] / plain[short]) > 1.1


def test_archetype_spills_past_the_scratchpad() -> None:
    arch, cfg = _archetype_matmul((8, 128))
    archetype = FAMILIES.archetype
    runtime, ws = archetype.cost(arch, cfg)
    spills = ws > archetype.VMEM
    assert 10 <= spills.sum() < len(cfg) - 10
    roomy_core = dataclasses.replace(archetype.CORE, vmem=1e12)  # nothing overflows it
    roomy = archetype.cost(arch, cfg, roomy_core)[0]
    np.testing.assert_array_equal(roomy[~spills], runtime[~spills])
    assert np.all(roomy[spills] < runtime[spills] / 1.2)  # no overlap, and the excess moved


def test_drawn_draws_a_core_and_a_log_per_data_seed() -> None:
    drawn = FAMILIES.drawn
    (core0, auto0), (core1, auto1) = drawn.core_of(0), drawn.core_of(1)
    assert core0 != core1 and (auto0, auto1) == (False, True)  # odd seeds: the autotuner's log
    assert drawn.core_of(0) == (core0, auto0)  # a function of the seed alone
    for seed in (0, 1):
        rng = np.random.default_rng([seed, 0, 3, 1])  # as `generate` seeds train kernel 3
        assert drawn.data_seed(rng) == seed
        k = drawn.make_kernel(rng)
        measured = k["config_runtime"] / k["config_runtime_normalizers"]
        exact = drawn.runtime(
            k["node_feat"], k["node_opcode"], k["edge_index"], k["config_feat"], seed=seed
        )
        # Its runtimes are its seed's core's, up to the measurement noise (a few %).
        ratio = k["config_runtime"] / exact
        assert np.all(np.abs(np.log(ratio / np.median(ratio))) < 0.1)
        if seed == 1:  # the autotuner's log: config 0 the compiler's default, the normaliser
            assert abs(measured[0] - 1.0) < 0.1
    # The same kernel graph on the other seed's core costs otherwise.
    other = drawn.runtime(
        k["node_feat"], k["node_opcode"], k["edge_index"], k["config_feat"], seed=0
    )
    assert not np.allclose(other, exact)


@pytest.fixture(scope="module")
def fusion_kernels(tmp_path_factory) -> list[dict[str, np.ndarray]]:
    """An uncapped fusion set, for its config-count tail and duplicates."""
    return _uncapped(tmp_path_factory, "fusion", 40)


def test_fusion_config_counts_are_heavy_tailed(
    fusion_kernels: list[dict[str, np.ndarray]], tmp_path: Path
) -> None:
    counts = np.array([len(d["config_feat"]) for d in fusion_kernels])
    assert counts.min() >= 2 and counts.max() >= 1000 and counts.max() / counts.min() > 10
    assert np.median(counts) < counts.mean() / 2  # a long right tail
    synthetic.generate(
        tmp_path,
        train=20,
        valid=0,
        test=0,
        seed=0,
        family="fusion",
        max_configs=100,
        progress=False,
    )
    capped = [len(d["config_feat"]) for _, d in _kernels(tmp_path, "train")]
    assert max(capped) == 100 and min(capped) >= 2


def test_fusion_duplicates_differ_by_measurement_noise(
    fusion_kernels: list[dict[str, np.ndarray]],
) -> None:
    gaps, rows = [], 0
    for d in fusion_kernels:
        cfg, rt = d["config_feat"], d["config_runtime"].astype(np.float64)
        _, first, inverse = np.unique(cfg, axis=0, return_index=True, return_inverse=True)
        dup = np.flatnonzero(first[inverse.reshape(-1)] != np.arange(len(cfg)))
        base = rt[first[inverse.reshape(-1)[dup]]]
        gaps.extend(np.abs(rt[dup] - base) / base)
        rows += len(cfg)
    assert 0.01 <= len(gaps) / rows <= 0.06  # a few re-measured configs
    assert 0.001 <= np.median(gaps) <= 0.01  # about 0.3% apart (0.03% to 4% in the real data)


def test_fusion_graphs_span_the_real_node_range() -> None:
    fusion_graphs = FAMILIES.fusion_graphs
    nodes, edges, ops = [], [], set()
    for i in range(400):
        g, _ = fusion_graphs.build(np.random.default_rng([9, i]), (0.3, 0.2, 0.15, 0.35))
        feat, opcode, edge_index = g.arrays()
        nodes.append(len(opcode))
        edges.append(len(edge_index))
        ops |= set(opcode.tolist())
        assert feat[:, 0].sum() == 1 and np.all(edge_index[:, 0] > edge_index[:, 1])
    assert min(nodes) == 2 and 250 <= max(nodes) <= synthetic.MAX_NODES
    assert 20 <= np.median(nodes) <= 40 and max(edges) <= 2 * max(nodes)
    names = ("reduce-window", "dynamic-slice", "iota", "shift-right-logical", "tuple", "dot")
    assert {synthetic.OPCODES[n] for n in names} <= ops  # op groups roofline never emits
