"""Tile configs and what one tile costs. Shared by every family: the 24-wide bounds blocks and
the autotuner's choice of which measured configs a kernel keeps. For `roofline` and `alt`:
the option grid, the config features, and per-config tile quantities (tile count, flops,
bytes streamed and re-read, working set) on a simulated TPU core."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tpu_tiles_models.formats import CONFIG_FEAT_DIM
from tpu_tiles_models.synthetic.features import CFG_INPUT, CFG_KERNEL, CFG_OUTPUT
from tpu_tiles_models.synthetic.geometry import KernelGeometry

DOT_K_CHUNK = 512  # contraction elements per pass of a dot


@dataclass(frozen=True)
class Hardware:
    """Constants of one simulated TPU core (rates per nanosecond).

    Attributes:
        mxu_bf16: MXU flop/ns with 16-bit operands.
        mxu_f32: MXU flop/ns with 32-bit operands (multi-pass).
        vpu: element-wise op/ns.
        hbm: bytes/ns.
        vmem: scratchpad bytes.
        mxu_dim: systolic array width (row/contraction padding granule).
        tile_ns: fixed cost per tile (grid step).
        pass_ns: cost per reduction pass within a tile.
        launch_ns: kernel launch.
        overlap: fraction of min(compute, memory) hidden (alt only).
        cache: bytes of operand cache (alt only).
        cache_speedup: how much faster a cached re-read is (alt only).
    """

    mxu_bf16: float
    mxu_f32: float
    vpu: float
    hbm: float
    vmem: float
    mxu_dim: int
    tile_ns: float
    pass_ns: float
    launch_ns: float
    overlap: float = 1.0
    cache: float = 0.0
    cache_speedup: float = 1.0


def tile_terms(geom: KernelGeometry, cfg: np.ndarray, mxu_dim: int) -> dict[str, np.ndarray]:
    """Per-config tile quantities.

    Args:
      geom: the kernel.
      cfg: `[c, 24]` float64 config features.
      mxu_dim: systolic array width, the padding granule of MXU rows and contraction.

    Returns:
      `[c]` arrays: `tiles`, `passes` (reduction passes per tile), `mxu` (flops per tile),
      `eff` (MXU efficiency), `vpu` (element-wise ops per tile), `stream` and `reuse`
      (bytes per tile read once / re-read by every tile), `ws` (working set bytes),
      `f32` (32-bit operands).
    """
    rank = len(geom.out_dims)
    units = -(-geom.out_dims // geom.granule)
    b = np.clip(cfg[:, CFG_OUTPUT : CFG_OUTPUT + rank], 1, units).astype(np.float64)
    ext = b * geom.granule  # tile extent in elements per dim
    tiles = np.prod(np.ceil(units / b), axis=1)
    e_t = np.prod(ext, axis=1)
    passes = np.ones(len(cfg))
    stream = np.zeros(len(cfg))  # operand bytes streamed once per tile
    reuse = np.zeros(len(cfg))  # operand bytes re-read by every tile (cacheable)
    chunk = np.zeros(len(cfg))  # bytes resident per pass
    mxu = np.zeros(len(cfg))
    eff = np.ones(len(cfg))
    vpu = geom.vpu_ops * e_t
    mb = geom.main_bytes
    if geom.kind == "conv":
        sp = [d for d in range(rank) if d not in (geom.batch_dim, geom.feat_dim)]
        kh, kw = geom.window
        ci = np.clip(cfg[:, CFG_KERNEL + 2] * 8, 8, None)
        ci = np.minimum(ci, geom.cin)
        passes = np.ceil(geom.cin / ci)
        rows = ext[:, geom.batch_dim] * np.prod(ext[:, sp], axis=1)
        in_sp = [(ext[:, d] - 1) * geom.stride + k for d, k in zip(sp, (kh, kw))]
        in_tile = ext[:, geom.batch_dim] * np.prod(in_sp, axis=0) * ci * mb
        w_tile = kh * kw * ci * ext[:, geom.feat_dim] * mb
        stream, reuse = in_tile * passes, w_tile * passes
        chunk = in_tile + w_tile
        depth = passes * ci
        mxu = 2.0 * e_t * kh * kw * depth
        eff = (rows / (np.ceil(rows / mxu_dim) * mxu_dim)) * np.sqrt(
            ci / (np.ceil(ci / mxu_dim) * mxu_dim)
        )
    elif geom.kind == "dot":
        k = float(geom.cin)
        bt = np.prod(ext[:, :-2], axis=1) if rank > 2 else np.ones(len(cfg))
        rows = bt * ext[:, -2] if rank >= 2 else ext[:, -1]
        stream = rows * k * mb
        reuse = (bt if geom.rhs_batched else 1.0) * k * ext[:, -1] * mb
        # The compiler streams the contraction in fixed chunks; only one is resident.
        passes = np.full(len(cfg), np.ceil(k / DOT_K_CHUNK))
        chunk = (stream + reuse) / passes
        mxu = 2.0 * e_t * k
        eff = rows / (np.ceil(rows / mxu_dim) * mxu_dim)
    elif geom.kind == "reduce":
        r_chunk = _reduce_chunk(geom, cfg, ext)
        passes = np.ceil(geom.reduce_size / r_chunk)
        stream = e_t * geom.reduce_size * mb
        chunk = e_t * r_chunk * mb
        vpu = vpu + e_t * geom.reduce_size
    side_tile = np.minimum(geom.side_elems[None, :], e_t[:, None])
    side = side_tile @ geom.side_bytes if len(geom.side_bytes) else np.zeros(len(cfg))
    small = geom.side_elems[None, :] < e_t[:, None]  # broadcast operands re-read per tile
    side_reuse = (side_tile * small) @ geom.side_bytes if len(geom.side_bytes) else 0.0
    out = e_t * geom.out_bytes
    return {
        "tiles": tiles,
        "passes": passes,
        "mxu": mxu,
        "eff": np.maximum(eff, 1.0 / 64),
        "vpu": vpu,
        "stream": stream + side - side_reuse + out,
        "reuse": reuse + side_reuse,
        "ws": 2.0 * (chunk + side) + e_t * 4.0 + out,
        "f32": np.full(len(cfg), mb >= 4),
    }


def _reduce_chunk(geom: KernelGeometry, cfg: np.ndarray, ext: np.ndarray) -> np.ndarray:
    """Reduced elements per pass: input tile elements over output tile elements (all of the
    reduction when the input bounds are empty); `[c]`."""
    ri = len(geom.in_dims)
    in_b = cfg[:, CFG_INPUT : CFG_INPUT + ri]
    in_tile = np.prod(np.minimum(in_b * geom.in_granule, geom.in_dims), axis=1)
    out_tile = np.prod(np.minimum(ext, geom.out_dims), axis=1)
    chunk = np.clip(in_tile / out_tile, 1.0, geom.reduce_size)
    return np.where(cfg[:, CFG_INPUT + 7] > 0, chunk, geom.reduce_size)


def bound_options(units: int) -> np.ndarray:
    """Bounds an autotuner tries on a dim of `units` granules: powers of two (cheap index
    maths, but padding when they do not divide) and even splits ceil(units / k), k <= 8."""
    units = max(int(units), 1)
    p = 2 ** np.arange(int(np.log2(units)) + 1)
    even = -(-units // np.arange(1, 9))
    return np.unique(np.concatenate([p, even]))


def autotuner_keep(
    runtime: np.ndarray,
    want: int,
    min_configs: int,
    spread: float,
    dup_rate: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Which of a pool of costed configs a kernel keeps, like an autotuner's log.

    Configs slower than `spread` times the best are dropped, at most `want` are kept (in pool
    order), and a `dup_rate` share are re-measured duplicates (taking the place of distinct
    configs at the cap); duplicates also fill up to `min_configs` when too few remain.

    Args:
      runtime: `[pool]` noise-free runtimes.
      want: how many configs the kernel should get.
      min_configs: the fewest it may get.
      spread: the slowest kept config may be this many times the fastest.
      dup_rate: share of duplicated rows.
      rng: the kernel's generator.

    Returns:
      `[c]` indices into the pool (repeated for duplicates), in random order if any repeat.
    """
    keep = np.flatnonzero(runtime <= spread * runtime.min())[:want]
    n_dup = int(rng.binomial(len(keep), dup_rate))
    keep = keep[: max(min(len(keep), want - n_dup), 1)]
    n_dup = max(n_dup, min_configs - len(keep))
    if n_dup:
        keep = np.append(keep, rng.choice(keep, size=n_dup))
        keep = keep[rng.permutation(len(keep))]
    return keep


def compilable(ws: np.ndarray, vmem: float) -> np.ndarray:
    """Which configs an autotuner can time at all: `[c]` bool, True where the working set
    `ws` (bytes) fits the scratchpad. A tile that does not fit fails to compile, so real
    logs hold none; the smallest working set is kept when nothing fits, so a kernel always
    has a config."""
    ok = ws <= vmem
    return ok if ok.any() else ws == ws.min()


def bounds_block(values: np.ndarray, width: int = 6) -> np.ndarray:
    """`[c, k]` bounds -> `[c, 8]` block of 6 dims + sum + product (product 0 when empty)."""
    out = np.zeros((len(values), width + 2))
    k = min(values.shape[1], width)
    out[:, :k] = values[:, :k]
    out[:, width] = values.sum(axis=1)
    out[:, width + 1] = np.prod(values, axis=1) if values.shape[1] else 0.0
    return out


def config_pool(
    geom: KernelGeometry, meta: dict[str, Any], size: int, rng: np.random.Generator
) -> np.ndarray:
    """Up to `size` distinct random configs of the option grid: `[c, 24]` float64."""
    units = -(-geom.out_dims // geom.granule)
    choices = [bound_options(int(u)) for u in units]
    if geom.kind == "conv":
        choices.append(bound_options(-(-geom.cin // 8)))
    if "reduce" in meta:  # how many chunks the outermost reduced dim is split into
        choices.append(reduce_splits(geom, meta))
    sizes = tuple(len(c) for c in choices)
    total = math.prod(sizes)
    # Distinct configs by drawing distinct flat indices of the option grid (no sorting).
    if total <= 4 * size:
        flat = rng.permutation(total)[:size]
    else:
        flat = np.unique(rng.integers(total, size=size + size // 8 + 8))[:size]
        flat = flat[rng.permutation(len(flat))]
    idx = np.unravel_index(flat, sizes)
    space = np.stack([c[i] for c, i in zip(choices, idx)], axis=1)
    return config_rows(geom, meta, space)


def config_rows(geom: KernelGeometry, meta: dict[str, Any], space: np.ndarray) -> np.ndarray:
    """Turns sampled bound columns `[c, rank (+1)]` into `[c, 24]` config features."""
    rank = len(geom.out_dims)
    out_b = space[:, :rank].astype(np.float64)
    cfg = np.zeros((len(space), CONFIG_FEAT_DIM))
    cfg[:, CFG_OUTPUT : CFG_OUTPUT + 8] = bounds_block(out_b)
    if geom.kind == "conv":
        kh, kw = geom.window
        kb = np.stack(
            [
                np.full(len(space), kh),
                np.full(len(space), kw),
                space[:, rank],
                out_b[:, geom.feat_dim],
            ],
            axis=1,
        )
        cfg[:, CFG_KERNEL : CFG_KERNEL + 8] = bounds_block(kb.astype(np.float64))
    if "reduce" in meta:
        split = space[:, rank] if space.shape[1] > rank else np.ones(len(space))
        block = bounds_block(_reduce_input_bounds(geom, meta, out_b, split))
        # Input bounds are only reported when the reduction itself is tiled (split > 1),
        # which keeps them mostly 0 as in the real data.
        cfg[:, CFG_INPUT : CFG_INPUT + 8] = block * (split > 1)[:, None]
    return cfg


def reduce_splits(geom: KernelGeometry, meta: dict[str, Any]) -> np.ndarray:
    """Split counts (powers of two) tried on the outermost reduced dim."""
    j = min(meta["reduce"][1])
    n_units = -(-int(geom.in_dims[j]) // int(geom.in_granule[j]))
    return 2 ** np.arange(int(np.log2(n_units)) + 1)


def _reduce_input_bounds(
    geom: KernelGeometry, meta: dict[str, Any], out_b: np.ndarray, split: np.ndarray
) -> np.ndarray:
    """Input tile of a reduction: kept dims follow the output tile, reduced dims are whole
    except the outermost, which is cut into `split` chunks (accumulated over passes)."""
    in_shape, red = meta["reduce"]
    in_rank = len(in_shape)
    g_in = geom.in_granule
    ext = out_b * geom.granule
    cols, k = [], 0
    for j in range(in_rank):
        n_units = -(-in_shape[j] // g_in[j])
        if j == min(red):
            cols.append(np.ceil(n_units / split).astype(float))
        elif j in red:
            cols.append(np.full(len(out_b), n_units, float))
        else:
            cols.append(np.clip(np.ceil(ext[:, k] / g_in[j]), 1, n_units))
            k += 1
    return np.stack(cols, axis=1)
