"""The generator families by name (`FAMILIES`), and the entry points that take a name.

The package holds one family, `roofline`, the one `tpu-tiles synth` and the demo write. The
benchmark suite checks that a model does not overfit one generator on more of them, which it
adds with `register` (benchmarks/synth_families).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tpu_tiles_models.errors import FlagError
from tpu_tiles_models.synthetic import roofline


class KernelMaker(Protocol):
    """Builds one kernel's six npz arrays from its own rng (see `analytic.make_kernel`)."""

    def __call__(
        self,
        rng: np.random.Generator,
        *,
        kind_weights: Sequence[float] | None,
        max_configs: int | None,
        min_configs: int,
        labelled: bool,
    ) -> dict[str, np.ndarray]: ...


class RuntimeFn(Protocol):
    """Noise-free `[c]` runtimes (ns) of a kernel's configs, from its npz arrays only."""

    def __call__(
        self,
        node_feat: np.ndarray,
        node_opcode: np.ndarray,
        edge_index: np.ndarray,
        config_feat: np.ndarray,
    ) -> np.ndarray: ...


@dataclass(frozen=True)
class Family:
    """One generator family: how it builds kernels and how it times their configs.

    Attributes:
        name: what `--family` takes.
        summary: one line for `--help` and benchmark tables.
        make_kernel: builds one kernel.
        runtime: the family's cost model, reading only what a learned model sees.
    """

    name: str
    summary: str
    make_kernel: KernelMaker
    runtime: RuntimeFn


FAMILIES: dict[str, Family] = {
    "roofline": Family(
        "roofline",
        "HLO fusions; max(compute, memory) per tile on a v3-like core",
        roofline.make_kernel,
        roofline.runtime,
    ),
}
DEFAULT_FAMILY = "roofline"


def register(family: Family) -> None:
    """Adds `family` to `FAMILIES` under its name (again: the same family, nothing changes).

    Its functions must be importable by module name wherever kernels are made: `generate`'s
    worker processes unpickle them.

    Raises:
      ValueError: another family already has its name.
    """
    if FAMILIES.setdefault(family.name, family) != family:
        raise ValueError(f"a generator family named {family.name!r} is already registered")


class UnknownFamilyError(FlagError):
    """`--family` (or `family=`) names no generator family."""


def get_family(name: str) -> Family:
    """The family called `name`.

    Raises:
      UnknownFamilyError: naming the known families.
    """
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
    """A family's runtime (ns, float64, no noise) of each config, from the npz arrays only.

    Args:
      node_feat: `[n, 140]` node features.
      node_opcode: `[n]` opcodes.
      edge_index: `[m, 2]` `(consumer, producer)` edges.
      config_feat: `[c, 24]` config features.
      family: a key of `FAMILIES`.

    Returns:
      `[c]` float64 runtimes.
    """
    return get_family(family).runtime(node_feat, node_opcode, edge_index, config_feat)


def make_kernel(
    rng: np.random.Generator,
    *,
    kind_weights: Sequence[float] | None = None,
    max_configs: int | None = None,
    min_configs: int = 2,
    family: str = DEFAULT_FAMILY,
    labelled: bool = True,
) -> dict[str, np.ndarray]:
    """Builds one kernel's npz arrays with a family's generator.

    Args:
      rng: the kernel's own generator.
      kind_weights: relative odds of conv, dot, reduce and element-wise main ops (the
        family's own mix when None).
      max_configs: cap on configs (family default when None).
      min_configs: floor on configs.
      family: a key of `FAMILIES`.
      labelled: False writes zero runtimes (the test split).

    Returns:
      The six npz arrays.
    """
    return get_family(family).make_kernel(
        rng,
        kind_weights=kind_weights,
        max_configs=max_configs,
        min_configs=min_configs,
        labelled=labelled,
    )
