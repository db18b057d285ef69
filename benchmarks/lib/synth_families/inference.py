"""The `inference` family: the same HLO fusions as `roofline`, timed on an inference core in
the style of the published TPU v4i description (one core feeding four 128x128 MXUs, a 128 MiB
on-chip memory tier, CMEM, between HBM and a 16 MiB scratchpad, HBM slow next to the MXUs,
bf16 the only fast matmul path), and drawn with an inference graph's mix of kernels (more
matmuls and loop fusions, fewer convolutions, mostly bf16).

How a tile costs here, unlike `roofline` (per-tile max of compute and memory) and `alt`
(a fixed share of the smaller of the two hidden):

- **How much overlaps depends on the tile.** The next tile's operands are fetched while
  this one computes only as far as the scratchpad has room for them beside this tile's
  buffers: a tile whose working set leaves the next one all its room hides the smaller of
  compute and fetch whole; one that fills the scratchpad hides none of it, except that its
  reduction passes pipeline among themselves (pass k+1's operands fetched under pass k), so
  what is left exposed is divided by its passes. Large tiles save fixed costs and re-reads
  but lose overlap; the best tile sits between.
- **Two DMA tiers.** Re-reads of an operand (filter, rhs, broadcast side inputs) that fits
  CMEM come from it at its own bandwidth, concurrently with the HBM stream, after one first
  read from HBM; a larger one is re-read from HBM every tile.
- **Four MXUs, filled and drained per weight block.** A tile's rows are split over the MXUs
  in blocks of 128: a tile of fewer blocks leaves some idle. Every 128x128 weight block that
  passes through the MXUs costs a fill and drain (`pass_ns`), so short tiles (few rows per
  weight block) pay for their weights again and again. The element-wise epilogue runs on
  the VPU after the MXUs, on their results.

The compiler's own estimate (config 0 is its pick, `_estimate`) is this core's naive one: it
prices every byte from HBM and rounds the headroom to all or nothing, so its default tile is
a good one, not always the best. Like every family, the data hold only tiles that fit the
scratchpad.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tpu_tiles_models.synthetic import analytic
from tpu_tiles_models.synthetic.geometry import KernelGeometry
from tpu_tiles_models.synthetic.kernels import KIND_WEIGHTS
from tpu_tiles_models.synthetic.tiling import Hardware

# The inference graph's mix of kernel kinds (conv, dot, reduce, elementwise) when the caller
# gives none: batch-norms folded into convolutions, no backward pass or optimizer, so fewer
# convolutions and reductions, more matmuls and loop fusions.
KIND_MIX = (0.15, 0.35, 0.1, 0.4)
# A mix the caller gives (a program's, in `tpu-tiles synth`) is tilted by the same factors,
# so a convnet's inference graph still holds more convolutions than a transformer's.
TILT = tuple(m / w for m, w in zip(KIND_MIX, KIND_WEIGHTS))
BF16_SHARE = 0.7  # inference graphs run mostly in bf16


def _mxu(t: dict[str, np.ndarray], hw: Hardware) -> np.ndarray:
    """`[c]` MXU time per tile (ns): the rows a tile feeds its MXUs, and a fill and drain per
    weight block."""
    peak = np.where(t["f32"], hw.mxu_f32, hw.mxu_bf16)
    blocks = np.ceil(t["rows"] / hw.mxu_dim)
    busy = np.clip(blocks, 1.0, hw.mxus) / hw.mxus  # share of the MXUs a tile's rows feed
    loads = t["mxu"] / (2.0 * np.maximum(t["rows"], 1.0) * hw.mxu_dim**2)
    return t["mxu"] / (peak * t["eff"] * busy) + hw.pass_ns * loads


def _time(geom: KernelGeometry, t: dict[str, np.ndarray], hw: Hardware) -> np.ndarray:
    """Overlap from the tile's passes and the scratchpad's headroom; CMEM re-reads."""
    comp = _mxu(t, hw) + t["vpu"] / hw.vpu  # the epilogue runs on the MXUs' results
    operand_bytes = geom.operand_bytes + float(np.dot(geom.side_elems, geom.side_bytes))
    cached = 0.0 < operand_bytes <= hw.cache
    hbm = (t["stream"] + (0.0 if cached else t["reuse"])) / hw.hbm
    cmem = t["reuse"] / (hw.cache_speedup * hw.hbm) if cached else np.zeros_like(hbm)
    fetch = np.maximum(hbm, cmem)  # two DMA engines, one per tier, run side by side
    # What is not hidden of the smaller of compute and fetch: the share of the next tile's
    # buffers the scratchpad has no room for, spread over the tile's passes.
    ahead = np.clip(hw.vmem / t["ws"] - 1.0, 0.0, 1.0)
    exposed = (1.0 - ahead) / t["passes"]
    per_tile = np.maximum(comp, fetch) + exposed * np.minimum(comp, fetch)
    first = operand_bytes / hw.hbm if cached else 0.0  # CMEM filled from HBM once
    return t["tiles"] * (per_tile + hw.tile_ns) + first + hw.launch_ns


def _estimate(geom: KernelGeometry, t: dict[str, np.ndarray], hw: Hardware) -> np.ndarray:
    """The compiler's own estimate: every byte from HBM, and the headroom rounded to all or
    nothing (a tile whose working set leaves the next tile at least half its room is
    prefetched whole, a larger one not at all)."""
    comp = _mxu(t, hw) + t["vpu"] / hw.vpu
    hbm = (t["stream"] + t["reuse"]) / hw.hbm
    exposed = np.where(t["ws"] <= hw.vmem * 2.0 / 3.0, 0.0, 1.0) / t["passes"]
    per_tile = np.maximum(comp, hbm) + exposed * np.minimum(comp, hbm)
    return t["tiles"] * (per_tile + hw.tile_ns) + hw.launch_ns


_HW = Hardware(
    mxu_bf16=137e3,  # 4 MXUs x 128 x 128 x 2 flop at 1.05 GHz
    mxu_f32=17e3,  # f32 matmuls emulated in several bf16 passes
    vpu=2.5e3,
    hbm=614.0,  # 223 flop per byte at bf16 (roofline's core: 133)
    vmem=16 * 2**20,
    mxu_dim=128,
    tile_ns=200.0,
    pass_ns=64.0,  # per weight block: fill and drain, partly hidden by weight double-buffers
    launch_ns=3000.0,
    cache=128 * 2**20,  # CMEM
    cache_speedup=4.0,  # CMEM bandwidth over HBM's
    dma_run=4096.0,
    dma_exp=0.6,
    dma_floor=0.1,
    operand_runs=True,
    mxus=4,
)
COST = analytic.CostModel("inference", _HW, _time, _estimate)


def make_kernel(
    rng: np.random.Generator, *, kind_weights: Sequence[float] | None = None, **kwargs
) -> dict[str, np.ndarray]:
    """One `inference` kernel's npz arrays: `KIND_MIX` when `kind_weights` is None, else the
    given mix tilted by `TILT`; other `kwargs` as `analytic.make_kernel`'s."""
    mix = KIND_MIX if kind_weights is None else tuple(w * f for w, f in zip(kind_weights, TILT))
    return analytic.make_kernel(rng, COST, kind_weights=mix, bf16_share=BF16_SHARE, **kwargs)
