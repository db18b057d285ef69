"""The generator families by name, and the cost-model entry points that take a name."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tpu_tiles_models.synthetic import alt, analytic, roofline
from tpu_tiles_models.synthetic.geometry import KernelGeometry
from tpu_tiles_models.synthetic.tiling import Hardware

COST_MODELS = ("roofline", "alt")
_COSTS: dict[str, analytic.CostModel] = {"roofline": roofline.COST, "alt": alt.COST}
HARDWARE: dict[str, Hardware] = {name: cost.hw for name, cost in _COSTS.items()}


def _cost(cost_model: str) -> analytic.CostModel:
    """The named analytic cost model; ValueError naming the choices otherwise."""
    if cost_model not in _COSTS:
        raise ValueError(f"cost_model must be one of {COST_MODELS}, got {cost_model!r}")
    return _COSTS[cost_model]


def geometry_runtime(geom: KernelGeometry, config_feat: np.ndarray, cost_model: str) -> np.ndarray:
    """Noise-free runtime in ns of each config row `[c, 24]` for an extracted geometry."""
    return _cost(cost_model).runtime(geom, config_feat)


def default_config(
    geom: KernelGeometry, meta: dict[str, Any] | None = None, cost_model: str = "roofline"
) -> np.ndarray:
    """The compiler-style default tile of a kernel under a cost model: `[24]` features."""
    return analytic.default_config(geom, meta, _cost(cost_model))


def noise_free_runtime(
    node_feat: np.ndarray,
    node_opcode: np.ndarray,
    edge_index: np.ndarray,
    config_feat: np.ndarray,
    cost_model: str = "roofline",
) -> np.ndarray:
    """The generator's runtime (ns, float64, no noise) of each config, from features only."""
    return analytic.features_runtime(
        _cost(cost_model), node_feat, node_opcode, edge_index, config_feat
    )


def make_kernel(
    rng: np.random.Generator,
    *,
    kind_weights: Sequence[float] = (0.3, 0.2, 0.15, 0.35),
    max_configs: int | None = None,
    min_configs: int = 2,
    cost_model: str = "roofline",
    labelled: bool = True,
) -> dict[str, np.ndarray]:
    """Builds one kernel's npz arrays (runtimes zero when `labelled` is False)."""
    return analytic.make_kernel(
        rng,
        _cost(cost_model),
        kind_weights=kind_weights,
        max_configs=max_configs,
        min_configs=min_configs,
        labelled=labelled,
    )
