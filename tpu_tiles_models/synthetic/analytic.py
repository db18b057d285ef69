"""A family timed by an analytic cost model (`roofline`; the benchmarks' `alt` and `inference`
too): one HLO fusion per kernel, tile configs sampled like an autotuner, and runtimes from a
cost model that reads only the kernel's features. Such families differ in their `CostModel`
(and may draw their own mix of kernels)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from tpu_tiles_models.formats import CONFIG_FEAT_DIM
from tpu_tiles_models.synthetic import autotuner
from tpu_tiles_models.synthetic.features import MAX_NODES
from tpu_tiles_models.synthetic.geometry import KernelGeometry, kernel_geometry
from tpu_tiles_models.synthetic.graph import Graph
from tpu_tiles_models.synthetic.kernels import KERNEL_KINDS, KIND_WEIGHTS, finish
from tpu_tiles_models.synthetic.tiling import (
    Hardware,
    at_most,
    choices,
    config_rows,
    tile_terms,
    tried,
)

LAYOUT_STYLES = (0.5, 0.35, 0.15, 0.0)  # odds of each `graph.Graph.layout_style`
MAX_STEPS = 2048  # output tiles per kernel the autotuner tries at most (`tiling.tried`)
SWAPPED_INPUTS = 0.3  # share of inputs (rank >= 2) stored with their minor dims swapped
BF16_SHARE = 0.25  # share of kernels in bf16 (the rest f32), unless a family says otherwise
TimeFn = Callable[[KernelGeometry, dict[str, np.ndarray], Hardware], np.ndarray]


@dataclass(frozen=True)
class CostModel:
    """A simulated TPU core and how it turns tile quantities into nanoseconds: `time(geometry,
    tile_terms(...), hw)` gives `[c]` runtimes; `estimate`, the compiler's own estimate with
    the same signature, is when None `time` on `hw` less the output write runs
    (`Hardware.out_runs`), which the compiler does not see."""

    name: str  # the family's
    hw: Hardware
    time: TimeFn
    estimate: TimeFn | None = None

    def runtime(
        self,
        node_feat: np.ndarray,
        node_opcode: np.ndarray,
        edge_index: np.ndarray,
        config_feat: np.ndarray,
    ) -> np.ndarray:
        """Noise-free `[c]` float64 runtimes (ns) of a kernel's `[c, 24]` configs, from its npz
        arrays only (a `Family`'s `runtime`)."""
        geom = kernel_geometry(node_feat, node_opcode, edge_index)
        cfg = np.asarray(config_feat, np.float64).reshape(-1, CONFIG_FEAT_DIM)
        return self.time(geom, tile_terms(geom, cfg, self.hw), self.hw)

    def make_kernel(self, rng: np.random.Generator, **kwargs) -> dict[str, np.ndarray]:
        """One kernel timed by this model (a `Family`'s `make_kernel`; `kwargs` as
        `make_kernel`'s)."""
        return make_kernel(rng, self, **kwargs)


def compiler_start(
    geom: KernelGeometry, meta: dict[str, Any], opts: list[np.ndarray]
) -> np.ndarray:
    """Where the compiler's search starts: about 64K output elements filled minor dims first
    (a matmul's or convolution's output features before them),
    the whole window, an input-feature chunk up to 128 channels, contraction chunks of up to
    512, no reduction split. `[knobs]` option values."""
    rank = len(geom.out_dims)
    b = np.ones(rank)
    budget = 65536.0
    order = list(np.argsort(-geom.granule, kind="stable"))
    if geom.kind in ("conv", "dot"):  # the matmul's output features first, as the MXU wants
        first = geom.feat_dim if geom.kind == "conv" else rank - 1
        order = [first] + [d for d in order if d != first]
    for d in order:
        fit = opts[d][opts[d] * geom.granule[d] <= budget]
        b[d] = fit.max() if len(fit) else 1
        budget = max(budget / (b[d] * geom.granule[d]), 1.0)
    extra: list[float] = []
    if geom.kind == "conv":
        extra = [float(opts[rank][-1]), float(opts[rank + 1][-1]), at_most(opts[rank + 2], 16)]
    elif geom.kind == "dot":
        extra = [at_most(opts[rank], 4)]
    if "reduce" in meta:
        extra = [1.0]
    return np.array([*b, *extra])


def space_of(geom: KernelGeometry, meta: dict[str, Any], cost: CostModel) -> autotuner.Space:
    """A kernel's tile search space under a cost model, for the autotuner."""
    opts = choices(geom, meta)

    def price(cfg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        terms = tile_terms(geom, cfg, cost.hw)
        return cost.time(geom, terms, cost.hw), terms["ws"]

    # The compiler's own estimate does not see how long the output's write runs are (or
    # whatever else the family's `estimate` leaves out).
    blind = replace(cost.hw, out_runs=False)

    def estimate(cfg: np.ndarray) -> np.ndarray:
        if cost.estimate is not None:
            return cost.estimate(geom, tile_terms(geom, cfg, cost.hw), cost.hw)
        return cost.time(geom, tile_terms(geom, cfg, blind), blind)

    units = -(-geom.out_dims // geom.granule)
    return autotuner.Space(
        opts,
        lambda points: config_rows(geom, meta, points),
        price,
        cost.hw.vmem,
        compiler_start(geom, meta, opts),
        lambda points: tried(points, units, MAX_STEPS),
        estimate if cost.hw.out_runs or cost.estimate else None,
    )


def make_kernel(
    rng: np.random.Generator,
    cost: CostModel,
    *,
    kind_weights: Sequence[float] | None = None,
    max_configs: int | None = None,
    min_configs: int = 2,
    labelled: bool = True,
    bf16_share: float = BF16_SHARE,
) -> dict[str, np.ndarray]:
    """One kernel's six npz arrays (`formats.REQUIRED_KEYS`) from its own `rng`, timed by
    `cost`: `kind_weights` are the relative odds of conv, dot, reduce and element-wise fusions
    (`kernels.KIND_WEIGHTS` when None), `bf16_share` the odds of a bf16 kernel (else f32);
    `max_configs`, `min_configs` and `labelled` as `autotuner.tune`'s."""

    odds = np.asarray(KIND_WEIGHTS if kind_weights is None else kind_weights, np.float64)

    def draw() -> tuple[dict[str, np.ndarray], autotuner.Space]:
        kind = list(KERNEL_KINDS)[rng.choice(4, p=odds / sum(odds))]
        target = int(
            np.clip(np.round(36.0 * np.exp(0.6 * rng.standard_normal())), 2, MAX_NODES - 1)
        )
        if rng.random() < 0.08:  # tiny fusions (a parameter and one or two ops) are common too
            target = int(rng.integers(2, 8))
        dtype = "bf16" if rng.random() < bf16_share else "f32"
        g = Graph(
            layout_style=int(rng.choice(4, p=LAYOUT_STYLES)),
            layout_rng=rng,
            swapped_inputs=SWAPPED_INPUTS,
        )
        meta = KERNEL_KINDS[kind](g, target, dtype, rng)
        finish(g, meta["root"], rng)
        node_feat, node_opcode, edge_index = g.arrays()
        graph = {"node_feat": node_feat, "node_opcode": node_opcode, "edge_index": edge_index}
        geom = kernel_geometry(node_feat, node_opcode, edge_index)
        return graph, space_of(geom, meta, cost)

    return autotuner.draw_kernel(
        draw, rng, max_configs=max_configs, min_configs=min_configs, labelled=labelled
    )
