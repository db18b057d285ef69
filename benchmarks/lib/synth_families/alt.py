"""The `alt` family: the same HLO fusions as `roofline`, timed on a wider, faster core (256
MXU, 8 MiB scratchpad, one core) with partial compute/memory overlap, an
operand cache that speeds up re-reads of operands that fit it, a DMA engine whose bandwidth
falls in proportion to short contiguous runs (side inputs, convolution input features and
filter outputs, matmul contraction chunks), and a smooth capacity penalty instead of a hard
spill (for configs priced by hand: like every family, the data hold only tiles that fit)."""

from __future__ import annotations

import numpy as np

from tpu_tiles_models.synthetic import analytic
from tpu_tiles_models.synthetic.geometry import KernelGeometry
from tpu_tiles_models.synthetic.tiling import Hardware


def _time(geom: KernelGeometry, t: dict[str, np.ndarray], hw: Hardware) -> np.ndarray:
    """Partial overlap, cached operand re-reads and a smooth capacity penalty."""
    operand_bytes = geom.operand_bytes + float(np.dot(geom.side_elems, geom.side_bytes))
    peak = np.where(t["f32"], hw.mxu_f32, hw.mxu_bf16)
    comp = t["mxu"] / (peak * t["eff"]) + t["vpu"] / hw.vpu
    cached = operand_bytes <= hw.cache
    reuse = t["reuse"] / (hw.cache_speedup if cached else 1.0)
    mem = (t["stream"] + reuse) / hw.hbm
    per_tile = comp + mem - hw.overlap * np.minimum(comp, mem)
    over = np.maximum(t["ws"] / hw.vmem - 1.0, 0.0)
    per_tile = per_tile * (1.0 + 2.0 * over**2) + hw.tile_ns + hw.pass_ns * np.sqrt(t["passes"])
    return t["tiles"] * per_tile + 2.0 * mem + hw.launch_ns


COST = analytic.CostModel(
    "alt",
    Hardware(
        mxu_bf16=180e3,
        mxu_f32=45e3,
        vpu=5.0e3,
        hbm=800.0,
        vmem=8 * 2**20,
        mxu_dim=256,
        tile_ns=150.0,
        pass_ns=120.0,
        launch_ns=4000.0,
        overlap=0.7,
        cache=24 * 2**20,
        cache_speedup=3.0,
        dma_run=8192.0,  # bandwidth in proportion to the run, down to 1/25 of it
        dma_exp=1.0,
        dma_floor=0.04,
        operand_runs=True,
    ),
    _time,
)
