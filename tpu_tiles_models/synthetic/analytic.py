"""What the `roofline` and `alt` families share: one HLO fusion per kernel, tile configs
sampled like an autotuner, and runtimes from an analytic cost model that reads only the
kernel's features. The two families differ only in their `CostModel`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from tpu_tiles_models.formats import CONFIG_FEAT_DIM
from tpu_tiles_models.synthetic.features import MAX_NODES
from tpu_tiles_models.synthetic.geometry import KernelGeometry, kernel_geometry
from tpu_tiles_models.synthetic.graph import Graph
from tpu_tiles_models.synthetic.kernels import KERNEL_KINDS, finish
from tpu_tiles_models.synthetic.tiling import (
    Hardware,
    autotuner_keep,
    bound_options,
    compilable,
    config_pool,
    config_rows,
    reduce_splits,
    tile_terms,
)

MAX_CONFIGS_DEFAULT = 6000
TimeFn = Callable[[KernelGeometry, dict[str, np.ndarray], Hardware], np.ndarray]


@dataclass(frozen=True)
class CostModel:
    """A simulated TPU core and how it turns tile quantities into nanoseconds.

    Attributes:
        name: the family's name.
        hw: the core's constants.
        time: `(geometry, tile_terms(...), hw) -> [c]` runtimes in ns.
    """

    name: str
    hw: Hardware
    time: TimeFn

    def runtime(self, geom: KernelGeometry, config_feat: np.ndarray) -> np.ndarray:
        """Noise-free runtime in ns of each config row `[c, 24]` of a kernel: `[c]` float64."""
        cfg = np.asarray(config_feat, np.float64).reshape(-1, CONFIG_FEAT_DIM)
        return self.time(geom, tile_terms(geom, cfg, self.hw.mxu_dim), self.hw)


def default_config(
    geom: KernelGeometry, meta: dict[str, Any] | None, cost: CostModel
) -> np.ndarray:
    """The compiler-style default tile of a kernel: `[24]` config features.

    About 64K output elements filled minor dims first, then halved on its largest dim until
    the working set fits half the scratchpad; it ignores compute/memory balance, so it is
    good on some kernels and poor on others.
    """
    rank = len(geom.out_dims)
    units = -(-geom.out_dims // geom.granule)
    b = np.ones(rank, np.int64)
    budget = 65536.0
    for d in np.argsort(-geom.granule, kind="stable"):
        fit = max(int(budget // geom.granule[d]), 1)
        opts = bound_options(int(units[d]))
        b[d] = opts[opts <= fit].max() if (opts <= fit).any() else 1
        budget = max(budget / (b[d] * geom.granule[d]), 1.0)
    meta = meta or {}
    extra = []  # conv input-feature chunk (halved) or reduce split count (doubled)
    if geom.kind == "conv":
        extra = [min(16, -(-geom.cin // 8))]
    elif "reduce" in meta:
        extra = [1]
    while True:
        row = config_rows(geom, meta, np.array([list(b) + extra]))
        if tile_terms(geom, row, cost.hw.mxu_dim)["ws"][0] <= cost.hw.vmem / 2:
            return row[0]
        if b.max() > 1:
            d = int(np.argmax(b))
            b[d] = -(-b[d] // 2)
        elif geom.kind == "conv" and extra[0] > 1:
            extra[0] = -(-extra[0] // 2)
        elif "reduce" in meta and extra[0] < reduce_splits(geom, meta)[-1]:
            extra[0] *= 2
        else:
            return row[0]


def _num_configs(kind: str, rng: np.random.Generator) -> int:
    """Heavy-tailed config count: large for convolutions, small for simple fusions."""
    median = {"conv": 400.0, "dot": 150.0, "reduce": 80.0, "elementwise": 80.0}[kind]
    return int(np.clip(np.round(median * np.exp(1.1 * rng.standard_normal())), 2, 20000))


def make_kernel(
    rng: np.random.Generator,
    cost: CostModel,
    *,
    kind_weights: Sequence[float] = (0.3, 0.2, 0.15, 0.35),
    max_configs: int | None = None,
    min_configs: int = 2,
    labelled: bool = True,
) -> dict[str, np.ndarray]:
    """Builds one kernel's npz arrays.

    Args:
      rng: the kernel's own generator.
      cost: the cost model that times its configs.
      kind_weights: relative odds of conv, dot, reduce and element-wise fusions.
      max_configs: cap on configs (default `MAX_CONFIGS_DEFAULT`).
      min_configs: floor on configs (duplicates fill up small option grids).
      labelled: False writes zero runtimes (the test split).

    Returns:
      The six npz arrays (`formats.REQUIRED_KEYS`; the format is in `formats`).
    """
    kind = list(KERNEL_KINDS)[rng.choice(4, p=np.asarray(kind_weights) / sum(kind_weights))]
    target = int(np.clip(np.round(40.0 * np.exp(0.6 * rng.standard_normal())), 2, MAX_NODES - 1))
    if rng.random() < 0.08:  # tiny fusions (a parameter and one or two ops) are common too
        target = int(rng.integers(2, 8))
    dtype = "bf16" if rng.random() < 0.25 else "f32"
    g = Graph(layout_style=int(rng.choice(3, p=(0.5, 0.35, 0.15))))
    meta = KERNEL_KINDS[kind](g, target, dtype, rng)
    finish(g, meta["root"], rng)
    node_feat, node_opcode, edge_index = g.arrays()
    geom = kernel_geometry(node_feat, node_opcode, edge_index)
    cfg, runtime = _choose_configs(geom, meta, rng, max_configs, min_configs, cost)
    default_cost = cost.runtime(geom, default_config(geom, meta, cost)[None, :])[0]
    c = len(cfg)
    runtime = runtime * np.exp(0.01 * rng.standard_normal(c))
    normalizer = default_cost * np.exp(0.01 * rng.standard_normal(c))
    return {
        "node_feat": node_feat,
        "node_opcode": node_opcode,
        "edge_index": edge_index,
        "config_feat": cfg.astype(np.float32),
        "config_runtime": np.maximum(np.round(runtime), 1).astype(np.int64) * int(labelled),
        "config_runtime_normalizers": np.maximum(np.round(normalizer), 1).astype(np.int64),
    }


def _choose_configs(
    geom: KernelGeometry,
    meta: dict[str, Any],
    rng: np.random.Generator,
    max_configs: int | None,
    min_configs: int,
    cost: CostModel,
) -> tuple[np.ndarray, np.ndarray]:
    """Samples configs like an autotuner: times only tiles that fit the scratchpad, drops
    those far slower than the best seen, adds re-measured duplicates. Returns `[c, 24]`
    configs and their `[c]` noise-free runtimes."""
    want = _num_configs(geom.kind, rng)
    want = min(want, max_configs if max_configs is not None else MAX_CONFIGS_DEFAULT)
    want = max(want, min_configs)
    # Cost the whole option grid when it is small (a random part of it otherwise), so the
    # number kept is limited by the pruning and the wanted count, not by luck.
    pool = config_pool(geom, meta, max(4 * want, min(4096, 32 * want)), rng)
    pool = pool[compilable(tile_terms(geom, pool, cost.hw.mxu_dim)["ws"], cost.hw.vmem)]
    runtime = cost.runtime(geom, pool)
    # Per-kernel pruning threshold gives worst/best spreads of ~3-30x (heavy-tailed).
    spread = float(np.clip(14.0 * np.exp(0.8 * rng.standard_normal()), 2.5, 300.0))
    # ~2% re-measured duplicates, as in real autotuning logs.
    keep = autotuner_keep(runtime, want, min_configs, spread, 0.02, rng)
    return pool[keep], runtime[keep]


def features_runtime(
    cost: CostModel,
    node_feat: np.ndarray,
    node_opcode: np.ndarray,
    edge_index: np.ndarray,
    config_feat: np.ndarray,
) -> np.ndarray:
    """A cost model's noise-free runtime (ns) of each config, from the npz arrays only."""
    return cost.runtime(kernel_geometry(node_feat, node_opcode, edge_index), config_feat)
