"""The `drawn` family: `archetype`'s kernels and cost model with the core and the log drawn
anew for each data seed, so that no default can fit one generator (issue 60).

Per data seed (`core_of`): the scratchpad (4 to 64 MiB) and how far past it a tile still
compiles (1.5 to 3 times), the HBM bandwidth (250 to 2,000 bytes/ns), the MXU's bf16 rate
(40 to 300 Tflop/s) and its f32 share (1/2 to 1/8), the VPU's rate (1 to 8 element-ops/ns
x 1,000), the step overhead per output tile (20 to 1,000 ns) and the launch (1 to 6 us),
the granules operands are padded to (8 or 16 sublanes, 128 or 256 lanes). How the log is
kept alternates: even seeds 12 to 400 random tiles with config 0 an ordinary one (as
`archetype`), odd seeds the autotuner's log (as the other families: up to thousands of
configs, config 0 the compiler's default). Two data seeds are two machines and two logs; the
kernels' graphs are `archetype`'s.

The data seed reaches a kernel through its generator: `synthetic.generate` seeds kernel `i`
of a split with `(seed, split, i, 1)`, so the first word of its seed is the data seed.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from . import archetype
from .archetype import Core


@functools.cache
def core_of(seed: int) -> tuple[Core, bool]:
    """The core of data seed `seed` (drawn), and whether its log is the autotuner's (odd
    seeds) or 12-400 random tiles (even seeds)."""
    rng = np.random.default_rng([seed, 0xD7A])
    mxu = float(np.exp(rng.uniform(np.log(40e3), np.log(300e3))))
    core = Core(
        vmem=float(2 ** rng.uniform(22, 26)),
        compile_limit=float(rng.uniform(1.5, 3.0)),
        hbm=float(np.exp(rng.uniform(np.log(250.0), np.log(2000.0)))),
        mxu_bf16=mxu,
        mxu_f32=mxu / float(rng.choice([2, 4, 8])),
        vpu=float(np.exp(rng.uniform(np.log(1e3), np.log(8e3)))),
        step_ns=float(np.exp(rng.uniform(np.log(20.0), np.log(1000.0)))),
        launch_ns=float(rng.uniform(1000.0, 6000.0)),
        sublanes=int(rng.choice([8, 16])),
        lanes=int(rng.choice([128, 256])),
    )
    return core, seed % 2 == 1  # odd seeds: the two draws of a protocol get one log each


def data_seed(rng: np.random.Generator) -> int:
    """The data seed of a kernel's generator (`synthetic.generate`'s `(seed, split, i, 1)`)."""
    entropy = rng.bit_generator.seed_seq.entropy
    return int(entropy[0] if isinstance(entropy, Sequence) else entropy)


def make_kernel(
    rng: np.random.Generator,
    *,
    kind_weights: Sequence[float] | None = None,
    max_configs: int | None = None,
    min_configs: int = 2,
    labelled: bool = True,
) -> dict[str, np.ndarray]:
    """One kernel (`families.KernelMaker`) on its data seed's core, logged its way."""
    core, autotuned = core_of(data_seed(rng))
    return archetype.make_kernel(
        rng,
        kind_weights=kind_weights,
        max_configs=max_configs,
        min_configs=min_configs,
        labelled=labelled,
        core=core,
        autotuned=autotuned,
    )


def runtime(
    node_feat: np.ndarray,
    node_opcode: np.ndarray,
    edge_index: np.ndarray,
    config_feat: np.ndarray,
    *,
    seed: int = 0,
) -> np.ndarray:
    """Noise-free `[c]` runtimes (ns) on data seed `seed`'s core (`Family.runtime` cannot know
    a data set's seed: seed 0 unless given)."""
    core, _ = core_of(seed)
    arch = archetype.read_archetype(node_feat, node_opcode, edge_index, core)
    return archetype.cost(arch, np.asarray(config_feat, np.float64), core)[0]
