"""The `roofline` family: HLO fusions timed on a v3-like TPU core (16 MiB scratchpad, 128x128
MXU) as the max of compute and memory time per tile with strict double buffering and fixed
costs per tile and per reduction pass. Two cores share the grid (megacore), and reads run at
full bandwidth only in long contiguous runs: a side input tiled short along its own minor dim,
a convolution's input features or filter outputs, a matmul's contraction chunk, each read in
short runs, are much slower, and so are output tiles written back in short runs along the
output layout's minor dim (a tile that holds the minor dim whole writes on into the next
dim), which the compiler's own estimate, and so its default tile, does not see. A filter or
matmul rhs of at most 1 MiB stays in the scratchpad for the whole grid, read once. So the best
tile depends on the kernel's shapes and layout: which dim is minor and how long, how large the
re-read operand is. The data hold only tiles that fit the scratchpad."""

from __future__ import annotations

import numpy as np

from tpu_tiles_models.synthetic import analytic
from tpu_tiles_models.synthetic.geometry import KernelGeometry
from tpu_tiles_models.synthetic.tiling import Hardware


def _time(geom: KernelGeometry, t: dict[str, np.ndarray], hw: Hardware) -> np.ndarray:
    """Max(compute, memory) per tile; a tile overflowing VMEM loses overlap and spills."""
    peak = np.where(t["f32"], hw.mxu_f32, hw.mxu_bf16)
    comp = t["mxu"] / (peak * t["eff"]) + t["vpu"] / hw.vpu
    mem = (t["stream"] + t["reuse"]) / hw.hbm
    over = t["ws"] / hw.vmem
    per_tile = np.where(over <= 1.0, np.maximum(comp, mem), comp + mem * (1.0 + over))
    per_tile = per_tile + hw.tile_ns + hw.pass_ns * t["passes"]
    # Megacore: two cores share the grid, one tile each per step; a single tile idles one
    # core, an odd count idles it for the last step.
    once = t["once"] / hw.hbm
    return np.ceil(t["tiles"] / 2.0) * per_tile + mem + once + hw.launch_ns


COST = analytic.CostModel(
    "roofline",
    Hardware(
        mxu_bf16=60e3,
        mxu_f32=20e3,
        vpu=2.0e3,
        hbm=450.0,
        vmem=16 * 2**20,
        mxu_dim=128,
        tile_ns=350.0,
        pass_ns=60.0,
        launch_ns=2500.0,
        dma_run=8192.0,  # side inputs and main operands need long runs for full bandwidth
        dma_exp=0.8,
        dma_floor=0.08,
        operand_runs=True,
        out_runs=True,
        resident=2**20,  # a filter or rhs up to 1 MiB stays in VMEM
    ),
    _time,
)
