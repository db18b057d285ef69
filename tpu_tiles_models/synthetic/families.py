"""The generator families by name (`FAMILIES`). The package holds `roofline`, the one
`tpu-tiles synth` and the demo write; the benchmark suite adds more with `register`
(benchmarks/lib/synth_families) to check that a model does not overfit one generator."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tpu_tiles_models.errors import FlagError
from tpu_tiles_models.synthetic import roofline


@dataclass(frozen=True)
class Family:
    """One generator family: `make_kernel(rng, *, kind_weights, max_configs, min_configs,
    labelled)` builds one kernel's six npz arrays from its own rng (see
    `analytic.make_kernel`); `runtime(node_feat, node_opcode, edge_index, config_feat)`, its
    cost model, gives noise-free `[c]` runtimes (ns) from what a learned model sees. `name` is
    what `--family` takes, `summary` one line for `--help` and benchmark tables."""

    name: str
    summary: str
    make_kernel: Callable[..., dict[str, np.ndarray]]
    runtime: Callable[..., np.ndarray]


FAMILIES: dict[str, Family] = {
    "roofline": Family(
        "roofline",
        "HLO fusions; max(compute, memory) per tile on a v3-like core",
        roofline.COST.make_kernel,
        roofline.COST.runtime,
    ),
}
DEFAULT_FAMILY = "roofline"


def register(family: Family) -> None:
    """Adds `family` to `FAMILIES` (the same family again: nothing changes; another with its
    name: ValueError). Its functions must be importable by module name wherever kernels are
    made: `generate`'s worker processes unpickle them."""
    if FAMILIES.setdefault(family.name, family) != family:
        raise ValueError(f"a generator family named {family.name!r} is already registered")


class UnknownFamilyError(FlagError):
    """`--family` (or `family=`) names no generator family."""


def get_family(name: str) -> Family:
    """The family called `name`; `UnknownFamilyError` naming the known ones if none is."""
    if name not in FAMILIES:
        known = ", ".join(FAMILIES)
        raise UnknownFamilyError(
            f"--family {name!r} is not a generator family; use one of: {known}"
        )
    return FAMILIES[name]


def noise_free_runtime(
    node_feat: np.ndarray,
    node_opcode: np.ndarray,
    edge_index: np.ndarray,
    config_feat: np.ndarray,
    family: str = DEFAULT_FAMILY,
) -> np.ndarray:
    """A family's noise-free `[c]` float64 runtimes (ns) of a kernel's `[c, 24]` configs, from
    its npz arrays only (`[n, 140]` node features, `[n]` opcodes, `[m, 2]` edges)."""
    return get_family(family).runtime(node_feat, node_opcode, edge_index, config_feat)
