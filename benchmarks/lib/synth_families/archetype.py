"""The `archetype` family, written from the description of a held-back TpuGraphs-format set
("set A") that the suite's other families did not reproduce.

Kernels are the package's HLO fusions, one of four archetypes by their main op (convolution,
dot, reduce, or an element-wise loop fusion), each with a fused element-wise epilogue. A tile's
runtime is a roofline over what the tile reads, computes and writes:

- **Padding to (8, 128).** Every tiled operand (a convolution's input and filter, a matmul's
  lhs and rhs, a reduction's input, every parameter of the epilogue) is held and moved with
  the two minor dims of its own layout padded to 8 sublanes and 128 lanes: a tile short along
  an operand's minor dim (or a one-dim operand, one sublane row of eight) moves padding too.
  The MXU pads a pass's contraction and output columns to 128 and its rows to 8.
- **Halo re-reads.** A convolution's input tile holds its window's overlap with the
  neighbouring tiles ((extent - 1) * stride + window taps per spatial dim), so small spatial
  tiles and window passes re-read the same input rows.
- **Spills.** A tile whose working set (two buffers of everything it reads and writes, and an
  f32 accumulator over several passes) exceeds the 16 MiB scratchpad still compiles, up to
  `COMPILE_LIMIT` times it, but loses overlap (compute and memory add up) and writes out and
  reads back the excess.
- **A fixed step overhead** per output tile (grid step), and a launch.

The log is not the compiler's: each kernel holds 12 to 400 configs (log-uniform; fewer when
fewer tiles compile, about 2% of them re-measured rows), distinct tiles drawn uniformly from
those that compile, in random order, so config 0 is an ordinary tile and nothing marks its
position. Every row's normaliser is the compiler's default tile measured again: its greedy
search (`autotuner.compiler_default`) among the tiles that compile, on an estimate blind to
the padding of the epilogue's parameters (`compiler_view`); that tile is in the log only when
the draw happened to take it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from tpu_tiles_models.synthetic import autotuner
from tpu_tiles_models.synthetic.analytic import LAYOUT_STYLES, SWAPPED_INPUTS, compiler_start
from tpu_tiles_models.synthetic.features import (
    CFG_INPUT,
    CFG_KERNEL,
    CFG_OUTPUT,
    COL_DIMENSIONS,
    COL_SHAPE,
    MAX_NODES,
    OPCODES,
)
from tpu_tiles_models.synthetic.geometry import (
    KernelGeometry,
    ancestors,
    dims_of,
    element_bytes,
    granules,
    kernel_geometry,
    operand_lists,
)
from tpu_tiles_models.synthetic.graph import Graph
from tpu_tiles_models.synthetic.kernels import KERNEL_KINDS, KIND_WEIGHTS, finish
from tpu_tiles_models.synthetic.tiling import MAX_STEPS, choices, config_rows, tried

# The core (rates per nanosecond).
VMEM = 16 * 2**20  # scratchpad bytes
COMPILE_LIMIT = 2.5  # working sets up to this many scratchpads compile (and spill)
HBM = 700.0  # bytes/ns
MXU_BF16, MXU_F32 = 120e3, 30e3  # flop/ns
VPU = 3e3  # element-ops/ns
STEP_NS = 200.0  # per output tile (grid step)
LAUNCH_NS = 2500.0
SUBLANES, LANES = 8, 128
# The log.
MIN_CONFIGS, MAX_LOGGED = 12, 400  # configs per kernel, drawn log-uniform between
ENUMERATE = 50_000  # grids up to this size are listed whole, larger ones sampled
DUPLICATES = 0.02  # share of rows that re-measure another row
DRAWS = 30  # kernels drawn for one place before one with fewer tiles than MIN_CONFIGS is kept
BF16_SHARE = 0.3


@dataclass(frozen=True)
class Core:
    """The constants the cost model reads (rates per nanosecond, bytes): `CORE` is this
    family's; the `drawn` family draws its own per data seed."""

    vmem: float = VMEM
    compile_limit: float = COMPILE_LIMIT
    hbm: float = HBM
    mxu_bf16: float = MXU_BF16
    mxu_f32: float = MXU_F32
    vpu: float = VPU
    step_ns: float = STEP_NS
    launch_ns: float = LAUNCH_NS
    sublanes: int = SUBLANES
    lanes: int = LANES


CORE = Core()


@dataclass(frozen=True)
class Operand:
    """A tiled operand as it sits in HBM.

    Attributes:
        dims: `[rank]` its shape.
        pad: `[rank]` the granule each dim is padded to: 128 on its layout's minor dim, 8 on
            the next, 1 elsewhere.
        nbytes: bytes per element.
        axes: `[rank]` the output dim each of its dims follows (an epilogue's parameter; -1:
            read whole); unused for a main op's operands, whose tiles each archetype knows.
    """

    dims: np.ndarray
    pad: np.ndarray
    nbytes: float
    axes: np.ndarray
    row: int = SUBLANES  # a one-dim operand's sublane row

    def tile_bytes(self, ext: np.ndarray) -> np.ndarray:
        """`[c]` bytes of tiles with extents `ext` `[c, rank]`, clipped to the operand and
        padded to its granules (a one-dim operand fills one sublane row of `row`)."""
        ext = np.minimum(ext, self.dims)
        padded = np.prod(np.ceil(ext / self.pad) * self.pad, axis=1)
        return padded * self.nbytes * (self.row if len(self.dims) == 1 else 1)


@dataclass(frozen=True)
class Archetype:
    """What the cost model reads of a kernel: its geometry, the main op's operands (conv:
    input and filter; dot: lhs and rhs; reduce: input; a loop fusion: none), the epilogue's
    parameters, and a reduction's reduced input dims."""

    geom: KernelGeometry
    main: tuple[Operand, ...]
    sides: tuple[Operand, ...]
    reduced: tuple[int, ...] = ()
    depthwise: bool = False


def read_archetype(
    node_feat: np.ndarray, node_opcode: np.ndarray, edge_index: np.ndarray, core: Core = CORE
) -> Archetype:
    """A kernel's `Archetype`, from its npz arrays only; its operands padded to `core`'s
    sublanes and lanes (where the layout's granules are 8 and 128)."""
    geom = kernel_geometry(node_feat, node_opcode, edge_index)
    opc = np.asarray(node_opcode).astype(np.int64)
    operands = operand_lists(len(opc), np.asarray(edge_index))
    consumers: list[list[int]] = [[] for _ in opc]
    for u, v in np.asarray(edge_index).tolist():
        consumers[v].append(u)
    ebytes = element_bytes(node_feat)
    rank = len(geom.out_dims)

    def source(i: int) -> int:
        """The parameter a main operand is read from (through converts and a reduction's
        element-wise prologue)."""
        while opc[i] != OPCODES["parameter"] and operands[i]:
            i = operands[i][0]
        return i

    def operand(i: int, axes: np.ndarray | None = None) -> Operand:
        dims = dims_of(node_feat, i)
        axes = np.full(len(dims), -1) if axes is None else axes
        pad = granules(node_feat, i, len(dims))
        pad = np.where(pad == LANES, core.lanes, np.where(pad == SUBLANES, core.sublanes, pad))
        return Operand(dims, pad, max(float(ebytes[i]), 1.0), axes, core.sublanes)

    def side_axes(i: int) -> np.ndarray:
        """The output dim each dim of parameter `i` follows: the same position (through a
        transpose's permutation), the trailing output dims for a broadcast one."""
        r = len(dims_of(node_feat, i))
        if r > rank:
            return np.full(r, -1)
        if r < rank:
            return np.arange(rank - r, rank)
        axes = np.arange(r)
        for t in consumers[i]:
            if opc[t] == OPCODES["transpose"]:
                perm = node_feat[t, COL_DIMENSIONS : COL_DIMENSIONS + r].astype(np.int64)
                axes[perm] = np.arange(r)
        return axes

    main_ops = {"conv": OPCODES["convolution"], "dot": OPCODES["dot"], "reduce": OPCODES["reduce"]}
    main, reduced = -1, ()
    if geom.kind in main_ops:
        cand = np.flatnonzero(opc == main_ops[geom.kind])
        # The largest, as `kernel_geometry` takes it.
        main = int(cand[np.argmax(node_feat[cand, COL_SHAPE + 7])])
    feeds = ancestors(main, operands) if main >= 0 else set()
    params = [i for i in np.flatnonzero(opc == OPCODES["parameter"]) if i not in feeds]
    sides = tuple(operand(i, side_axes(i)) for i in params if len(dims_of(node_feat, i)))
    mains: tuple[Operand, ...] = ()
    if geom.kind in ("conv", "dot"):
        mains = tuple(operand(source(i)) for i in operands[main][:2])
    elif geom.kind == "reduce":
        mains = (operand(source(operands[main][0])),)
        in_rank = len(geom.in_dims)
        first = int(node_feat[main, COL_DIMENSIONS])
        # The package's reductions reduce the last dim (its `dimensions` start with it) or
        # all the leading ones (starting with 0).
        reduced = (in_rank - 1,) if first > 0 else tuple(range(in_rank - len(geom.out_dims)))
    depthwise = geom.kind == "conv" and geom.cin == 1 and mains[0].dims[-1] > 1
    return Archetype(geom, mains, sides, reduced, depthwise)


def _up(x: np.ndarray, granule: int) -> np.ndarray:
    return np.ceil(x / granule) * granule


def cost(a: Archetype, cfg: np.ndarray, core: Core = CORE) -> tuple[np.ndarray, np.ndarray]:
    """`[c]` noise-free runtimes (ns) and working sets (bytes) of config rows `[c, 24]` on
    `core`."""
    g, n = a.geom, len(cfg)
    rank = len(g.out_dims)
    units = -(-g.out_dims // g.granule)
    b = np.clip(cfg[:, CFG_OUTPUT : CFG_OUTPUT + rank], 1, units)
    ext = b * g.granule  # the output tile: its granules are its layout's (8, 128) already
    tiles = np.prod(np.ceil(units / b), axis=1)
    out_elems = np.prod(ext, axis=1)
    passes, flops, per_pass = np.ones(n), np.zeros(n), np.zeros(n)
    vpu = g.vpu_ops * out_elems
    if g.kind == "conv":
        x, w = a.main
        (kh, kw), s = g.window, g.stride
        th = np.clip(cfg[:, CFG_KERNEL], 1, kh)
        tw = np.clip(cfg[:, CFG_KERNEL + 1], 1, kw)
        co = ext[:, g.feat_dim]
        ci = co if a.depthwise else np.minimum(np.maximum(cfg[:, CFG_KERNEL + 2] * 8, 8), g.cin)
        passes = np.ceil(kh / th) * np.ceil(kw / tw) * (1 if a.depthwise else np.ceil(g.cin / ci))
        # Input tile with its halo: the taps of this pass over the output tile's pixels (the
        # convolution's zero border is made on chip: `tile_bytes` clips to the input).
        halo = [(ext[:, d] - 1) * s + t for d, t in zip((1, 2), (th, tw))]
        x_ext = np.column_stack([ext[:, g.batch_dim], *halo, ci])
        w_ext = np.column_stack([th, tw, np.ones(n) if a.depthwise else ci, co])
        per_pass = x.tile_bytes(x_ext) + w.tile_bytes(w_ext)
        rows = ext[:, g.batch_dim] * ext[:, 1] * ext[:, 2]
        if a.depthwise:  # one channel per group: multiply-adds on the VPU, not the MXU
            vpu = vpu + 2.0 * out_elems * kh * kw
        else:
            sub, lane = core.sublanes, core.lanes
            flops = 2.0 * _up(rows, sub) * _up(th * tw * ci, lane) * _up(co, lane) * passes
    elif g.kind == "dot":
        lhs, rhs = a.main
        kc = np.minimum(np.maximum(cfg[:, CFG_KERNEL] * LANES, LANES), g.cin)  # the format's
        passes = np.ceil(g.cin / kc)
        lead = [ext[:, d] for d in range(rank - 2)]  # batch dims
        lhs_ext = np.column_stack([*lead, ext[:, -2], kc]) if rank >= 2 else kc[:, None]
        rhs_lead = lead if len(rhs.dims) == rank else []
        rhs_ext = np.column_stack([*rhs_lead, kc, ext[:, -1]])
        per_pass = lhs.tile_bytes(lhs_ext) + rhs.tile_bytes(rhs_ext)
        rows = np.prod(ext[:, :-1], axis=1)
        sub, lane = core.sublanes, core.lanes
        flops = 2.0 * _up(rows, sub) * _up(kc, lane) * _up(ext[:, -1], lane) * passes
    elif g.kind == "reduce":
        (x,) = a.main
        in_rank = len(x.dims)
        kept = [j for j in range(in_rank) if j not in a.reduced]
        x_ext = np.tile(x.dims.astype(np.float64), (n, 1))  # reduced dims whole ...
        x_ext[:, kept] = ext[:, : len(kept)]  # ... kept dims follow the output tile
        bounds = cfg[:, CFG_INPUT : CFG_INPUT + in_rank] * g.in_granule
        split = cfg[:, CFG_INPUT + 7] > 0  # input bounds written: the reduction is split
        x_ext = np.minimum(np.where(split[:, None], bounds, x_ext), x.dims)
        j = min(a.reduced)
        passes = np.ceil(x.dims[j] / np.maximum(x_ext[:, j], 1))
        per_pass = x.tile_bytes(x_ext)
        vpu = vpu + np.prod(x_ext, axis=1) * passes
    side = sum((op.tile_bytes(_side_ext(op, ext)) for op in a.sides), np.zeros(n))
    out = out_elems * g.out_bytes
    accumulator = np.where(passes > 1, 4.0 * out_elems, 0.0)
    ws = 2.0 * (per_pass + side + out) + accumulator
    peak = core.mxu_f32 if g.main_bytes >= 4 else core.mxu_bf16
    comp = flops / peak + vpu / core.vpu
    mem = (per_pass * passes + side + out) / core.hbm
    spill = np.maximum(ws - core.vmem, 0.0)
    per_tile = np.where(spill > 0, comp + mem + 2.0 * spill / core.hbm, np.maximum(comp, mem))
    first = (per_pass + side) / core.hbm  # the pipeline's first fetch, nothing to hide under
    return tiles * (per_tile + core.step_ns) + first + core.launch_ns, ws


def _side_ext(op: Operand, ext: np.ndarray) -> np.ndarray:
    """`[c, rank]` tile extents of an epilogue parameter: the output tile's along the dims it
    follows, whole along the others."""
    whole = np.tile(op.dims.astype(np.float64), (len(ext), 1))
    follows = op.axes >= 0
    whole[:, follows] = ext[:, op.axes[follows]]
    return whole


def compiler_view(a: Archetype) -> Archetype:
    """`a` as the compiler's estimate sees it: the epilogue's parameters unpadded (it knows its
    main op's operand layouts, not those of what the fusion adds), so that its default tile
    is a good one, not always the best."""
    sides = tuple(replace(op, pad=np.ones_like(op.pad)) for op in a.sides)
    return replace(a, sides=sides)


def _space(a: Archetype, meta: dict, core: Core = CORE) -> autotuner.Space:
    """A kernel's tile grid (the package's options and config rows) under this cost model: the
    tiles that compile, and the compiler's estimate (`compiler_view`)."""
    opts = choices(a.geom, meta)
    units = -(-a.geom.out_dims // a.geom.granule)
    blind = compiler_view(a)
    return autotuner.Space(
        opts,
        lambda points: config_rows(a.geom, meta, points),
        lambda rows: cost(a, rows, core),
        core.compile_limit * core.vmem,
        compiler_start(a.geom, meta, opts),
        lambda points: tried(points, units, MAX_STEPS),
        lambda rows: cost(blind, rows, core)[0],
    )


def _sample(space: autotuner.Space, a: Archetype, want: int, rng: np.random.Generator):
    """Up to `want` distinct tiles that compile, uniformly in random order: `([c, knobs]
    option values, [c, 24] config rows, [c] runtimes)`."""
    shape = tuple(len(c) for c in space.choices)
    total = math.prod(shape)
    if total <= ENUMERATE:
        order = rng.permutation(total)
    else:
        draws = rng.integers(total, size=40 * want + 2000)
        _, first = np.unique(draws, return_index=True)
        order = draws[np.sort(first)]
    idx = np.unravel_index(order, shape)
    points = np.stack([np.asarray(c)[i] for c, i in zip(space.choices, idx)], axis=1)
    points = points[space.tries(points)]
    rows = space.rows(points)
    runtime, ws = space.cost(rows)
    ok = np.flatnonzero(ws <= space.vmem)[:want]
    return points[ok], rows[ok], runtime[ok]


def _draw(rng: np.random.Generator, odds: np.ndarray, core: Core):
    """One kernel drawn from `rng`: its graph arrays, `Archetype` and tile grid on `core`."""
    kind = list(KERNEL_KINDS)[rng.choice(4, p=odds / odds.sum())]
    nodes = int(np.clip(np.round(34.0 * np.exp(0.65 * rng.standard_normal())), 2, MAX_NODES))
    if rng.random() < 0.06:  # a parameter and an op or two
        nodes = int(rng.integers(2, 8))
    dtype = "bf16" if rng.random() < BF16_SHARE else "f32"
    g = Graph(int(rng.choice(4, p=LAYOUT_STYLES)), rng, SWAPPED_INPUTS)
    meta = KERNEL_KINDS[kind](g, nodes - 1, dtype, rng)
    finish(g, meta["root"], rng)
    node_feat, node_opcode, edge_index = g.arrays()
    arch = read_archetype(node_feat, node_opcode, edge_index, core)
    graph = dict(node_feat=node_feat, node_opcode=node_opcode, edge_index=edge_index)
    return graph, arch, _space(arch, meta, core)


def make_kernel(
    rng: np.random.Generator,
    *,
    kind_weights: Sequence[float] | None = None,
    max_configs: int | None = None,
    min_configs: int = 2,
    labelled: bool = True,
    core: Core = CORE,
    autotuned: bool = False,
) -> dict[str, np.ndarray]:
    """One `archetype` kernel's six npz arrays (`families.KernelMaker`) on `core`: at most
    `max_configs` configs (`MAX_LOGGED` when None), at least `min_configs`. `autotuned`: logged
    as the other families' (`autotuner.draw_kernel`: up to thousands of configs, config 0 the
    compiler's default) instead of 12 to 400 random tiles."""
    odds = np.asarray(KIND_WEIGHTS if kind_weights is None else kind_weights, np.float64)
    if autotuned:

        def draw() -> tuple[dict[str, np.ndarray], autotuner.Space]:
            graph, _, space = _draw(rng, odds, core)
            return graph, space

        return autotuner.draw_kernel(
            draw,
            rng,
            max_configs=max_configs,
            min_configs=min_configs,
            labelled=labelled,
        )
    cap = MAX_LOGGED if max_configs is None else max_configs
    want = round(MIN_CONFIGS * (MAX_LOGGED / MIN_CONFIGS) ** rng.random())
    want = max(min(want, cap), min_configs)
    for attempt in range(DRAWS):
        graph, arch, space = _draw(rng, odds, core)
        points, rows, runtime = _sample(space, arch, want, rng)
        if len(points) >= min(MIN_CONFIGS, want) or (attempt == DRAWS - 1 and len(points)):
            break
    else:
        raise AssertionError("no tile compiles in any kernel drawn")
    # A few re-measured rows, as in any log; where fewer than `MIN_CONFIGS` tiles compile (in
    # the last kernel drawn) re-measured copies fill the log up to them.
    distinct = len(points) - int(rng.binomial(len(points) - 1, DUPLICATES))
    total = max(len(points), min(want, MIN_CONFIGS))
    order = np.concatenate([np.arange(distinct), rng.integers(distinct, size=total - distinct)])
    order = rng.permutation(order)
    default = autotuner.compiler_default(space, fallback=points)
    base = float(space.cost(space.rows(default[None, :]))[0][0])
    sigma = float(np.clip(0.004 * math.exp(0.9 * rng.standard_normal()), 3e-4, 0.02))
    measured = runtime[order] * np.exp(sigma * rng.standard_normal(len(order)))
    normaliser = base * np.exp(sigma * rng.standard_normal(len(order)))
    return {
        **graph,
        "config_feat": rows[order].astype(np.float32),
        "config_runtime": np.maximum(np.round(measured), 1).astype(np.int64) * int(labelled),
        "config_runtime_normalizers": np.maximum(np.round(normaliser), 1).astype(np.int64),
    }


def runtime(
    node_feat: np.ndarray, node_opcode: np.ndarray, edge_index: np.ndarray, config_feat: np.ndarray
) -> np.ndarray:
    """Noise-free `[c]` runtimes (ns) of a kernel's configs under this family's cost model."""
    arch = read_archetype(node_feat, node_opcode, edge_index)
    return cost(arch, np.asarray(config_feat, np.float64))[0]
