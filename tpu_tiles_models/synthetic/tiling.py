"""Tile configs and what one tile costs: the option grid, the 24-wide config features, and
per-config tile quantities (tile count, flops, bytes streamed and re-read, working set) on a
simulated TPU core (`Hardware`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tpu_tiles_models.formats import CONFIG_FEAT_DIM
from tpu_tiles_models.synthetic.features import CFG_INPUT, CFG_KERNEL, CFG_OUTPUT
from tpu_tiles_models.synthetic.geometry import KernelGeometry

MAX_TILE = 4096  # granules per output tile (product of the bounds)
MAX_STEPS = 512  # output tiles per kernel (grid steps); smaller tiles are never tried
MAX_CHUNKS = 8  # input-feature chunks of a convolution (contraction chunks of a matmul: 16)


@dataclass(frozen=True)
class Hardware:
    """Constants of one simulated TPU core (rates per nanosecond, sizes in bytes)."""

    mxu_bf16: float  # MXU flop/ns with 16-bit operands
    mxu_f32: float  # MXU flop/ns with 32-bit operands (multi-pass)
    vpu: float  # element-wise op/ns
    hbm: float  # bytes/ns
    vmem: float  # scratchpad bytes
    mxu_dim: int  # systolic array width (row/contraction padding granule)
    tile_ns: float  # fixed cost per tile (grid step)
    pass_ns: float  # cost per reduction pass within a tile
    launch_ns: float  # kernel launch
    overlap: float = 1.0  # share of min(compute, memory) hidden, where a cost model reads it
    cache: float = 0.0  # an operand cache, or an on-chip tier between HBM and scratchpad; 0: none
    cache_speedup: float = 1.0  # a cached re-read's bandwidth over HBM's
    # Reads in contiguous runs of r bytes get the bandwidth share
    # clip((r / dma_run) ** dma_exp, dma_floor, 1): side inputs along their minor dim, and
    # with `operand_runs` the main op's operands (a convolution's input, features minor, and
    # filter, outputs minor; a matmul's lhs, contraction minor), with `out_runs` the output
    # tiles' write-back along the output's minor dim. A run goes on into the next dim when the
    # tile holds the minor dim whole.
    dma_run: float = 2048.0
    dma_exp: float = 0.4
    dma_floor: float = 0.25
    operand_runs: bool = False
    out_runs: bool = False
    resident: float = 0.0  # a filter or rhs at most this large is read once and stays; 0: never
    mxus: int = 1  # MXUs that share a tile's rows in blocks of `mxu_dim`


def tile_terms(geom: KernelGeometry, cfg: np.ndarray, hw: Hardware) -> dict[str, np.ndarray]:
    """Per-config tile quantities of `[c, 24]` float64 configs on core `hw`.

    Returns:
      `[c]` arrays: `tiles`, `passes` (reduction passes per tile), `mxu` (flops per tile),
      `eff` (MXU efficiency), `vpu` (element-wise ops per tile), `stream` and `reuse` (bytes
      per tile read once / re-read by every tile), `once` (bytes read once for the whole
      grid: a resident operand), `ws` (working set bytes: two buffers of everything
      streamed, so one tile's transfers overlap the previous tile's compute), `f32` (32-bit
      operands), `rows` (MXU rows per tile: a convolution's output pixels, a matmul's lhs
      rows; 0 without an MXU op).
    """
    rank, mxu_dim = len(geom.out_dims), hw.mxu_dim
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
    rows = np.zeros(len(cfg))
    eff = np.ones(len(cfg))
    vpu = geom.vpu_ops * e_t
    mb = geom.main_bytes
    if geom.kind == "conv":
        sp = [d for d in range(rank) if d not in (geom.batch_dim, geom.feat_dim)]
        kh, kw = geom.window
        th = np.clip(cfg[:, CFG_KERNEL], 1, kh)  # window tile: taps per pass
        tw = np.clip(cfg[:, CFG_KERNEL + 1], 1, kw)
        ci = np.clip(cfg[:, CFG_KERNEL + 2] * 8, 8, None)
        ci = np.minimum(ci, geom.cin)
        passes = np.ceil(geom.cin / ci) * np.ceil(kh / th) * np.ceil(kw / tw)
        rows = ext[:, geom.batch_dim] * np.prod(ext[:, sp], axis=1)
        in_sp = [(ext[:, d] - 1) * geom.stride + k for d, k in zip(sp, (th, tw))]
        in_tile = ext[:, geom.batch_dim] * np.prod(in_sp, axis=0) * ci * mb
        w_tile = th * tw * ci * ext[:, geom.feat_dim] * mb
        stream, reuse = in_tile * passes, w_tile * passes
        if hw.operand_runs:  # short runs of input features or filter outputs read slowly
            stream = stream / _share(np.where(ci >= geom.cin, geom.cin * in_sp[-1], ci) * mb, hw)
            co = ext[:, geom.feat_dim]  # filter [kh, kw, ci, co]
            whole = co >= geom.out_dims[geom.feat_dim]
            reuse = reuse / _share(np.where(whole, co * ci, co) * mb, hw)
        chunk = in_tile + w_tile
        mxu = 2.0 * e_t * kh * kw * geom.cin
        depth = th * tw * ci
        eff = (rows / (np.ceil(rows / mxu_dim) * mxu_dim)) * np.sqrt(
            depth / (np.ceil(depth / mxu_dim) * mxu_dim)
        )
    elif geom.kind == "dot":
        k = float(geom.cin)
        bt = np.prod(ext[:, :-2], axis=1) if rank > 2 else np.ones(len(cfg))
        rows = bt * ext[:, -2] if rank >= 2 else ext[:, -1]
        kc = np.clip(cfg[:, CFG_KERNEL] * 128.0, 128.0, None)  # contraction chunk, 128s
        kc = np.minimum(kc, k)
        passes = np.ceil(k / kc)
        stream = rows * k * mb
        reuse = (bt if geom.rhs_batched else 1.0) * k * ext[:, -1] * mb
        chunk = (stream + reuse) * kc / k  # one contraction chunk resident
        if hw.operand_runs:  # the lhs's contraction dim is minor: a chunk of it is one run
            stream = stream / _share(np.where(kc >= k, k * rows, kc) * mb, hw)
        mxu = 2.0 * e_t * k
        eff = rows / (np.ceil(rows / mxu_dim) * mxu_dim) * kc / (np.ceil(kc / mxu_dim) * mxu_dim)
    elif geom.kind == "reduce":
        r_chunk = _reduce_chunk(geom, cfg, ext)
        passes = np.ceil(geom.reduce_size / r_chunk)
        stream = e_t * geom.reduce_size * mb
        chunk = e_t * r_chunk * mb
        vpu = vpu + e_t * geom.reduce_size
    once = np.zeros(len(cfg))  # bytes read once for the whole grid
    if 0.0 < geom.operand_bytes <= hw.resident:
        reuse, once = np.zeros(len(cfg)), once + geom.operand_bytes
    side_tile = np.minimum(geom.side_elems[None, :], e_t[:, None])
    side = side_tile @ geom.side_bytes  # `[c]` (zeros without side inputs)
    small = geom.side_elems[None, :] < e_t[:, None]  # broadcast operands re-read per tile
    side_reuse = (side_tile * small) @ geom.side_bytes
    # Reading a side input costs more when the tile is short along its own minor dim.
    side_slow = (side_tile / _dma_share(geom, ext, hw) - side_tile) @ geom.side_bytes
    out = e_t * geom.out_bytes
    single = chunk + side + e_t * 4.0 + out  # one buffer of everything streamed
    write = out  # the write-back's time in bytes at full bandwidth: short runs are slower
    if hw.out_runs:
        write = out / _share(_out_run(geom, ext, units, b) * geom.out_bytes, hw)
    return {
        "tiles": tiles,
        "passes": passes,
        "mxu": mxu,
        "eff": np.maximum(eff, 1.0 / 64),
        "vpu": vpu,
        "stream": stream + side - side_reuse + side_slow + write,
        "reuse": reuse + side_reuse,
        "ws": single + chunk + side + out,
        "once": once,
        "f32": np.full(len(cfg), mb >= 4),
        "rows": rows,
    }


def _out_run(geom: KernelGeometry, ext: np.ndarray, units: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`[c]` elements in one contiguous run of an output tile's write-back: its extent along
    the layout's minor dim, times its extent along the next dim when it holds the minor dim
    whole."""
    order = np.argsort(-geom.granule, kind="stable")  # the minor dim (128 lanes), the next
    minor = int(order[0])
    run = np.minimum(ext[:, minor], geom.out_dims[minor])
    if len(order) > 1:
        nxt = int(order[1])
        whole = b[:, minor] >= units[minor]
        run = np.where(whole, run * np.minimum(ext[:, nxt], geom.out_dims[nxt]), run)
    return run


def _dma_share(geom: KernelGeometry, ext: np.ndarray, hw: Hardware) -> np.ndarray:
    """`[c, p]` bandwidth share of reading each side input with tile extents `ext`: long
    contiguous runs along its minor dim read fast."""
    minor = np.maximum(geom.side_minor, 0)
    run = np.where(geom.side_minor[None, :] >= 0, ext[:, minor], np.inf)  # a scalar: no limit
    return _share(run * geom.side_bytes[None, :], hw)


def _share(run: np.ndarray, hw: Hardware) -> np.ndarray:
    """Bandwidth share of reads or writes in contiguous runs of `run` bytes (any shape)."""
    return np.clip((run / hw.dma_run) ** hw.dma_exp, hw.dma_floor, 1.0)


def _reduce_chunk(geom: KernelGeometry, cfg: np.ndarray, ext: np.ndarray) -> np.ndarray:
    """Reduced elements per pass: input tile elements over output tile elements (all of the
    reduction when the input bounds are empty); `[c]`."""
    ri = len(geom.in_dims)
    in_b = cfg[:, CFG_INPUT : CFG_INPUT + ri]
    in_tile = np.prod(np.minimum(in_b * geom.in_granule, geom.in_dims), axis=1)
    out_tile = np.prod(np.minimum(ext, geom.out_dims), axis=1)
    chunk = np.clip(in_tile / out_tile, 1.0, geom.reduce_size)
    return np.where(cfg[:, CFG_INPUT + 7] > 0, chunk, geom.reduce_size)


def bound_options(units: int, cap: int | None = None) -> np.ndarray:
    """Bounds an autotuner tries on a dim of `units` granules: its divisors, powers of two
    (cheap index maths) and even splits ceil(units / k) for k <= 8 (the last tile hangs over
    the edge when a bound does not divide), at most `cap`."""
    units = max(int(units), 1)
    low = np.arange(1, math.isqrt(units) + 1)
    low = low[units % low == 0]  # with units // low: the divisors
    pow2 = 2 ** np.arange(int(np.log2(units)) + 1)
    values = np.unique(np.concatenate([low, units // low, pow2, -(-units // np.arange(1, 9))]))
    return values if cap is None else values[values <= cap]


def window_options(size: int) -> np.ndarray:
    """Window tiles tried on a window dim of `size` taps: every count up to 3, else one
    tap, half the window and the whole."""
    return np.arange(1, size + 1) if size <= 3 else np.unique([1, -(-size // 2), size])


def chunk_options(size: int, unit: int, most: int) -> np.ndarray:
    """Chunks tried (in `unit`s) on a dim of `size` elements cut into at most `most`
    chunks."""
    units = -(-size // unit)
    opts = bound_options(units)
    return opts[opts >= -(-units // most)]


def at_most(options: np.ndarray, value: float) -> float:
    """The largest option not above `value`, else the smallest."""
    fit = options[options <= value]
    return float(fit.max() if len(fit) else options.min())


def tried(points: np.ndarray, units: np.ndarray, max_steps: int = MAX_STEPS) -> np.ndarray:
    """`[c]` bool: which option points `[c, knobs]` (output bounds first, over dims of
    `units` granules) the autotuner tries: tiles of at most `MAX_TILE` granules, in grids of
    at most `max_steps` tiles (or 16 times the fewest `MAX_TILE` allows, for huge outputs)."""
    rank = len(units)
    steps = np.prod(np.ceil(units / points[:, :rank]), axis=1)
    most = max(max_steps, 16.0 * float(np.prod(units, dtype=float)) / MAX_TILE)
    return (np.prod(points[:, :rank], axis=1) <= MAX_TILE) & (steps <= most)


def bounds_block(values: np.ndarray) -> np.ndarray:
    """`[c, k]` bounds -> `[c, 8]` block of 6 dims + sum + product (product 0 when empty)."""
    out = np.zeros((len(values), 8))
    k = min(values.shape[1], 6)
    out[:, :k] = values[:, :k]
    out[:, 6] = values.sum(axis=1)
    out[:, 7] = np.prod(values, axis=1) if values.shape[1] else 0.0
    return out


def choices(geom: KernelGeometry, meta: dict[str, Any]) -> list[np.ndarray]:
    """The option grid: bounds per output dim (granules), then a convolution's window tile
    (h, w taps) and input-feature chunk (8s), a matmul's contraction chunk (128s) or a
    reduction's split count."""
    units = -(-geom.out_dims // geom.granule)
    out = [bound_options(int(u)) for u in units]
    if geom.kind == "conv":
        out += [window_options(geom.window[0]), window_options(geom.window[1])]
        out.append(chunk_options(geom.cin, 8, MAX_CHUNKS))
    elif geom.kind == "dot":
        out.append(chunk_options(geom.cin, 128, 2 * MAX_CHUNKS))
    if "reduce" in meta:  # how many chunks (powers of two) the outermost reduced dim is cut into
        j = min(meta["reduce"][1])
        n_units = -(-int(geom.in_dims[j]) // int(geom.in_granule[j]))
        out.append(2 ** np.arange(int(np.log2(n_units)) + 1))
    return out


def config_rows(geom: KernelGeometry, meta: dict[str, Any], space: np.ndarray) -> np.ndarray:
    """Turns sampled bound columns `[c, rank (+1)]` into `[c, 24]` config features."""
    rank = len(geom.out_dims)
    out_b = space[:, :rank].astype(np.float64)
    cfg = np.zeros((len(space), CONFIG_FEAT_DIM))
    cfg[:, CFG_OUTPUT : CFG_OUTPUT + 8] = bounds_block(out_b)
    if geom.kind == "conv":  # kernel bounds: window tile h, w, input features (8s), outputs
        kb = np.column_stack([space[:, rank : rank + 3], out_b[:, geom.feat_dim]])
        cfg[:, CFG_KERNEL : CFG_KERNEL + 8] = bounds_block(kb.astype(np.float64))
    elif geom.kind == "dot":  # kernel bounds: contraction chunk (128s), outputs
        kb = np.column_stack([space[:, rank], out_b[:, -1]])
        cfg[:, CFG_KERNEL : CFG_KERNEL + 8] = bounds_block(kb.astype(np.float64))
    if "reduce" in meta:
        split = space[:, rank] if space.shape[1] > rank else np.ones(len(space))
        block = bounds_block(_reduce_input_bounds(geom, meta, out_b, split))
        # Input bounds are only reported when the reduction itself is tiled (split > 1),
        # which keeps them mostly 0 as in the real data.
        cfg[:, CFG_INPUT : CFG_INPUT + 8] = block * (split > 1)[:, None]
    return cfg


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
